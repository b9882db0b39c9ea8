"""Residual adds fused into the convolution before them (ISA extension acc_8bit): a small ResNet-18 on fsim equals
its CPU quantized run bit for bit; the placement report shows each fused add, and why an add stays on the CPU
(no extension, or graph_pack(residual="cpu")); residual="vta" refuses a config that cannot fuse."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import run_cpu, run_vta

tvm = pytest.importorskip("tvm")

import vta_compiler as vta  # noqa: E402
from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.ir import GraphError  # noqa: E402
from vta_compiler.graph.models import imagenet_like, resnet_onnx  # noqa: E402

IMAGE = 32
#: ResNet-18's eight residual adds: after the second convolution of each basic block
ADDS = 8


@pytest.fixture(scope="module")
def small_resnet():
    mod, params = graph.from_onnx(resnet_onnx(18, image=IMAGE, widths=(16, 16, 32, 32), num_classes=16))
    cal = [imagenet_like(1, IMAGE, seed=s) for s in (11, 12)]
    return graph.quantize(mod, params, calibration=cal), imagenet_like(1, IMAGE, seed=13)


@pytest.fixture
def ext_env(ext_fsim):
    return ext_fsim("acc_8bit")


def host_adds(pl):
    """The residual adds' ``add`` nodes left on the CPU (the quantizer names them ``<add>_sum``)."""
    return [r for r in pl.rows if r["device"] == "CPU" and r["name"].endswith("_sum") and r["op"] == "add"]


def test_fused_residuals_equal_the_cpu_run(small_resnet, ext_env):
    qmod, x = small_resnet
    env, dev = ext_env
    pmod = graph.graph_pack(qmod, env, residual="vta")
    pl = graph.placement(pmod)
    fused = [r for r in pl.vta_rows if "residual" in r]
    assert len(fused) == ADDS and not host_adds(pl)
    assert all("ACC_8BIT" in r["note"] and "residual(" in r["op"] for r in fused)
    want = run_cpu(qmod, x)[0]
    got = run_vta(graph.build(pmod), x)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) >= 12, "the logits should be informative"
    # by default (auto) each add goes where the estimate says it is faster on the board; on these small maps
    # some stay on the Pynq's host, and every decision says why, with the two estimates
    auto = graph.placement(graph.graph_pack(qmod, env))
    auto_fused = [r for r in auto.vta_rows if "residual" in r]
    kept = [r for r in host_adds(auto) if "the host is faster" in r["note"]]
    assert len(auto_fused) + len(kept) == ADDS and kept
    assert all("Cortex-A9" in r["note"] and "more at 100 MHz" in r["note"] for r in auto_fused + kept)
    # the same network with the adds on the host: eight adds more on the CPU
    host = graph.placement(graph.graph_pack(qmod, env, residual="cpu"))
    assert len(host_adds(host)) == ADDS and not [r for r in host.vta_rows if "residual" in r]
    assert all("graph_pack(residual='cpu')" in r["note"] for r in host_adds(host))
    # each fused add takes at least five host ops away (two casts, the add, the clip, the final cast)
    cpu_ops = [len([r for r in p.rows if r["device"] == "CPU"]) for p in (host, pl)]
    assert cpu_ops[0] - cpu_ops[1] >= 5 * ADDS


def test_without_acc_8bit_nothing_fuses(small_resnet):
    qmod, _ = small_resnet
    env = vta.get_env()
    assert not env.config.isa.has("acc_8bit")
    pl = graph.placement(graph.graph_pack(qmod, env))
    assert not [r for r in pl.vta_rows if "residual" in r]
    adds = host_adds(pl)
    assert len(adds) == ADDS
    assert all("needs ISA extension acc_8bit (config key ISA_EXTENSIONS)" in r["note"] for r in adds)
    with pytest.raises(GraphError, match=r"residual='vta'.*cannot be fused.*needs ISA extension acc_8bit"):
        graph.graph_pack(qmod, env, residual="vta")
    with pytest.raises(GraphError, match=r"residual='fused'; choose one of auto, vta, cpu"):
        graph.graph_pack(qmod, env, residual="fused")


@pytest.mark.parametrize("seed", [15, 22], ids=["relu-before-and-after", "relu6-before-none-after"])
def test_random_networks_with_fused_residuals(seed):
    """Random networks (vta_compiler.testing.netfuzz) whose residual add follows a convolution with an activation
    and odd channel counts (33 and 16 channels, padded to the block): fused, and exact against the CPU run."""
    from vta_compiler.testing import netfuzz
    cfg = vta.get_env().config.replace(ISA_EXTENSIONS=("acc_8bit",))
    with vta.Environment(cfg) as env:
        net = netfuzz.Network.draw(seed, 7)
        cal, x = net.inputs()
        mod, params = graph.from_onnx(net.onnx())
        pl = graph.placement(graph.graph_pack(graph.quantize(mod, params, calibration=cal), env, residual="vta"))
        fused = [r for r in pl.vta_rows if "residual" in r]
        assert len(fused) == 1 and "clip(0, " in fused[0]["op"], "the layer before the add has an activation"
        got = netfuzz.check(net, "fsim", {"residual": "vta"})
    assert got.kind == "ok" and got.informative, got.detail


def test_auto_placement_follows_the_board_hosts_estimate():
    """ResNet-18 at 224x224: on the Pynq (the simulators' system, 100 MHz) every fused add is faster than the
    Cortex-A9's estimate for it; clocked at 25 MHz, VTA's extra cycles cost more than the host's add, so auto
    keeps them all on the CPU (residual="vta" still fuses)."""
    mod, params = graph.from_onnx(resnet_onnx(18, image=224))
    qmod = graph.quantize(mod, params, global_scale=8.0)
    for mhz, fused_adds in ((100, ADDS), (25, 0)):
        cfg = vta.get_env().config.replace(ISA_EXTENSIONS=("acc_8bit",), FPGA_FREQ=mhz)
        with vta.Environment(cfg) as env:
            pl = graph.placement(graph.graph_pack(qmod, env))
            assert len([r for r in pl.vta_rows if "residual" in r]) == fused_adds, mhz
            assert len([r for r in host_adds(pl) if "the host is faster" in r["note"]]) == ADDS - fused_adds
            if not fused_adds:      # where auto says the host, the option still fuses every add
                forced = graph.placement(graph.graph_pack(qmod, env, residual="vta"))
                assert len([r for r in forced.vta_rows if "residual" in r]) == ADDS
