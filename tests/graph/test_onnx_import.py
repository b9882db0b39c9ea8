"""graph.from_onnx on models as exporters write them: folded shape arithmetic, dynamic inputs, nodes TVM's
importer cannot convert, label outputs, control flow on a mode input, the three ways to pass a model.

Each model here is small and built with onnx.helper in the exporters' patterns; the float results are
compared with ONNX Runtime on the same file.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxsim")
tvm = pytest.importorskip("tvm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tvm import relax  # noqa: E402

from vta_compiler import graph  # noqa: E402
from vta_compiler.graph import onnx_import  # noqa: E402
from vta_compiler.graph.frontend import bind_params  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17, name="t"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="test")
    m.ir_version = 8
    return m


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _run_float(mod, params, *xs):
    vm = relax.VirtualMachine(tvm.compile(tvm.IRModule({"main": bind_params(mod, params)}), "llvm"), tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(x) for x in xs])
    return [r.numpy() for r in res] if isinstance(res, tvm.ir.Array) or hasattr(res, "__len__") and \
        not hasattr(res, "numpy") else [res.numpy()]


def _paddle_reshape_model():
    """Conv, then Paddle2ONNX's reshape: Shape -> Cast(INT32) -> Slice -> Cast(INT64) -> Concat(.., -1)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    consts = [numpy_helper.from_array(np.array(v, np.int64 if k != "tail" else np.int32), k)
              for k, v in (("st", [0]), ("en", [2]), ("tail", [-1]))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["c"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["s32"], name="cast32", to=TensorProto.INT32),
        helper.make_node("Slice", ["s32", "st", "en"], ["nc"], name="slice"),
        helper.make_node("Concat", ["nc", "tail"], ["shape32"], name="concat", axis=-1),
        helper.make_node("Cast", ["shape32"], ["shape64"], name="cast64", to=TensorProto.INT64),
        helper.make_node("Reshape", ["c", "shape64"], ["y"], name="reshape"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, *consts])


def test_paddle2onnx_shape_arithmetic_is_folded_and_computes_what_onnxruntime_does():
    model = _paddle_reshape_model()
    x = np.random.default_rng(1).normal(0, 1, (1, 3, 10, 12)).astype(np.float32)
    mod, params = graph.from_onnx(model, shape_dict={"x": [1, 3, 10, 12]})
    got = _run_float(mod, params, x)[0]
    want = _ort(model, {"x": x})[0]
    assert got.shape == (1, 8, 120)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tvm_alone_fails_on_the_paddle2onnx_pattern():
    """The negative control: without the folding, TVM 0.27's importer refuses this model (so the test above
    shows the folding at work, not an importer that got better)."""
    from tvm.relax.frontend.onnx import from_onnx as tvm_from_onnx
    with pytest.raises(Exception, match="Reshape requires the input new shape to be Shape"):
        tvm_from_onnx(_paddle_reshape_model(), shape_dict={"x": [1, 3, 10, 12]})


def test_dynamic_inputs_are_listed_with_the_shape_dict_to_pass():
    model = _paddle_reshape_model()
    with pytest.raises(graph.GraphError) as e:
        graph.from_onnx(model)
    msg = str(e.value)
    assert "dynamic dimensions" in msg and "x: [<N>, 3, <H>, <W>] (float32)" in msg
    assert 'shape_dict={"x": [<N>, 3, <H>, <W>]}' in msg


def test_shape_dict_mistakes_are_named():
    model = _paddle_reshape_model()
    with pytest.raises(graph.GraphError, match="'image' is not an input of the model \\(inputs: x\\)"):
        graph.from_onnx(model, shape_dict={"image": [1, 3, 8, 8]})
    with pytest.raises(graph.GraphError, match="input 'x' has rank 4 .* shape_dict gives \\[1, 3, 8\\]"):
        graph.from_onnx(model, shape_dict={"x": [1, 3, 8]})
    with pytest.raises(graph.GraphError, match="input 'x' dimension 1 is 3 in the model, shape_dict gives 4"):
        graph.from_onnx(model, shape_dict={"x": [1, 4, 8, 8]})


