"""cocotb suite: the ISA extensions' hardware (a config with alu_mul and acc_8bit, VTA_CONFIG):
MUL in the tensor-compute unit (every operand form, forwarding between back-to-back uops, its
throughput), and the ACC_8BIT loader (sign extension, every pad combination, random AXI back-pressure)."""

import itertools
import random

import cocotb
import numpy as np
import refs
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_alu import alu_word, check, fz
from cocotb_common import CFG, backpressure, reset, start, v
from cocotb_tc_common import ISA, LANES, count_strobes, run_insn, write_acc, write_uops
from cocotbext.axi import AxiBus, AxiRam

from vta_hw.spec import AluOp, MemType

assert CFG.isa.has("alu_mul") and CFG.isa.has("acc_8bit"), "run with VTA_CONFIG naming a config with both extensions"


def operands(rng, n):
    """int32 rows whose low halves cover int16 (extremes included) under random high halves."""
    acc = rng.integers(-2**31, 2**31, (n, LANES))
    acc[0, :4] = [0x7FFF, -0x8000, 0x12348000, -1]
    acc[1] = rng.integers(-300, 300, LANES)
    return acc


@cocotb.test()
async def mul_immediate_and_register(dut):
    await start(dut)
    rng = np.random.default_rng(41)
    n = 16
    for use_imm in (True, False):
        await reset(dut)
        acc = operands(rng, 2 * n)
        out = np.zeros_like(acc)
        await write_acc(dut, acc, range(2 * n))
        count = [0]
        task = cocotb.start_soon(count_strobes(dut, dut.tc_alu_uop, count))
        if use_imm:
            imms = [-32768, -1, 0, 1, 3, 32767]
            for k, imm in enumerate(imms):
                await write_uops(dut, [(2 * k, 0, 0)])
                f = fz(dst_in=1)
                await run_insn(dut, alu_word(1, 1, 2, f, AluOp.MUL, True, imm))
                refs.alu(acc, out, [(2 * k, 0, 0)], 1, 2, f, AluOp.MUL, True, imm)
            rows, expected = range(2 * len(imms)), 2 * len(imms)
        else:
            await write_uops(dut, [(0, n, 0)])
            f = fz(dst_in=1, src_in=1)
            await run_insn(dut, alu_word(1, 1, n, f, AluOp.MUL, False))
            refs.alu(acc, out, [(0, n, 0)], 1, n, f, AluOp.MUL, False, 0)
            rows, expected = range(n), n
        task.kill()
        await check(dut, acc, out, rows, f"MUL {'imm' if use_imm else 'reg'}")
        assert count[0] == expected
        assert len({int(x) for r in rows for x in acc[r]}) > len(rows)     # informative values


@cocotb.test()
async def mul_forwarding_follows_program_order(dut):
    """Each uop reads what the one before wrote: a chain, one destination over and over, a ping-pong."""
    await start(dut)
    rng = np.random.default_rng(42)
    n = 20
    acc = rng.integers(-200, 200, (n, LANES))
    acc[6] = rng.integers(-2**31, 2**31, LANES)
    out = np.zeros_like(acc)
    await write_acc(dut, acc, range(n))
    await write_uops(dut, [(1, 0, 0)])
    f = fz(dst_in=1, src_in=1)
    await run_insn(dut, alu_word(1, 1, 5, f, AluOp.MUL, False))          # acc[i+1] *= acc[i], i < 5
    refs.alu(acc, out, [(1, 0, 0)], 1, 5, f, AluOp.MUL, False, 0)
    await check(dut, acc, None, range(n), "chain")
    uops = [(7, 0, 0)] * 5 + [(8, 0, 0), (7, 0, 0)]                      # one row, back to back (imm)
    await write_uops(dut, uops)
    await run_insn(dut, alu_word(len(uops), 1, 2, fz(), AluOp.MUL, True, -3))
    refs.alu(acc, out, uops, 1, 2, fz(), AluOp.MUL, True, -3)
    await check(dut, acc, None, range(n), "repeated imm")
    uops = [(10, 11, 0), (11, 10, 0), (10, 11, 0), (12, 10, 0)]            # register ping-pong
    await write_uops(dut, uops)
    await run_insn(dut, alu_word(len(uops), 1, 2, fz(), AluOp.MUL, False))
    refs.alu(acc, out, uops, 1, 2, fz(), AluOp.MUL, False, 0)
    await check(dut, acc, None, range(n), "ping-pong")
    # a MUL chain then other opcodes on the same rows: the next instruction sees the last product
    await write_uops(dut, [(7, 0, 0)])
    await run_insn(dut, alu_word(1, 1, 1, fz(), AluOp.ADD, True, 5))
    refs.alu(acc, out, [(7, 0, 0)], 1, 1, fz(), AluOp.ADD, True, 5)
    await check(dut, acc, None, range(n), "after MUL")
    assert len({int(acc[r, 0]) for r in range(n)}) > n // 2


