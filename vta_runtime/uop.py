"""Micro-op kernels: recording (spec 4.4), the kernel cache and the UOP SRAM residency cache."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from vta_hw.spec import SUPPORTED_ALU_OPS, AluOp, Isa

from .errors import RuntimeUsageError

MODE_GEMM = 0
MODE_ALU = 1
MAX_UOP_LOOPS = 2


@dataclass
class UopKernel:
    """A recorded kernel: uops plus up to two loops, and the GEMM/ALU settings they share."""

    mode: int | None = None
    reset: int = 0
    opcode: int = 0
    use_imm: int = 0
    imm: int = 0
    uops: list[tuple[int, int, int]] = field(default_factory=list)
    loops: list[tuple[int, int, int, int]] = field(default_factory=list)   # extent, dst, src, wgt factors
    open_loops: int = 0
    words: np.ndarray | None = None
    sram_begin: int = 0
    sram_end: int = 0

    def __len__(self) -> int:
        return len(self.uops)

    @property
    def resident(self) -> bool:
        return self.sram_end > self.sram_begin

    # ------------------------------------------------------------------ recording
    def loop_begin(self, extent: int, dst_factor: int, src_factor: int, wgt_factor: int) -> None:
        if self.uops:
            raise RuntimeUsageError("uop_loop_begin must come before the first uop_push of a kernel")
        if len(self.loops) == MAX_UOP_LOOPS:
            raise RuntimeUsageError(f"a uop kernel has at most {MAX_UOP_LOOPS} loops")
        if extent < 1:
            raise RuntimeUsageError(f"uop loop extent {extent} must be at least 1")
        self.loops.append((int(extent), int(dst_factor), int(src_factor), int(wgt_factor)))
        self.open_loops += 1

    def loop_end(self) -> None:
        if self.open_loops == 0:
            raise RuntimeUsageError("uop_loop_end without a matching uop_loop_begin")
        self.open_loops -= 1

    def push(self, mode: int, reset: int, dst: int, src: int, wgt: int, opcode: int, use_imm: int, imm: int) -> None:
        mode, reset, opcode, use_imm, imm = int(mode), int(bool(reset)), int(opcode), int(bool(use_imm)), int(imm)
        if mode not in (MODE_GEMM, MODE_ALU):
            raise RuntimeUsageError(f"uop_push mode {mode} must be 0 (GEMM) or 1 (ALU)")
        if self.mode is None:
            if mode == MODE_ALU and opcode not in SUPPORTED_ALU_OPS:
                name = AluOp(opcode).name if opcode in AluOp._value2member_map_ else str(opcode)
                raise RuntimeUsageError(f"ALU opcode {name} is not supported (MIN, MAX, ADD and SHR are; see README)")
            self.mode, self.reset, self.opcode, self.use_imm, self.imm = mode, reset, opcode, use_imm, imm
        else:
            if mode != self.mode or reset != self.reset:
                raise RuntimeUsageError(
                    f"uop {len(self.uops)} has mode={mode} reset={reset} but the kernel has mode={self.mode} "
                    f"reset={self.reset}: every uop of a kernel must agree")
            if mode == MODE_ALU and (opcode, use_imm, imm) != (self.opcode, self.use_imm, self.imm):
                raise RuntimeUsageError(
                    f"uop {len(self.uops)} has ALU opcode={opcode} use_imm={use_imm} imm={imm} but the kernel has "
                    f"opcode={self.opcode} use_imm={self.use_imm} imm={self.imm}: every uop of a kernel must agree")
        self.uops.append((int(dst), int(src), int(wgt) if mode == MODE_GEMM else 0))

    def finish(self, isa: Isa) -> None:
        if self.open_loops:
            raise RuntimeUsageError(f"uop kernel ends with {self.open_loops} uop loop(s) still open")
        if not self.uops:
            raise RuntimeUsageError("a uop kernel must push at least one uop")
        fmt = isa.uop
        words = []
        for k, (d, s, w) in enumerate(self.uops):
            try:
                words.append(fmt.encode(dst_idx=d, src_idx=s, wgt_idx=w))
            except ValueError as exc:
                raise RuntimeUsageError(f"uop {k}: {exc}") from None
        self.words = np.array(words, dtype=np.uint32)

    # ------------------------------------------------------------------ instruction fields
    def loop_fields(self) -> dict[str, int]:
        """iter/factor fields: GEMM maps one loop to the outer level, ALU to the inner one (spec 4.4)."""
        loops = list(self.loops)
        if len(loops) == 1 and self.mode == MODE_ALU:
            loops = [(1, 0, 0, 0), loops[0]]
        while len(loops) < 2:
            loops.append((1, 0, 0, 0))
        (eo, do, so, wo), (ei, di, si, wi) = loops
        f = {"iter_out": eo, "iter_in": ei, "dst_factor_out": do, "dst_factor_in": di,
             "src_factor_out": so, "src_factor_in": si}
        if self.mode == MODE_GEMM:
            f.update(wgt_factor_out=wo, wgt_factor_in=wi)
        return f


class UopResidency:
    """Where kernels sit in the UOP SRAM during one stream; placement wraps and evicts (spec 4.4)."""

    def __init__(self, depth: int):
        self.depth = depth
        self.end = 0
        self.resident: list[UopKernel] = []

    def reset(self) -> None:
        for k in self.resident:
            k.sram_begin = k.sram_end = 0
        self.resident.clear()
        self.end = 0

    def place(self, kernel: UopKernel) -> bool:
        """Give ``kernel`` an SRAM range; True if it must be loaded (it was not resident)."""
        if kernel.resident:
            return False
        n = len(kernel)
        if n > self.depth:
            raise RuntimeUsageError(f"a uop kernel of {n} uops does not fit the UOP buffer ({self.depth} uops)")
        if self.end + n > self.depth:
            self.end = 0
        begin, end = self.end, self.end + n
        keep = []
        for k in self.resident:
            if k.sram_begin < end and begin < k.sram_end:
                k.sram_begin = k.sram_end = 0
            else:
                keep.append(k)
        self.resident = keep + [kernel]
        kernel.sram_begin, kernel.sram_end = begin, end
        self.end = end
        return True


KernelKey = tuple[Hashable, int | None]
