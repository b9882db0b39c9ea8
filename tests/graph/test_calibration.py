"""Calibration beyond the maximum (percentile, mse, entropy on power-of-two scales), per-channel scales on the
way to depthwise layers, and bias correction: each checked against numpy references written here."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402
from vta_compiler.graph import calibrate as cal  # noqa: E402
from vta_compiler.graph.ir import Graph  # noqa: E402


def stats_of(x: np.ndarray, pct=None) -> cal.NodeStats:
    a = np.abs(x)
    return cal.NodeStats(amax=float(a.max()), pct=float(np.percentile(a, pct)) if pct else 0.0, samples=[x])


def round_clip_mse(x, e):
    q = np.clip(np.floor(x * 2.0 ** e + 0.5), -128, 127) / 2.0 ** e
    return float(np.mean((x - q) ** 2))


def test_methods_on_data_with_outliers():
    rng = np.random.default_rng(0)
    x = rng.standard_t(4, 60000)                      # a long tail: the largest values are rare
    s = stats_of(x, 99.99)
    e_max = int(np.floor(np.log2(127 / np.abs(x).max())))
    assert cal.exponent(s, "max") == e_max == 2
    assert cal.exponent(s, "percentile") == int(np.floor(np.log2(127 / np.percentile(np.abs(x), 99.99))))
    e_mse = cal.exponent(s, "mse")
    errs = {e: round_clip_mse(x, e) for e in range(e_max, e_max + cal.SEARCH + 1)}
    assert e_mse == min(errs, key=errs.get) and e_mse > e_max
    assert cal.exponent(s, "entropy") > e_max


def test_methods_keep_the_maximum_when_nothing_should_clip():
    """Uniform data fills its range: clipping it only loses, so mse and entropy keep the maximum's exponent."""
    x = np.random.default_rng(1).uniform(-3, 3, 60000)
    s = stats_of(x, 99.99)
    for m in cal.METHODS:
        assert cal.exponent(s, m) == cal.exponent_for(3.0) == 5, m


def conv_model(rng, o=16, c=8, hw=8):
    w = rng.normal(0, 0.3, (o, c, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, hw, hw])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_quantize_calibrate_option():
    rng = np.random.default_rng(2)
    mod, params = graph.from_onnx(conv_model(rng, hw=32))
    xs = [rng.laplace(0, 0.3, (1, 8, 32, 32)).astype(np.float32) for _ in range(3)]
    xs[0][0, 0, 0, 0] = 12.0                          # one outlier sets the maximum's scale
    text = {m: graph.quantize(mod, params, calibration=xs, calibrate=m)["main"].script() for m in cal.METHODS}
    assert 'R.multiply(x, R.const(8.0, "float32"))' in text["max"]        # 12 * 2**3 <= 127
    for m in ("percentile", "mse", "entropy"):
        assert 'R.multiply(x, R.const(8.0, "float32"))' not in text[m], m
    assert text["percentile"] == graph.quantize(mod, params, calibration=xs)["main"].script()     # the default
    assert text["percentile"] == graph.quantize(mod, params, calibration=xs, percentile=99.99)["main"].script()
    assert text["percentile"] != graph.quantize(mod, params, calibration=xs, percentile=99.0)["main"].script()
    with pytest.raises(graph.QuantizationError, match="percentile=99.0 is for calibrate='percentile', not "
                       "calibrate='max'"):
        graph.quantize(mod, params, calibration=xs, calibrate="max", percentile=99.0)
    with pytest.raises(graph.QuantizationError, match="calibrate='median': choose one of 'max', 'percentile'"):
        graph.quantize(mod, params, calibration=xs, calibrate="median")
    with pytest.raises(graph.QuantizationError, match="percentile must be in"):
        graph.quantize(mod, params, calibration=xs, percentile=120)