@cocotb.test()
async def mul_keeps_the_alu_throughput(dut):
    """Independent uops: MUL takes one cycle more per instruction than ADD (its write comes from the
    DSP's output register, a stage after E's), not per uop. A uop that reads what the one just before
    wrote waits one cycle."""
    await start(dut)
    await write_uops(dut, [(k, 40 + k, 0) for k in range(8)])
    cycles = {}
    for op in (AluOp.ADD, AluOp.MUL):
        for use_imm in (True, False):
            cycles[op, use_imm] = await run_insn(dut, alu_word(8, 2, 3, fz(dst_in=8, src_in=8), op, use_imm, 3))
    dut._log.info("48 ALU uops: %s cycles", cycles)
    for use_imm in (True, False):
        assert cycles[AluOp.MUL, use_imm] == cycles[AluOp.ADD, use_imm] + 1
    assert cycles[AluOp.ADD, False] - cycles[AluOp.ADD, True] == 48     # two slots per register uop
    # dependent neighbours: 12 uops on one row (imm), and register uops reading the row just written
    await write_uops(dut, [(3, 0, 0)])
    same_row = {op: await run_insn(dut, alu_word(1, 1, 12, fz(), op, True, 1)) for op in (AluOp.ADD, AluOp.MUL)}
    assert same_row[AluOp.MUL] == same_row[AluOp.ADD] + 1 + 11           # each uop after the first waits
    await write_uops(dut, [(1, 0, 0)])
    chain = {op: await run_insn(dut, alu_word(1, 1, 6, fz(dst_in=1, src_in=1), op, False)) for op in
             (AluOp.ADD, AluOp.MUL)}
    assert chain[AluOp.MUL] == chain[AluOp.ADD] + 1 + 5                  # src(i+1) = dst(i): waits too


# ---------------------------------------------------------------- the ACC_8BIT loader
ELEM = CFG.OUT_ELEM_BYTES   # a DRAM element: one int8 per lane


class SramMonitor:
    def __init__(self, dut):
        self.dut = dut
        self.mem = {}
        self.writes = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        d = self.dut
        while True:
            await ReadOnly()
            if v(d.acc8_sram_en):
                self.mem[v(d.acc8_sram_addr)] = v(d.acc8_sram_data)
                self.writes += 1
            await RisingEdge(d.clk)


def widened(raw: bytes) -> int:
    """An ACC element from ELEM int8 values, each sign-extended to 32 bits (numpy: a reference of its own)."""
    lanes = np.frombuffer(raw, np.int8).astype(np.int32)
    return int.from_bytes(lanes.astype("<i4").tobytes(), "little")


def expected_block(ram, f):
    rows = f["y_pad_0"] + f["y_size"] + f["y_pad_1"]
    cols = f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
    out = {}
    for r in range(rows):
        for c in range(cols):
            rr, cc = r - f["y_pad_0"], c - f["x_pad_0"]
            inside = 0 <= rr < f["y_size"] and 0 <= cc < f["x_size"]
            addr = (f["dram_base"] + rr * f["x_stride"] + cc) * ELEM
            out[f["sram_base"] + r * cols + c] = widened(ram.read(addr, ELEM)) if inside else 0
    return out


async def run_load(dut, f):
    dut.acc8_insn.value = ISA.load(MemType.ACC_8BIT, **f)
    dut.acc8_start.value = 1
    await RisingEdge(dut.clk)
    dut.acc8_start.value = 0
    for _ in range(20000):
        await ReadOnly()
        if not v(dut.acc8_busy):
            await RisingEdge(dut.clk)
            return
        await RisingEdge(dut.clk)
    raise AssertionError("the ACC_8BIT load did not finish")


@cocotb.test()
async def acc8_every_pad_combination(dut):
    await start(dut)
    dut.acc8_halt.value = 0
    ram = AxiRam(AxiBus.from_prefix(dut, "acc8_axi"), dut.clk, dut.rst, size=1 << 20)
    backpressure(ram, 8)
    rng = np.random.default_rng(43)
    ram.write(0, rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    mon = SramMonitor(dut)
    rnd = random.Random(44)
    for present in itertools.product((0, 1), repeat=4):
        for big in (False, True):
            pads = [(15 if big else rnd.randrange(1, 4)) * p for p in present]
            x = rnd.randrange(1, 5)
            f = dict(sram_base=rnd.randrange(0, 32), dram_base=rnd.randrange(1, (1 << 20) // ELEM - 64),
                     y_size=rnd.randrange(1, 3), x_size=x, x_stride=x + rnd.randrange(0, 3), y_pad_0=pads[0],
                     y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3])
            want = expected_block(ram, f)
            mon.mem.clear()
            before = mon.writes
            await run_load(dut, f)
            assert mon.mem.keys() == want.keys(), f"{f}: wrote {sorted(mon.mem)[:5]}.., want {sorted(want)[:5]}.."
            bad = [k for k in want if mon.mem[k] != want[k]]
            assert not bad, f"{f}: wrong elements at {bad[:5]}"
            assert mon.writes - before == len(want)
            assert not v(dut.acc8_error)
    # negative control for the reference: a plain copy of the bytes is not what the loader writes
    raw = ram.read(f["dram_base"] * ELEM, ELEM)
    assert widened(raw) != int.from_bytes(raw, "little")
