"""numpy references of the group, depthwise and transposed convolutions, written from their definitions
(independent of ``vta_compiler.top``). Exact integer arithmetic: int64 accumulation."""

from __future__ import annotations

import numpy as np


def requantize(acc: np.ndarray, bias: np.ndarray | None, shift: int | np.ndarray, clip) -> np.ndarray:
    """int8(clip((int32(acc) + bias) >> shift)), with 32-bit wrap-around like the accumulators; ``shift`` is
    one amount or one per output channel."""
    acc = acc.astype(np.int64).astype(np.int32)
    if bias is not None:
        acc = (acc.astype(np.int64) + bias.reshape(1, -1, 1, 1)).astype(np.int32)
    if isinstance(shift, np.ndarray):
        acc = acc >> shift.astype(np.int32).reshape(1, -1, 1, 1)
    elif shift:
        acc = acc >> shift
    if clip is not None:
        acc = np.clip(acc, clip[0], clip[1])
    return acc.astype(np.int8)


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
