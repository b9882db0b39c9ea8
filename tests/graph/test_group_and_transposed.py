"""Networks with group, depthwise and transposed convolutions on VTA: each VTA run equals the CPU run of
the same quantized module, bit for bit.

A MobileNet-v1-style network (depthwise-separable blocks, ReLU6) and a DCGAN-style generator (transposed
convolutions, tanh on the CPU) on fsim, and a small network whose shapes VTA refuses in part: those layers
fall back to the CPU with the operator's reason and the network stays exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import inside_fractions, run_cpu, run_vta

tvm = pytest.importorskip("tvm")

from vta_compiler import autotune, graph  # noqa: E402
from vta_compiler.graph.models import (  # noqa: E402
    dcgan_generator_onnx,
    imagenet_like,
    latent_like,
    mobilenet_v1_onnx,
)
from vta_compiler.top.group_conv2d import DEPTHWISE_NOTE  # noqa: E402


def check_informative(qmod, x, minimum=0.3):
    fr = inside_fractions(qmod, x)
    low = {k: round(v, 3) for k, v in fr.items() if v < minimum}
    assert not low, f"layers with fewer than {minimum:.0%} of outputs strictly inside the clip range: {low}"
    return fr


def layout_changes(pmod) -> int:
    return pmod["main"].script().count("R.to_vdevice(")


def test_mobilenet_v1_on_fsim_equals_the_cpu_run(fsim):
    """Width 0.25 at 64x64: the first depthwise layer has 8 channels (padded to a block with zero groups)."""
    mod, params = graph.from_onnx(mobilenet_v1_onnx(image=64, width=0.25, num_classes=32))
    qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, 64, seed=s) for s in (11, 12)])
    x = imagenet_like(1, 64, seed=13)
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    depthwise = [r for r in pl.rows if r["op"].startswith("depthwise_conv2d")]
    assert len(depthwise) == 13 and all(r["device"] == "VTA" for r in depthwise)
    assert all(r["note"] == DEPTHWISE_NOTE["vta"] for r in depthwise)
    # block-diagonal: each output channel issues a whole 16-lane block per tap, 9 of which are useful
    assert all(r["macs"] * 16 == r["issued_macs"] for r in depthwise[1:])
    assert depthwise[0]["macs"] * 32 == depthwise[0]["issued_macs"], "8 channels padded to 16"
    assert all(">>shift[c]" in r["op"] for r in depthwise), "per-channel weights need per-channel shifts"
    assert len(pl.vta_rows) == 28 and pl.vta_share >= 0.99
    assert layout_changes(pmod) == 2, "a layout change or copy sits between VTA layers"
    # every VTA layer is a tuning task: the depthwise ones are group_conv2d tasks (one per distinct shape)
    tasks = autotune.extract_tasks(pmod)
    assert {t.kind for t in tasks} == {"conv2d", "group_conv2d", "dense"}
    assert sum(t.uses for t in tasks) == 28
    dw = [t for t in tasks if t.kind == "group_conv2d"]
    assert len(dw) == 9 and sum(t.uses for t in dw) == 13
    assert all(t.workload.is_depthwise and t.acc_operands == 2 for t in dw)
    assert [t.key for t in autotune.extract_tasks(qmod)] == [t.key for t in tasks]
    want = run_cpu(qmod, x)[0]
    got = run_vta(graph.build(pmod), x)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 10, "the logits should be informative"
    fr = check_informative(qmod, x)
    assert len(fr) == 28


def test_dcgan_generator_on_fsim_equals_the_cpu_run(fsim):
    mod, params = graph.from_onnx(dcgan_generator_onnx(features=16, image=32))
    qmod = graph.quantize(mod, params, calibration=[latent_like(seed=s) for s in (1, 2)])
    z = latent_like(seed=3)
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    names = [r["name"] for r in pl.vta_rows]
    assert names == [f"conv2d_transpose_{k}" for k in range(4)] and pl.vta_share == 1.0
    first = pl.vta_rows[0]
    assert "1x1_112to64_k4x4" in first["kernel"], "100 latent channels padded to 112"
    # stride 2: the phases issue only the taps that meet input pixels, no zeros of the dilation
    assert all(r["issued_macs"] == r["macs"] for r in pl.vta_rows[1:-1])
    assert pl.vta_rows[-1]["issued_macs"] * 3 == pl.vta_rows[-1]["macs"] * 16, "3 image channels padded to 16"
    tanh = next(r for r in pl.rows if r["op"] == "tanh")
    assert tanh["device"] == "CPU" and tanh["note"] == "float arithmetic (VTA computes integers)"
    assert layout_changes(pmod) == 2
    tasks = autotune.extract_tasks(pmod)
    assert [(t.kind, t.name, t.uses) for t in tasks] == [("conv2d_transpose", n, 1) for n in names]
    assert [t.key for t in autotune.extract_tasks(qmod)] == [t.key for t in tasks]
    assert tasks[0].workload.in_filter == 112 and tasks[-1].workload.out_filter == 16
    want = run_cpu(qmod, z)[0]
    got = run_vta(graph.build(pmod), z)[0]
    assert got.shape == (1, 3, 32, 32)
    np.testing.assert_array_equal(got, want)
    assert np.abs(want).max() <= 1 and len(np.unique(want)) > 100
    check_informative(qmod, z)


def refusing_network():
    """Layers VTA runs and layers it refuses, one after another (24 channels, 8x8)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    shapes = {"dw": (24, 1, 3, 3), "g3": (24, 3, 3, 3), "odd": (24, 16, 3, 3), "up": (16, 16, 3, 3),
              "gt": (16, 8, 2, 2), "pw": (16, 16, 1, 1)}
    inits = [numpy_helper.from_array(rng.normal(0, np.sqrt(2 / np.prod(s[1:])), s).astype(np.float32), k)
             for k, s in shapes.items()]
    inits += [numpy_helper.from_array(rng.normal(0.2, 0.1, 24).astype(np.float32), "b24"),
              numpy_helper.from_array(rng.normal(0.2, 0.1, 16).astype(np.float32), "b16")]
    relu = [helper.make_node("Relu", [f"a{k}"], [f"r{k}"]) for k in range(6)]
    nodes = [helper.make_node("Conv", ["x", "dw", "b24"], ["a0"], pads=[1, 1, 1, 1], group=24),       # VTA
             helper.make_node("Conv", ["r0", "g3", "b24"], ["a1"], pads=[1, 1, 1, 1], group=8),       # refused
             helper.make_node("ConvTranspose", ["r1", "odd", "b16"], ["a2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["r2", "up", "b16"], ["a3"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1]),                                                 # VTA
             helper.make_node("ConvTranspose", ["r3", "gt", "b16"], ["a4"], strides=[2, 2], group=2),  # refused
             helper.make_node("Conv", ["r4", "pw", "b16"], ["a5"])]                                   # VTA
    nodes = [n for pair in zip(nodes, relu) for n in pair]
    g = helper.make_graph(nodes, "refusals", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 8, 8])],
                          [helper.make_tensor_value_info("r5", TensorProto.FLOAT, [1, 16, 60, 60])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, rng


def test_refused_shapes_fall_back_to_the_cpu_and_stay_exact(fsim):
    model, rng = refusing_network()
    mod, params = graph.from_onnx(model)
    x = rng.normal(0, 1, (1, 24, 8, 8)).astype(np.float32)
    qmod = graph.quantize(mod, params, calibration=[x, rng.normal(0, 1, (1, 24, 8, 8)).astype(np.float32)])
    want = run_cpu(qmod, x)[0]
    check_informative(qmod, x)
    for place in ("vta", "cpu"):
        pmod = graph.graph_pack(qmod, depthwise=place)
        rows = graph.placement(pmod).rows
        vta = [r["name"] for r in rows if r["device"] == "VTA"]
        assert vta == (["conv2d_0"] if place == "vta" else []) + ["conv2d_transpose_1", "conv2d_2"], vta
        notes = [r["note"] for r in rows if r["op"] in ("nn.conv2d", "nn.conv2d_transpose")]
        assert notes[-3:] == [
            "VTA cannot run this group convolution: 3 input and 3 output channels per group: VTA's GEMM needs whole "
            "16-channel blocks per group, or the same divisor of 16 for input and output channels (block-diagonal "
            "weights, e.g. depthwise)",
            "VTA cannot run this transposed convolution: the output height 15 is not a multiple of the stride 2: VTA "
            "computes whole stride phases (an output padding that rounds it up makes it one)",
            "grouped transposed convolution (groups=2); VTA's conv2d_transpose_packed has one group"]
        if place == "cpu":
            assert notes[0] == DEPTHWISE_NOTE["cpu"]
        np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], want)


def test_depthwise_placement_option_is_checked():
    model, _ = refusing_network()
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, global_scale=8.0)
    with pytest.raises(graph.GraphError, match="depthwise='gpu'; choose one of vta, cpu"):
        graph.graph_pack(qmod, depthwise="gpu")
