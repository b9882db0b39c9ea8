"""ISA field tables: exact bit positions (spec 2.4-2.10), idle bits, encode/decode round trips."""

import numpy as np
import pytest

from vta_hw.spec import AluOp, Isa, IsaEncodeError, MemType, Opcode, load_config

ISA = load_config({"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
                   "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15,
                   "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}).isa

# (field, first bit, last bit), copied from the spec's bit tables for the default configuration
MEM_BITS = [("opcode", 0, 2), ("pop_prev_dep", 3, 3), ("pop_next_dep", 4, 4), ("push_prev_dep", 5, 5),
            ("push_next_dep", 6, 6), ("memory_type", 7, 9), ("sram_base", 10, 25), ("dram_base", 26, 57),
            ("y_size", 64, 79), ("x_size", 80, 95), ("x_stride", 96, 111), ("y_pad_0", 112, 115),
            ("y_pad_1", 116, 119), ("x_pad_0", 120, 123), ("x_pad_1", 124, 127)]
LOOP_HEAD = [("opcode", 0, 2), ("pop_prev_dep", 3, 3), ("pop_next_dep", 4, 4), ("push_prev_dep", 5, 5),
             ("push_next_dep", 6, 6), ("reset_reg", 7, 7), ("uop_bgn", 8, 20), ("uop_end", 21, 34),
             ("iter_out", 35, 48), ("iter_in", 49, 62), ("dst_factor_out", 64, 74), ("dst_factor_in", 75, 85),
             ("src_factor_out", 86, 96), ("src_factor_in", 97, 107)]
GEMM_BITS = LOOP_HEAD + [("wgt_factor_out", 108, 117), ("wgt_factor_in", 118, 127)]
ALU_BITS = LOOP_HEAD + [("alu_opcode", 108, 110), ("use_imm", 111, 111), ("imm", 112, 127)]
UOP_BITS = [("dst_idx", 0, 10), ("src_idx", 11, 21), ("wgt_idx", 22, 31)]


@pytest.mark.parametrize("fmt, table, idle", [
    (ISA.mem, MEM_BITS, [(58, 63)]),
    (ISA.gemm, GEMM_BITS, [(63, 63)]),
    (ISA.alu, ALU_BITS, [(63, 63)]),
    (ISA.uop, UOP_BITS, []),
])
def test_bit_positions_match_spec(fmt, table, idle):
    assert [(f.name, f.lsb, f.msb) for f in fmt] == table
    assert fmt.idle_ranges() == idle


def test_finish_is_gemm_shaped_with_opcode_3():
    assert ISA.finish_insn() == 3
    assert ISA.finish is ISA.gemm


def _extremes(fmt):
    yield {f.name: f.min for f in fmt}
    yield {f.name: f.max for f in fmt}
    for f in fmt:
        yield {f.name: f.max}
        yield {f.name: f.min if f.signed else 1}


@pytest.mark.parametrize("fmt", [ISA.mem, ISA.gemm, ISA.alu, ISA.uop], ids=lambda f: f.name)
def test_round_trip_at_extremes_and_idle_bits_zero(fmt):
    for values in _extremes(fmt):
        word = fmt.encode(values)
        assert word < (1 << fmt.total_bits)
        for lo, hi in fmt.idle_ranges():
            assert (word >> lo) & ((1 << (hi - lo + 1)) - 1) == 0
        got = fmt.decode(word)
        assert got == {f.name: values.get(f.name, 0) for f in fmt}
        if fmt.total_bits == 128:
            words = np.array([[word & (2**64 - 1), word >> 64]], dtype=np.uint64)
            assert {f.name: int(fmt.extract(words, f.name)[0]) for f in fmt} == got


def test_each_field_lands_at_its_bits():
    for fmt, table in ((ISA.mem, MEM_BITS), (ISA.gemm, GEMM_BITS), (ISA.alu, ALU_BITS), (ISA.uop, UOP_BITS)):
        for name, lo, hi in table:
            f = fmt[name]
            value = -1 if f.signed else f.max
            assert fmt.encode({name: value}) == ((1 << (hi - lo + 1)) - 1) << lo, name


def test_known_words():
    # LOAD INP, push_next, sram 5, dram 0x100, 2x3 stride 4, pads 1,2,3,4
    w = ISA.load(MemType.INP, 5, 0x100, 2, 3, 4, 1, 2, 3, 4, push_next_dep=1)
    assert w == (0 | 1 << 6 | 2 << 7 | 5 << 10 | 0x100 << 26 | 2 << 64 | 3 << 80 | 4 << 96 |
                 1 << 112 | 2 << 116 | 3 << 120 | 4 << 124)
    # ALU SHR imm -1: the immediate is two's complement in bits 112-127
    a = ISA.alu.encode(opcode=Opcode.ALU, alu_opcode=AluOp.SHR, use_imm=1, imm=-1, uop_end=1, iter_out=1, iter_in=1)
    assert a >> 112 == 0xFFFF and (a >> 108) & 7 == 3 and (a >> 111) & 1 == 1
    assert ISA.alu.decode(a)["imm"] == -1
    assert Isa.to_bytes([w])[:1] == bytes([w & 0xFF])


@pytest.mark.parametrize("fmt, field, value, message", [
    ("mem", "x_size", 1 << 16, "memory field x_size=65536 does not fit its 16 bits (range 0..65535)"),
    ("mem", "y_pad_0", 16, "memory field y_pad_0=16 does not fit its 4 bits (range 0..15)"),
    ("gemm", "iter_out", 1 << 14, "GEMM field iter_out=16384 does not fit its 14 bits (range 0..16383)"),
    ("gemm", "uop_bgn", 8192, "GEMM field uop_bgn=8192 does not fit its 13 bits"),
    ("alu", "imm", 32768, "ALU field imm=32768 does not fit its 16 bits (range -32768..32767)"),
    ("alu", "imm", -32769, "ALU field imm=-32769 does not fit"),
    ("uop", "wgt_idx", 1024, "uop field wgt_idx=1024 does not fit its 10 bits"),
    ("mem", "dram_base", -1, "memory field dram_base=-1 does not fit"),
])
def test_encode_refuses_out_of_range(fmt, field, value, message):
    with pytest.raises(IsaEncodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        getattr(ISA, fmt).encode({field: value})


def test_unknown_field_refused():
    with pytest.raises(IsaEncodeError, match="no field.s. named wgt_factor_in"):
        ISA.alu.encode(wgt_factor_in=1)


def test_layout_follows_config():
    # 2x8x8 with a 64 KiB weight buffer: LID 11, LWD 10 (64-byte weights), LAD 11
    cfg = load_config({"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3,
                       "LOG_ACC_WIDTH": 5, "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_UOP_BUFF_SIZE": 12,
                       "LOG_INP_BUFF_SIZE": 14, "LOG_WGT_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 15})
    isa = cfg.isa
    assert (isa.LUD, isa.LAD, isa.LID, isa.LWD) == (10, 9, 10, 10)
    assert [(f.name, f.lsb, f.width) for f in isa.gemm][6:] == [
        ("uop_bgn", 8, 10), ("uop_end", 18, 11), ("iter_out", 29, 14), ("iter_in", 43, 14),
        ("dst_factor_out", 64, 9), ("dst_factor_in", 73, 9), ("src_factor_out", 82, 10), ("src_factor_in", 92, 10),
        ("wgt_factor_out", 102, 10), ("wgt_factor_in", 112, 10)]
    assert [(f.name, f.lsb, f.width) for f in isa.uop] == [("dst_idx", 0, 9), ("src_idx", 9, 10),
                                                           ("wgt_idx", 19, 10)]
