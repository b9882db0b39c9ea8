"""cocotb: ``vta_hw.axi_split.AxiSplit`` (the core's 256-bit master onto two 128-bit ports) against two
AXI RAMs that share one memory, with random back-pressure on every channel of all three buses.

Reads of random lengths and alignments, several in flight with different IDs, come back whole and in
order per ID; both ports carry read bursts; writes (port 0 only) land byte-exactly, strobes included;
without back-pressure a long stream of reads takes about half the cycles one port would need."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb_common import pauses
from cocotbext.axi import AxiBus, AxiMaster, AxiRam

WIDE_BYTES, MAX_BURST, MEM = 32, 32, 1 << 16


async def setup(dut, seed, stall=0.3):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    master = AxiMaster(AxiBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst, max_burst_len=MAX_BURST)
    ram0 = AxiRam(AxiBus.from_prefix(dut, "m0_axi"), dut.clk, dut.rst, size=MEM)
    ram1 = AxiRam(AxiBus.from_prefix(dut, "m1_axi"), dut.clk, dut.rst, size=MEM, mem=ram0.mem)
    if stall:
        chans = [master.write_if.aw_channel, master.write_if.w_channel, master.write_if.b_channel,
                 master.read_if.ar_channel, master.read_if.r_channel]
        for ram in (ram0, ram1):
            chans += [ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                      ram.read_if.ar_channel, ram.read_if.r_channel]
        for k, ch in enumerate(chans):
            ch.set_pause_generator(pauses(seed * 100 + k, stall))
    return master, ram0, ram1


class ArCounter:
    """Counts the AR handshakes on one port."""

    def __init__(self, dut, prefix):
        self.n = 0
        self.valid, self.ready = getattr(dut, f"{prefix}_arvalid"), getattr(dut, f"{prefix}_arready")
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        while True:
            await RisingEdge(dut.clk)
            if self.valid.value == 1 and self.ready.value == 1:
                self.n += 1


@cocotb.test()
async def reads_in_flight_come_back_whole(dut):
    master, ram0, _ = await setup(dut, 1)
    ports = [ArCounter(dut, "m0_axi"), ArCounter(dut, "m1_axi")]
    rnd = random.Random(1)
    image = bytes(rnd.getrandbits(8) for _ in range(MEM))
    ram0.write(0, image)

    async def reader(k):
        for _ in range(12):
            n = WIDE_BYTES * rnd.randrange(1, 3 * MAX_BURST)       # split into several bursts by the master
            addr = WIDE_BYTES * rnd.randrange(0, (MEM - n) // WIDE_BYTES)
            got = await master.read(addr, n, arid=k)
            assert got.data == image[addr:addr + n], (k, hex(addr), n)
    tasks = [cocotb.start_soon(reader(k)) for k in range(4)]
    for t in tasks:
        await t
    assert ports[0].n > 0 and ports[1].n > 0, [p.n for p in ports]


@cocotb.test()
async def single_beat_and_odd_bursts(dut):
    master, ram0, _ = await setup(dut, 2)
    rnd = random.Random(2)
    image = bytes(rnd.getrandbits(8) for _ in range(MEM))
    ram0.write(0, image)
    for beats in (1, 2, 3, 5, MAX_BURST - 1, MAX_BURST):
        addr = WIDE_BYTES * rnd.randrange(0, 64)
        got = await master.read(addr, beats * WIDE_BYTES)
        assert got.data == image[addr:addr + beats * WIDE_BYTES], beats


@cocotb.test()
async def writes_land_on_port_0(dut):
    master, ram0, _ = await setup(dut, 3)
    rnd = random.Random(3)
    model = bytearray(MEM)
    for _ in range(30):
        n = rnd.randrange(1, 3 * MAX_BURST * WIDE_BYTES)
        addr = rnd.randrange(0, MEM - n)                          # unaligned: strobes at both ends
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        await master.write(addr, data)
        model[addr:addr + n] = data
    assert ram0.read(0, MEM) == bytes(model)
    assert (await master.read(0, 4096)).data == bytes(model[:4096])


@cocotb.test()
async def two_ports_double_the_read_rate(dut):
    """Without back-pressure, 8 KiB of reads take about 128 cycles of the two ports' 256 beats; one port
    alone would need at least 512 cycles."""
    master, ram0, _ = await setup(dut, 4, stall=0)
    ram0.write(0, bytes(range(256)) * 32)
    await RisingEdge(dut.clk)
    t0 = cocotb.utils.get_sim_time("ns")
    tasks = [cocotb.start_soon(master.read(k * 2048, 2048, arid=k)) for k in range(4)]
    for t in tasks:
        await t
    cycles = (cocotb.utils.get_sim_time("ns") - t0) / 10
    assert cycles < 400, cycles
