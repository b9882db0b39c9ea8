"""cocotb suite: the AXI arbiter (three read clients by ID, one write client) against AxiRam
with random back-pressure on every channel and random ready on every client."""

import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_common import CFG, backpressure, start, v
from cocotbext.axi import AxiBus, AxiRam

BEAT = CFG.AXI_DATA_BYTES
DW = CFG.AXI_DATA_BITS


async def read_client(dut, cid, ram, rnd, bursts):
    """Issue bursts on client ``cid`` and check every beat that comes back."""
    ar_valid, ar_ready, ar_payload = (getattr(dut, f"arb_c{cid}_ar_{n}") for n in ("valid", "ready", "payload"))
    r_valid, r_ready, r_payload = (getattr(dut, f"arb_c{cid}_r_{n}") for n in ("valid", "ready", "payload"))
    expect = []

    async def receive():
        got = 0
        while got < sum(n for _, n in bursts):
            rr = int(rnd.random() < 0.6)
            r_ready.value = rr
            await ReadOnly()
            if rr and v(r_valid):
                p = v(r_payload)
                data, last, resp = p & ((1 << DW) - 1), p >> DW & 1, p >> (DW + 1) & 3
                want_data, want_last = expect.pop(0)
                assert (data, last, resp) == (want_data, want_last, 0), f"client {cid} beat {got}"
                got += 1
            await RisingEdge(dut.clk)
        r_ready.value = 0

    for addr, n in bursts:
        for k in range(n):
            expect.append((int.from_bytes(ram.read(addr + k * BEAT, BEAT), "little"), int(k == n - 1)))
    rx = cocotb.start_soon(receive())
    for addr, n in bursts:
        while rnd.random() < 0.3:
            await RisingEdge(dut.clk)
        ar_valid.value = 1
        ar_payload.value = addr | (n - 1) << 32
        while True:
            await ReadOnly()
            fired = v(ar_ready)
            await RisingEdge(dut.clk)
            if fired:
                break
        ar_valid.value = 0
    await rx


@cocotb.test()
async def three_readers_and_a_writer(dut):
    await start(dut)
    size = 1 << 20
    ram = AxiRam(AxiBus.from_prefix(dut, "arb_axi"), dut.clk, dut.rst, size=size)
    backpressure(ram, 12)
    rnd = random.Random(12)
    ram.write(0, bytes(rnd.randrange(256) for _ in range(1 << 16)))
    for cid in range(3):
        getattr(dut, f"arb_c{cid}_ar_valid").value = 0
        getattr(dut, f"arb_c{cid}_r_ready").value = 0
    dut.arb_w_aw_valid.value = 0
    dut.arb_w_w_valid.value = 0
    dut.arb_w_b_ready.value = 1

    def bursts(region):
        out = []
        for _ in range(25):
            n = rnd.randrange(1, 33)
            start_beat = rnd.randrange(0, 4096 // BEAT - n)
            out.append((region + start_beat * BEAT, n))
        return out

    readers = [cocotb.start_soon(read_client(dut, cid, ram, random.Random(cid), bursts(cid * 0x4000)))
               for cid in range(3)]

    # the write client: bursts of known data into 0x80000...
    wrnd = random.Random(99)
    written = {}
    b_seen = [0]

    async def count_b():
        while True:
            await ReadOnly()
            b_seen[0] += v(dut.arb_w_b_valid) & v(dut.arb_w_b_ready)
            await RisingEdge(dut.clk)
    cocotb.start_soon(count_b())
    for k in range(10):
        n = wrnd.randrange(1, 20)
        addr = 0x80000 + k * 0x1000
        data = [wrnd.randrange(1 << DW) for _ in range(n)]
        dut.arb_w_aw_valid.value = 1
        dut.arb_w_aw_payload.value = addr | (n - 1) << 32
        while True:
            await ReadOnly()
            fired = v(dut.arb_w_aw_ready)
            await RisingEdge(dut.clk)
            if fired:
                break
        dut.arb_w_aw_valid.value = 0
        for i, d in enumerate(data):
            dut.arb_w_w_valid.value = 1
            dut.arb_w_w_payload.value = d | ((1 << BEAT) - 1) << DW | int(i == n - 1) << (DW + BEAT)
            while True:
                await ReadOnly()
                fired = v(dut.arb_w_w_ready)
                await RisingEdge(dut.clk)
                if fired:
                    break
            written[addr + i * BEAT] = d
        dut.arb_w_w_valid.value = 0
    for r in readers:
        await r
    for _ in range(200):
        await RisingEdge(dut.clk)
    assert b_seen[0] == 10, f"{b_seen[0]} write responses for 10 bursts"
    for a, d in written.items():
        assert int.from_bytes(ram.read(a, BEAT), "little") == d, f"write at {a:#x}"
