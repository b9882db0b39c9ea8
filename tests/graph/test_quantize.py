"""Quantization to VTA's integer form: import, batch-norm folding, calibrated power-of-two scales,
round to nearest, per-channel shifts, skipped layers, refusals. Checked on the CPU against float
references computed independently (numpy, ONNX Runtime)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import clip_ranges, run_cpu

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.quantize import exponent_for, prepare  # noqa: E402


def onnx_model(nodes, inits, x_shape, y_shape, y="y"):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def conv_bn_model(rng, c=3, o=16, hw=8):
    inits = {"w": rng.normal(0, 0.3, (o, c, 3, 3)), "g": rng.uniform(0.5, 1.5, o), "b": rng.normal(0, 0.2, o),
             "m": rng.normal(0, 0.2, o), "v": rng.uniform(0.5, 1.5, o), "wd": rng.normal(0, 0.2, (10, o)),
             "bd": rng.normal(0, 0.1, 10)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1)]
    return onnx_model(nodes, inits, [1, c, hw, hw], [1, 10]), inits


def test_exponent_is_the_largest_that_fits():
    assert exponent_for(127.0) == 0
    assert exponent_for(1.0) == 6            # 64 <= 127 < 128
    assert exponent_for(0.99) == 7           # 126.7
    assert exponent_for(0.5) == 7
    assert exponent_for(200.0) == -1
    for a in np.geomspace(1e-3, 1e3, 50):
        e = exponent_for(a)
        assert a * 2.0 ** e <= 127 < a * 2.0 ** (e + 1)


def test_batch_norm_is_folded_and_the_result_follows_float(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    model, inits = conv_bn_model(rng)
    mod, params = graph.from_onnx(model)
    g = prepare(mod, params)
    assert not [n for n in g.nodes if "batch_norm" in n.op], "batch norm should be folded into the conv"
    conv = next(n for n in g.nodes if n.op == "conv2d")
    scale = inits["g"] / np.sqrt(inits["v"] + 1e-5)
    np.testing.assert_allclose(conv.attrs["weight"], inits["w"] * scale[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(conv.attrs["bias"], inits["b"] - inits["m"] * scale, rtol=1e-6, atol=1e-7)
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    qmod = graph.quantize(mod, params, calibration=xs[:3])
    sess = ort.InferenceSession(model.SerializeToString())
    for x in xs:
        want = sess.run(None, {"x": x})[0]
        got = run_cpu(qmod, x)[0]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 0.05, f"int8 result is {err:.3f} of the range away from float"
        assert not np.array_equal(got, np.zeros_like(got))


def test_round_to_nearest_and_per_channel_shift():
    """A 1x1 conv whose exact result has halves: VTA's integer form must round them to nearest (up)."""
    o = 16
    w = np.zeros((o, 16, 1, 1))
    w[np.arange(o), np.arange(o), 0, 0] = np.where(np.arange(o) < 8, 0.75, 7 / 256)   # two weight magnitudes
    model = onnx_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"w": w}, [1, 16, 4, 4], [1, o, 4, 4])
    mod, params = graph.from_onnx(model)
    rng = np.random.default_rng(1)
    x = rng.integers(-64, 64, (1, 16, 4, 4)).astype(np.float32) / 64     # exact at exponent 6
    qmod = graph.quantize(mod, params, calibration=[x])
    got = run_cpu(qmod, x)[0]
    # the reference: output exponent from the calibration maximum, then round half up, computed here
    exact = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x.astype(np.float64))
    e_out = int(np.floor(np.log2(127 / np.abs(exact).max())))
    want = np.clip(np.floor(exact * 2.0 ** e_out + 0.5), -128, 127) / 2.0 ** e_out
    np.testing.assert_array_equal(got, want)
    assert (np.abs(exact * 2.0 ** e_out % 1) == 0.5).any(), "the data should contain halves to round"
    text = qmod["main"].script()
    assert "R.right_shift(" in text
    # per-channel scales give the small channels their own, finer, weight exponent
    qmod_t = graph.quantize(mod, params, calibration=[x], per_channel=False)
    small = slice(8, 16)
    err_c = np.abs(run_cpu(qmod, x)[0][:, small] - exact[:, small]).max()
    err_t = np.abs(run_cpu(qmod_t, x)[0][:, small] - exact[:, small]).max()
    assert err_c < err_t, (err_c, err_t)


def test_global_scale_mode():
    rng = np.random.default_rng(2)
    model, _ = conv_bn_model(rng)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, global_scale=8.0)
    # every activation exponent is 4 (8 * 2**4 = 128 > 127, so 3): the input is multiplied by 2**3
    assert 'R.multiply(x, R.const(8.0, "float32"))' in qmod["main"].script()


