"""cocotb: the PS-side AXI to AXI-Lite bridge against an AXI-Lite RAM, random back-pressure.

Checks single and burst writes/reads (INCR), narrow 32-bit accesses on a 128-bit bus, byte
strobes, ID echo, and that a burst reaches consecutive registers."""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb_common import pauses
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteRam, AxiMaster

DATA_BITS = int(os.environ["BRIDGE_DATA_BITS"])
MAX_BURST = int(os.environ["BRIDGE_MAX_BURST"])


async def setup(dut, seed):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    if hasattr(dut, "axi__wid"):
        dut.axi__wid.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    master = AxiMaster(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, max_burst_len=MAX_BURST)
    ram = AxiLiteRam(AxiLiteBus.from_prefix(dut, "lite_"), dut.clk, dut.rst, size=4096)
    for k, gen in enumerate((master.write_if.aw_channel, master.write_if.w_channel, master.read_if.ar_channel)):
        gen.set_pause_generator(pauses(seed + k))
    for k, ch in enumerate((master.write_if.b_channel, master.read_if.r_channel)):
        ch.set_pause_generator(pauses(seed + 10 + k))
    for k, ch in enumerate((ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                            ram.read_if.ar_channel, ram.read_if.r_channel)):
        ch.set_pause_generator(pauses(seed + 20 + k))
    return master, ram


@cocotb.test()
async def single_words(dut):
    master, ram = await setup(dut, 1)
    rnd = random.Random(1)
    model = bytearray(4096)
    for _ in range(60):
        addr = rnd.randrange(0, 4096, 4)
        word = rnd.getrandbits(32).to_bytes(4, "little")
        await master.write(addr, word)
        model[addr:addr + 4] = word
        got = await master.read(rnd.randrange(0, 4096, 4) if rnd.random() < 0.5 else addr, 4)
        assert got.data == bytes(model[got.address:got.address + 4]), (hex(got.address), got.data)
    assert ram.read(0, 4096) == bytes(model)


@cocotb.test()
async def bursts_and_strobes(dut):
    master, ram = await setup(dut, 2)
    rnd = random.Random(2)
    model = bytearray(4096)
    for _ in range(25):
        n = 4 * rnd.randrange(1, 2 * MAX_BURST)            # may be split by the master into several bursts
        addr = rnd.randrange(0, 4096 - n, 4)
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        await master.write(addr, data)
        model[addr:addr + n] = data
        got = await master.read(addr, n)
        assert got.data == bytes(model[addr:addr + n])
    if DATA_BITS > 32:   # narrow 32-bit beats on a wide bus, as a CPU's word accesses arrive
        for _ in range(10):
            n = 4 * rnd.randrange(1, 12)
            addr = rnd.randrange(0, 4096 - n, 4)
            data = bytes(rnd.getrandbits(8) for _ in range(n))
            await master.write(addr, data, size=2)
            model[addr:addr + n] = data
            assert (await master.read(addr, n, size=2)).data == bytes(model[addr:addr + n])
    # byte strobes: a 1-byte write touches one byte
    await master.write(0x101, b"\xab")
    model[0x101] = 0xAB
    assert (await master.read(0x100, 4)).data == bytes(model[0x100:0x104])
    assert ram.read(0, 4096) == bytes(model)


@cocotb.test()
async def ids_are_echoed(dut):
    master, ram = await setup(dut, 3)
    for tid in (0, 1, 5, (1 << len(dut.axi__awid)) - 1):
        w = await master.write(0x40, tid.to_bytes(4, "little"), awid=tid)
        assert w.resp == 0
        r = await master.read(0x40, 4, arid=tid)
        assert r.data == tid.to_bytes(4, "little")
