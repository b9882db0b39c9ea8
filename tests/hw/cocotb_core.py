"""cocotb suite: the whole core (AXI4 master on cocotbext-axi's AxiRam, AXI4-Lite registers through
AxiLiteMaster, random back-pressure on every channel of both), checked against fsim.

Programs are made by the real runtime over a recording fsim device: each ``run`` is captured with
the DRAM image before and after fsim executed it; the core runs from the same image and must leave
the same bytes. Errors are decoded by the shared ``vta_runtime.mmio.Mmio`` from a register snapshot.
"""

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from cocotb_common import CFG, backpressure, start
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from sim.fsim import FsimDevice
from vta_hw.spec import Isa, MemType, Opcode
from vta_hw.spec.regmap import COUNTER_BASE, COUNTERS, FSIM_COUNTERS, OFFSET, STATE, STATE_BASE, Control, ErrorCode
from vta_runtime import DEBUG_FORCE_SERIAL, CommandQueue
from vta_runtime.errors import DeadlockError, IllegalInstructionError
from vta_runtime.mmio import Mmio
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift, unsaturated_fraction

DRAM = 8 << 20
P = float(os.environ.get("VTA_COCOTB_BACKPRESSURE", "0.3"))


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
        self.runs.append((before, insn_phys, insn_count, self.dram.data.copy(),
                          {k: s1[k] - s0[k] for k in s1}))


class Core:
    def __init__(self, dut, seed):
        self.dut = dut
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=DRAM)
        self.lite = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
        backpressure(self.ram, seed, P)
        backpressure(self.lite, seed + 1, P)

    async def run(self, insn_phys, count, max_polls=2000):
        w = self.lite.write_dword
        await w(OFFSET["INSN_ADDR"], insn_phys)
        await w(OFFSET["INSN_COUNT"], count)
        await w(OFFSET["CONTROL"], Control.START)
        for _ in range(max_polls):
            if not await self.lite.read_dword(OFFSET["CONTROL"]) & Control.BUSY:
                break
            await ClockCycles(self.dut.clk, 50)
        else:
            raise AssertionError("the core is still busy")
        return await self.snapshot()

    async def snapshot(self):
        """Every register, read over AXI4-Lite, as an Mmio over the snapshot."""
        offs = [r for r in OFFSET.values()]
        regs = {o: await self.lite.read_dword(o) for o in offs}
        return Mmio(regs.__getitem__, lambda o, v: None)


@cocotb.test()
async def runtime_programs_match_fsim(dut):
    await start(dut)
    core = Core(dut, 1)
    rec = Recorder()
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (4 * CFG.BATCH, 4 * CFG.BLOCK_IN), dtype=np.int8)
    b = rng.integers(-128, 128, (4 * CFG.BLOCK_OUT, 4 * CFG.BLOCK_IN), dtype=np.int8)
    t = GemmTiling(tile_m=2, tile_n=2, tile_k=2, vthreads=2)
    shift = informative_shift(a, b)          # outputs mostly not saturated, so the DRAM images say much
    expected = gemm_reference(a, b, shift)
    assert unsaturated_fraction(expected) >= 0.3
    small = dict(uop_staging_bytes=1 << 16)
    for q in (CommandQueue(rec, **small), CommandQueue(rec, debug_flags=DEBUG_FORCE_SERIAL, **small),
              CommandQueue(rec, max_insns=30, **small)):
        c = blocked_gemm(q, a, b, shift, t)
        assert np.array_equal(c, expected)
    assert len(rec.runs) > 4
    for k, (before, phys, count, after, counters) in enumerate(rec.runs):
        core.ram.write(0, before.tobytes())
        mmio = await core.run(phys, count)
        o = mmio.outcome()
        assert o.ok, f"run {k}: code {o.code} at {o.insn}"
        got = np.frombuffer(core.ram.read(0, DRAM), np.uint8)
        diff = np.flatnonzero(got != after)
        assert diff.size == 0, f"run {k}: {diff.size} bytes differ from fsim, first at {diff[0]:#x}"
        for name in FSIM_COUNTERS:
            assert o.counters[name] == counters[name], f"run {k}: {name} {o.counters[name]} != {counters[name]}"
        dut._log.info("run %d: %d instructions in %d cycles", k, count, o.cycles)


@cocotb.test()
async def errors_are_reported_and_the_core_recovers(dut):
    await start(dut)
    core = Core(dut, 2)
    isa = CFG.isa
    base = 0x10000

    async def run_words(words):
        core.ram.write(base, Isa.to_bytes(words))
        mmio = await core.run(base, len(words))
        return mmio, mmio.outcome(), np.array(Isa.words_from_bytes(Isa.to_bytes(words)))

    # illegal opcode: sticky error with its index
    mmio, o, words = await run_words([isa.load(MemType.INP, 0, 0, 0, 0, 0), 5, isa.finish_insn()])
    assert o.code == ErrorCode.ILLEGAL_OPCODE and o.insn == 1 and not o.done
    try:
        mmio.raise_for(o, CFG, words)
        raise AssertionError("no exception")
    except IllegalInstructionError as e:
        assert e.index == 1 and "illegal opcode 5" in str(e)
    # a deadlock is detected by the core itself
    mmio, o, words = await run_words([isa.gemm.encode(opcode=Opcode.GEMM, pop_prev_dep=1, uop_end=1, iter_out=1,
                                                      iter_in=1), isa.finish_insn()])
    assert o.code == ErrorCode.DEADLOCK and o.insn == 0
    try:
        mmio.raise_for(o, CFG, words)
        raise AssertionError("no exception")
    except DeadlockError as e:
        assert "waiting for a token on l2g" in str(e)
    # after errors the next START runs normally
    mmio, o, _ = await run_words([isa.load(MemType.INP, 0, 0, 0, 0, 0), isa.finish_insn()])
    assert o.ok and o.cycles > 0
    # ABORT stops a long run
    uops = np.zeros(1, np.uint32)
    core.ram.write(0x20000, uops.tobytes())
    long = [isa.load(MemType.UOP, 0, 0x20000 // 4, 1, 1, 1),
            isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=1000, iter_in=1000), isa.finish_insn()]
    core.ram.write(base, Isa.to_bytes(long))
    await core.lite.write_dword(OFFSET["INSN_ADDR"], base)
    await core.lite.write_dword(OFFSET["INSN_COUNT"], len(long))
    await core.lite.write_dword(OFFSET["CONTROL"], Control.START)
    await ClockCycles(dut.clk, 200)
    assert await core.lite.read_dword(OFFSET["CONTROL"]) & Control.BUSY
    await core.lite.write_dword(OFFSET["CONTROL"], Control.ABORT)
    await ClockCycles(dut.clk, 100)
    ctl = await core.lite.read_dword(OFFSET["CONTROL"])
    assert not ctl & Control.BUSY and ctl & Control.ERROR
    assert (await core.lite.read_dword(OFFSET["ERROR"])) & 0xFF == ErrorCode.ABORTED
    # the aborted run left the state registers readable: the GEMM had started, no FINISH
    state = [await core.lite.read_dword(STATE_BASE + 4 * k) for k in range(len(STATE))]
    assert state[STATE.index("retired_compute")] == 1
    assert (await core.lite.read_dword(COUNTER_BASE + 4 * COUNTERS.index("gemm_counter"))) > 0