def test_skip_layers_keeps_them_in_float():
    rng = np.random.default_rng(3)
    model, _ = conv_bn_model(rng)
    mod, params = graph.from_onnx(model)
    x = rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    for skip in ([0], ["conv2d_0"]):
        qmod = graph.quantize(mod, params, calibration=[x], skip_layers=skip)
        assert graph.layer_outputs(qmod) == ["dense_0"]
        pl = graph.placement(graph.graph_pack(qmod))
        row = next(r for r in pl.rows if r["op"] == "nn.conv2d")
        assert row["device"] == "CPU" and "float" in row["note"]
    with pytest.raises(graph.QuantizationError, match="no layer named 'conv9'; the layers are conv2d_0, dense_0"):
        graph.quantize(mod, params, calibration=[x], skip_layers=["conv9"])
    with pytest.raises(graph.QuantizationError, match="index 5 is out of range; the network has 2"):
        graph.quantize(mod, params, calibration=[x], skip_layers=[5])


def test_bias_overflow_is_refused_naming_the_layer():
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.01, (16, 16, 1, 1))
    b = np.zeros(16)
    b[5] = 1e9
    model = onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])], {"w": w, "b": b}, [1, 16, 4, 4],
                       [1, 16, 4, 4])
    mod, params = graph.from_onnx(model)
    x = rng.normal(0, 1, (1, 16, 4, 4)).astype(np.float32)
    with pytest.raises(graph.QuantizationError, match=r"layer conv2d_0: the bias of output channel 5 .* overflows "
                                                      r"the int32 accumulator"):
        graph.quantize(mod, params, calibration=[x])


def test_bad_calibration_is_refused():
    rng = np.random.default_rng(5)
    model, _ = conv_bn_model(rng)
    mod, params = graph.from_onnx(model)
    good = rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    with pytest.raises(graph.QuantizationError, match=r"calibration item 1: input 'x' has shape \(2, 3, 8, 8\), "
                                                      r"the network expects \(1, 3, 8, 8\)"):
        graph.quantize(mod, params, calibration=[good, np.zeros((2, 3, 8, 8), np.float32)])
    with pytest.raises(graph.QuantizationError, match="calibration item 0 has 2 arrays; the network has 1 input"):
        graph.quantize(mod, params, calibration=[(good, good)])
    with pytest.raises(graph.QuantizationError, match="the calibration set is empty"):
        graph.quantize(mod, params, calibration=[])
    with pytest.raises(graph.QuantizationError, match="either calibration"):
        graph.quantize(mod, params)
    with pytest.raises(graph.GraphError, match="no value for the weight parameter"):
        graph.quantize(mod, {}, calibration=[good])


