"""Helpers shared by the cocotb suites: clock/reset, random back-pressure, stream drivers."""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from vta_hw.spec import load_config

CFG = load_config()


def v(sig) -> int:
    """Unsigned integer value of a signal."""
    val = sig.value
    return val.to_unsigned() if hasattr(val, "to_unsigned") else int(val)


async def start(dut, reset_cycles: int = 5):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, reset_cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def reset(dut, cycles: int = 3):
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def pauses(seed: int, p: float = 0.3):
    """An endless random pause pattern (True = stall this cycle)."""
    rnd = random.Random(seed)
    while True:
        yield rnd.random() < p


def backpressure(model, seed: int, p: float = 0.3) -> None:
    """Random stalls on every channel of a cocotbext-axi RAM/master (AXI4 or AXI4-Lite)."""
    k = 0
    for side in ("write_if", "read_if"):
        iface = getattr(model, side, None)
        if iface is None:
            continue
        for ch in ("aw_channel", "w_channel", "b_channel", "ar_channel", "r_channel"):
            c = getattr(iface, ch, None)
            if c is not None:
                c.set_pause_generator(pauses(seed * 31 + k, p))
                k += 1


async def wait_until(dut, cond, limit: int = 100_000, what: str = "condition"):
    """Wait (from just after a clock edge) until ``cond()`` holds in a settled cycle; returns after
    the following edge."""
    for _ in range(limit):
        await ReadOnly()
        ok = cond()
        await RisingEdge(dut.clk)
        if ok:
            return
    raise AssertionError(f"timed out after {limit} cycles waiting for {what}")


class StreamSink:
    """Collects the payloads of a valid/ready stream, with a random ready."""

    def __init__(self, dut, prefix: str, seed: int = 0, p_ready: float = 0.7):
        self.dut = dut
        self.valid = getattr(dut, f"{prefix}_valid")
        self.ready = getattr(dut, f"{prefix}_ready")
        self.payload = getattr(dut, f"{prefix}_payload")
        self.items: list[int] = []
        self.rnd = random.Random(seed)
        self.p = p_ready
        self.task = cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            r = int(self.rnd.random() < self.p)
            self.ready.value = r
            await ReadOnly()
            if r and v(self.valid):
                self.items.append(v(self.payload))
            await RisingEdge(self.dut.clk)


async def send(dut, prefix: str, payloads, seed: int = 0, p_valid: float = 0.8):
    """Drive a valid/ready stream with the given payloads (random gaps). Call just after an edge."""
    rnd = random.Random(seed)
    valid = getattr(dut, f"{prefix}_valid")
    ready = getattr(dut, f"{prefix}_ready")
    payload = getattr(dut, f"{prefix}_payload")
    for item in payloads:
        while rnd.random() > p_valid:
            valid.value = 0
            await RisingEdge(dut.clk)
        valid.value = 1
        payload.value = item
        while True:
            await ReadOnly()
            fired = v(ready)
            await RisingEdge(dut.clk)
            if fired:
                break
        valid.value = 0
