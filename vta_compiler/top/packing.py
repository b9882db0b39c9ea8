"""Packing NCHW / OIHW numpy data into VTA's blocked layouts (spec 5.6) and back.

* data ``(N, C, H, W)`` -> ``(N/B, C/BI, H, W, B, BI)`` (``NCHW{B}n{BI}c``)
* conv kernel ``(O, I, KH, KW)`` -> ``(O/BO, I/BI, KH, KW, BO, BI)`` (``OIHW{BO}o{BI}i``)
* dense data ``(N, C)`` -> ``(N/B, C/BI, B, BI)``; dense weight ``(O, I)`` -> ``(O/BO, I/BI, BO, BI)``
* per-channel bias ``(O,)`` -> ``(N/B, O/BO, 1, 1, B, BO)`` (conv) or ``(N/B, O/BO, B, BO)`` (dense),
  broadcast over the batch

Channel counts that are not multiples of the block are padded with zeros (``pad_channels``),
which is how a 3-channel image reaches VTA.
"""

from __future__ import annotations

import numpy as np


def _ceil_to(n: int, k: int) -> int:
    return -(-n // k) * k


def pad_channels(x: np.ndarray, axis: int, multiple: int) -> np.ndarray:
    """Zero-pad ``axis`` of ``x`` up to a multiple of ``multiple``."""
    n = x.shape[axis]
    m = _ceil_to(n, multiple)
    if m == n:
        return x
    width = [(0, 0)] * x.ndim
    width[axis] = (0, m - n)
    return np.pad(x, width)


def _check(n: int, k: int, what: str) -> None:
    if n % k:
        raise ValueError(f"{what} {n} is not a multiple of {k} (pad it first: pad_channels)")


def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    _check(n, batch, "batch")
    _check(c, block, "channel count")
    return np.ascontiguousarray(x.reshape(n // batch, batch, c // block, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(x: np.ndarray) -> np.ndarray:
    nb, cb, h, w, b, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * c, h, w))


def pack_oihw(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    o, i, kh, kw = w.shape
    _check(o, block_out, "output channel count")
    _check(i, block_in, "input channel count")
    return np.ascontiguousarray(w.reshape(o // block_out, block_out, i // block_in, block_in, kh, kw)
                                .transpose(0, 2, 4, 5, 1, 3))


def unpack_oihw(w: np.ndarray) -> np.ndarray:
    ob, ib, kh, kw, bo, bi = w.shape
    return np.ascontiguousarray(w.transpose(0, 4, 1, 5, 2, 3).reshape(ob * bo, ib * bi, kh, kw))


def pack_nc(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    n, c = x.shape
    _check(n, batch, "batch")
    _check(c, block, "channel count")
    return np.ascontiguousarray(x.reshape(n // batch, batch, c // block, block).transpose(0, 2, 1, 3))


def unpack_nc(x: np.ndarray) -> np.ndarray:
    nb, cb, b, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(nb * b, cb * c))


def pack_oi(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    o, i = w.shape
    _check(o, block_out, "output channel count")
    _check(i, block_in, "input channel count")
    return np.ascontiguousarray(w.reshape(o // block_out, block_out, i // block_in, block_in).transpose(0, 2, 1, 3))


def pack_bias_conv(b: np.ndarray, n: int, batch: int, block_out: int) -> np.ndarray:
    o = b.shape[0]
    _check(o, block_out, "output channel count")
    t = np.broadcast_to(b.reshape(1, o // block_out, 1, 1, 1, block_out), (n // batch, o // block_out, 1, 1, batch,
                                                                           block_out))
    return np.ascontiguousarray(t)


def pack_bias_dense(b: np.ndarray, n: int, batch: int, block_out: int) -> np.ndarray:
    o = b.shape[0]
    _check(o, block_out, "output channel count")
    return np.ascontiguousarray(np.broadcast_to(b.reshape(1, o // block_out, 1, block_out),
                                                (n // batch, o // block_out, batch, block_out)))
