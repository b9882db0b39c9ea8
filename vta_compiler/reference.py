"""numpy references of VTA's operators, written from their definitions (independent of ``vta_compiler.top``),
and the choice of a shift that keeps requantised outputs informative. Exact integer arithmetic: float64 BLAS
where every partial sum stays below 2^53, int64 elsewhere. The tuner checks every measurement against them;
``vta_compiler.testing`` re-exports them for tests."""

from __future__ import annotations

import numpy as np

#: int8 outputs without clipping are the low 8 bits: their full range
INT8_RANGE = (-128, 127)


def _wrap32(acc) -> np.ndarray:
    """Round the exact float64 sums and wrap them like the 32-bit accumulator."""
    return np.rint(acc).astype(np.int64).astype(np.int32)


def requantize(acc: np.ndarray, shift: int, clip: tuple[int, int] | None) -> np.ndarray:
    """int8(clip(acc >> shift)) of int32 accumulators (bias already added); no clip: the low 8 bits."""
    acc = acc.astype(np.int32)
    if shift:
        acc = acc >> shift
    if clip is not None:
        acc = np.clip(acc, clip[0], clip[1])
    return acc.astype(np.int8)


#: bits of a fixed-point multiplier (it lies in [2**(bits-1), 2**bits)): the balance of the multiplier's rounding
#: (relative 2**-bits) and the pre-shift's (one unit of the shifted value is M / 2**post of an output unit)
MULTIPLIER_BITS = 11
#: the largest post-shift (its rounding constant 2**(post-1) is a 16-bit ALU immediate)
MAX_POST_SHIFT = 15


def fixed_point(scale, bits: int = MULTIPLIER_BITS, max_post: int = MAX_POST_SHIFT):
    """The fixed-point form ``(pre, M, post)`` of a positive requantization scale, ``scale ~ M * 2**-(pre+post)``
    with ``M`` in ``[2**(bits-1), 2**bits)`` (an int16 ALU MUL operand), ``post <= max_post`` and ``pre >= 0``.
    A sequence of scales (per channel) gives arrays ``pre`` and ``M`` and one ``post`` (an immediate).
    ValueError for a scale that is not positive or too large (``post`` would be below 1)."""
    scales = np.atleast_1d(np.asarray(scale, np.float64))
    if not np.all(np.isfinite(scales) & (scales > 0)):
        raise ValueError(f"a fixed-point requantization scale must be positive and finite, got {scale}")
    mant, exp = np.frexp(scales)                      # scale = mant * 2**exp, mant in [0.5, 1)
    m = np.round(mant * (1 << bits)).astype(np.int64)
    up = m == (1 << bits)
    m[up] >>= 1
    exp = exp + up
    total = bits - exp                                # scale ~ m * 2**-total
    post = int(min(max_post, int(total.min())))
    if post < 1:
        raise ValueError(f"a requantization scale {float(scales.max())} is too large for a fixed-point multiplier "
                         f"of {bits} bits (it needs a post-shift of at least 1)")
    pre = (total - post).astype(np.int64)
    if np.ndim(scale) == 0:
        return int(pre[0]), int(m[0]), post
    return pre, m, post


def requantize_fixed_point(x: np.ndarray, pre, multiplier, post: int, clip: tuple[int, int] | None) -> np.ndarray:
    """The fixed-point requantization of int32 values ``x`` (bias already added; ``pre``/``multiplier`` scalars
    or broadcastable per channel): ``clip(((clip16(x >> pre) * M) + 2**(post-1)) >> post)``, as int8."""
    x = np.asarray(x, np.int64) >> np.asarray(pre, np.int64)
    x = np.clip(x, -(1 << 15), (1 << 15) - 1) * np.asarray(multiplier, np.int64)
    x = (x + (1 << (post - 1))) >> post
    if clip is not None:
        x = np.clip(x, clip[0], clip[1])
    return x.astype(np.int8)