def test_resize_with_dynamic_height_and_width_needs_no_more_than_shape_dict():
    """The PP-OCR detector's case: Resize of a tensor whose size depends on the dynamic input."""
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="nearest")]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
    with pytest.raises(graph.GraphError, match="shape_dict"):
        graph.from_onnx(model)
    x = np.random.default_rng(2).normal(0, 1, (1, 4, 5, 7)).astype(np.float32)
    mod, params = graph.from_onnx(model, shape_dict={"x": [1, 4, 5, 7]})
    np.testing.assert_array_equal(_run_float(mod, params, x)[0], _ort(model, {"x": x})[0])


def _lstm_model():
    """conv -> reshape to a sequence -> LSTM -> its last hidden state -> dense: a model with a recurrent part."""
    rng = np.random.default_rng(3)
    h, t = 8, 4
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, s).astype(np.float32), k) for k, s in
             (("cw", (6, 2, 3, 3)), ("W", (1, 4 * h, 6 * t * 4)), ("R", (1, 4 * h, h)), ("dw", (h, 3)))]
    inits.append(numpy_helper.from_array(np.array([1, 1, -1], np.int64), "seq_shape"))
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], name="enc/conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="enc/relu"),
             helper.make_node("Reshape", ["r", "seq_shape"], ["seq"], name="enc/flatten"),
             helper.make_node("LSTM", ["seq", "W", "R"], ["all_h", "last_h"], name="rnn/lstm", hidden_size=h),
             helper.make_node("Squeeze", ["last_h"], ["hv"], name="rnn/squeeze"),
             helper.make_node("MatMul", ["hv", "dw"], ["y"], name="head")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, t, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def test_an_lstm_is_refused_with_the_node_named_and_the_cut_that_compiles_the_rest():
    model = _lstm_model()
    with pytest.raises(graph.GraphError) as e:
        graph.from_onnx(model)
    msg = str(e.value)
    assert "TVM's ONNX importer cannot convert LSTM" in msg
    assert "'rnn/lstm' (LSTM; inputs: seq float32[1, 1, 96], W float32[1, 32, 96] (constant)" in msg
    assert "outputs=['seq']" in msg and "ONNX Runtime" in msg
    # the advice works: the part before the LSTM imports and computes what ONNX Runtime computes for it
    mod, params = graph.from_onnx(model, outputs=["seq"])
    x = np.random.default_rng(4).normal(0, 1, (1, 2, 4, 4)).astype(np.float32)
    seq = _run_float(mod, params, x)[0]
    sub = onnx_import.simplify_onnx(model)
    full_seq = _ort(onnx.utils.Extractor(onnx.shape_inference.infer_shapes(sub)).extract_model(["x"], ["seq"]),
                    {"x": x})[0]
    np.testing.assert_allclose(seq, full_seq, rtol=1e-5, atol=1e-6)


