"""group_conv2d and depthwise convolution end to end on fsim, exact against numpy (reference_extra).

Every exactness test also asserts that at least 30% of the outputs lie strictly inside the clip
range, so that saturation cannot hide a wrong result. The whole D1-D9 / DW1-DW9 / G1-G4 sets run
in ``nox -s sweeps`` (test_operator_sweeps.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
from vta_compiler import VTACompileError
from vta_compiler.testing.layers_extra import run_depthwise_conv2d, run_group_conv2d
from vta_compiler.top import (
    MOBILENET_DEPTHWISE,
    MOBILENET_GROUP,
    GroupConv2DTiling,
    GroupConv2DWorkload,
    depthwise_conv2d_layer,
    depthwise_conv2d_supported,
    depthwise_workload,
    group_conv2d_layer,
    group_conv2d_supported,
    group_conv2d_tiling,
    pack_depthwise_kernel,
    pack_group_conv2d_kernel,
    pack_oihw,
    schedule_group_conv2d_packed,
)

MIN_INSIDE = 0.3


def check(r):
    assert r.inside_fraction >= MIN_INSIDE, f"{r.name}: only {r.inside_fraction:.0%} of outputs inside the clip range"
    assert r.correct, f"{r.name}: {np.count_nonzero(r.output != r.expected)} of {r.output.size} outputs wrong"
    return r


@pytest.mark.parametrize("name", ["D8", "D9"])
def test_mobilenet_group_layer(fsim, name):
    """D-workloads (16 channels per group): exact, one GEMM uop per useful 16x16 block product."""
    r = check(run_group_conv2d(MOBILENET_GROUP[name], name=name))
    assert r.stats["gemm_counter"] == r.ideal_uops


def test_mobilenet_depthwise_layer(fsim):
    """DW9 (7x7, 1024 channels, one per group): block-diagonal tiles, 16 GEMM MACs per useful MAC."""
    r = check(run_depthwise_conv2d(MOBILENET_DEPTHWISE["DW9"], name="DW9"))
    assert r.stats["gemm_counter"] == 16 * r.ideal_uops


@pytest.mark.parametrize("wkl", [
    GroupConv2DWorkload(1, 10, 10, 96, 96, 2, 3, 3, 1, 1, 1, 1),        # 3 blocks per group
    GroupConv2DWorkload(1, 9, 7, 64, 128, 2, 3, 3, 1, 1, 2, 2),         # odd sizes, 2 in / 4 out blocks per group
    GroupConv2DWorkload(1, 8, 8, 64, 64, 4, 5, 5, 2, 2, 1, 1),          # 5x5
    GroupConv2DWorkload(1, 6, 10, 32, 32, 2, 3, 1, 0, 0, 1, 1),         # 3x1, no padding, non-square
    GroupConv2DWorkload(1, 8, 8, 64, 64, 8, 3, 3, 1, 1, 1, 1),          # block-diagonal: 8 channels per group
    GroupConv2DWorkload(1, 7, 9, 32, 32, 16, 3, 3, 1, 1, 2, 2),         # block-diagonal: 2 channels per group
    depthwise_workload(1, 9, 11, 48, 3, 1, 2),                          # depthwise, odd, stride 2
    depthwise_workload(1, 8, 8, 16, 5, 2, 1),                           # depthwise 5x5, one block
], ids=["3blk", "odd-s2-wider-out", "5x5", "3x1-nopad", "bdiag8", "bdiag2-s2", "dw-odd-s2", "dw-5x5"])
def test_other_shapes(fsim, wkl):
    r = check(run_group_conv2d(wkl))
    lanes = 16 // min(wkl.in_per_group, 16)
    assert r.stats["gemm_counter"] == lanes * r.ideal_uops


SMALL = GroupConv2DWorkload(1, 8, 8, 64, 64, 2, 3, 3, 1, 1, 1, 1)       # 2 groups of 2 blocks
NARROW = GroupConv2DWorkload(1, 8, 8, 64, 64, 4, 3, 3, 1, 1, 1, 1)      # 4 groups of 1 block
TILINGS = [
    (SMALL, GroupConv2DTiling(1, 2, 8, 8, 2)),                           # one group per tile, whole group
    (SMALL, GroupConv2DTiling(1, 1, 4, 8, 1)),                           # several tiles, single buffers
    (SMALL, GroupConv2DTiling(1, 2, 4, 8, 1, 2, 1)),                     # threads over a group's blocks
    (SMALL, GroupConv2DTiling(2, 2, 8, 4, 2, 2, 2)),                     # threads over groups and rows
    (SMALL, GroupConv2DTiling(1, 2, 8, 8, 1, 1, 1, "ko", 2)),            # two input chunks in flight
    (SMALL, GroupConv2DTiling(1, 2, 4, 4, 1, 2, 2, "co", 2)),            # everything, weights per channel tile
    (NARROW, GroupConv2DTiling(4, 1, 8, 8, 1, 2, 1)),                    # all groups in one tile, thread each half
    (NARROW, GroupConv2DTiling(2, 1, 4, 8, 1, 1, 2, "co")),
]


@pytest.mark.parametrize("wkl,tiling", TILINGS, ids=lambda x: "" if isinstance(x, GroupConv2DWorkload) else
                         f"g{x.tile_g}co{x.tile_co}h{x.tile_h}w{x.tile_w}ci{x.tile_ci}_oc{x.oc_nthread}h{x.h_nthread}"
                         f"ko{x.ko_nthread}_{x.wgt_at}")
@pytest.mark.parametrize("seed", [0, 1])
def test_tokens_under_random_interleaving(racy, wkl, tiling, seed):
    """Load, compute and store interleaved in random orders (as hardware may) still give exact results."""
    racy(seed)
    check(run_group_conv2d(wkl, tiling, seed=seed))


def test_no_bias_no_clip(fsim):
    r = run_group_conv2d(NARROW, bias=False, clip=None, shift=0)
    assert r.correct and np.count_nonzero(r.output) > r.output.size // 2


@pytest.mark.parametrize("wkl", [SMALL, depthwise_workload(1, 8, 8, 32, 3, 1, 1)], ids=["group", "depthwise"])
def test_per_channel_shift(fsim, wkl):
    """channel_shift: the shift is a tensor shaped like the bias (ALU SHR with a register operand), as a
    quantized network with per-channel weight scales needs."""
    r = check(run_group_conv2d(wkl, channel_shift=True))
    assert len(set(r.shift.tolist())) > 1, "the shifts should differ between channels"


def test_kernel_packing():
    rng = np.random.default_rng(0)
    # whole blocks per group: conv2d's packing of the per-group kernel
    w = rng.integers(-128, 128, (64, 32, 3, 3), dtype=np.int8)
    wkl = GroupConv2DWorkload(1, 8, 8, 64, 64, 2, 3, 3, 1, 1, 1, 1)
    assert np.array_equal(pack_group_conv2d_kernel(w, wkl), pack_oihw(w, 16, 16))
    # block-diagonal: 4 channels per group -> each 16x16 tile holds four 4x4 blocks on its diagonal
    w = rng.integers(1, 128, (32, 4, 3, 3), dtype=np.int8)
    p = pack_group_conv2d_kernel(w, GroupConv2DWorkload(1, 8, 8, 32, 32, 8, 3, 3, 1, 1, 1, 1))
    assert p.shape == (2, 1, 3, 3, 16, 16)
    for c in range(32):
        cb, o = divmod(c, 16)
        g0 = (o // 4) * 4
        assert np.array_equal(p[cb, 0, :, :, o, g0:g0 + 4], w[c].transpose(1, 2, 0))
        assert np.count_nonzero(p[cb, 0, :, :, o, :]) == 4 * 9
    dw = rng.integers(1, 128, (32, 1, 3, 3), dtype=np.int8)
    p = pack_depthwise_kernel(dw, depthwise_workload(1, 8, 8, 32, 3, 1, 1))
    for c in range(32):
        cb, o = divmod(c, 16)
        assert np.array_equal(p[cb, 0, :, :, o, o], dw[c, 0])
    assert np.count_nonzero(p) == 32 * 9


@pytest.mark.parametrize("wkl,pattern", [
    (GroupConv2DWorkload(1, 8, 8, 48, 48, 2, 3, 3, 1, 1, 1, 1), r"24 input and 24 output channels per group"),
    (GroupConv2DWorkload(1, 8, 8, 32, 64, 8, 3, 3, 1, 1, 1, 1), r"4 input and 8 output channels per group"),
    (GroupConv2DWorkload(1, 8, 8, 32, 32, 3, 3, 3, 1, 1, 1, 1), r"3 groups do not divide"),
    (GroupConv2DWorkload(1, 8, 8, 24, 24, 24, 3, 3, 1, 1, 1, 1), r"24 channels are not a whole number of 16-channel"),
    (GroupConv2DWorkload(1, 60, 60, 32, 32, 2, 47, 47, 0, 0, 1, 1), r"no tiling fits .* INP buffer elements 2209"),
], ids=["cpg24", "cpg-in-ne-out", "groups-not-dividing", "partial-block", "too-big"])
def test_unsupported_shapes_say_why(wkl, pattern):
    import re
    reason = group_conv2d_supported(wkl)
    assert reason is not None and re.search(pattern, reason), reason
    with pytest.raises(VTACompileError, match=pattern):
        sch = schedule_group_conv2d_packed(group_conv2d_layer(wkl), wkl=wkl)
        vta.build(sch)


def test_supported_shapes():
    for wkl in list(MOBILENET_GROUP.values()) + list(MOBILENET_DEPTHWISE.values()):
        assert group_conv2d_supported(wkl) is None
    assert depthwise_conv2d_supported(MOBILENET_DEPTHWISE["DW1"]) is None
    assert "not a depthwise" in depthwise_conv2d_supported(MOBILENET_GROUP["D1"])
    with pytest.raises(VTACompileError, match="not a depthwise"):
        depthwise_conv2d_layer(MOBILENET_GROUP["D1"])


def test_bad_tiling_is_refused():
    with pytest.raises(VTACompileError, match=r"must hold each group's channel blocks whole"):
        schedule_group_conv2d_packed(group_conv2d_layer(SMALL), GroupConv2DTiling(2, 1, 8, 8, 2))
    with pytest.raises(VTACompileError, match=r"do not divide the 8x8 output"):
        schedule_group_conv2d_packed(group_conv2d_layer(SMALL), GroupConv2DTiling(1, 2, 3, 8, 2))


def test_tiling_fits_every_mobilenet_layer():
    from vta_compiler.top.group_conv2d import GROUP_CONV2D
    env = vta.get_env()
    for wkl in list(MOBILENET_GROUP.values()) + list(MOBILENET_DEPTHWISE.values()):
        t = group_conv2d_tiling(wkl)
        assert GROUP_CONV2D.fits(wkl, t, env)
