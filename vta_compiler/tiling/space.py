"""A tiling space: the knobs of a schedule, what a tiling needs of the on-chip buffers, and the data of one
measurement."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..environment import Environment
from ..transform.uop import kernel_uop_budget


@dataclass(frozen=True)
class Knob:
    """One knob of a schedule and the values it may take."""
    name: str
    values: tuple


@dataclass(frozen=True)
class BufferNeeds:
    """What one tiling keeps on chip: SRAM elements of each buffer and the uops of its GEMM kernel."""
    inp: int
    wgt: int
    acc: int
    uops: int

    #: (field, what the refusal message calls it)
    NAMES = (("inp", "INP buffer elements"), ("wgt", "WGT buffer elements"), ("acc", "ACC buffer elements"),
             ("uops", "GEMM kernel uops"))

    @staticmethod
    def limits(env: Environment) -> BufferNeeds:
        return BufferNeeds(env.INP_BUFF_DEPTH, env.WGT_BUFF_DEPTH, env.ACC_BUFF_DEPTH, kernel_uop_budget(env))

    def fit(self, env: Environment) -> bool:
        cap = self.limits(env)
        return self.inp <= cap.inp and self.wgt <= cap.wgt and self.acc <= cap.acc and self.uops <= cap.uops

    def excess(self, env: Environment) -> str:
        """Each need beside the capacity it exceeds, e.g. ``WGT buffer elements 49 > 16``."""
        cap = self.limits(env)
        over = [f"{name} {getattr(self, f)} > {getattr(cap, f)}" for f, name in self.NAMES
                if getattr(self, f) > getattr(cap, f)]
        return ", ".join(over or ["more than fits"])


@dataclass
class LayerData:
    """Inputs of one measurement (packed, as the kernel takes them) and the expected output (unpacked)."""
    args: list[np.ndarray]
    out_shape: tuple[int, ...]
    expected: np.ndarray
    shift: int | None              # the immediate shift the kernel is built with (None: per-channel tensor)
    macs: int                      # multiply-accumulates the GEMMs issue (channels padded to the block)