def test_depthwise_and_transposed_convolutions_fold_and_quantize():
    """Depthwise conv + batch norm + ReLU6 (ONNX Clip), then a grouped transposed conv (output padding,
    asymmetric pads) + batch norm + ReLU: batch norm folds along each layer's output channels (axis 1 of the
    transposed kernel (CI, CO/groups, KH, KW)), ReLU6 becomes the layer's clip, the float evaluator and the
    int8 network follow ONNX Runtime, and the transposed layer can be kept in float."""
    ort = pytest.importorskip("onnxruntime")
    from vta_compiler.graph.evaluate import evaluate
    rng = np.random.default_rng(6)
    c, groups, cog = 16, 2, 6                       # the transposed conv: 16 -> 12 channels in 2 groups

    def bn(n):
        return [rng.uniform(0.5, 1.5, n), rng.normal(0.2, 0.2, n), rng.normal(0, 0.2, n), rng.uniform(0.5, 1.5, n)]
    g1, b1, m1, v1 = bn(c)
    g2, b2, m2, v2 = bn(groups * cog)
    inits = {"wd": rng.normal(0, 0.4, (c, 1, 3, 3)), "g1": g1, "b1": b1, "m1": m1, "v1": v1, "lo": np.array(0.0),
             "hi": np.array(6.0), "wt": rng.normal(0, 0.2, (c, cog, 3, 3)), "g2": g2, "b2": b2, "m2": m2, "v2": v2}
    nodes = [helper.make_node("Conv", ["x", "wd"], ["d"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("BatchNormalization", ["d", "g1", "b1", "m1", "v1"], ["dn"]),
             helper.make_node("Clip", ["dn", "lo", "hi"], ["r6"]),
             helper.make_node("ConvTranspose", ["r6", "wt"], ["t"], strides=[2, 2], pads=[1, 0, 0, 1],
                              output_padding=[1, 1], group=groups),
             helper.make_node("BatchNormalization", ["t", "g2", "b2", "m2", "v2"], ["tn"]),
             helper.make_node("Relu", ["tn"], ["y"])]
    model = onnx_model(nodes, inits, [1, c, 8, 8], [1, groups * cog, 17, 17])
    mod, params = graph.from_onnx(model)
    g = prepare(mod, params)
    layers = {n.op: n for n in g.nodes if n.op in ("conv2d", "conv2d_transpose")}
    assert len(layers) == 2 and not [n for n in g.nodes if "batch_norm" in n.op or "clip" in n.op]
    assert layers["conv2d"].attrs["act"] == ("clip", 0.0, 6.0) and layers["conv2d"].attrs["groups"] == c
    t = layers["conv2d_transpose"].attrs
    assert t["act"] == ("clip", 0.0, None) and t["output_padding"] == (1, 1) and t["padding"] == (1, 0, 0, 1)
    scale = g2 / np.sqrt(v2 + 1e-5)
    want_w = np.empty_like(inits["wt"])
    for ci in range(c):                              # input channel ci feeds output channels (ci // 8) * 6 + j
        for j in range(cog):
            want_w[ci, j] = inits["wt"][ci, j] * scale[(ci // (c // groups)) * cog + j]
    np.testing.assert_allclose(t["weight"], want_w, rtol=1e-6)
    np.testing.assert_allclose(t["bias"], b2 - m2 * scale, rtol=1e-6, atol=1e-7)

    sess = ort.InferenceSession(model.SerializeToString())
    xs = [rng.normal(0, 1, (1, c, 8, 8)).astype(np.float32) for _ in range(3)]
    want = sess.run(None, {"x": xs[2]})[0]
    np.testing.assert_allclose(evaluate(g, [xs[2]])[id(g.outputs[0])], want, rtol=1e-4, atol=1e-4)
    qmod = graph.quantize(mod, params, calibration=xs[:2])
    assert graph.layer_outputs(qmod) == ["conv2d_0", "conv2d_transpose_0"]
    lo, hi = clip_ranges(qmod)["conv2d_0"]
    assert lo == 0 and hi in {6 << k for k in range(5)}, "ReLU6 should clip at 6 in the layer's scale"
    got = run_cpu(qmod, xs[2])[0]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 0.05, f"int8 result is {err:.3f} of the range away from float"
    assert (got > 0).mean() > 0.3
    kept = graph.quantize(mod, params, calibration=xs[:2], skip_layers=["conv2d_transpose_0"])
    assert graph.layer_outputs(kept) == ["conv2d_0"]
    assert np.abs(run_cpu(kept, xs[2])[0] - want).max() / np.abs(want).max() < 0.05


def test_a_hard_sigmoid_after_a_layer_becomes_its_epilogue(fsim):
    """PyTorch's hard-sigmoid ``relu6(conv(x) + 3) / 6``: the add, the clip and the divide fold into the layer
    (weights, bias and clip scaled by 1/6), nothing runs in float between the layers, the float graph still
    follows ONNX Runtime, and VTA's run equals the CPU's."""
    ort = pytest.importorskip("onnxruntime")
    from graph_helpers import run_vta

    from vta_compiler.graph.evaluate import evaluate
    rng = np.random.default_rng(3)
    inits = {"w1": rng.normal(0, 0.4, (16, 8, 3, 3)), "b1": rng.normal(0, 0.5, 16), "three": np.array(3.0),
             "lo": np.array(0.0), "hi": np.array(6.0), "six": np.array(6.0), "w2": rng.normal(0, 0.3, (8, 16, 1, 1))}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "three"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["r6"]),
             helper.make_node("Div", ["r6", "six"], ["hs"]),
             helper.make_node("Conv", ["hs", "w2"], ["y"])]
    model = onnx_model(nodes, inits, [1, 8, 8, 8], [1, 8, 8, 8])
    mod, params = graph.from_onnx(model)
    g = prepare(mod, params)
    assert [n.op for n in g.nodes if n.op != "input"] == ["conv2d"] * 2
    c1 = next(n for n in g.nodes if n.op == "conv2d")
    assert c1.attrs["act"] == ("clip", 0.0, 1.0)
    np.testing.assert_allclose(c1.attrs["weight"], inits["w1"] / 6, rtol=1e-6)
    np.testing.assert_allclose(c1.attrs["bias"], (inits["b1"] + 3) / 6, rtol=1e-6)
    xs = [rng.normal(0, 1, (1, 8, 8, 8)).astype(np.float32) for _ in range(3)]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": xs[2]})[0]
    np.testing.assert_allclose(evaluate(g, [xs[2]])[id(g.outputs[0])], want, rtol=1e-4, atol=1e-4)
    qmod = graph.quantize(mod, params, calibration=xs[:2])
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    assert [r["device"] for r in pl.rows if r["macs"]] == ["VTA"] * 2
    devices = "".join("V" if r["device"] == "VTA" else "C" for r in pl.rows)
    assert devices.strip("C") == "VV", pl.rows     # nothing on the host between the layers (only the input's
    #                                               quantization before them and the output's after)
    got = run_cpu(qmod, xs[2])[0]
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.98
    np.testing.assert_array_equal(run_vta(graph.build(pmod), xs[2])[0], got)
