"""Quantization of what users bring: non-finite calibration data and scales are refused by name;
integer outputs (ArgMax) and tuple-producing operators (Split, TopK) pass through, and the packed
network still equals its CPU run bit for bit."""

from __future__ import annotations

import re

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.evaluate import evaluate  # noqa: E402
from vta_compiler.graph.ir import SOURCE_NAMES, TUPLE_ITEM, Graph  # noqa: E402
from vta_compiler.graph.quantize import prepare  # noqa: E402


def model_of(nodes, inits, inputs, outputs):
    """inputs/outputs: [(name, TensorProto type, shape)]."""
    def vi(name, ty, shape):
        return helper.make_tensor_value_info(name, ty, shape)
    g = helper.make_graph(nodes, "t", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


F, I64 = TensorProto.FLOAT, TensorProto.INT64


def split_argmax_model(rng):
    """conv -> relu -> Split(16, 16) -> conv / conv -> add -> ArgMax over channels (int64 output)."""
    inits = {"w1": rng.normal(0, .3, (32, 16, 3, 3)).astype(np.float32),
             "w2": rng.normal(0, .2, (16, 16, 3, 3)).astype(np.float32),
             "w3": rng.normal(0, .2, (16, 16, 1, 1)).astype(np.float32), "sp": np.array([16, 16], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Split", ["ar", "sp"], ["s0", "s1"], axis=1),
             helper.make_node("Conv", ["s0", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["s1", "w3"], ["c"]),
             helper.make_node("Add", ["b", "c"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["y"], axis=1, keepdims=0)]
    with_argmax = model_of(nodes, inits, [("x", F, [1, 16, 8, 8])], [("y", I64, [1, 8, 8])])
    logits = model_of(nodes[:-1], inits, [("x", F, [1, 16, 8, 8])], [("logits", F, [1, 16, 8, 8])])
    return with_argmax, logits


def small_conv_model(rng):
    inits = {"w": rng.normal(0, .3, (16, 3, 3, 3)).astype(np.float32)}
    return model_of([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], inits,
                    [("x", F, [1, 3, 8, 8])], [("y", F, [1, 16, 8, 8])])


@pytest.mark.parametrize("bad, what", [(np.nan, "1 NaN and 0 infinite"), (np.inf, "0 NaN and 1 infinite"),
                                       (-np.inf, "0 NaN and 1 infinite")])
def test_non_finite_calibration_input_is_refused_naming_the_item(bad, what):
    rng = np.random.default_rng(0)
    mod, params = graph.from_onnx(small_conv_model(rng))
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    xs[2][0, 1, 4, 5] = bad
    with pytest.raises(graph.QuantizationError, match=rf"calibration item 2: input 'x' has {what} values \(the first "
                                                      r"at index \(0, 1, 4, 5\)"):
        graph.quantize(mod, params, calibration=xs)
    # the same set without the bad value calibrates
    xs[2][0, 1, 4, 5] = 0.0
    graph.quantize(mod, params, calibration=xs)


def test_a_node_that_computes_nan_is_refused_naming_it():
    """Sqrt of a convolution that goes negative: NaN from finite inputs, named with its batch."""
    rng = np.random.default_rng(1)
    inits = {"w": rng.normal(0, .3, (16, 3, 3, 3)).astype(np.float32)}
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("Sqrt", ["c"], ["y"])], inits, [("x", F, [1, 3, 8, 8])],
                     [("y", F, [1, 16, 8, 8])])
    mod, params = graph.from_onnx(model)
    pos = np.zeros((1, 3, 8, 8), np.float32)           # sqrt(0): finite
    neg = rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    with pytest.raises(graph.QuantizationError, match=r"calibration item 1: \w+ \(relax.sqrt\) computes NaN or "
                                                      "infinite values from finite inputs"):
        graph.quantize(mod, params, calibration=[pos, neg])


@pytest.mark.parametrize("scale", [float("inf"), float("-inf"), float("nan"), 0.0, -2.0, True, "8"])
def test_bad_global_scale_is_refused(scale):
    mod, params = graph.from_onnx(small_conv_model(np.random.default_rng(2)))
    with pytest.raises(graph.QuantizationError, match=r"global_scale must be a finite positive number, got "):
        graph.quantize(mod, params, global_scale=scale)
    graph.quantize(mod, params, global_scale=np.float32(8.0))       # a numpy scalar is a number


def test_split_and_argmax_pass_through_and_run_on_vta(fsim):
    """The split runs on int8 with the exponent of its input; ArgMax's int64 output is returned as is and
    equals the argmax of the quantized logits; VTA equals the CPU run bit for bit."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    with_argmax, logits = split_argmax_model(rng)
    cal = [rng.normal(0, 1, (1, 16, 8, 8)).astype(np.float32) for _ in range(2)]
    x = rng.normal(0, 1, (1, 16, 8, 8)).astype(np.float32)
    mod, params = graph.from_onnx(with_argmax)
    qmod = graph.quantize(mod, params, calibration=cal)
    assert graph.layer_outputs(qmod) == ["conv2d_0", "conv2d_1", "conv2d_2"]
    g = Graph.from_relax(qmod["main"])
    split = next(n for n in g.nodes if n.op == "relax.split")
    assert split.inputs[0].name == "conv2d_0" and split.fields == [((1, 16, 8, 8), "int8")] * 2
    got = run_cpu(qmod, x)[0]
    assert got.dtype == np.int64 and got.shape == (1, 8, 8)
    lmod, lparams = graph.from_onnx(logits)
    q_logits = run_cpu(graph.quantize(lmod, lparams, calibration=cal), x)[0]
    np.testing.assert_array_equal(got, q_logits.argmax(1))
    want_float = ort.InferenceSession(logits.SerializeToString()).run(None, {"x": x})[0]
    err = np.abs(q_logits - want_float).max() / np.abs(want_float).max()
    assert err < 0.05, err
    assert (got == want_float.argmax(1)).mean() > 0.8
    assert len(np.unique(got)) > 4, "the argmax should vary over the image"
    pmod = graph.graph_pack(qmod)
    assert len(graph.placement(pmod).vta_rows) == 3
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], got)


def test_tuples_in_the_graph_ir():
    """Split and TopK become tuple nodes read by item nodes; a tuple can be returned; evaluate and probe
    (which writes every node back to Relax) follow ONNX Runtime; the int64 indices pass through quantize."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(4)
    inits = {"w": rng.normal(0, .3, (32, 16)).astype(np.float32), "k": np.array([3], np.int64),
             "sp": np.array([8, 24], np.int64)}
    nodes = [helper.make_node("Gemm", ["x", "w"], ["a"], transB=1),
             helper.make_node("Split", ["a", "sp"], ["s0", "s1"], axis=1),
             helper.make_node("TopK", ["s1", "k"], ["v", "i"], axis=1)]
    model = model_of(nodes, inits, [("x", F, [2, 16])], [("s0", F, [2, 8]), ("v", F, [2, 3]), ("i", I64, [2, 3])])
    mod, params = graph.from_onnx(model)
    g = prepare(mod, params)
    tuples = [n for n in g.nodes if n.is_tuple]
    assert [(n.op, n.fields) for n in tuples] == [
        ("relax.split", [((2, 8), "float32"), ((2, 24), "float32")]),
        ("relax.topk", [((2, 3), "float32"), ((2, 3), "int64")])]
    assert all(n.op == TUPLE_ITEM and n.inputs[0].is_tuple for n in g.outputs)
    x = rng.normal(0, 1, (2, 16)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    vals = evaluate(g, [x])
    for o, w in zip(g.outputs, want):
        np.testing.assert_allclose(vals[id(o)], w, rtol=1e-5, atol=1e-5)
    qmod = graph.quantize(mod, params, calibration=[x])
    got = run_cpu(qmod, x)
    assert [r.dtype for r in got] == [np.float32, np.float32, np.int64]
    np.testing.assert_array_equal(got[2], want[2])          # well separated values: the same top 3
    for k in (0, 1):
        assert np.abs(got[k] - want[k]).max() < 0.1
    again = run_cpu(graph.probe(qmod, []), x)               # every node (tuples too) written back to Relax
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)


def test_a_constant_split_is_folded():
    """A split of a constant (Paddle splits weights this way) folds to constants before quantization."""
    rng = np.random.default_rng(5)
    c = rng.normal(0, 1, (1, 32, 1, 1)).astype(np.float32)
    inits = {"w": rng.normal(0, .3, (16, 16, 1, 1)).astype(np.float32), "c": c, "sp": np.array([16, 16], np.int64)}
    nodes = [helper.make_node("Split", ["c", "sp"], ["c0", "c1"], axis=1),
             helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Add", ["a", "c1"], ["y"])]
    model = model_of(nodes, inits, [("x", F, [1, 16, 4, 4])], [("y", F, [1, 16, 4, 4])])
    mod, params = graph.from_onnx(model)
    g = prepare(mod, params)
    assert [n.op for n in g.nodes] == ["input", "conv2d"]
    np.testing.assert_allclose(g.nodes[1].attrs["bias"], c[0, 16:, 0, 0], rtol=1e-6)


def test_errors_name_the_source_operator():
    """With the importer's map of binding names to source operators, a refusal names the ONNX node."""
    rng = np.random.default_rng(6)
    inits = {"w": rng.normal(0, .3, (16, 3, 3, 3)).astype(np.float32)}
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("Sqrt", ["c"], ["y"])], inits, [("x", F, [1, 3, 8, 8])],
                     [("y", F, [1, 16, 8, 8])])
    mod, params = graph.from_onnx(model)
    func = mod["main"]
    sqrt = [b.var.name for b in func.body.blocks[0].bindings if "sqrt" in str(b.value.op)][0]
    mod["main"] = func.with_attr(SOURCE_NAMES, {sqrt: "the_sqrt (Sqrt)"})
    with pytest.raises(graph.QuantizationError, match=r"calibration item 0: \w+ \(from the_sqrt \(Sqrt\)\) "
                                                      r"\(relax.sqrt\) computes NaN"):
        graph.quantize(mod, params, calibration=[rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)])


