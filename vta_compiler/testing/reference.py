"""numpy references (exact int arithmetic via float64 BLAS: every partial sum stays below 2^53)."""

from __future__ import annotations

import numpy as np


def _requant(acc: np.ndarray, bias, shift: int, clip) -> np.ndarray:
    acc = acc.astype(np.int64).astype(np.int32)          # wraps like the 32-bit accumulator
    if bias is not None:
        acc = (acc.astype(np.int64) + bias).astype(np.int32)
    if shift:
        acc = acc >> shift
    if clip is not None:
        acc = np.clip(acc, clip[0], clip[1])
    return acc.astype(np.int8)


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: tuple[int, int],
                     pad: tuple[int, int], shift: int = 8, clip=(0, 127)) -> np.ndarray:
    """int8 NCHW x int8 OIHW -> int8 NCHW: int8(clip((conv + bias) >> shift))."""
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((n, c, kh, kw, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
    acc = np.einsum("nkhw,ok->nohw", cols.reshape(n, c * kh * kw, oh, ow), w.reshape(o, -1).astype(np.float64),
                    optimize=True)
    b = None if bias is None else bias.reshape(1, o, 1, 1).astype(np.int64)
    return _requant(acc, b, shift, clip)


def dense_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, shift: int = 8,
                    clip=(0, 127)) -> np.ndarray:
    """int8 (N, I) x int8 (O, I) -> int8 (N, O): int8(clip((x @ w.T + bias) >> shift))."""
    acc = x.astype(np.float64) @ w.astype(np.float64).T
    b = None if bias is None else bias.reshape(1, -1).astype(np.int64)
    return _requant(acc, b, shift, clip)
