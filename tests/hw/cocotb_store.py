"""cocotb suite: store (OUT SRAM -> DRAM rows, strides, tokens, back-pressure)."""

import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb_common import CFG, backpressure, reset, send, start, v, wait_until
from cocotbext.axi import AxiBus, AxiRam

ISA = CFG.isa
EB = CFG.OUT_ELEM_BYTES


async def fill_out(dut, rows: dict):
    for addr, data in rows.items():
        dut.store_bd_addr.value = addr
        dut.store_bd_data.value = int.from_bytes(data, "little")
        dut.store_bd_en.value = 1
        await RisingEdge(dut.clk)
    dut.store_bd_en.value = 0


async def count(dut, sig, box):
    while True:
        await ReadOnly()
        if v(sig):
            box[0] += 1
        await RisingEdge(dut.clk)


@cocotb.test()
async def strided_rows_under_backpressure(dut):
    await start(dut)
    dut.store_halt.value = 0
    dut.store_g2s_avail.value = 0
    size = 1 << 20
    ram = AxiRam(AxiBus.from_prefix(dut, "store_axi"), dut.clk, dut.rst, size=size)
    backpressure(ram, 8)
    rng = np.random.default_rng(3)
    rnd = random.Random(3)
    out = {k: rng.integers(0, 256, EB, dtype=np.uint8).tobytes() for k in range(512)}
    await fill_out(dut, out)
    pattern = bytes([0xA5]) * size
    pushes = [0]
    elems = [0]
    cocotb.start_soon(count(dut, dut.store_s2g_push, pushes))
    cocotb.start_soon(count(dut, dut.store_out_elem, elems))
    for index in range(12):
        ram.write(0, pattern)
        x = rnd.choice([1, 2, 3, 17, 300]) if index < 10 else 600     # 300 elements cross 4 KiB and 256 beats
        y = rnd.randrange(1, 4)
        stride = x + rnd.randrange(0, 4)
        base = rnd.randrange(0, 512 - x * y + 1) if x * y <= 512 else 0
        y = y if x * y <= 512 else 1
        x = min(x, 512)
        dram = rnd.randrange(1, (size // EB) - stride * y - 1)
        e0 = elems[0]
        await send(dut, "store_cmd", [ISA.store(base, dram, y, x, stride, push_prev_dep=1) | index << 128],
                   seed=index)
        await wait_until(dut, lambda index=index: v(dut.store_retired) == index + 1, 50000, "store")
        want = bytearray(pattern)
        for r in range(y):
            for c in range(x):
                a = (dram + r * stride + c) * EB
                want[a:a + EB] = out[base + r * x + c]
        got = ram.read(0, size)
        assert got == bytes(want), f"store {index} (x={x}, y={y}, stride={stride}) wrote the wrong bytes"
        assert pushes[0] == index + 1 and elems[0] - e0 == x * y


@cocotb.test()
async def waits_for_its_token_and_nop(dut):
    await start(dut)
    dut.store_halt.value = 0
    dut.store_g2s_avail.value = 0
    ram = AxiRam(AxiBus.from_prefix(dut, "store_axi"), dut.clk, dut.rst, size=1 << 16)
    await fill_out(dut, {0: bytes(range(EB))})
    cocotb.start_soon(send(dut, "store_cmd", [ISA.store(0, 4, 1, 1, 1, pop_prev_dep=1)]))
    await ClockCycles(dut.clk, 50)
    assert v(dut.store_retired) == 0 and v(dut.store_stall) and v(dut.store_quiet)
    assert ram.read(4 * EB, EB) == bytes(EB)
    dut.store_g2s_avail.value = 1
    await wait_until(dut, lambda: v(dut.store_g2s_pop), 100, "pop")
    dut.store_g2s_avail.value = 0
    await wait_until(dut, lambda: v(dut.store_retired) == 1, 2000, "retire")
    assert ram.read(4 * EB, EB) == bytes(range(EB))
    await reset(dut)
    for mt in range(5):   # x_size = 0 is a NOP for any memory type 0..4
        await send(dut, "store_cmd", [ISA.store(0, 0, 3, 0, 0, memory_type=mt) | mt << 128])
        await wait_until(dut, lambda mt=mt: v(dut.store_retired) == mt + 1, 200, "nop")

