"""numpy references of the group, depthwise and transposed convolutions, written from their definitions
(independent of ``vta_compiler.top``). Exact integer arithmetic: int64 accumulation."""

from __future__ import annotations

import numpy as np

from ..reference import conv2d_transpose_accumulate, group_conv2d_accumulate  # noqa: F401  (re-exported)


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

