"""conv2d end to end on fsim: every ResNet-18 layer at batch 1, tilings with and without virtual threads."""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import RESNET18, Conv2DTiling, Conv2DWorkload, conv2d_tiling
from vta_compiler.top.conv2d import fits

from .checks import assert_exact


@pytest.mark.parametrize("name", list(RESNET18))
def test_resnet18_layer(fsim, name):
    """C1 (3 input channels, zero-padded to a block) to C11: exact int8 results, no wasted GEMM uops."""
    r = run_conv2d(RESNET18[name], name=name, seed=len(name))
    assert_exact(r)
    assert r.stats["gemm_counter"] == r.ideal_uops


SMALL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)
TILINGS = [
    Conv2DTiling(2, 8, 8, 2, 1, 1),            # one tile, no virtual threads
    Conv2DTiling(1, 4, 8, 1, 1, 1),            # several tiles, single buffers
    Conv2DTiling(2, 4, 8, 1, 2, 1),            # threads over output channels (input tile shared)
    Conv2DTiling(2, 8, 4, 1, 1, 2),            # threads over rows (weight tile shared)
    Conv2DTiling(2, 8, 8, 1, 2, 2),            # both
    Conv2DTiling(2, 4, 4, 1, 2, 1, "co"),      # weights loaded once per channel tile
    Conv2DTiling(2, 4, 8, 1, 1, 1, "ko", 2),   # two input chunks in flight (pipelined reduction loop)
    Conv2DTiling(2, 8, 8, 1, 2, 2, "co", 2),   # everything at once
    Conv2DTiling(1, 4, 8, 1, 1, 1, acc_nbuf=2),            # two accumulator copies, consecutive tiles alternate
    Conv2DTiling(2, 4, 4, 1, 2, 1, "ko", 2, acc_nbuf=2),   # ... with threads and chunks in flight
    Conv2DTiling(1, 8, 8, 1, 1, 1, "co", 2, acc_nbuf=2),   # ... alternating over output-channel tiles, weights per tile
]


@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: f"co{t.tile_co}h{t.tile_h}w{t.tile_w}ci{t.tile_ci}"
                         f"_oc{t.oc_nthread}h{t.h_nthread}ko{t.ko_nthread}_{t.wgt_at}_acc{t.acc_nbuf}")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tokens_under_random_interleaving(racy, tiling, seed):
    """Load, compute and store interleaved in random orders (as hardware may) still give exact results."""
    racy(seed)
    assert_exact(run_conv2d(SMALL, tiling, seed=seed), tiling)


@pytest.mark.parametrize("name", ["C3", "C9"])
def test_resnet_layer_under_random_interleaving(racy, name):
    racy(7)
    assert_exact(run_conv2d(RESNET18[name], name=name))


@pytest.mark.parametrize("wkl", [Conv2DWorkload(1, 9, 7, 16, 16, 3, 3, 1, 1, 2, 2),
                                 Conv2DWorkload(1, 6, 6, 16, 32, 3, 3, 0, 0, 1, 1),
                                 Conv2DWorkload(1, 5, 5, 16, 16, 5, 5, 2, 2, 1, 1),
                                 Conv2DWorkload(1, 6, 10, 16, 16, 3, 1, 1, 0, 1, 1)],
                         ids=["odd-stride2", "no-pad", "5x5", "3x1"])
def test_other_shapes(fsim, wkl):
    assert_exact(run_conv2d(wkl))


@pytest.mark.parametrize("shift", [0, 5])
def test_no_bias_no_clip(fsim, shift):
    """Without clipping the int8 result is the low 8 bits of (acc >> shift): negative values and wrap-around
    show, and every bit of the accumulator's low byte is checked."""
    r = run_conv2d(SMALL, Conv2DTiling(2, 4, 8, 1, 2, 1), bias=False, shift=shift, clip=None)
    assert_exact(r)
    assert np.mean(r.expected < 0) > 0.3                       # a clip to [0, 127] would have removed these
    assert len(np.unique(r.expected)) == 256


def test_tiling_fits_every_resnet_layer():
    env = vta.get_env()
    for wkl in RESNET18.values():
        assert fits(wkl, conv2d_tiling(wkl), env)


def test_force_serial_gives_the_same_result(fsim):
    env = vta.get_env()
    assert_exact(run_conv2d(SMALL, Conv2DTiling(2, 4, 8, 1, 2, 1), debug_flag=env.DEBUG_FORCE_SERIAL))


def test_accumulator_copies_must_divide_the_alternated_tiles(fsim):
    """Two accumulator copies alternate over the innermost tile loop with more than one tile: an odd count is refused,
    naming the knob's loop and its tiles; the ACC the copies need is counted by the buffer check."""
    wkl = Conv2DWorkload(1, 6, 6, 16, 16, 3, 3, 1, 1, 1, 1)
    odd = Conv2DTiling(1, 2, 6, 1, acc_nbuf=2)          # three tiles of rows
    with pytest.raises(vta.VTACompileError, match="accumulator copies alternate over the innermost tile loop, whose 3"):
        run_conv2d(wkl, odd)
    env = vta.get_env()
    big = Conv2DTiling(1, 8, 8, 1)
    wide = Conv2DWorkload(1, 8, 16, 16, 16, 3, 3, 1, 1, 1, 1)
    from vta_compiler.top.conv2d import CONV2D
    one, two = CONV2D.needs(wide, big, env), CONV2D.needs(wide, Conv2DTiling(1, 8, 8, 1, acc_nbuf=2), env)
    assert two.acc == 2 * one.acc and two.inp == one.inp
