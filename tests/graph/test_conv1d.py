"""1-D convolutions (audio and sequence models: silero-vad's STFT and encoder) run on VTA as 2-D ones one row
high, with their bias and activation folded, no layout change between them, and VTA equal to the CPU int8 run."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
tvm = pytest.importorskip("tvm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402

#: (out channels, kernel, stride, pad) of each Conv after the first input's 6 channels
LAYERS = [(24, 3, 1, 1), (16, 5, 2, 2), (40, 1, 1, 0), (32, 3, 2, 1)]


def conv1d_model(seed: int = 0):
    """x (1, 6, 48) -> Conv1d + bias -> Relu, four times (kernels 3, 5, 1, 3; strides 1, 2, 1, 2)."""
    rng = np.random.default_rng(seed)
    nodes, inits, c, x = [], [], 6, "x"
    for k, (co, kern, stride, pad) in enumerate(LAYERS):
        w = rng.normal(0, 1 / np.sqrt(c * kern), (co, c, kern)).astype(np.float32)
        b = rng.normal(0.1, 0.2, co).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [f"c{k}"], name=f"enc{k}/conv", kernel_shape=[kern],
                                   strides=[stride], pads=[pad, pad]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"enc{k}/relu")]
        x, c = f"r{k}", co
    g = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 48])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    m.ir_version = 8
    return m


def test_conv1d_layers_run_on_vta_equal_to_the_cpu_int8_run_and_close_to_float(fsim):
    model = conv1d_model()
    rng = np.random.default_rng(1)
    xs = [rng.normal(0, 1, (1, 6, 48)).astype(np.float32) for _ in range(4)]
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=xs[:3])
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    convs = [r for r in pl.rows if r["op"].startswith("conv2d")]
    assert len(convs) == 4 and all(r["device"] == "VTA" for r in convs), pl
    assert pl.vta_share == 1.0
    assert pmod["main"].script().count("R.to_vdevice(") == 2, pl     # in once, out once: the views fold away
    ex = graph.build(pmod)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        want = run_cpu(qmod, x)[0]
        got = run_vta(ex, x)[0]
        np.testing.assert_array_equal(got, want)
        ref = sess.run(None, {"x": x})[0]
        assert got.shape == ref.shape == (1, 32, 12)
        assert np.count_nonzero(ref) > ref.size // 4 and len(np.unique(got)) > 20       # informative
        assert np.corrcoef(got.reshape(-1), ref.reshape(-1))[0, 1] > 0.97
    assert fsim.stats()["gemm_counter"] > 0


def test_conv1d_as_conv2d_computes_what_onnxruntime_does():
    """The rewrite alone, in float: the canonical graph (2-D layers one row high, bias and relu folded), every
    layer kept in float (the activations between them still round to int8 steps), follows ONNX Runtime's
    result; negative control: another model's weights do not."""
    from vta_compiler.graph import canon
    from vta_compiler.graph.frontend import bind_params
    from vta_compiler.graph.ir import Graph
    model = conv1d_model(seed=3)
    mod, params = graph.from_onnx(model)
    g = canon.canonicalize(Graph.from_relax(bind_params(mod, params)))
    layers = [n for n in g.nodes if n.op == "conv2d"]
    assert [n.attrs["weight"].shape[2] for n in layers] == [1] * 4
    assert all(n.attrs["act"] is not None for n in layers)               # each relu folded into its layer
    assert not any(n.op in ("relax.nn.conv1d", "relax.add", "relax.nn.relu") for n in g.nodes)
    x = np.random.default_rng(2).normal(0, 1, (1, 6, 48)).astype(np.float32)
    fmod = graph.quantize(mod, params, global_scale=8.0, skip_layers=range(4))
    got = run_cpu(fmod, x)[0]
    for seed, same in ((3, True), (4, False)):
        sess = ort.InferenceSession(conv1d_model(seed).SerializeToString(), providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"x": x})[0]
        assert (np.corrcoef(got.reshape(-1), ref.reshape(-1))[0, 1] > 0.999) == same, seed


def test_a_bias_after_a_one_wide_convolutions_squeeze_folds_into_the_layer(fsim):
    """magika's form: Conv with a (5, 1) kernel on (N, C, L, 1), Slice [:, :, :, 0:1] (a copy), Squeeze of the last
    axis, then the bias Add on (N, O, L) and a GELU. The slice goes, the add folds into the layer's bias (it ran in
    float on the host), and VTA equals the CPU int8 run."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.15, (24, 8, 5, 1)).astype(np.float32)
    b = rng.normal(0.2, 0.3, (24, 1)).astype(np.float32)
    consts = {"w": w, "b": b, "st": np.array([0], np.int64), "en": np.array([1], np.int64),
              "ax": np.array([3], np.int64), "sq": np.array([3], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[5, 1]),
             helper.make_node("Slice", ["c", "st", "en", "ax"], ["s"]),
             helper.make_node("Squeeze", ["s", "sq"], ["q"]),
             helper.make_node("Add", ["q", "b"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["g"]), helper.make_node("Mul", ["a", "g"], ["y"])]
    g = helper.make_graph(nodes, "wide1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 40, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    xs = [rng.normal(0, 1, (1, 8, 40, 1)).astype(np.float32) for _ in range(3)]
    qmod = graph.quantize(mod, params, calibration=xs[:2])
    pl = graph.placement(graph.graph_pack(qmod))
    assert not [r for r in pl.rows if r["op"] in ("add", "strided_slice")], [(r["op"], r["device"]) for r in pl.rows]
    want, got = run_cpu(qmod, xs[2])[0], run_vta(graph.build(graph.graph_pack(qmod)), xs[2])[0]
    np.testing.assert_array_equal(got, want)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xs[2]})[0]
    assert got.shape == ref.shape == (1, 24, 36)
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] > 0.99


def test_a_long_strided_first_kernel_folds_by_blocks(fsim):
    """silero-vad's STFT form: one channel, a kernel 32 wide at stride 8 (a divisor of it). Its columns fold into
    the channels with 4 slices of the row cut in blocks of 8 instead of 32 slices, and VTA equals the CPU int8
    run."""
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.2, (24, 1, 32)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[32], strides=[8])], "stft",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 200])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    xs = [rng.normal(0, 1, (1, 1, 200)).astype(np.float32) for _ in range(3)]
    qmod = graph.quantize(mod, params, calibration=xs[:2])
    pmod = graph.graph_pack(qmod)
    conv = next(r for r in graph.placement(pmod).rows if r["op"].startswith("conv2d"))
    assert conv["device"] == "VTA" and conv["fold"], conv
    assert pmod["main"].script().count("R.strided_slice(") <= 6
    want, got = run_cpu(qmod, xs[2])[0], run_vta(graph.build(pmod), xs[2])[0]
    assert got.shape == (1, 24, 22) and len(np.unique(got)) > 20
    np.testing.assert_array_equal(got, want)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xs[2]})[0]
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] > 0.99