def hswish_depthwise_model(rng, c=32, hw=8):
    """conv -> hard-swish (as Paddle2ONNX writes it) -> depthwise conv -> hard-swish -> 1x1 conv; the first
    conv's output channels span a 200x range, which the depthwise weights undo."""
    ranges = np.geomspace(0.05, 10, c)
    w1 = rng.normal(0, 0.3, (c, 8, 3, 3)) * ranges.reshape(-1, 1, 1, 1)
    # the depthwise weights even the ranges out again (as a folded batch norm does): every channel counts
    wd = rng.normal(0, 0.4, (c, 1, 3, 3)) / ranges.reshape(-1, 1, 1, 1)
    inits = {"w1": w1, "wd": wd, "w3": rng.normal(0, 0.2, (16, c, 1, 1)),
             "three": np.array(3.0), "zero": np.array(0.0), "six": np.array(6.0)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1])]

    def hswish(x, y):
        return [helper.make_node("Add", [x, "three"], [y + "_p"]),
                helper.make_node("Clip", [y + "_p", "zero", "six"], [y + "_c"]),
                helper.make_node("Mul", [x, y + "_c"], [y + "_m"]),
                helper.make_node("Div", [y + "_m", "six"], [y])]
    nodes += hswish("a", "h") + [helper.make_node("Conv", ["h", "wd"], ["d"], pads=[1, 1, 1, 1], group=c)]
    nodes += hswish("d", "h2") + [helper.make_node("Conv", ["h2", "w3"], ["y"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, hw, hw])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_per_channel_scales_on_the_way_to_a_depthwise_layer(fsim):
    """The conv before the hard-swish requantizes each channel with its own shift, the hard-swish output is
    quantized per channel, the depthwise layer folds those exponents into its shifts: the output follows
    float far better than with one scale per tensor, and VTA still equals the CPU run."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    model = hswish_depthwise_model(rng)
    mod, params = graph.from_onnx(model)
    xs = [rng.normal(0, 1, (1, 8, 8, 8)).astype(np.float32) for _ in range(4)]
    sess = ort.InferenceSession(model.SerializeToString())
    x = xs[3]
    want = sess.run(None, {"x": x})[0]
    per = graph.quantize(mod, params, calibration=xs[:3])
    one = graph.quantize(mod, params, calibration=xs[:3], depthwise_channels=False)

    def rel_err(q):
        return np.sqrt(np.mean((run_cpu(q, x)[0] - want) ** 2) / np.mean(want ** 2))
    e_per, e_one = rel_err(per), rel_err(one)
    assert e_per < 0.08 and e_per < 0.25 * e_one, (e_per, e_one)
    # the scales: the first conv's output and the depthwise input carry one exponent per channel
    g = Graph.from_relax(per["main"])
    by = {n.name: n for n in g.nodes}
    shift0 = by["conv2d_0_shift"].args[1].value.reshape(-1)
    e_in_dw = np.log2(next(n for n in g.nodes if n.name.endswith("_scaled") and n.name != "x_scaled")
                      .args[0].args[1].value.reshape(-1))
    assert len(np.unique(e_in_dw)) >= 5 and np.ptp(e_in_dw) >= 5        # a 200x range: 5+ bits apart
    assert len(np.unique(shift0)) > 1
    for n in Graph.from_relax(one["main"]).nodes:
        if n.name.endswith("_scaled"):
            assert n.args[0].args[1].value.size == 1
    np.testing.assert_array_equal(run_vta(graph.build(graph.graph_pack(per)), x)[0], run_cpu(per, x)[0])


def coarse_weights_chain(rng, c=16, hw=8):
    """Two 1x1 convs on all-positive inputs whose weights are coarse in int8 (one weight per output channel
    is 40x the others): the rounding errors of each channel's weights do not average out against inputs
    with a positive mean, so each layer adds a systematic (per-channel) error to its output."""
    ws = []
    for _ in range(2):
        w = rng.uniform(0.01, 0.05, (c, c)) * rng.choice([-1, 1], (c, c))
        w[np.arange(c), rng.integers(0, c, c)] = 2.0
        ws.append(w)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
                          [numpy_helper.from_array(w.reshape(c, c, 1, 1).astype(np.float32), f"w{k}")
                           for k, w in enumerate(ws)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, ws


def test_bias_correction_removes_the_mean_error():
    """Bias correction moves each output channel's mean error toward zero, through two layers (each layer
    corrects the error it adds itself, not what reaches it from the layer before, which that one corrects)."""
    rng = np.random.default_rng(4)
    model, (w0, w1) = coarse_weights_chain(rng)
    mod, params = graph.from_onnx(model)
    xs = [rng.exponential(0.5, (1, 16, 8, 8)).astype(np.float32) for _ in range(4)]

    def float_net(x):
        r = np.maximum(np.einsum("oc,nchw->nohw", w0, x.astype(np.float64)), 0)
        return np.einsum("oc,nchw->nohw", w1, r)

    def mean_err(q):
        d = np.concatenate([run_cpu(q, x)[0] - float_net(x) for x in xs])
        return np.abs(d.mean(axis=(0, 2, 3)))
    before = mean_err(graph.quantize(mod, params, calibration=xs))
    after = mean_err(graph.quantize(mod, params, calibration=xs, bias_correction=True))
    assert before.mean() > 0.01, "coarse weights on positive inputs should bias the output"
    assert after.mean() < 0.5 * before.mean(), (before.mean(), after.mean())
    with pytest.raises(graph.QuantizationError, match="bias_correction needs calibration data"):
        graph.quantize(mod, params, global_scale=8.0, bias_correction=True)


def test_depthwise_with_a_channel_multiplier_reads_each_input_channels_exponent():
    """groups = C with 2 outputs per input channel: output o reads input channel o // 2 and its exponent."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    c = 16
    ranges = np.geomspace(0.02, 8, c).astype(np.float32)
    wd = (rng.normal(0, 0.4, (2 * c, 1, 3, 3)) / np.repeat(ranges, 2).reshape(-1, 1, 1, 1)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "wd"], ["y"], pads=[1, 1, 1, 1], group=c)], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, 8, 8])],
                          [numpy_helper.from_array(wd, "wd")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    xs = [(rng.normal(0, 1, (1, c, 8, 8)) * ranges.reshape(1, -1, 1, 1)).astype(np.float32) for _ in range(3)]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": xs[2]})[0]
    for per, bound in ((True, 0.1), (False, None)):
        got = run_cpu(graph.quantize(mod, params, calibration=xs[:2], depthwise_channels=per), xs[2])[0]
        err = np.sqrt(np.mean((got - want) ** 2, axis=(0, 2, 3)) / np.mean(want ** 2, axis=(0, 2, 3)))
        if per:
            assert err.max() < bound, err
        else:
            assert err.max() > 0.3, "one scale per tensor should lose the small channels"
