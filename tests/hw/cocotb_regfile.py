"""cocotb suite: the AXI4-Lite register file (every register of vta_hw.spec.regmap, byte strobes,
start/abort strobes, unmapped offsets) through cocotbext-axi's AxiLiteMaster with back-pressure."""

import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_common import backpressure, start, v
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from vta_hw.spec.regmap import OFFSET, REGISTERS

WRITABLE = ("INSN_ADDR", "INSN_COUNT")


async def count(dut, sig, box):
    while True:
        await ReadOnly()
        box[0] += v(sig)
        await RisingEdge(dut.clk)


@cocotb.test()
async def every_register(dut):
    await start(dut)
    m = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "regs_s_axi"), dut.clk, dut.rst)
    backpressure(m, 3)
    rnd = random.Random(4)
    values = {}
    for r in REGISTERS:
        if r.name not in WRITABLE:
            values[r.name] = rnd.randrange(1 << 32)
            getattr(dut, f"regs_rd_{r.name.lower()}").value = values[r.name]
    await RisingEdge(dut.clk)
    for r in REGISTERS:
        if r.name not in WRITABLE:
            assert await m.read_dword(r.offset) == values[r.name], r.name
    for name in WRITABLE:
        await m.write_dword(OFFSET[name], 0x12345678)
        assert await m.read_dword(OFFSET[name]) == 0x12345678
        assert v(getattr(dut, f"regs_{name.lower()}")) == 0x12345678
        await m.write(OFFSET[name] + 1, b"\xAB\xCD")          # bytes 1 and 2 only
        assert await m.read_dword(OFFSET[name]) == 0x12CDAB78, name
    # read-only and unmapped offsets: writes ignored, unmapped reads are zero
    await m.write_dword(OFFSET["CYCLES_LO"], 0)
    assert await m.read_dword(OFFSET["CYCLES_LO"]) == values["CYCLES_LO"]
    assert await m.read_dword(0xFFC) == 0
    await m.write_dword(0xFFC, 0xFFFFFFFF)


@cocotb.test()
async def control_strobes(dut):
    await start(dut)
    m = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "regs_s_axi"), dut.clk, dut.rst)
    starts, aborts = [0], [0]
    cocotb.start_soon(count(dut, dut.regs_start, starts))
    cocotb.start_soon(count(dut, dut.regs_abort, aborts))
    await m.write_dword(OFFSET["CONTROL"], 1)
    await m.write_dword(OFFSET["CONTROL"], 2)
    await m.write_dword(OFFSET["CONTROL"], 0)
    await m.write(OFFSET["CONTROL"] + 1, b"\x01")        # byte 1: not the START bit
    for _ in range(5):
        await RisingEdge(dut.clk)
    assert starts[0] == 1 and aborts[0] == 1, (starts, aborts)
