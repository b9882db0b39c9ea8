"""Random instruction words for the unit suites (legal unless asked otherwise)."""

from __future__ import annotations

import random

from vta_hw.spec import AluOp, MemType, Opcode, Stage


def random_legal(isa, cfg, rnd: random.Random):
    """(word, stage) of a random legal instruction other than FINISH."""
    kind = rnd.choice(["inp", "wgt", "uop", "acc", "gemm", "alu", "store", "nop_l", "nop_c", "nop_s"])
    if kind in ("inp", "wgt", "uop", "acc"):
        mt = {"inp": MemType.INP, "wgt": MemType.WGT, "uop": MemType.UOP, "acc": MemType.ACC}[kind]
        w = isa.load(mt, rnd.randrange(8), rnd.randrange(1 << 20), rnd.randrange(1, 3), rnd.randrange(1, 4),
                     rnd.randrange(4, 8), rnd.randrange(2), rnd.randrange(2), rnd.randrange(2), rnd.randrange(2),
                     **_deps(rnd, Stage.LOAD if kind in ("inp", "wgt") else Stage.COMPUTE))
        return w, Stage.LOAD if kind in ("inp", "wgt") else Stage.COMPUTE
    if kind == "gemm":
        return isa.gemm.encode(opcode=Opcode.GEMM, reset_reg=rnd.randrange(2), uop_bgn=rnd.randrange(4),
                               uop_end=rnd.randrange(4, 9), iter_out=rnd.randrange(4), iter_in=rnd.randrange(4),
                               **_deps(rnd, Stage.COMPUTE)), Stage.COMPUTE
    if kind == "alu":
        return isa.alu.encode(opcode=Opcode.ALU, alu_opcode=rnd.choice(list(range(4))), use_imm=rnd.randrange(2),
                              imm=rnd.randrange(-100, 100), uop_end=rnd.randrange(1, 9), iter_out=1, iter_in=2,
                              **_deps(rnd, Stage.COMPUTE)), Stage.COMPUTE
    if kind == "store":
        return isa.store(rnd.randrange(8), rnd.randrange(1 << 20), rnd.randrange(1, 3), rnd.randrange(1, 4), 8,
                         **_deps(rnd, Stage.STORE)), Stage.STORE
    if kind == "nop_l":
        return isa.load(MemType.INP, 0, 0, 0, 0, 0, **_deps(rnd, Stage.LOAD)), Stage.LOAD
    if kind == "nop_c":
        return isa.load(MemType.UOP, 0, 0, 0, 0, 0, **_deps(rnd, Stage.COMPUTE)), Stage.COMPUTE
    return isa.store(0, 0, 0, 0, 0, memory_type=rnd.randrange(5), **_deps(rnd, Stage.STORE)), Stage.STORE


def _deps(rnd, stage):
    legal = {Stage.LOAD: ("pop_next_dep", "push_next_dep"), Stage.STORE: ("pop_prev_dep", "push_prev_dep"),
             Stage.COMPUTE: ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")}[stage]
    return {f: rnd.randrange(2) for f in legal}


def illegal_cases(isa, cfg):
    """(name, word, error code, ERROR_INFO or None)."""
    from vta_hw.spec.regmap import ErrorCode as E
    return [
        ("opcode5", 5, E.ILLEGAL_OPCODE, 5),
        ("opcode7", 7 | 1 << 20, E.ILLEGAL_OPCODE, 7),
        ("load_out", isa.load(MemType.OUT, 0, 0, 1, 1, 1), E.ILLEGAL_MEM_TYPE, 4),
        ("load_acc8", isa.load(MemType.ACC_8BIT, 0, 0, 1, 1, 1), E.ILLEGAL_MEM_TYPE, 5),
        ("store_acc", isa.store(0, 0, 1, 1, 1, memory_type=MemType.ACC), E.ILLEGAL_MEM_TYPE, 3),
        ("store_nop_mt6", isa.store(0, 0, 0, 0, 0, memory_type=6), E.ILLEGAL_MEM_TYPE, 6),
        ("load_pop_prev", isa.load(MemType.INP, 0, 0, 0, 0, 0, pop_prev_dep=1), E.ILLEGAL_DEP_FLAGS, 1),
        ("store_push_next", isa.store(0, 0, 0, 0, 0, push_next_dep=1), E.ILLEGAL_DEP_FLAGS, 8),
        ("alu_mul", isa.alu.encode(opcode=Opcode.ALU, alu_opcode=AluOp.MUL, uop_end=1, iter_out=1, iter_in=1),
         E.ILLEGAL_ALU_OPCODE, 4),
        ("alu_6", isa.alu.encode(opcode=Opcode.ALU, alu_opcode=6), E.ILLEGAL_ALU_OPCODE, 6),
        ("uop_end", isa.gemm.encode(opcode=Opcode.GEMM, uop_end=cfg.UOP_BUFF_DEPTH + 1, iter_out=1, iter_in=1),
         E.UOP_RANGE, cfg.UOP_BUFF_DEPTH + 1),
        ("store_pad", isa.mem.encode(opcode=Opcode.STORE, memory_type=MemType.OUT, y_size=1, x_size=1, x_stride=1,
                                     x_pad_1=2), E.STORE_PADDING, None),
        ("inp_range", isa.load(MemType.INP, cfg.INP_BUFF_DEPTH - 2, 0, 1, 2, 2, x_pad_1=1), E.SRAM_RANGE,
         cfg.INP_BUFF_DEPTH),
        ("out_range", isa.store(cfg.ACC_BUFF_DEPTH - 1, 0, 1, 2, 2), E.SRAM_RANGE, cfg.ACC_BUFF_DEPTH),
        ("wgt_range", isa.load(MemType.WGT, 0, 0, 3, cfg.WGT_BUFF_DEPTH // 2, cfg.WGT_BUFF_DEPTH // 2, y_pad_0=1),
         E.SRAM_RANGE, 4 * (cfg.WGT_BUFF_DEPTH // 2) - 1),
    ]
