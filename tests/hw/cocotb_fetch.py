"""cocotb suite: fetch (instruction DMA, decode checks, dispatch to the three command queues)."""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb_common import CFG, StreamSink, backpressure, reset, start, v, wait_until
from cocotbext.axi import AxiBus, AxiRam
from programs import illegal_cases, random_legal

from vta_hw.spec import Isa, Stage

ISA = CFG.isa
BASE = 0x1000


def setup_ram(dut, seed):
    ram = AxiRam(AxiBus.from_prefix(dut, "fetch_axi"), dut.clk, dut.rst, size=1 << 20)
    backpressure(ram, seed)
    return ram


async def launch(dut, count, addr=BASE):
    dut.fetch_halt.value = 0
    dut.fetch_insn_addr.value = addr
    dut.fetch_insn_count.value = count
    dut.fetch_start.value = 1
    await RisingEdge(dut.clk)
    dut.fetch_start.value = 0


@cocotb.test()
async def dispatch_in_order_under_backpressure(dut):
    await start(dut)
    ram = setup_ram(dut, 1)
    rnd = random.Random(7)
    for trial, n in enumerate((1, 7, 40, 150)):
        await reset(dut)
        words, stages = [], []
        for _ in range(n - 1):
            w, st = random_legal(ISA, CFG, rnd)
            words.append(w)
            stages.append(st)
        words.append(ISA.finish_insn())
        stages.append(Stage.COMPUTE)
        addr = BASE + 0x800 * trial + 16 * rnd.randrange(40)   # any 16-byte aligned start, across 4 KiB
        ram.write(addr, Isa.to_bytes(words))
        sinks = {st: StreamSink(dut, f"fetch_{q}_q", seed=trial * 3 + k, p_ready=0.5)
                 for k, (st, q) in enumerate(((Stage.LOAD, "load"), (Stage.COMPUTE, "compute"),
                                              (Stage.STORE, "store")))}
        await launch(dut, n, addr)
        await wait_until(dut, lambda: v(dut.fetch_all_dispatched) and v(dut.fetch_quiet), 20000, "dispatch")
        await ClockCycles(dut.clk, 5)
        for st, sink in sinks.items():
            sink.task.kill()
            want = [w | i << 128 for i, (w, s) in enumerate(zip(words, stages)) if s == st]
            assert sink.items == want, f"{st.name}: got {len(sink.items)} commands, want {len(want)}"
        assert v(dut.fetch_dispatched) == n and v(dut.fetch_saw_finish) == 1 and v(dut.fetch_error) == 0


@cocotb.test()
async def illegal_instructions_stop_fetch(dut):
    await start(dut)
    ram = setup_ram(dut, 2)
    rnd = random.Random(3)
    for k, (name, bad, code, info) in enumerate(illegal_cases(ISA, CFG)):
        await reset(dut)
        words = [random_legal(ISA, CFG, rnd)[0], random_legal(ISA, CFG, rnd)[0], bad,
                 random_legal(ISA, CFG, rnd)[0], ISA.finish_insn()]
        ram.write(BASE, Isa.to_bytes(words))
        sinks = [StreamSink(dut, f"fetch_{q}_q", seed=k) for q in ("load", "compute", "store")]
        await launch(dut, len(words))
        await wait_until(dut, lambda: v(dut.fetch_error) and v(dut.fetch_quiet), 5000, name)
        for s in sinks:
            s.task.kill()
        assert v(dut.fetch_error_code) == code, (name, v(dut.fetch_error_code))
        assert v(dut.fetch_error_index) == 2, name
        if info is not None:
            assert v(dut.fetch_error_info) == info, (name, v(dut.fetch_error_info), info)
        assert v(dut.fetch_dispatched) == 2 and sum(len(s.items) for s in sinks) == 2, name


@cocotb.test()
async def nothing_after_finish_is_dispatched(dut):
    await start(dut)
    ram = setup_ram(dut, 3)
    words = [ISA.load(0, 0, 0, 0, 0, 0), ISA.finish_insn(), ISA.load(2, 0, 0, 0, 0, 0), ISA.store(0, 0, 0, 0, 0)]
    ram.write(BASE, Isa.to_bytes(words))
    sinks = [StreamSink(dut, f"fetch_{q}_q", seed=5) for q in ("load", "compute", "store")]
    await launch(dut, len(words))
    await wait_until(dut, lambda: v(dut.fetch_quiet) and v(dut.fetch_saw_finish), 2000, "finish")
    await ClockCycles(dut.clk, 20)
    assert v(dut.fetch_dispatched) == 2 and v(dut.fetch_all_dispatched) == 0
    assert sum(len(s.items) for s in sinks) == 2
