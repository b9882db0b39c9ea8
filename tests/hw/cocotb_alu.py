"""cocotb suite: the vector ALU (every opcode, immediate and register operands, program order)."""

import cocotb
import numpy as np
import refs
from cocotb_common import CFG, reset, start, v
from cocotb_tc_common import ISA, LANES, count_strobes, read_acc, read_out, run_insn, write_acc, write_uops

from vta_hw.spec import AluOp, Opcode
from vta_hw.spec.regmap import IndexOperand


def alu_word(n_uops, it_out, it_in, f, op, use_imm, imm=0, bgn=0):
    return ISA.alu.encode(opcode=Opcode.ALU, uop_bgn=bgn, uop_end=bgn + n_uops, iter_out=it_out, iter_in=it_in,
                          dst_factor_out=f["dst_out"], dst_factor_in=f["dst_in"], src_factor_out=f["src_out"],
                          src_factor_in=f["src_in"], alu_opcode=op, use_imm=int(use_imm), imm=imm)


def fz(**kw):
    return dict(dict(dst_out=0, dst_in=0, src_out=0, src_in=0, wgt_out=0, wgt_in=0), **kw)


async def check(dut, acc, out, rows, what):
    got = await read_acc(dut, rows)
    got_out = await read_out(dut, rows)
    for r in rows:
        assert np.array_equal(got[r], acc[r]), f"{what}: ACC[{r}] {got[r][:4]} want {acc[r][:4]}"
        if out is not None:
            assert np.array_equal(got_out[r], out[r]), f"{what}: OUT[{r}]"


@cocotb.test()
async def every_opcode_imm_and_reg(dut):
    await start(dut)
    rng = np.random.default_rng(21)
    n = 24
    for op in (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR):
        for use_imm in (True, False):
            await reset(dut)
            acc = rng.integers(-2**31, 2**31, (2 * n, LANES))
            acc[:3] = rng.integers(-300, 300, (3, LANES))
            if op == AluOp.SHR:
                acc[n:] = rng.integers(-40, 40, (n, LANES))      # register shift amounts, beyond +-32 too
                acc[n:n + 2] = rng.integers(-2**31, 2**31, (2, LANES))
            out = np.zeros_like(acc)
            await write_acc(dut, acc, range(2 * n))
            await write_uops(dut, [(0, n, 0)])
            imms = [-16, -5, -1, 0, 1, 7, 15] if op == AluOp.SHR else [-32768, -1, 0, 1, 32767]
            count = [0]
            task = cocotb.start_soon(count_strobes(dut, dut.tc_alu_uop, count))
            if use_imm:
                for k, imm in enumerate(imms):
                    await write_uops(dut, [(3 * k, 0, 0)])
                    f = fz(dst_in=1)
                    await run_insn(dut, alu_word(1, 1, 3, f, op, True, imm))
                    refs.alu(acc, out, [(3 * k, 0, 0)], 1, 3, f, op, True, imm)
                rows = range(3 * len(imms))
                expected = 3 * len(imms)
            else:
                f = fz(dst_in=1, src_in=1)
                await run_insn(dut, alu_word(1, 1, n, f, op, False))
                refs.alu(acc, out, [(0, n, 0)], 1, n, f, op, False, 0)
                rows = range(n)
                expected = n
            task.kill()
            out_rows = {r: out[r] for r in rows}
            await check(dut, acc, None, rows, f"{AluOp(op).name} {'imm' if use_imm else 'reg'}")
            got_out = await read_out(dut, rows)
            for r in rows:
                assert np.array_equal(got_out[r], out_rows[r]), f"{AluOp(op).name} OUT[{r}]"
            assert count[0] == expected


@cocotb.test()
async def in_place_chain_follows_program_order(dut):
    """acc[i+1] += acc[i] (register operand written by the previous uop) and repeated imm adds."""
    await start(dut)
    rng = np.random.default_rng(22)
    n = 20
    acc = rng.integers(-1000, 1000, (n, LANES))
    out = np.zeros_like(acc)
    await write_acc(dut, acc, range(n))
    await write_uops(dut, [(1, 0, 0)])
    f = fz(dst_in=1, src_in=1)
    await run_insn(dut, alu_word(1, 1, n - 1, f, AluOp.ADD, False))
    refs.alu(acc, out, [(1, 0, 0)], 1, n - 1, f, AluOp.ADD, False, 0)
    await check(dut, acc, None, range(n), "prefix sum")
    # the same destination every uop, immediate: 1 uop per cycle with forwarding
    uops = [(2, 0, 0)] * 6 + [(3, 0, 0), (2, 0, 0)]
    await write_uops(dut, uops)
    cycles = await run_insn(dut, alu_word(len(uops), 2, 2, fz(), AluOp.ADD, True, 3))
    refs.alu(acc, out, uops, 2, 2, fz(), AluOp.ADD, True, 3)
    await check(dut, acc, None, range(n), "repeated imm")
    dut._log.info("32 ALU imm uops in %d cycles", cycles)
    # register operand that is the destination of the previous uop
    uops = [(4, 5, 0), (5, 4, 0), (4, 5, 0)]
    await write_uops(dut, uops)
    await run_insn(dut, alu_word(3, 1, 2, fz(), AluOp.ADD, False))
    refs.alu(acc, out, uops, 1, 2, fz(), AluOp.ADD, False, 0)
    await check(dut, acc, None, range(n), "ping-pong")


@cocotb.test()
async def alu_index_past_depth(dut):
    await start(dut)
    await write_uops(dut, [(0, 0, 0)])
    await run_insn(dut, alu_word(1, 1, 3, fz(src_in=CFG.ACC_BUFF_DEPTH // 2), AluOp.ADD, False))
    assert v(dut.tc_error) and v(dut.tc_error_operand) == IndexOperand.ALU_SRC
    assert v(dut.tc_error_value) == CFG.ACC_BUFF_DEPTH
    await reset(dut)
    await write_uops(dut, [(1, 0, 0)])
    await run_insn(dut, alu_word(1, 2, 1, fz(dst_out=CFG.ACC_BUFF_DEPTH - 1), AluOp.MAX, True, 0))
    assert v(dut.tc_error) and v(dut.tc_error_operand) == IndexOperand.ALU_DST
    assert v(dut.tc_error_value) == CFG.ACC_BUFF_DEPTH
