"""cocotb suite: GEMM (uop loop, packed int8 multipliers, accumulator forwarding, reset, index checks)."""

import random

import cocotb
import numpy as np
import refs
from cocotb_common import CFG, reset, start, v
from cocotb_tc_common import (
    ISA,
    LANES,
    bd_write,
    count_strobes,
    pack,
    read_acc,
    read_out,
    run_insn,
    write_acc,
    write_out,
    write_uops,
)

from vta_hw.spec import Opcode
from vta_hw.spec.regmap import IndexOperand

BT, BI, BO = CFG.BATCH, CFG.BLOCK_IN, CFG.BLOCK_OUT
F0 = dict(dst_out=0, dst_in=0, src_out=0, src_in=0, wgt_out=0, wgt_in=0)


def gemm_word(n_uops, it_out, it_in, f, reset=False, bgn=0):
    return ISA.gemm.encode(opcode=Opcode.GEMM, reset_reg=int(reset), uop_bgn=bgn, uop_end=bgn + n_uops,
                           iter_out=it_out, iter_in=it_in,
                           dst_factor_out=f["dst_out"], dst_factor_in=f["dst_in"],
                           src_factor_out=f["src_out"], src_factor_in=f["src_in"],
                           wgt_factor_out=f["wgt_out"], wgt_factor_in=f["wgt_in"])


async def load_operands(dut, rng, n_inp, n_wgt, n_acc, extreme=False):
    if extreme:
        inp = rng.choice([-128, 127, -1, 0], (n_inp, BT * BI)).astype(np.int64)
        wgt = rng.choice([-128, 127, -1, 0], (n_wgt, BO * BI)).astype(np.int64)
    else:
        inp = rng.integers(-128, 128, (n_inp, BT * BI))
        wgt = rng.integers(-128, 128, (n_wgt, BO * BI))
    acc = rng.integers(-2**31, 2**31, (n_acc, LANES))
    acc[:4] = 2**31 - 7
    out = rng.integers(-128, 128, (n_acc, LANES))
    await bd_write(dut, "inp", {r: pack(inp[r], 8) for r in range(n_inp)})
    await bd_write(dut, "wgt", {r: pack(wgt[r], 8) for r in range(n_wgt)})
    await write_acc(dut, acc, range(n_acc))
    await write_out(dut, out, range(n_acc))
    return inp, wgt, acc, out


async def check(dut, acc, out, n_acc, what):
    got_acc = await read_acc(dut, range(n_acc))
    got_out = await read_out(dut, range(n_acc))
    for r in range(n_acc):
        assert np.array_equal(got_acc[r], acc[r]), f"{what}: ACC[{r}] {got_acc[r][:4]}... want {acc[r][:4]}..."
        assert np.array_equal(got_out[r], out[r]), f"{what}: OUT[{r}] {got_out[r][:4]}... want {out[r][:4]}..."


@cocotb.test()
async def random_kernels_with_hazards(dut):
    await start(dut)
    rng = np.random.default_rng(11)
    rnd = random.Random(11)
    for trial in range(6):
        await reset(dut)
        n_inp, n_wgt, n_acc = 24, 20, 40
        inp, wgt, acc, out = await load_operands(dut, rng, n_inp, n_wgt, n_acc, extreme=trial % 2 == 1)
        nu = rnd.randrange(1, 7)
        uops = [(rnd.randrange(6), rnd.randrange(6), rnd.randrange(6)) for _ in range(nu)]
        if nu > 2:
            uops[1] = (uops[0][0], uops[1][1], uops[1][2])        # back-to-back on one accumulator
        f = dict(dst_out=rnd.randrange(4), dst_in=rnd.randrange(3), src_out=rnd.randrange(4),
                 src_in=rnd.randrange(3), wgt_out=rnd.randrange(4), wgt_in=rnd.randrange(3))
        it_out, it_in = rnd.randrange(1, 4), rnd.randrange(1, 4)
        base = rnd.randrange(0, 50)
        await write_uops(dut, uops, base)
        count = [0]
        task = cocotb.start_soon(count_strobes(dut, dut.tc_gemm_uop, count))
        await run_insn(dut, gemm_word(nu, it_out, it_in, f, bgn=base))
        task.kill()
        refs.gemm(acc, out, inp, wgt, uops, it_out, it_in, f, False, BT, BI, BO)
        await check(dut, acc, out, n_acc, f"trial {trial}")
        assert count[0] == nu * it_out * it_in
        assert not v(dut.tc_error)


@cocotb.test()
async def same_accumulator_every_cycle(dut):
    """Every uop of a long kernel adds into one of two accumulators: exercises forwarding at 1 uop/cycle."""
    await start(dut)
    rng = np.random.default_rng(5)
    inp, wgt, acc, out = await load_operands(dut, rng, 8, 8, 4)
    uops = [(k % 2 if k % 5 else 0, k % 8, (3 * k) % 8) for k in range(32)]
    await write_uops(dut, uops)
    cycles = await run_insn(dut, gemm_word(len(uops), 2, 3, F0))
    refs.gemm(acc, out, inp, wgt, uops, 2, 3, F0, False, BT, BI, BO)
    await check(dut, acc, out, 4, "same accumulator")
    dut._log.info("192 GEMM uops in %d cycles", cycles)


@cocotb.test()
async def reset_zeroes_acc_and_keeps_out(dut):
    await start(dut)
    rng = np.random.default_rng(6)
    inp, wgt, acc, out = await load_operands(dut, rng, 4, 4, 16)
    uops = [(1, 0, 0), (5, 0, 0)]
    await write_uops(dut, uops)
    f = dict(F0, dst_in=1)
    count = [0]
    task = cocotb.start_soon(count_strobes(dut, dut.tc_gemm_uop, count))
    await run_insn(dut, gemm_word(2, 1, 3, f, reset=True))
    task.kill()
    refs.gemm(acc, out, inp, wgt, uops, 1, 3, f, True, BT, BI, BO)
    await check(dut, acc, out, 16, "reset")
    assert count[0] == 0, "reset GEMMs are not counted"


@cocotb.test()
async def empty_loops_do_nothing(dut):
    await start(dut)
    rng = np.random.default_rng(7)
    inp, wgt, acc, out = await load_operands(dut, rng, 4, 4, 8)
    await write_uops(dut, [(0, 0, 0), (1, 1, 1)])
    for word in (gemm_word(2, 0, 3, F0), gemm_word(2, 3, 0, F0), gemm_word(0, 1, 1, F0, bgn=1)):
        await run_insn(dut, word)
    await check(dut, acc, out, 8, "empty")


@cocotb.test()
async def index_past_depth_is_reported(dut):
    await start(dut)
    cases = [
        ((5, 0, 0), dict(F0, dst_out=CFG.ACC_BUFF_DEPTH - 5), IndexOperand.GEMM_DST, CFG.ACC_BUFF_DEPTH),
        ((0, 3, 0), dict(F0, src_out=CFG.INP_BUFF_DEPTH - 3), IndexOperand.GEMM_SRC, CFG.INP_BUFF_DEPTH),
        ((0, 0, 1), dict(F0, wgt_out=CFG.WGT_BUFF_DEPTH - 1), IndexOperand.GEMM_WGT, CFG.WGT_BUFF_DEPTH),
    ]
    for uop, f, operand, value in cases:
        await reset(dut)
        await write_uops(dut, [uop])
        await run_insn(dut, gemm_word(1, 2, 1, f))
        assert v(dut.tc_error) == 1 and v(dut.tc_error_operand) == operand and v(dut.tc_error_value) == value, \
            (operand, v(dut.tc_error_operand), v(dut.tc_error_value))
