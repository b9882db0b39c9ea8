"""dense / blocked GEMM end to end on fsim, with and without virtual threads; mock modes."""

from __future__ import annotations

import pytest

import vta_compiler as vta
from vta_compiler.testing.layers import run_dense
from vta_compiler.top import DenseTiling, DenseWorkload

from .checks import assert_exact


def _gemm_tilings():
    env = vta.get_env()
    b = 128 // env.BATCH
    c = 128 // env.BLOCK_IN
    return {"no-vthread": DenseTiling(b, c, c, 1, 1), "oc-vthreads": DenseTiling(b, c, c, 2, 1),
            "batch-vthreads": DenseTiling(b, c, c, 1, 2), "chunked-both": DenseTiling(b // 2, c, 2, 2, 2),
            "pipelined-chunks": DenseTiling(b, c, 2, 1, 1, 2)}


@pytest.mark.parametrize("name", ["no-vthread", "oc-vthreads", "batch-vthreads", "chunked-both", "pipelined-chunks"])
def test_blocked_gemm(fsim, name):
    """The original test_benchmark_gemm shape: batch = channels = block = 128, >>8, clip, int8."""
    r = run_dense(DenseWorkload(128, 128, 128), _gemm_tilings()[name], bias=False)
    assert_exact(r)
    assert r.uop_ratio == 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_blocked_gemm_random_interleaving(racy, seed):
    racy(seed)
    for name in ("chunked-both", "pipelined-chunks"):
        assert_exact(run_dense(DenseWorkload(128, 128, 128), _gemm_tilings()[name], bias=False, seed=seed), name)


@pytest.mark.parametrize("shape", [(1, 512, 1008), (16, 256, 128), (4, 64, 96)])
def test_dense_layer(fsim, shape):
    r = run_dense(shape)
    assert_exact(r)
    assert r.uop_ratio == 1.0


def test_mock_everything(fsim):
    """env.mock: DMA and ALU nests become no-ops and the GEMM intrinsic does nothing."""
    env = vta.get_env()
    r = run_dense(DenseWorkload(16, 64, 64), DenseTiling(16 // env.BATCH, 4, 4, 1, 1), env=env.mock, bias=False)
    assert not any(r.stats.values())


def test_gemm_only_and_alu_only(fsim):
    """The benchmark variants of the original: GEMM only (DMA and ALU mocked), ALU only (DMA and GEMM mocked)."""
    env = vta.get_env()
    t = DenseTiling(16 // env.BATCH, 4, 2, 2, 1)
    g = run_dense(DenseWorkload(16, 64, 64), t, bias=False, mock=("dma", "alu"))
    assert g.stats["gemm_counter"] == g.ideal_uops
    assert g.stats["alu_counter"] == 0 and g.moved_bytes == 0
    a = run_dense(DenseWorkload(16, 64, 64), t, bias=False, mock=("dma", "gemm"))
    assert a.stats["gemm_counter"] == 0 and a.moved_bytes == 0
    assert a.stats["alu_counter"] == 3 * 16 * 64 // (env.BATCH * env.BLOCK_OUT)
