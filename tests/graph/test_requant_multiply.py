"""graph.quantize(requant="multiply"): fixed-point multipliers (ALU MUL, ISA extension alu_mul) instead of
power-of-two shifts. A small CNN quantized both ways: the multiply version runs on VTA (fsim) bit for bit as on
the CPU and is at least as close to ONNX Runtime's float run as the shift version; without alu_mul its layers stay
on the CPU with the reason."""

from __future__ import annotations

import re

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import vta_compiler as vta  # noqa: E402
from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.prepare import QuantizationError  # noqa: E402


def small_cnn(rng):
    """conv 3->16 + ReLU, conv 16->32 stride 2 + ReLU (channels of two weight ranges), flatten, dense 512->10."""
    inits = {"w1": rng.normal(0, 0.4, (16, 3, 3, 3)), "b1": rng.normal(0, 0.1, 16),
             "w2": rng.normal(0, 0.15, (32, 16, 3, 3)), "b2": rng.normal(0, 0.1, 32),
             "wd": rng.normal(0, 0.05, (10, 512)), "bd": rng.normal(0, 0.1, 10)}
    inits["w2"][:8] *= 0.2
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def quantized():
    rng = np.random.default_rng(0)
    model = small_cnn(rng)
    mod, params = graph.from_onnx(model)
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(24)]
    shift = graph.quantize(mod, params, calibration=xs[:8])
    mul = graph.quantize(mod, params, calibration=xs[:8], requant="multiply")
    return model, shift, mul, xs[8:]


@pytest.fixture
def mul_env(ext_fsim):
    return ext_fsim("alu_mul")


def test_the_multiply_network_runs_on_vta_bit_for_bit(quantized, mul_env):
    _, _, qmod, xs = quantized
    env, dev = mul_env
    pmod = graph.graph_pack(qmod, env)
    rows = graph.placement(pmod).vta_rows
    assert [r["name"] for r in rows] == ["conv2d_0", "conv2d_1", "dense_0"]
    assert all("*" in r["op"] for r in rows), [r["op"] for r in rows]    # each with its fixed-point multiply
    ex = graph.build(pmod)
    before = dev.stats()["alu_counter"]
    wants = []
    for x in xs[:3]:
        wants.append(run_cpu(qmod, x)[0])
        np.testing.assert_array_equal(run_vta(ex, x)[0], wants[-1])
    assert len(np.unique(wants)) >= 20, "the logits should be informative"
    assert dev.stats()["alu_counter"] > before


def test_multipliers_are_at_least_as_accurate_as_shifts(quantized):
    """Against ONNX Runtime's float run: the mean absolute error of the logits (output units) is no larger with
    fixed-point multipliers, and the scales are not all powers of two (a negative control: the two modules
    differ)."""
    model, qshift, qmul, xs = quantized
    sess = ort.InferenceSession(model.SerializeToString())
    err = {"shift": [], "multiply": []}
    for x in xs:
        want = sess.run(None, {"x": x})[0]
        err["shift"].append(np.abs(run_cpu(qshift, x)[0] - want).mean())
        err["multiply"].append(np.abs(run_cpu(qmul, x)[0] - want).mean())
    es, em = np.mean(err["shift"]), np.mean(err["multiply"])
    assert em <= es, (em, es)
    assert es > 0.01, "the shift version should show some quantization error"
    text = qmul["main"].script()
    assert "clip16" in text and "clip16" not in qshift["main"].script()


def test_without_alu_mul_the_layers_stay_on_the_cpu(quantized):
    _, _, qmod, _ = quantized
    env = vta.get_env()
    assert not env.config.isa.has("alu_mul")
    pl = graph.placement(graph.graph_pack(qmod, env))
    assert not pl.vta_rows
    notes = [r["note"] for r in pl.rows if r["name"].endswith("_acc")]
    assert notes and all("needs ISA extension alu_mul (config key ISA_EXTENSIONS)" in n for n in notes), notes


def test_requant_option_is_checked(quantized):
    model = quantized[0]
    mod, params = graph.from_onnx(model)
    with pytest.raises(QuantizationError, match=r"requant='mul': choose one of 'shift', 'multiply'"):
        graph.quantize(mod, params, global_scale=4.0, requant="mul")


def test_tensors_a_shift_rescaling_host_op_reads_keep_powers_of_two():
    """conv -> ReLU -> global average pool -> dense: the pool rescales by shifts, so the conv's output scale stays
    a power of two (its multiplier absorbs the rest), while the dense output's scale is the calibrated one."""
    rng = np.random.default_rng(5)
    inits = {"w": rng.normal(0, 0.3, (16, 3, 3, 3)), "b": rng.normal(0, 0.1, 16), "wd": rng.normal(0, 0.3, (10, 16)),
             "bd": rng.normal(0, 0.1, 10)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(6)]
    qmod = graph.quantize(mod, params, calibration=xs[:3], requant="multiply")
    text = qmod["main"].script()
    assert "conv2d_0_clip16" in text and "dense_0_clip16" in text
    sess = ort.InferenceSession(model.SerializeToString())
    for x in xs[3:]:
        want = sess.run(None, {"x": x})[0]
        got = run_cpu(qmod, x)[0]
        assert np.abs(got - want).max() < 0.03 * np.abs(want).max()
    # the output's dequantization is at the calibrated scale (not a power of two; with shifts it is one)
    assert not np.log2(output_scale(qmod)).is_integer()
    assert np.log2(output_scale(graph.quantize(mod, params, calibration=xs[:3]))).is_integer()

    # a conv whose output is finer than its accumulator's unit (channels 0 and 1 of the input nearly cancel): its
    # exponent, clamped to the accumulator's, is still an integer for the pool (a real one would not quantize)
    inits["w"] = np.zeros((16, 3, 3, 3))
    inits["w"][:, 0, 1, 1], inits["w"][:, 1, 1, 1] = 1.0, -1.0
    inits["b"] = np.zeros(16)
    g = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    for x in xs:
        x[:, 1] = x[:, 0] + 1e-3 * rng.normal(0, 1, x[:, 0].shape)
    qmod = graph.quantize(mod, params, calibration=xs[:3], requant="multiply")
    assert "conv2d_0_clip16" in qmod["main"].script()


def output_scale(qmod) -> float:
    """The float32 constant of the module's last multiply (the output's dequantization), from its text."""
    lines = [ln for ln in qmod["main"].script().splitlines() if "R.multiply(" in ln and '"float32")' in ln]
    return float(re.search(r'R\.const\(([-0-9.e]+), "float32"\)', lines[-1]).group(1))
