"""Pooling on VTA (``vta_compiler.top.pool2d``, ISA extensions acc_8bit and alu_mul): a small ResNet-18 with its
stem max pool and its global average pool on VTA equals its CPU quantized run bit for bit on fsim; the placement
report says where each pool runs and why; without the extensions nothing changes."""

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


@pytest.fixture(scope="module")
def small_resnet():
    mod, params = graph.from_onnx(resnet_onnx(18, image=IMAGE, widths=(16, 16, 32, 32), num_classes=16))
    cal = [imagenet_like(1, IMAGE, seed=s) for s in (11, 12)]
    return graph.quantize(mod, params, calibration=cal), imagenet_like(1, IMAGE, seed=13)


@pytest.fixture
def both_env(ext_fsim):
    return ext_fsim("alu_mul", "acc_8bit")[0]


def pools(pl, device):
    return [r for r in pl.rows if r["device"] == device and ("pool" in r["op"] or r["op"] == "sum")]


def test_pools_on_vta_equal_the_cpu_run(small_resnet, both_env):
    qmod, x = small_resnet
    env = both_env
    pmod = graph.graph_pack(qmod, env, residual="vta", pool="vta")
    pl = graph.placement(pmod)
    on_vta = pools(pl, "VTA")
    assert [r["op"] for r in on_vta] == ["max_pool2d", "avg_pool2d"] and not pools(pl, "CPU")
    assert all("Cortex-A9" in r["note"] and "µs at 100 MHz" in r["note"] for r in on_vta)
    want = run_cpu(qmod, x)[0]
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], want)
    assert len(np.unique(want)) >= 12, "the logits should be informative"
    # the global pool's seven host ops (cast, sum, multiply, rounding add, shift, clip, cast) are gone
    host = graph.placement(graph.graph_pack(qmod, env, residual="vta", pool="cpu"))
    assert len(pools(host, "CPU")) == 2 and not pools(host, "VTA")
    assert all("graph_pack(pool='cpu')" in r["note"] for r in pools(host, "CPU"))
    cpu_rows = [len([r for r in p.rows if r["device"] == "CPU"]) for p in (host, pl)]
    assert cpu_rows[0] - cpu_rows[1] == 1 + 7
    # auto: on these small maps the Pynq's host is estimated faster, and the note says so with both figures
    auto = graph.placement(graph.graph_pack(qmod, env, residual="vta"))
    kept = [r for r in auto.rows if "the host is faster" in r["note"]]
    assert kept and all("µs (estimate), on VTA about" in r["note"] for r in kept)


def test_without_the_extensions_pools_stay_on_the_cpu(small_resnet):
    qmod, _ = small_resnet
    env = vta.get_env()
    assert not env.config.isa.has("acc_8bit")
    pl = graph.placement(graph.graph_pack(qmod, env))
    assert not pools(pl, "VTA") and pools(pl, "CPU")
    with pytest.raises(GraphError, match=r"pool='vta'.*max_pool2d.*ISA extension acc_8bit \(config key "
                                         r"ISA_EXTENSIONS\)"):
        graph.graph_pack(qmod, env, pool="vta")
    with vta.Environment(env.config.replace(ISA_EXTENSIONS=("acc_8bit",))) as acc_only:
        with pytest.raises(GraphError, match=r"pool='vta'.*sum.*alu_mul"):
            graph.graph_pack(qmod, acc_only, pool="vta")