@pytest.mark.parametrize("tiny", [0.0, 1e-20, 7e-39])
def test_dead_channels_output_their_bias(tiny, fsim):
    """Output channels whose weights are all (nearly) zero: their bias would overflow int32 at the finest
    weight scale (2**24); they get a scale that fits it, and output exactly their bias, rounded to nearest.
    The live channels keep following float, and VTA equals the CPU run."""
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.3, (16, 8, 3, 3)).astype(np.float32)
    dead = [3, 7, 12, 14]
    w[dead] = tiny
    b = rng.uniform(-1, 1, 16).astype(np.float32)
    b[dead] = [1.7, 2.3, 0.6, -1e12]          # the last one: far below the ReLU, beyond int32 at any scale
    model = model_of([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("Relu", ["c"], ["y"])], {"w": w, "b": b},
                     [("x", F, [1, 8, 6, 6])], [("y", F, [1, 16, 6, 6])])
    mod, params = graph.from_onnx(model)
    x = rng.uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)        # exponent 7: 1.7 * 2**(7+24) overflows
    qmod = graph.quantize(mod, params, calibration=[x])
    got = run_cpu(qmod, x)[0]
    # float reference in float64, by hand
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    exact = np.zeros((1, 16, 6, 6)) + b.reshape(1, -1, 1, 1)
    for i in range(3):
        for j in range(3):
            exact += np.einsum("oc,nchw->nohw", w[:, :, i, j], xp[:, :, i:i + 6, j:j + 6])
    exact = np.maximum(exact, 0)
    e_out = int(np.floor(np.log2(127 / np.abs(exact).max())))
    want_dead = np.maximum(np.floor(b[dead].astype(np.float64) * 2.0 ** e_out + 0.5), 0) / 2.0 ** e_out
    assert (want_dead[:3] > 0).all()
    np.testing.assert_array_equal(got[0, dead], np.broadcast_to(want_dead.reshape(-1, 1, 1), (4, 6, 6)))
    live = [c for c in range(16) if c not in dead]
    assert np.abs(got[:, live] - exact[:, live]).max() < 0.05 * np.abs(exact).max()
    np.testing.assert_array_equal(run_vta(graph.build(graph.graph_pack(qmod)), x)[0], got)


