"""Decoding an instruction stream and explaining what is wrong with it.

Shared by every device so that the same bad program gives the same message everywhere: fsim
runs these checks before executing a stream; tsim and the boards run them on the instruction
that the hardware reported (error code + instruction index) to word the message, and use the
hardware's state registers for deadlocks and unbalanced runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from vta_hw.spec import (
    TOKEN_QUEUES,
    AluOp,
    Config,
    MemType,
    Opcode,
    Stage,
    describe,
    illegal_dep_flags,
    stage_of,
    token_pops,
    token_pushes,
)

from .errors import IllegalInstructionError, MissingFinishError, SramIndexError, UnbalancedTokensError

QUEUE_NAMES = {"l2g": "load->compute", "g2l": "compute->load", "g2s": "compute->store", "s2g": "store->compute"}
MEM_NAMES = {MemType.UOP: "UOP", MemType.WGT: "WGT", MemType.INP: "INP", MemType.ACC: "ACC", MemType.OUT: "OUT"}


def sram_geometry(cfg: Config, mt: int) -> tuple[int, int, str]:
    """(depth, element bytes, name) of the SRAM a memory instruction of type ``mt`` touches."""
    depth = {MemType.UOP: cfg.UOP_BUFF_DEPTH, MemType.WGT: cfg.WGT_BUFF_DEPTH, MemType.INP: cfg.INP_BUFF_DEPTH,
             MemType.ACC: cfg.ACC_BUFF_DEPTH, MemType.OUT: cfg.ACC_BUFF_DEPTH}[mt]
    elem = {MemType.UOP: cfg.UOP_ELEM_BYTES, MemType.WGT: cfg.WGT_ELEM_BYTES, MemType.INP: cfg.INP_ELEM_BYTES,
            MemType.ACC: cfg.ACC_ELEM_BYTES, MemType.OUT: cfg.OUT_ELEM_BYTES}[mt]
    return depth, elem, MEM_NAMES[mt]


class Program:
    """A decoded instruction stream: per-field columns, stages and token actions.

    Decoding is lazy (each attribute on first use), so a device whose engine reads the words
    itself pays for it only when a message needs it.
    """

    def __init__(self, isa, words: np.ndarray):
        self.isa = isa
        self.words = words
        self.n = words.shape[0]

    @cached_property
    def opcode(self) -> list[int]:
        return (self.words[:, 0] & np.uint64(7)).astype(np.int64).tolist()

    @cached_property
    def _cols(self) -> dict[str, dict[str, list[int]]]:
        isa, words = self.isa, self.words
        return {key: {f.name: fmt.extract(words, f.name).tolist() for f in fmt}
                for key, fmt in (("mem", isa.mem), ("gemm", isa.gemm), ("alu", isa.alu))}

    @cached_property
    def stage(self) -> list[Stage | None]:
        mt = self._cols["mem"]["memory_type"]
        return [stage_of(op, mt[i]) if op <= Opcode.ALU else None for i, op in enumerate(self.opcode)]

    @cached_property
    def pops(self) -> list[list[str]]:
        return [token_pops(st, self.flags(i)) if st else [] for i, st in enumerate(self.stage)]

    @cached_property
    def pushes(self) -> list[list[str]]:
        return [token_pushes(st, self.flags(i)) if st else [] for i, st in enumerate(self.stage)]

    def word(self, i: int) -> int:
        return int(self.words[i, 0]) | (int(self.words[i, 1]) << 64)

    def flags(self, i: int) -> dict[str, int]:
        c = self._cols["mem"]
        return {k: c[k][i] for k in ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")}

    def mem(self, name: str, i: int) -> int:
        return self._cols["mem"][name][i]

    def gemm(self, name: str, i: int) -> int:
        return self._cols["gemm"][name][i]

    def alu(self, name: str, i: int) -> int:
        return self._cols["alu"][name][i]

    def _fields(self, key: str, i: int) -> dict[str, int]:
        return {k: v[i] for k, v in self._cols[key].items()}

    def mem_fields(self, i: int) -> dict[str, int]:
        return self._fields("mem", i)

    def gemm_fields(self, i: int) -> dict[str, int]:
        return self._fields("gemm", i)

    def alu_fields(self, i: int) -> dict[str, int]:
        return self._fields("alu", i)


def check_instruction(cfg: Config, p: Program, i: int, dram: Any = None) -> None:
    """Raise the ProgramError that instruction ``i`` deserves, if any. ``dram`` (optional) has
    ``check(phys, nbytes, what, index)`` and raises DramAccessError for memory outside every allocation."""
    op = p.opcode[i]
    if op > Opcode.ALU:
        raise IllegalInstructionError(f"instruction {i}: illegal opcode {op} (valid: 0-4)", i)
    mt = p.mem("memory_type", i)
    st = p.stage[i]
    if op == Opcode.LOAD and st is None:
        why = "ACC_8BIT loads are not supported (see README)" if mt == MemType.ACC_8BIT else \
            "a LOAD may target UOP(0), WGT(1), INP(2) or ACC(3)"
        raise IllegalInstructionError(f"instruction {i}: LOAD with memory type {mt}: {why}", i)
    if op == Opcode.STORE and p.mem("x_size", i) and mt != MemType.OUT:
        raise IllegalInstructionError(
            f"instruction {i}: STORE with memory type {mt}: a STORE reads the OUT buffer (4)", i)
    if op == Opcode.STORE and mt > MemType.OUT:
        raise IllegalInstructionError(f"instruction {i}: STORE NOP with memory type {mt} (valid: 0-4)", i)
    bad = illegal_dep_flags(st, p.flags(i))
    if bad:
        raise IllegalInstructionError(
            f"instruction {i}: {', '.join(bad)} set on a {st.name.lower()} instruction, whose module "
            "has no such queue", i)
    if op == Opcode.ALU:
        aop = p.alu("alu_opcode", i)
        if aop not in (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR):
            why = "MUL is not supported (see README)" if aop == AluOp.MUL else "valid: 0-3"
            raise IllegalInstructionError(f"instruction {i}: illegal ALU opcode {aop} ({why})", i)
    if op in (Opcode.GEMM, Opcode.ALU):
        end = p.gemm("uop_end", i)
        if end > cfg.UOP_BUFF_DEPTH:
            raise SramIndexError(
                f"instruction {i}: uop_end={end} is past the UOP buffer depth {cfg.UOP_BUFF_DEPTH}", i)
    if op in (Opcode.LOAD, Opcode.STORE) and p.mem("x_size", i):
        check_memory(cfg, p, i, op, mt, dram)


def check_memory(cfg: Config, p: Program, i: int, op: int, mt: int, dram: Any = None) -> None:
    """The checks of a LOAD or STORE that moves data: store padding, SRAM extent, DRAM extent."""
    f = p.mem_fields(i)
    depth, elem_bytes, name = sram_geometry(cfg, mt)
    if op == Opcode.STORE:
        if f["y_pad_0"] or f["y_pad_1"] or f["x_pad_0"] or f["x_pad_1"]:
            raise IllegalInstructionError(f"instruction {i}: a STORE must have zero padding fields", i)
        rows, cols = f["y_size"], f["x_size"]
    else:
        rows = f["y_pad_0"] + f["y_size"] + f["y_pad_1"]
        cols = f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
    last = f["sram_base"] + rows * cols
    if last > depth:
        raise SramIndexError(
            f"instruction {i}: {'STORE from' if op == Opcode.STORE else 'LOAD into'} {name} covers SRAM "
            f"indices {f['sram_base']}..{last - 1}, past the {name} buffer depth {depth}", i)
    if f["y_size"] and dram is not None:
        span = max(f["x_size"], (f["y_size"] - 1) * f["x_stride"] + f["x_size"])
        dram.check(f["dram_base"] * elem_bytes, span * elem_bytes,
                   f"{'STORE' if op == Opcode.STORE else 'LOAD'} {name}", i)


def check_stream(cfg: Config, p: Program, dram: Any = None) -> None:
    """Every static check of a stream in stream order up to its first FINISH (the core dispatches,
    and so checks, nothing after it), then the FINISH check."""
    for i in range(p.n):
        check_instruction(cfg, p, i, dram)
        if p.opcode[i] == Opcode.FINISH:
            return
    raise MissingFinishError(f"the stream of {p.n} instructions has no FINISH instruction")


def state_report(isa, p: Program, queues: Mapping[Stage, Sequence[int]], tokens: Mapping[str, int]) -> str:
    """One line per module (the instruction it is at and the tokens it waits for) and the token counts.
    ``queues`` maps each stage to the indices of its instructions not yet executed, in order."""
    lines = []
    for stage, q in queues.items():
        if not q:
            lines.append(f"  {stage.name.lower():<7}: no instructions left")
            continue
        i = q[0]
        waits = [t for t in p.pops[i] if tokens[t] == 0]
        wait = ", ".join(f"a token on {t} ({QUEUE_NAMES[t]})" for t in waits) if waits else "nothing"
        lines.append(f"  {stage.name.lower():<7}: at instruction {i} ({describe(isa, p.word(i))}), "
                     f"waiting for {wait}; {len(q)} instruction(s) left")
    lines.append("  tokens : " + " ".join(f"{t}={tokens[t]}" for t in TOKEN_QUEUES))
    return "\n".join(lines)


def unbalanced_error(isa, p: Program, queues: Mapping[Stage, Sequence[int]],
                     tokens: Mapping[str, int]) -> UnbalancedTokensError | None:
    """The error for work or tokens left when FINISH has run, or None if the run is balanced."""
    leftovers = {s: list(q) for s, q in queues.items() if q}
    left_tokens = {t: c for t, c in tokens.items() if c}
    finish = p.opcode.index(Opcode.FINISH) if Opcode.FINISH in p.opcode else p.n
    # instructions after FINISH that no module could run (their opcode or memory type is illegal)
    orphans = [i for i in range(finish + 1, p.n) if p.stage[i] is None]
    if not (leftovers or left_tokens or orphans):
        return None
    parts = [f"{s.name.lower()} has {len(ix)} instruction(s) left from #{ix[0]}" for s, ix in leftovers.items()]
    if orphans:
        parts.append(f"{len(orphans)} instruction(s) for no module left from #{orphans[0]}")
    parts += [f"{c} token(s) remain in {t} ({QUEUE_NAMES[t]})" for t, c in left_tokens.items()]
    why = []
    if orphans or any(ix[-1] > finish for ix in leftovers.values()):
        why.append("nothing after the first FINISH runs")
    if any(ix[0] < finish for ix in leftovers.values()):
        why.append("a module waiting for a token that is never pushed cannot end")
    if left_tokens:
        why.append("every push needs a matching pop")
    return UnbalancedTokensError(
        "FINISH ran but the program is not balanced: " + "; ".join(parts) + f" ({'; '.join(why)})\n" +
        state_report(isa, p, queues, tokens),
        min([ix[0] for ix in leftovers.values()] + orphans[:1], default=None))


def remaining_after(p: Program, retired: Mapping[Stage, int]) -> dict[Stage, list[int]]:
    """Per stage, the instructions with an index >= ``retired[stage]`` (each module runs its
    instructions in stream order, so these are the ones it has not executed)."""
    out: dict[Stage, list[int]] = {Stage.LOAD: [], Stage.COMPUTE: [], Stage.STORE: []}
    for i in range(p.n):
        st = p.stage[i]
        if st is not None and i >= retired[st]:
            out[st].append(i)
    return out
