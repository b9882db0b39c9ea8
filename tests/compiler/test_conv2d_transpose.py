"""conv2d_transpose end to end on fsim, exact against numpy's scatter definition (reference_extra).

No GEMM is issued for the zeros of stride dilation: ``gemm_counter`` equals the useful uops and,
at stride 2, at most 30% of the dilated convolution's. At least 30% of the outputs lie strictly
inside the clip range in every exactness test. CT1 and CT2 run in ``nox -s sweeps``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import vta_compiler as vta
from vta_compiler import VTACompileError
from vta_compiler.testing.layers_extra import run_conv2d_transpose
from vta_compiler.testing.reference_extra import conv2d_transpose_accumulate
from vta_compiler.top import (
    DCGAN,
    UNET_DECODER,
    Conv2DTiling,
    Conv2DTransposeWorkload,
    conv2d_transpose_layer,
    conv2d_transpose_supported,
    pack_conv2d_transpose_kernel,
    schedule_conv2d_transpose_packed,
)

MIN_INSIDE = 0.3


def check(r):
    assert r.inside_fraction >= MIN_INSIDE, f"{r.name}: only {r.inside_fraction:.0%} of outputs inside the clip range"
    assert r.correct, f"{r.name}: {np.count_nonzero(r.output != r.expected)} of {r.output.size} outputs wrong"
    assert r.stats["gemm_counter"] == r.ideal_uops, "GEMMs issued for taps that only meet dilation zeros"
    return r


@pytest.mark.parametrize("name", ["CT3", "UP1"])
def test_dcgan_and_unet_layers(fsim, name):
    """DCGAN's CT3 (kernel 4) and a U-Net decoder layer (kernel 3, output padding 1): stride 2, so a quarter
    of the dilated convolution's GEMMs."""
    wkl = {**DCGAN, **UNET_DECODER}[name]
    r = check(run_conv2d_transpose(wkl, name=name))
    assert r.stats["gemm_counter"] <= 0.30 * r.dilated_uops
    assert r.stats["gemm_counter"] == r.dilated_uops / 4


@pytest.mark.parametrize("wkl", [
    Conv2DTransposeWorkload(1, 5, 5, 32, 16, 3, 3, 1, 1, 1, 1),             # stride 1: a flipped convolution
    Conv2DTransposeWorkload(1, 6, 4, 16, 32, 2, 2, 0, 0, 2, 2),             # U-Net up-conv: kernel 2, stride 2
    Conv2DTransposeWorkload(1, 4, 5, 16, 16, 5, 5, 2, 2, 2, 2, 1, 1),       # kernel 5, output padding
    Conv2DTransposeWorkload(1, 3, 3, 16, 16, 4, 4, 0, 0, 3, 3, 2, 2),       # stride 3: offsets not affine in the phase
    Conv2DTransposeWorkload(1, 4, 6, 32, 16, 4, 3, 1, 0, 2, 1, 0, 0),       # different height / width parameters
    Conv2DTransposeWorkload(1, 3, 3, 16, 16, 1, 1, 0, 0, 2, 2, 1, 1),       # kernel smaller than the stride
], ids=["s1", "k2s2", "k5-outpad", "s3", "rect", "k1s2"])
def test_other_shapes(fsim, wkl):
    check(run_conv2d_transpose(wkl))


SMALL = Conv2DTransposeWorkload(1, 4, 4, 32, 32, 3, 3, 1, 1, 2, 2, 1, 1)
TILINGS = [
    Conv2DTiling(2, 8, 8, 2, 1, 1),             # one tile, no virtual threads
    Conv2DTiling(1, 4, 8, 1, 1, 1),             # several tiles
    Conv2DTiling(2, 4, 8, 1, 2, 1),             # threads over output channels
    Conv2DTiling(2, 8, 4, 1, 1, 2),             # threads over rows
    Conv2DTiling(2, 4, 4, 1, 2, 1, "co"),       # weights once per channel tile
    Conv2DTiling(2, 8, 8, 1, 2, 2, "co", 2),    # everything at once
]


@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: f"co{t.tile_co}h{t.tile_h}w{t.tile_w}ci{t.tile_ci}"
                         f"_oc{t.oc_nthread}h{t.h_nthread}ko{t.ko_nthread}_{t.wgt_at}")