def test_every_layer_that_cannot_be_quantized_is_reported_at_once():
    rng = np.random.default_rng(8)
    inits = {}
    nodes = []
    for k in range(3):                                   # three parallel layers, concatenated
        inits[f"w{k}"] = rng.normal(0, 0.01, (16, 16, 1, 1)).astype(np.float32)
        inits[f"b{k}"] = np.zeros(16, np.float32)
        if k != 1:
            inits[f"b{k}"][2 + k] = 1e9                  # live weights beside a huge bias: refused
        nodes.append(helper.make_node("Conv", ["x", f"w{k}", f"b{k}"], [f"c{k}"]))
    nodes.append(helper.make_node("Concat", ["c0", "c1", "c2"], ["y"], axis=1))
    model = model_of(nodes, inits, [("x", F, [1, 16, 4, 4])], [("y", F, [1, 48, 4, 4])])
    mod, params = graph.from_onnx(model)
    x = rng.normal(0, 1, (1, 16, 4, 4)).astype(np.float32)
    with pytest.raises(graph.QuantizationError) as exc:
        graph.quantize(mod, params, calibration=[x])
    msg = str(exc.value)
    assert msg.startswith("2 layer(s) cannot be quantized:\n")
    # the import may order the three parallel layers differently: find them by their biases
    bad = sorted(re.findall(r"layer (conv2d_\d): the bias of output channel (\d) \(1e\+09\)", msg), key=lambda m: m[1])
    assert [ch for _, ch in bad] == ["2", "4"] and len({name for name, _ in bad}) == 2, msg
    good = ({"conv2d_0", "conv2d_1", "conv2d_2"} - {name for name, _ in bad}).pop()
    assert f"layer {good}" not in msg and "(from " not in msg
    skip = sorted(name for name, _ in bad)
    assert msg.endswith(f"keep them in float (skip_layers={skip!r}) or use a coarser input scale")
    qmod = graph.quantize(mod, params, calibration=[x], skip_layers=skip)
    assert graph.layer_outputs(qmod) == [good]


