"""Driving the tensor-compute unit (GEMM/ALU uop loop) through its SRAM backdoor."""

from __future__ import annotations

import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_common import CFG, v, wait_until
from unit_top import BACKDOOR

from vta_hw.sram import READ_LATENCY

LANES = CFG.BATCH * CFG.BLOCK_OUT
ISA = CFG.isa


def pack(values, bits: int) -> int:
    word = 0
    mask = (1 << bits) - 1
    for k, x in enumerate(values):
        word |= (int(x) & mask) << (k * bits)
    return word


def unpack(word: int, n: int, bits: int) -> np.ndarray:
    mask = (1 << bits) - 1
    vals = [(word >> (k * bits)) & mask for k in range(n)]
    return np.array([x - (1 << bits) if x >> (bits - 1) else x for x in vals], dtype=np.int64)


async def bd_write(dut, mem: str, rows: dict):
    dut.tc_bd_active.value = 1
    dut.tc_bd_mem.value = BACKDOOR[mem]
    for addr, word in rows.items():
        dut.tc_bd_addr.value = addr
        dut.tc_bd_wdata.value = word
        dut.tc_bd_we.value = 1
        await RisingEdge(dut.clk)
    dut.tc_bd_we.value = 0
    dut.tc_bd_active.value = 0


async def bd_read(dut, mem: str, addrs) -> dict:
    out = {}
    dut.tc_bd_active.value = 1
    dut.tc_bd_we.value = 0
    dut.tc_bd_mem.value = BACKDOOR[mem]
    for addr in addrs:
        dut.tc_bd_addr.value = addr
        for _ in range(READ_LATENCY):
            await RisingEdge(dut.clk)
        await ReadOnly()
        out[addr] = v(dut.tc_bd_rdata)
        await RisingEdge(dut.clk)
    dut.tc_bd_active.value = 0
    return out


async def write_acc(dut, acc: np.ndarray, rows):
    await bd_write(dut, "acc", {r: pack(acc[r], 32) for r in rows})


async def write_out(dut, out: np.ndarray, rows):
    await bd_write(dut, "out", {r: pack(out[r], 8) for r in rows})


async def read_acc(dut, rows) -> dict:
    raw = await bd_read(dut, "acc", rows)
    return {r: unpack(w, LANES, 32) for r, w in raw.items()}


async def read_out(dut, rows) -> dict:
    raw = await bd_read(dut, "out", rows)
    return {r: unpack(w, LANES, 8) for r, w in raw.items()}


async def write_uops(dut, uops, base: int = 0):
    await bd_write(dut, "uop", {base + k: ISA.uop.encode(dst_idx=d, src_idx=s, wgt_idx=w)
                                for k, (d, s, w) in enumerate(uops)})


async def run_insn(dut, word: int, limit: int = 200_000) -> int:
    """Start one GEMM/ALU instruction and wait until the unit is idle; returns the cycles taken."""
    dut.tc_halt.value = 0
    dut.tc_insn.value = word
    dut.tc_start.value = 1
    await RisingEdge(dut.clk)
    dut.tc_start.value = 0
    cycles = 0
    for cycles in range(1, limit):
        await ReadOnly()
        if not v(dut.tc_busy):
            await RisingEdge(dut.clk)
            return cycles
        await RisingEdge(dut.clk)
    raise AssertionError("the uop loop did not finish")


async def count_strobes(dut, sig, box):
    while True:
        await ReadOnly()
        if v(sig):
            box[0] += 1
        await RisingEdge(dut.clk)


__all__ = ["pack", "unpack", "bd_write", "bd_read", "write_acc", "write_out", "read_acc", "read_out",
           "write_uops", "run_insn", "count_strobes", "wait_until", "LANES", "ISA"]
