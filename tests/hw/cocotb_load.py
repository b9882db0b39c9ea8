"""cocotb suite: load (INP and WGT 2-D DMA with every pad combination, tokens, NOPs)."""

import itertools
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb_common import CFG, backpressure, reset, send, start, v, wait_until
from cocotbext.axi import AxiBus, AxiRam

from vta_hw.spec import MemType

ISA = CFG.isa
ELEM = {MemType.INP: CFG.INP_ELEM_BYTES, MemType.WGT: CFG.WGT_ELEM_BYTES}
PORT = {MemType.INP: "inp", MemType.WGT: "wgt"}


class SramMonitor:
    def __init__(self, dut):
        self.dut = dut
        self.mem = {MemType.INP: {}, MemType.WGT: {}}
        self.writes = {MemType.INP: 0, MemType.WGT: 0}
        self.events = []
        cocotb.start_soon(self._run())

    async def _run(self):
        d = self.dut
        while True:
            await ReadOnly()
            for mt, p in PORT.items():
                if v(getattr(d, f"load_{p}_wr_en")):
                    self.mem[mt][v(getattr(d, f"load_{p}_wr_addr"))] = v(getattr(d, f"load_{p}_wr_data"))
                    self.writes[mt] += 1
                    self.events.append("w")
            if v(d.load_l2g_push):
                self.events.append("push")
            if v(d.load_g2l_pop):
                self.events.append("pop")
            await RisingEdge(d.clk)


def expected_block(ram, mt, f):
    eb = ELEM[mt]
    rows = f["y_pad_0"] + f["y_size"] + f["y_pad_1"]
    cols = f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
    out = {}
    for r in range(rows):
        for c in range(cols):
            k = f["sram_base"] + r * cols + c
            rr, cc = r - f["y_pad_0"], c - f["x_pad_0"]
            if 0 <= rr < f["y_size"] and 0 <= cc < f["x_size"]:
                addr = (f["dram_base"] + rr * f["x_stride"] + cc) * eb
                out[k] = int.from_bytes(ram.read(addr, eb), "little")
            else:
                out[k] = 0
    return out


async def run_load(dut, mon, ram, mt, f, index, seed):
    word = ISA.load(mt, f["sram_base"], f["dram_base"], f["y_size"], f["x_size"], f["x_stride"], f["y_pad_0"],
                    f["y_pad_1"], f["x_pad_0"], f["x_pad_1"], push_next_dep=1)
    for m in mon.mem.values():
        m.clear()
    before = mon.writes[mt]
    await send(dut, "load_cmd", [word | index << 128], seed=seed)
    await wait_until(dut, lambda: v(dut.load_retired) == index + 1, 20000, "retire")
    return mon.writes[mt] - before


@cocotb.test()
async def every_pad_combination(dut):
    await start(dut)
    dut.load_halt.value = 0
    dut.load_g2l_avail.value = 0
    ram = AxiRam(AxiBus.from_prefix(dut, "load_axi"), dut.clk, dut.rst, size=1 << 22)
    backpressure(ram, 4)
    rng = np.random.default_rng(1)
    ram.write(0, rng.integers(0, 256, 1 << 22, dtype=np.uint8).tobytes())
    mon = SramMonitor(dut)
    rnd = random.Random(9)
    index = 0
    for mt in (MemType.INP, MemType.WGT):
        for present in itertools.product((0, 1), repeat=4):
            for big in (False, True):
                pads = [(15 if big else rnd.randrange(1, 4)) * p for p in present]
                x = rnd.randrange(1, 4)
                f = dict(sram_base=rnd.randrange(0, 32), y_size=rnd.randrange(0 if not big else 1, 3), x_size=x,
                         x_stride=x + rnd.randrange(0, 3), y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                         x_pad_1=pads[3])
                f["dram_base"] = rnd.randrange(1, (1 << 22) // ELEM[mt] - 64)
                want = expected_block(ram, mt, f)
                total = await run_load(dut, mon, ram, mt, f, index, index)
                index += 1
                got = mon.mem[mt]
                assert set(got) == set(want), f"{mt.name} {f}: wrote {sorted(got)[:5]}.., want {sorted(want)[:5]}.."
                bad = [k for k in want if got[k] != want[k]]
                assert not bad, f"{mt.name} {f}: wrong elements at {bad[:5]}"
                assert total == len(want)
                assert mon.events[-1] == "push", "l2g is pushed after the last SRAM write"


@cocotb.test()
async def tokens_and_nops(dut):
    await start(dut)
    dut.load_halt.value = 0
    dut.load_g2l_avail.value = 0
    AxiRam(AxiBus.from_prefix(dut, "load_axi"), dut.clk, dut.rst, size=1 << 16)
    mon = SramMonitor(dut)
    # a load that pops g2l waits for the token
    word = ISA.load(MemType.INP, 3, 16, 1, 2, 2, pop_next_dep=1, push_next_dep=1)
    cocotb.start_soon(send(dut, "load_cmd", [word]))
    await ClockCycles(dut.clk, 60)
    assert mon.writes[MemType.INP] == 0 and v(dut.load_retired) == 0 and v(dut.load_stall) == 1
    assert v(dut.load_quiet) == 1, "waiting for a token is quiet"
    dut.load_g2l_avail.value = 1
    await wait_until(dut, lambda: v(dut.load_g2l_pop), 100, "pop")
    dut.load_g2l_avail.value = 0
    await wait_until(dut, lambda: v(dut.load_retired) == 1, 2000, "retire")
    assert mon.events.count("pop") == 1 and mon.writes[MemType.INP] == 2
    # x_size = 0: only the token work, even with pads
    await reset(dut)
    mon.events.clear()
    nop = ISA.load(MemType.WGT, 0, 0, 1, 0, 0, 1, 1, 1, 1, push_next_dep=1)
    await send(dut, "load_cmd", [nop | 5 << 128])
    await wait_until(dut, lambda: v(dut.load_retired) == 6, 200, "nop")
    assert mon.events == ["push"]
