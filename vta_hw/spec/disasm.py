"""Disassembler: one line per instruction with the running token counts of the four queues."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .isa import TOKEN_QUEUES, AluOp, Isa, MemType, Opcode, extension_for, stage_of, token_pops, token_pushes


def _words(stream: bytes | np.ndarray | Sequence[int]) -> list[int]:
    if isinstance(stream, (bytes, bytearray, memoryview)):
        w = Isa.words_from_bytes(bytes(stream))
        return [int(a) | (int(b) << 64) for a, b in w]
    if isinstance(stream, np.ndarray):
        w = stream.reshape(-1, 2) if stream.dtype != object else stream
        return [int(a) | (int(b) << 64) for a, b in w]
    return [int(x) for x in stream]


def _name(enum, v: int) -> str:
    try:
        return enum(v).name
    except ValueError:
        return f"?{v}"


def describe(isa: Isa, word: int) -> str:
    """The instruction part of a disassembly line (no index, no token counts). An instruction of an ISA
    extension that ``isa`` does not enable is marked so."""
    text = _describe(isa, word)
    f = isa.decode(word)
    op = f["opcode"]
    ext = extension_for(alu_op=f["alu_opcode"]) if op == Opcode.ALU else \
        extension_for(mem_type=f["memory_type"]) if op == Opcode.LOAD else None
    return f"{text} [illegal: needs ISA extension {ext.name}]" if ext and not isa.has(ext.name) else text


def _describe(isa: Isa, word: int) -> str:
    op = isa.opcode_of(word)
    f = isa.decode(word)
    if op in (Opcode.LOAD, Opcode.STORE):
        kind = "LOAD" if op == Opcode.LOAD else "STORE"
        mt = _name(MemType, f["memory_type"])
        if f["x_size"] == 0:
            return f"{kind:<6} {mt:<4} NOP"
        pads = f"pad y=({f['y_pad_0']},{f['y_pad_1']}) x=({f['x_pad_0']},{f['x_pad_1']})"
        return (f"{kind:<6} {mt:<4} sram={f['sram_base']:#06x} dram={f['dram_base']:#010x} "
                f"y={f['y_size']} x={f['x_size']} stride={f['x_stride']} {pads}")
    if op in (Opcode.GEMM, Opcode.ALU):
        loops = (f"uop=[{f['uop_bgn']},{f['uop_end']}) iter={f['iter_out']}x{f['iter_in']} "
                 f"dst=({f['dst_factor_out']},{f['dst_factor_in']}) src=({f['src_factor_out']},{f['src_factor_in']})")
        if op == Opcode.GEMM:
            kind = "GEMM   reset" if f["reset_reg"] else "GEMM"
            return f"{kind:<11} {loops} wgt=({f['wgt_factor_out']},{f['wgt_factor_in']})"
        operand = f"imm={f['imm']}" if f["use_imm"] else "reg"
        return f"ALU    {_name(AluOp, f['alu_opcode']):<4} {operand:<9} {loops}"
    if op == Opcode.FINISH:
        return "FINISH"
    return f"ILLEGAL opcode {op}"


def disassemble(stream: bytes | np.ndarray | Iterable[int], isa: Isa) -> list[str]:
    """Disassemble a stream; each line ends with the queue counts after that instruction."""
    counts = dict.fromkeys(TOKEN_QUEUES, 0)
    lines = []
    for i, word in enumerate(_words(stream)):
        f = isa.decode(word)
        st = stage_of(f["opcode"], f.get("memory_type", 0))
        pops = token_pops(st, f) if st else []
        pushes = token_pushes(st, f) if st else []
        for q in pops:
            counts[q] -= 1
        for q in pushes:
            counts[q] += 1
        deps = f"pop[{','.join(pops) or '-'}] push[{','.join(pushes) or '-'}]"
        stage = st.name.lower() if st else "none"
        tokens = " ".join(f"{q}={counts[q]}" for q in TOKEN_QUEUES)
        lines.append(f"{i:5d} {stage:<7} {describe(isa, word):<100} {deps:<26} | {tokens}")
    return lines