@pytest.mark.parametrize("seed", [0, 1])
def test_tokens_under_random_interleaving(racy, tiling, seed):
    racy(seed)
    check(run_conv2d_transpose(SMALL, tiling, seed=seed))


def test_no_bias_no_clip(fsim):
    r = run_conv2d_transpose(SMALL, bias=False, clip=None, shift=0)
    assert r.correct and np.count_nonzero(r.output) > r.output.size // 2


def test_per_channel_shift(fsim):
    """channel_shift: the shift is a tensor shaped like the bias (ALU SHR with a register operand)."""
    r = check(run_conv2d_transpose(SMALL, channel_shift=True))
    assert len(set(r.shift.tolist())) > 1, "the shifts should differ between channels"


def test_reference_matches_the_dilated_convolution():
    """The scatter reference equals the textbook lowering (dilate, pad by k-1-p, flip the kernel, convolve)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 3, 5, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 2, 3, 3), dtype=np.int8)
    s, p, op = 2, 1, 1
    dil = np.zeros((1, 3, (5 - 1) * s + 1, (4 - 1) * s + 1), np.int64)
    dil[:, :, ::s, ::s] = x
    q = 3 - 1 - p
    dil = np.pad(dil, ((0, 0), (0, 0), (q, q + op), (q, q + op)))
    wf = w[:, :, ::-1, ::-1].astype(np.int64)
    oh, ow = dil.shape[2] - 2, dil.shape[3] - 2
    ref = np.zeros((1, 2, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            ref[0, :, i, j] = np.einsum("chw,cohw->o", dil[0, :, i:i + 3, j:j + 3], wf)
    assert np.array_equal(conv2d_transpose_accumulate(x, w, (s, s), (p, p), (op, op)), ref)


def test_phase_kernel_holds_every_tap_once():
    rng = np.random.default_rng(0)
    for wkl in (SMALL, DCGAN["CT3"], Conv2DTransposeWorkload(1, 3, 3, 16, 16, 4, 4, 0, 0, 3, 3, 2, 2)):
        w = rng.integers(1, 128, (wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
        p = pack_conv2d_transpose_kernel(w, wkl)
        assert np.count_nonzero(p) == w.size                 # each tap once, zeros elsewhere
        assert sorted(p[p != 0].tolist()) == sorted(w.ravel().tolist())


@pytest.mark.parametrize("wkl,pattern", [
    (Conv2DTransposeWorkload(1, 8, 8, 16, 16, 3, 3, 1, 1, 2, 2), r"output height 15 is not a multiple of the stride 2"),
    (Conv2DTransposeWorkload(1, 8, 8, 16, 16, 4, 4, 1, 1, 2, 2, 2, 2), r"output padding 2 must be smaller than"),
    (Conv2DTransposeWorkload(1, 8, 8, 24, 16, 4, 4, 1, 1, 2, 2), r"must be multiples of BLOCK_IN=16"),
    (Conv2DTransposeWorkload(1, 8, 8, 16, 16, 3, 3, 3, 3, 1, 1), r"padding 3 must be smaller than the kernel 3"),
], ids=["odd-output", "outpad-ge-stride", "channels", "pad-ge-kernel"])
def test_unsupported_shapes_say_why(wkl, pattern):
    reason = conv2d_transpose_supported(wkl)
    assert reason is not None and re.search(pattern, reason), reason
    with pytest.raises(VTACompileError, match=pattern):
        conv2d_transpose_layer(wkl)


def test_supported_shapes():
    for wkl in list(DCGAN.values()) + list(UNET_DECODER.values()):
        assert conv2d_transpose_supported(wkl) is None


def test_bad_tiling_is_refused():
    with pytest.raises(VTACompileError, match=r"must hold whole 2x2 stride phases"):
        schedule_conv2d_transpose_packed(conv2d_transpose_layer(SMALL), Conv2DTiling(2, 2, 8, 1, 1, 2))
    env = vta.get_env()
    with pytest.raises(VTACompileError, match=r"not a conv2d_transpose_layer"):
        from vta_compiler.top import Conv2DWorkload, conv2d_layer
        schedule_conv2d_transpose_packed(conv2d_layer(Conv2DWorkload(1, 8, 8, 16, 16, 3, 3, 1, 1, 1, 1), env),
                                         Conv2DTiling())