def byte_embedding_model(rng, vocab: int = 8, length: int = 16, width: int = 32):
    """magika's shape: int32 ids -> one-hot (Equal against a range, Cast) -> 3-D matmul + bias -> relu ->
    3-D matmul."""
    inits = {"vocab": np.arange(vocab, dtype=np.int32), "axis": np.array([-1], np.int64),
             "w1": rng.normal(0, .4, (vocab, width)).astype(np.float32),
             "b1": rng.normal(0, .3, (width,)).astype(np.float32),
             "w2": rng.normal(0, .2, (width, 16)).astype(np.float32)}
    nodes = [helper.make_node("Unsqueeze", ["ids", "axis"], ["ids3"]),
             helper.make_node("Equal", ["ids3", "vocab"], ["hot"]),
             helper.make_node("Cast", ["hot"], ["onehot"], to=F),
             helper.make_node("MatMul", ["onehot", "w1"], ["e"]),
             helper.make_node("Add", ["e", "b1"], ["eb"]),
             helper.make_node("Relu", ["eb"], ["er"]),
             helper.make_node("MatMul", ["er", "w2"], ["y"])]
    return model_of(nodes, inits, [("ids", TensorProto.INT32, [1, length])], [("y", F, [1, length, 16])])


def test_an_integer_input_and_3d_matmuls_run_with_their_dense_layers_on_vta(fsim):
    """Token ids or bytes (magika's int32 input): the integer operators before the first float one run on the
    host as the model writes them (the quantizer once refused any non-float input). The matmuls of a
    sequence (rank 3, constant weight) are dense layers over its rows, with the bias and the relu after
    the first folded in; both run on VTA and equal the CPU run bit for bit, close to ONNX Runtime's float."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    model = byte_embedding_model(rng)
    cal = [rng.integers(0, 8, (1, 16), dtype=np.int32) for _ in range(3)]
    x = rng.integers(0, 8, (1, 16), dtype=np.int32)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=cal)
    assert graph.layer_outputs(qmod) == ["dense_0", "dense_1"]
    got = run_cpu(qmod, x)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": x})[0]
    assert got.shape == want.shape == (1, 16, 16) and len(np.unique(got)) > 8
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    assert len(pl.vta_rows) == 2 and pl.vta_share == 1.0
    assert [r["op"] for r in pl.vta_rows] == ["dense +bias+>>shift[c]+clip(0, 127)",
                                              "dense +bias+>>shift[c]+clip(-128, 127)"], "bias and relu fold in"
    assert [r["op"] for r in pl.rows if r["device"] == "CPU" and r["layout"] != "packed"].count("clip") == 1
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], got)


def test_a_matmul_of_two_activations_says_so_in_the_placement(fsim):
    """Attention's scores (queries times keys, both computed): the projections run on VTA as dense layers over
    the sequence's rows; the scores matmul stays in float, and its placement says why (once "a float layer",
    which nothing had asked for)."""
    rng = np.random.default_rng(8)
    inits = {"wq": rng.normal(0, .3, (16, 16)).astype(np.float32), "wk": rng.normal(0, .3, (16, 16)).astype(np.float32),
             "perm": np.array([0, 2, 1], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["y"])]
    model = model_of(nodes, {k: v for k, v in inits.items() if k != "perm"}, [("x", F, [1, 8, 16])],
                     [("y", F, [1, 8, 8])])
    x = rng.normal(0, 1, (1, 8, 16)).astype(np.float32)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=[x])
    pl = graph.placement(graph.graph_pack(qmod))
    assert len(pl.vta_rows) == 2
    notes = [r["note"] for r in pl.rows if r["op"] == "matmul" and r["device"] == "CPU"]
    assert notes == ["a matmul of two activations (no constant weight): the quantizer keeps it in float"], notes
