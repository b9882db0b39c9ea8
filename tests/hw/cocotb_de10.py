"""cocotb: the DE10-Nano fabric (``boards.cyclonev.De10Fabric``: the core, the register bridge on
the lightweight HPS-to-FPGA bridge's port, the ACP window onto the FPGA-to-HPS bridge's port), that
is the whole top but the hard block, against fsim (through ``bridge_top.De10FabricTop``, which
gives the AXI3 ports the 8-bit AxLEN cocotbext-axi expects).

The HPS side is cocotbext-axi with random back-pressure: an AXI3 32-bit master on the lightweight
port (the Cortex-A9's register accesses, at the config's register window inside the bridge's 2 MiB
window) and a RAM on the FPGA-to-HPS port. A monitor records every burst on that port and the
tests check the port's rules: addresses inside the ACP window, no burst across 4 KiB, at most 16
beats, full-width INCR beats, AxUSER = 1 (shared), AxCACHE/AxPROT from the config, WID = AWID.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb_common import backpressure, start, v
from cocotbext.axi import AxiBus, AxiMaster, AxiRam

from boards.cyclonev import ACP_WINDOW_BASE, LW_BRIDGE_BASE
from sim.fsim import FsimDevice
from vta_hw.core import VtaCore
from vta_hw.spec import load_config
from vta_hw.spec.regmap import FSIM_COUNTERS, OFFSET, Control
from vta_runtime import CommandQueue
from vta_runtime.mmio import Mmio
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift, unsaturated_fraction

CFG = load_config(json.loads(os.environ["DE10_CONFIG"]))
DRAM = 4 << 20
REGS = CFG.fetch_base_addr - LW_BRIDGE_BASE      # the register file's offset in the lightweight window


class Recorder(FsimDevice):
    """fsim that records every run with the DRAM image before and after it."""

    def __init__(self):
        super().__init__(CFG, dram_bytes=DRAM)
        self.runs = []

    def run(self, insn_phys, insn_count, timeout=None):
        before = self.dram.data.copy()
        s0 = self.stats()
        super().run(insn_phys, insn_count, timeout)
        s1 = self.stats()
        self.runs.append((before, insn_phys, insn_count, self.dram.data.copy(), {k: s1[k] - s0[k] for k in s1}))


class Hps:
    """The HPS's two bridges as cocotbext-axi models, and a monitor of the FPGA-to-HPS port."""

    def __init__(self, dut, seed):
        self.dut = dut
        dut.lw__wid.value = 0
        self.lw = AxiMaster(AxiBus.from_prefix(dut, "lw_"), dut.clk, dut.rst, max_burst_len=16)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "f2h_"), dut.clk, dut.rst, size=DRAM)
        backpressure(self.lw, seed, 0.3)
        backpressure(self.ram, seed + 1, 0.3)
        self.bursts = {"aw": [], "ar": []}
        self.wids = []
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        d = self.dut
        fields = ("addr", "len", "size", "burst", "user", "cache", "prot", "id")
        while True:
            await ReadOnly()
            for ch in ("aw", "ar"):
                if v(getattr(d, f"f2h__{ch}valid")) and v(getattr(d, f"f2h__{ch}ready")):
                    burst = {f: v(getattr(d, f"f2h__{ch}{f}")) for f in fields}
                    burst["lock"] = v(getattr(d, f"f2h_{ch}lock"))      # both AXI3 bits
                    self.bursts[ch].append(burst)
            if v(d.f2h__wvalid) and v(d.f2h__wready):
                self.wids.append(v(d.f2h_wid))
            await RisingEdge(d.clk)

    async def reg_write(self, name, value):
        await self.lw.write_dword(REGS + OFFSET[name], value)

    async def reg_read(self, name):
        return await self.lw.read_dword(REGS + OFFSET[name])

    async def run(self, insn_phys, count, max_polls=4000):
        await self.reg_write("INSN_ADDR", insn_phys)
        await self.reg_write("INSN_COUNT", count)
        await self.reg_write("CONTROL", Control.START)
        for _ in range(max_polls):
            if not await self.reg_read("CONTROL") & Control.BUSY:
                break
            await ClockCycles(self.dut.clk, 50)
        else:
            raise AssertionError("the core is still busy")
        regs = {o: await self.lw.read_dword(REGS + o) for o in OFFSET.values()}
        return Mmio(regs.__getitem__, lambda o, val: None)


def check_port_rules(hps: Hps) -> None:
    beat = CFG.AXI_DATA_BYTES
    for ch, bursts in hps.bursts.items():
        assert bursts, f"no {ch} bursts seen"
        for b in bursts:
            what = f"{ch} burst {b}"
            assert ACP_WINDOW_BASE <= b["addr"] < ACP_WINDOW_BASE + DRAM, what      # through the ACP window
            assert b["len"] <= 15 and b["size"] == beat.bit_length() - 1 and b["burst"] == 1, what
            assert (b["addr"] % 4096) + (b["len"] + 1) * beat <= 4096, what          # never across 4 KiB
            assert b["addr"] % beat == 0 and b["lock"] == 0, what
            assert (b["user"], b["cache"], b["prot"]) == (1, int(CFG.axi_cache_bits, 2), int(CFG.axi_prot_bits, 2))
        assert max(b["len"] for b in bursts) == 15 or ch == "aw", f"no 16-beat {ch} burst was exercised"
    assert {b["id"] for b in hps.bursts["aw"]} == {VtaCore.write_id} and set(hps.wids) == {VtaCore.write_id}
    assert len(hps.wids) == sum(b["len"] + 1 for b in hps.bursts["aw"])


@cocotb.test()
async def runtime_programs_through_the_hps_ports(dut):
    await start(dut)
    hps = Hps(dut, 5)
    assert await hps.reg_read("ID") == 0x56544102
    # the register file answers at the config's window, offset 0x20000 in the bridge's 2 MiB
    await hps.reg_write("INSN_ADDR", 0x1234_5000)
    assert await hps.reg_read("INSN_ADDR") == 0x1234_5000
    rec = Recorder()
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (4 * CFG.BATCH, 8 * CFG.BLOCK_IN), dtype=np.int8)
    b = rng.integers(-128, 128, (4 * CFG.BLOCK_OUT, 8 * CFG.BLOCK_IN), dtype=np.int8)
    shift = informative_shift(a, b)
    expected = gemm_reference(a, b, shift)
    assert unsaturated_fraction(expected) >= 0.3
    c = blocked_gemm(CommandQueue(rec, uop_staging_bytes=1 << 14), a, b, shift,
                     GemmTiling(tile_m=2, tile_n=2, tile_k=8, vthreads=2))
    assert np.array_equal(c, expected)
    assert len(rec.runs) >= 1
    for k, (before, phys, count, after, counters) in enumerate(rec.runs):
        hps.ram.write(0, before.tobytes())
        o = (await hps.run(phys, count)).outcome()
        assert o.ok, f"run {k}: code {o.code} at {o.insn}"
        got = np.frombuffer(hps.ram.read(0, DRAM), np.uint8)
        diff = np.flatnonzero(got != after)
        assert diff.size == 0, f"run {k}: {diff.size} bytes differ from fsim, first at {diff[0]:#x}"
        for name in FSIM_COUNTERS:
            assert o.counters[name] == counters[name], f"run {k}: {name} {o.counters[name]} != {counters[name]}"
    check_port_rules(hps)
    assert v(dut.irq) == 1          # a finished run's DONE raises the interrupt to the HPS