def test_a_failing_converter_is_traced_to_its_onnx_node():
    """TVM's Pad converter refuses pads computed at run time (its error names no node); the bisection finds it."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="first"),
             helper.make_node("Pad", ["r", "pads"], ["y"], name="the_pad"),
             helper.make_node("Relu", ["y"], ["z"], name="last")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3]),
                           helper.make_tensor_value_info("pads", TensorProto.INT64, [8])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    with pytest.raises(graph.GraphError) as e:
        graph.from_onnx(model)
    msg = str(e.value)
    assert "failed on node 'the_pad' (Pad; inputs: r float32[1, 2, 3, 3], pads int64[8])" in msg
    assert "outputs=['r']" in msg


def _mlp_onnx():
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits
    skl2onnx = pytest.importorskip("skl2onnx")
    d = load_digits()
    x = (d.data / 16).astype(np.float32)
    with threadpool_limits(1):
        clf = MLPClassifier(hidden_layer_sizes=(16,), solver="lbfgs", max_iter=50, random_state=0).fit(x, d.target)
    return skl2onnx.to_onnx(clf, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}), x


def test_skl2onnx_label_outputs_are_named_and_outputs_chooses_the_rest():
    model, x = _mlp_onnx()
    with pytest.raises(graph.GraphError) as e:
        graph.from_onnx(model, shape_dict={"X": [5, 64]})
    msg = str(e.value)
    assert "label or post-processing operators" in msg and "'output_probability'" in msg
    assert "'ZipMap' (ZipMap of domain ai.onnx.ml; inputs: out_activations_result float32" in msg
    assert "'ArrayFeatureExtractor' (ArrayFeatureExtractor of domain ai.onnx.ml" in msg
    assert "outputs=['out_activations_result', 'argmax_output']" in msg
    mod, params = graph.from_onnx(model, shape_dict={"X": [5, 64]},
                                  outputs=["out_activations_result", "argmax_output"])
    prob, idx = _run_float(mod, params, x[:5])
    label, zipmap = _ort(model, {"X": x[:5]})
    np.testing.assert_allclose(prob, np.array([[z[k] for k in range(10)] for z in zipmap]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(idx.ravel(), label)


def _if_model():
    """A mode input ``fast`` picks one of two branches (silero-vad's sample-rate switch, in small)."""
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 4)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 4)).astype(np.float32), "w2")
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "w2"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [helper.make_node("Equal", ["fast", "one"], ["cond"], name="is_fast"),
             helper.make_node("If", ["cond"], ["y"], name="mode_switch", then_branch=then_g, else_branch=else_g)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                          helper.make_tensor_value_info("fast", TensorProto.INT64, [])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2, one])


