"""Pre-quantized ONNX models (QDQ pairs) run with their own scales: exactly when they are powers of two (against
an integer numpy reference of the model's arithmetic, and close to ONNX Runtime's own run of the same file);
onnxruntime's static quantization (scales of any value) is refused by name, or rounded when asked."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402

E_X, E_Y = 5, 3                        # the activations' scales 2^-5 and 2^-3
E_W = np.array([7, 8, 6, 7, 9, 7, 8, 7, 6, 7, 8, 7, 7, 6, 8, 7])     # per output channel


def qdq_conv_model(rng):
    """As a power-of-two exporter writes it: Q/DQ(x) -> Conv(DQ(int8 W, per channel), DQ(int32 bias)) -> Relu ->
    Q/DQ(y)."""
    wq = rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    bq = rng.integers(-3000, 3000, 16).astype(np.int32)
    sw = (2.0 ** -E_W).astype(np.float32)
    inits = {"sx": np.array(2.0 ** -E_X, np.float32), "zx": np.array(0, np.int8), "wq": wq, "sw": sw,
             "zw": np.zeros(16, np.int8), "bq": bq, "sb": (2.0 ** -(E_X + E_W)).astype(np.float32),
             "zb": np.zeros(16, np.int32), "sy": np.array(2.0 ** -E_Y, np.float32), "zy": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, wq, bq


def integer_reference(x, wq, bq, e_y=E_Y):
    """The model's arithmetic in integers: x to int8 at 2^-5 (round half to even, as QuantizeLinear), the int32
    convolution plus the bias, each channel requantized to 2^-3 (VTA rounds halves up), relu, int8."""
    xq = np.clip(np.rint(x * 2.0 ** E_X), -128, 127).astype(np.int64)
    xp = np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((1, 16, 10, 10), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 10, j:j + 10], wq[:, :, i, j].astype(np.int64))
    acc += bq.reshape(1, -1, 1, 1)
    shift = (E_X + E_W - e_y).reshape(1, -1, 1, 1)
    y = np.floor_divide(acc + (1 << (shift - 1)), 1 << shift)
    return np.clip(y, 0, 127) * 2.0 ** -e_y


def test_a_power_of_two_qdq_model_runs_with_its_own_scales_exactly(fsim):
    rng = np.random.default_rng(11)
    model, wq, bq = qdq_conv_model(rng)
    x = rng.normal(0, 1.2, (1, 8, 10, 10)).astype(np.float32)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params)                      # no calibration: the model's scales
    want = integer_reference(x, wq, bq)
    assert len(np.unique(want)) > 50 and (want == 0).mean() < 0.7, "informative outputs"
    got = run_cpu(qmod, x)[0]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    pmod = graph.graph_pack(qmod)
    assert len(graph.placement(pmod).vta_rows) == 1
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], got)
    # ONNX Runtime's own run of the file: the same grid; a tie rounds to even there, half up on VTA
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    units = np.abs(theirs - got) * 2.0 ** E_Y
    assert units.max() <= 1 and (units == 0).mean() > 0.98, (units.max(), (units == 0).mean())
    # the scales are the file's: the same model with y at 2^-2 gives other numbers, its own reference's
    for t in model.graph.initializer:
        if t.name == "sy":
            t.CopyFrom(numpy_helper.from_array(np.array(0.25, np.float32), "sy"))
    coarser = run_cpu(graph.quantize(*graph.from_onnx(model)), x)[0]
    assert not np.array_equal(coarser, got)
    np.testing.assert_array_equal(coarser, integer_reference(x, wq, bq, e_y=2).astype(np.float32))


def _float_model(rng):
    inits = {"w1": rng.normal(0, .3, (16, 3, 3, 3)).astype(np.float32), "b1": rng.normal(0, .1, 16).astype(np.float32),
             "w2": rng.normal(0, .2, (16, 16, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ort_reference(model):
    """ONNX Runtime on a QDQ model as the file says: DequantizeLinear, the float operator, QuantizeLinear. Its graph
    optimizations would fuse them into int8 kernels whose results depend on the CPU (without VNNI, MLAS's u8s8
    products saturate: up to 16 output units off the file's own semantics on an AVX2 machine here), so they are off."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _ort_static_model(tmp_path):
    """(model, calibration inputs): onnxruntime's static quantization (QDQ, symmetric int8, per-channel weights)
    of ``_float_model``, calibrated on the inputs."""
    quant = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(4)
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(4)]

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter({"x": x} for x in xs)

        def get_next(self):
            return next(self.it, None)
    fp, qp = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_float_model(rng), str(fp))
    quant.quantize_static(str(fp), str(qp), Reader(), quant_format=quant.QuantFormat.QDQ, per_channel=True,
                          activation_type=quant.QuantType.QInt8, weight_type=quant.QuantType.QInt8,
                          extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return onnx.load(str(qp)), xs


def test_onnxruntime_static_quantization_is_refused_by_name_or_rounded(tmp_path, fsim):
    """onnxruntime's QDQ scales are any real number: refused, naming the tensors; ``qdq_scales="nearest"`` rounds
    them to powers of two, and the result stays near ONNX Runtime's run of its own quantized file."""
    model, xs = _ort_static_model(tmp_path)
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 2
    mod, params = graph.from_onnx(model)
    with pytest.raises(graph.QuantizationError, match=r"QDQ scale\(s\) are not powers of two.*qdq_scales='nearest'"
                                                      r".*ISA extension alu_mul"):
        graph.quantize(mod, params)
    qmod = graph.quantize(mod, params, qdq_scales="nearest")      # every tensor has its pair: no calibration
    x = xs[0]
    got = run_cpu(qmod, x)[0]
    theirs = _ort_reference(model).run(None, {"x": x})[0]
    assert np.corrcoef(got.ravel(), theirs.ravel())[0, 1] > 0.97
    np.testing.assert_array_equal(run_vta(graph.build(graph.graph_pack(qmod)), x)[0], got)


def test_onnxruntime_static_quantization_runs_with_its_own_scales_by_multipliers(tmp_path):
    """With ``requant="multiply"`` (ALU MUL, ISA extension alu_mul; the default on a configuration with alu_mul) the
    model's scales are taken as they are: within one
    unit of ONNX Runtime's output scale everywhere, equal (to half a unit) on most values; the power-of-two
    rounding is several units off (a negative control). On fsim with alu_mul: the CPU's bits."""
    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice
    model, xs = _ort_static_model(tmp_path)
    y_scale = float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "y_scale"))
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=xs, requant="multiply")
    rounded = graph.quantize(mod, params, calibration=xs, qdq_scales="nearest")
    sess = _ort_reference(model)
    theirs = [sess.run(None, {"x": x})[0] for x in xs]
    diff = np.concatenate([np.abs(run_cpu(qmod, x)[0] - t).ravel() for x, t in zip(xs, theirs)]) / y_scale
    assert diff.max() <= 1.25 and np.mean(diff < 0.5) > 0.85, (diff.max(), np.mean(diff < 0.5))
    rdiff = np.concatenate([np.abs(run_cpu(rounded, x)[0] - t).ravel() for x, t in zip(xs, theirs)]) / y_scale
    assert rdiff.max() > 3 and np.mean(rdiff < 0.5) < np.mean(diff < 0.5) - 0.2
    cfg = vta.get_env().config.replace(ISA_EXTENSIONS=("alu_mul",))
    with vta.Environment(cfg) as env:
        auto = graph.quantize(mod, params)       # alu_mul here: the model's own scales by multipliers, by itself
        for x in xs[:2]:
            np.testing.assert_array_equal(run_cpu(auto, x)[0], run_cpu(qmod, x)[0])
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
        try:
            pmod = graph.graph_pack(qmod, env)
            assert len(graph.placement(pmod).vta_rows) == 2
            ex = graph.build(pmod)
            for x in xs[:2]:
                np.testing.assert_array_equal(run_vta(ex, x)[0], run_cpu(qmod, x)[0])
        finally:
            vta_runtime.set_command_queue(None)


def test_an_asymmetric_qdq_pair_is_refused_naming_the_tensor():
    rng = np.random.default_rng(1)
    model, _, _ = qdq_conv_model(rng)
    for t in model.graph.initializer:
        if t.name == "zx":
            t.CopyFrom(numpy_helper.from_array(np.array(3, np.int8), "zx"))
    mod, params = graph.from_onnx(model)
    with pytest.raises(graph.QuantizationError, match="zero point 3; VTA's int8 is symmetric"):
        graph.quantize(mod, params)
