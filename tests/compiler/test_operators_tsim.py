"""One group convolution, one depthwise convolution and one transposed convolution on tsim (the Verilated
core): exact, with fsim's counters."""

from __future__ import annotations

import pytest

import vta_runtime
from vta_compiler.testing.layers_extra import run_conv2d_transpose, run_depthwise_conv2d, run_group_conv2d
from vta_compiler.top import Conv2DTransposeWorkload, GroupConv2DWorkload, depthwise_workload

tsim = pytest.importorskip("sim.tsim")


@pytest.fixture(scope="module")
def tsim_queue():
    if not tsim.verilator_available():
        pytest.skip("Verilator is not installed")
    dev = tsim.TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    yield dev
    vta_runtime.set_command_queue(None)
    dev.close()


@pytest.mark.parametrize("op,wkl,gemm_per_ideal", [
    (run_group_conv2d, GroupConv2DWorkload(1, 8, 8, 64, 64, 2, 3, 3, 1, 1, 1, 1), 1),
    (run_depthwise_conv2d, depthwise_workload(1, 9, 9, 32, 3, 1, 2), 16),
    (run_conv2d_transpose, Conv2DTransposeWorkload(1, 4, 4, 32, 32, 3, 3, 1, 1, 2, 2, 1, 1), 1),
], ids=["group", "depthwise", "transpose"])
def test_operator_on_tsim(tsim_queue, op, wkl, gemm_per_ideal):
    r = op(wkl)
    assert r.inside_fraction >= 0.3
    assert r.correct
    assert r.stats["gemm_counter"] == gemm_per_ideal * r.ideal_uops
    assert r.stats["cycle_count"] > r.stats["gemm_counter"]
