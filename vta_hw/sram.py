"""A simple dual-port SRAM (one synchronous read port, one write port) that infers block RAM.

Every read is registered twice: the block RAM's own read register and its output register
(Vivado maps it to DOA_REG/DOB_REG), so no logic ever waits on a block RAM's slow clock-to-out
(``vta_hw.timing``). Data for the address presented in cycle t arrive in cycle t +
``READ_LATENCY``. The read port is not transparent: a read in the same cycle as a write to the
same address returns the old contents. Users that need the new value forward it themselves (see
``tensor_compute.py``). With ``read_enable`` the read port has an ``en``: while it is low both read
registers hold, so a reader can stall its read pipeline for a cycle.

Where the memory goes (block RAM or, on parts that have it, UltraRAM) is the platform's choice: a
platform with ``vta_sram_styles`` (``{name: "block" | "ultra"}``, set by the board flow from
:func:`vta_hw.synth.sram_styles`) puts a ``ram_style`` attribute on the memory, which yosys and Vivado
both follow. Without it nothing is said and the tools decide (the Verilog is unchanged).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

#: cycles from ``rd.addr`` to ``rd.data``
READ_LATENCY = 2


class SramReadSignature(wiring.Signature):
    """Read port, from the reader's side: present ``addr`` in cycle t, get ``data`` in cycle
    t + READ_LATENCY (cycles with ``en`` high, if the port has one)."""

    def __init__(self, addr_bits: int, data_bits: int, enable: bool = False):
        members = {"addr": Out(addr_bits), "data": In(data_bits)}
        if enable:
            members["en"] = Out(1)
        super().__init__(members)


class SramWriteSignature(wiring.Signature):
    """Write port, from the writer's side."""

    def __init__(self, addr_bits: int, data_bits: int):
        super().__init__({"addr": Out(addr_bits), "data": Out(data_bits), "en": Out(1)})


class Sram(wiring.Component):
    def __init__(self, depth: int, data_bits: int, name: str = "sram", read_enable: bool = False):
        self.depth = depth
        self.data_bits = data_bits
        self.addr_bits = max((depth - 1).bit_length(), 1)
        self._name = name
        self.read_enable = read_enable
        super().__init__({
            "rd": In(SramReadSignature(self.addr_bits, data_bits, read_enable)),
            "wr": In(SramWriteSignature(self.addr_bits, data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        style = (getattr(platform, "vta_sram_styles", None) or {}).get(self._name)
        m.submodules.mem = mem = memory.Memory(shape=self.data_bits, depth=self.depth, init=[],
                                               attrs={"ram_style": style} if style else None)
        rp = mem.read_port()
        wp = mem.write_port()
        data_q = Signal(self.data_bits)      # the output register
        if self.read_enable:
            m.d.comb += rp.en.eq(self.rd.en)
            with m.If(self.rd.en):
                m.d.sync += data_q.eq(rp.data)
        else:
            m.d.sync += data_q.eq(rp.data)
        m.d.comb += [rp.addr.eq(self.rd.addr), self.rd.data.eq(data_q),
                     wp.addr.eq(self.wr.addr), wp.data.eq(self.wr.data), wp.en.eq(self.wr.en)]
        return m