def inside_fraction(out: np.ndarray, clip: tuple[int, int] | None) -> float:
    """Fraction of int8 outputs strictly inside the clip range (the others could be saturated)."""
    lo, hi = clip if clip is not None else INT8_RANGE
    return float(np.mean((out > lo) & (out < hi)))


def calibrated_shift(acc: np.ndarray, clip: tuple[int, int] | None, max_shift: int = 31) -> int:
    """The right shift that leaves the most requantised outputs strictly inside the clip range.

    Without it, full-range int8 data and a fixed ``>> 8`` saturate almost every output of a
    large layer, and an "exact" comparison checks little more than signs."""
    acc = acc.astype(np.int32)
    fractions = [inside_fraction(requantize(acc, s, clip), clip) for s in range(max_shift + 1)]
    return int(np.argmax(fractions))


def conv2d_accumulators(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: tuple[int, int],
                        pad: tuple[int, int]) -> np.ndarray:
    """int8 NCHW x int8 OIHW (+ int32 bias per output channel) -> the int32 accumulators, NCHW."""
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((n, c, kh, kw, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
    acc = _wrap32(np.einsum("nkhw,ok->nohw", cols.reshape(n, c * kh * kw, oh, ow),
                            w.reshape(o, -1).astype(np.float64), optimize=True))
    if bias is not None:
        acc = (acc.astype(np.int64) + bias.reshape(1, o, 1, 1)).astype(np.int32)
    return acc


def dense_accumulators(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """int8 (N, I) x int8 (O, I) (+ int32 bias per output) -> the int32 accumulators (N, O)."""
    acc = _wrap32(x.astype(np.float64) @ w.astype(np.float64).T)
    if bias is not None:
        acc = (acc.astype(np.int64) + bias.reshape(1, -1)).astype(np.int32)
    return acc


def group_conv2d_accumulate(x: np.ndarray, w: np.ndarray, groups: int, stride: tuple[int, int],
                            pad: tuple[int, int]) -> np.ndarray:
    """int8 NCHW x int8 (O, I/groups, KH, KW) -> int64 NCHW sums: each output channel sees its group's inputs."""
    n, c, h, wd = x.shape
    o, cpg, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), np.int64)
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    opg = o // groups
    out = np.zeros((n, o, oh, ow), np.int64)
    for oc in range(o):
        g = oc // opg
        xs = xp[:, g * cpg:(g + 1) * cpg]
        for i in range(kh):
            for j in range(kw):
                window = xs[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
                out[:, oc] += np.tensordot(window, w[oc, :, i, j].astype(np.int64), axes=([1], [0]))
    return out


def conv2d_transpose_accumulate(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                                out_pad: tuple[int, int]) -> np.ndarray:
    """int8 NCHW x int8 (I, O, KH, KW) -> int64 sums: input pixel (iy, ix) adds w[:, :, ky, kx] into output pixel
    (iy*sh - ph + ky, ix*sw - pw + kx) (the scatter definition)."""
    n, c, h, wd = x.shape
    ci, o, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw) = stride, pad, out_pad
    oh, ow = (h - 1) * sh - 2 * ph + kh + oph, (wd - 1) * sw - 2 * pw + kw + opw
    full = np.zeros((n, o, (h - 1) * sh + kh + oph + ph, (wd - 1) * sw + kw + opw + pw), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            contrib = np.tensordot(x.astype(np.int64), w[:, :, ky, kx].astype(np.int64), axes=([1], [0]))
            full[:, :, ky:ky + sh * (h - 1) + 1:sh, kx:kx + sw * (wd - 1) + 1:sw] += contrib.transpose(0, 3, 1, 2)
    return full[:, :, ph:ph + oh, pw:pw + ow]


def plus_bias(acc: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """int64 NCHW sums -> the int32 accumulators with a per-channel bias added (32-bit wrap-around, as VTA's ACC)."""
    return (acc.astype(np.int64).astype(np.int32).astype(np.int64) + bias.reshape(1, -1, 1, 1)).astype(np.int32)
