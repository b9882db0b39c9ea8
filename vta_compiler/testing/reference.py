"""numpy references (exact int arithmetic via float64 BLAS: every partial sum stays below 2^53),
and the choice of a shift that keeps the requantised outputs informative."""

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


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: tuple[int, int],
                     pad: tuple[int, int], shift: int = 8, clip=(0, 127)) -> np.ndarray:
    """int8 NCHW x int8 OIHW -> int8 NCHW: int8(clip((conv + bias) >> shift))."""
    return requantize(conv2d_accumulators(x, w, bias, stride, pad), shift, clip)


def dense_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, shift: int = 8,
                    clip=(0, 127)) -> np.ndarray:
    """int8 (N, I) x int8 (O, I) -> int8 (N, O): int8(clip((x @ w.T + bias) >> shift))."""
    return requantize(dense_accumulators(x, w, bias), shift, clip)