def test_an_if_on_a_mode_input_is_named_and_constants_fold_it():
    model = _if_model()
    with pytest.raises(graph.GraphError) as e:
        graph.from_onnx(model)
    assert "ONNX node 'mode_switch' (If) branches on a value computed at run time (from 'fast')" in str(e.value)
    assert "constants={'fast': ...}" in str(e.value)
    x = np.random.default_rng(6).normal(0, 1, (2, 4)).astype(np.float32)
    for fast in (0, 1):
        mod, params = graph.from_onnx(model, constants={"fast": fast})
        assert [p.name for p in mod["main"].params][:1] == ["x"] and int(mod["main"].attrs["num_input"]) == 1
        want = _ort(model, {"x": x, "fast": np.array(fast, np.int64)})[0]
        np.testing.assert_allclose(_run_float(mod, params, x)[0], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(graph.GraphError, match="'slow' is not an input of the model"):
        graph.from_onnx(model, constants={"slow": 1})


def test_a_model_as_modelproto_path_or_bytes(tmp_path):
    model = _paddle_reshape_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    sd = {"x": [1, 3, 6, 6]}
    scripts = {kind: graph.from_onnx(src, shape_dict=sd)[0]["main"].script()
               for kind, src in (("proto", model), ("str", str(path)), ("path", path),
                                 ("bytes", model.SerializeToString()))}
    assert len(set(scripts.values())) == 1, "the four ways give different modules"
    assert "R.reshape" in scripts["proto"]
    with pytest.raises(graph.GraphError, match="no ONNX file at"):
        graph.from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(graph.GraphError, match="bytes given are not an ONNX model"):
        graph.from_onnx(b"not a model")
    with pytest.raises(graph.GraphError, match="expects an onnx.ModelProto, a path or bytes, not int"):
        graph.from_onnx(3)


def test_outputs_mistakes_are_named():
    model = _lstm_model()
    with pytest.raises(graph.GraphError, match="'nope' is not a tensor of the model \\(its outputs are 'y'"):
        graph.from_onnx(model, outputs=["nope"])


@pytest.mark.parametrize("mode", ["reflect", "constant"])
def test_onnx_pad_becomes_a_relax_pad_that_quantize_reads(mode):
    """TVM writes Pad as a TE function that the flow could not carry (silero-vad's STFT padding): it becomes
    relax.nn.pad with the node's pads, and the float result is ONNX Runtime's."""
    pads = numpy_helper.from_array(np.array([0, 0, 2, 0, 0, 1], np.int64), "pads")     # 3-D: last axis 2 / 1
    value = numpy_helper.from_array(np.array(0.5, np.float32), "value")
    nodes = [helper.make_node("Pad", ["x", "pads", "value"] if mode == "constant" else ["x", "pads"], ["p"],
                              name="stft_pad", mode=mode),
             helper.make_node("Relu", ["p"], ["y"], name="relu")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [pads, value])
    mod, params = graph.from_onnx(model)
    assert [gv.name_hint for gv in mod.functions] == ["main"] and "R.nn.pad" in mod["main"].script()
    x = np.random.default_rng(7).normal(0, 1, (1, 2, 6)).astype(np.float32)
    want = _ort(model, {"x": x})[0]
    assert want.shape == (1, 2, 9)
    np.testing.assert_allclose(_run_float(mod, params, x)[0], want, rtol=1e-6)
    qmod = graph.quantize(mod, params, calibration=[x])           # reads the graph (a TE call would not be)
    assert qmod["main"].script().count("R.nn.pad") == 1


def test_te_functions_left_by_the_importer_are_refused_by_name():
    reps = numpy_helper.from_array(np.array([1, 2], np.int64), "reps")
    model = _model([helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [reps])
    mod, params = graph.from_onnx(model)
    with pytest.raises(graph.GraphError, match=r"calls TE functions of its module \(tile: TVM's importer"):
        graph.quantize(mod, params, global_scale=4.0)


def _stable_softmax_model(inf_shape=()):
    """jax2tf's softmax (magika): ``exp(z - max(-inf, reduce_max(z)))`` normalised, and a ``min(+inf, .)``."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, .5, (8, 6)).astype(np.float32), "w"),
             numpy_helper.from_array(np.full(inf_shape, -np.inf, np.float32), "neg_inf"),
             numpy_helper.from_array(np.full((), np.inf, np.float32), "pos_inf"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]),
             helper.make_node("ReduceMax", ["z", "axes"], ["zmax"], keepdims=1),
             helper.make_node("Max", ["neg_inf", "zmax"], ["m"]),
             helper.make_node("Sub", ["z", "m"], ["d"]),
             helper.make_node("Min", ["d", "pos_inf"], ["dc"]),
             helper.make_node("Exp", ["dc"], ["e"]),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=1),
             helper.make_node("Div", ["e", "s"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset=18)


def test_max_with_minus_infinity_and_min_with_infinity_are_dropped():
    """``max(-inf, y)`` is ``y`` (and ``min(+inf, y)``): the infinities are gone from the imported graph, the
    float result is ONNX Runtime's, and the quantizer takes the model (it refuses infinite constants)."""
    model = _stable_softmax_model()
    x = np.random.default_rng(3).normal(0, 1, (1, 8)).astype(np.float32)
    mod, params = graph.from_onnx(model)
    assert params and all(np.all(np.isfinite(np.asarray(v))) for v in params.values())
    assert "inf" not in mod["main"].script()
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(_run_float(mod, params, x)[0], want, rtol=1e-5, atol=1e-6)
    graph.quantize(mod, params, calibration=[x])


def test_an_infinite_operand_that_widens_the_result_is_kept():
    """The negative control: ``max(-inf[1, 6], reduce_max(z)[1, 1])`` broadcasts to (1, 6), so it is not ``y``:
    it stays, and the quantizer refuses its infinities by name as before."""
    model = _stable_softmax_model(inf_shape=(1, 6))
    x = np.random.default_rng(3).normal(0, 1, (1, 8)).astype(np.float32)
    mod, params = graph.from_onnx(model)
    np.testing.assert_allclose(_run_float(mod, params, x)[0], _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(graph.QuantizationError, match="infinite"):
        graph.quantize(mod, params, calibration=[x])
