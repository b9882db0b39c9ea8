"""A small conv2d on tsim (the Verilated core), once the hardware issue has landed ``sim.tsim``."""

from __future__ import annotations

import pytest

import vta_runtime
from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import Conv2DTiling, Conv2DWorkload

tsim = pytest.importorskip("sim.tsim", reason="sim.tsim (the Verilated VTA core) is not on this branch yet: it "
                                               "lands with the hardware issue; the compiler tests run on fsim")


def test_small_conv2d_on_tsim():
    dev = tsim.TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        r = run_conv2d(Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1), Conv2DTiling(2, 4, 8, 1, 2, 1))
        assert r.correct
        assert r.stats["gemm_counter"] == r.ideal_uops if "gemm_counter" in r.stats else True
    finally:
        vta_runtime.set_command_queue(None)
        close = getattr(dev, "close", None)
        if close:
            close()
