"""numpy references for tests: the operators' int8 results (from :mod:`vta_compiler.reference`)."""

from __future__ import annotations

import numpy as np

from ..reference import (  # noqa: F401  (re-exported for tests)
    INT8_RANGE,
    calibrated_shift,
    conv2d_accumulators,
    dense_accumulators,
    inside_fraction,
    requantize,
)


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: tuple[int, int],
                     pad: tuple[int, int], shift: int = 8, clip=(0, 127)) -> np.ndarray:
    """int8 NCHW x int8 OIHW -> int8 NCHW: int8(clip((conv + bias) >> shift))."""
    return requantize(conv2d_accumulators(x, w, bias, stride, pad), shift, clip)


def dense_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, shift: int = 8,
                    clip=(0, 127)) -> np.ndarray:
    """int8 (N, I) x int8 (O, I) -> int8 (N, O): int8(clip((x @ w.T + bias) >> shift))."""
    return requantize(dense_accumulators(x, w, bias), shift, clip)
