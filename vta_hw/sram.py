"""A simple dual-port SRAM (one synchronous read port, one write port) that infers block RAM.

The read port is not transparent: a read in the same cycle as a write to the same address returns
the old contents. Users that need the new value forward it themselves (see ``compute.py``).
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out


class SramReadSignature(wiring.Signature):
    """Read port, from the reader's side: present ``addr`` in cycle t, get ``data`` in cycle t+1."""

    def __init__(self, addr_bits: int, data_bits: int):
        super().__init__({"addr": Out(addr_bits), "data": In(data_bits)})


class SramWriteSignature(wiring.Signature):
    """Write port, from the writer's side."""

    def __init__(self, addr_bits: int, data_bits: int):
        super().__init__({"addr": Out(addr_bits), "data": Out(data_bits), "en": Out(1)})


class Sram(wiring.Component):
    def __init__(self, depth: int, data_bits: int, name: str = "sram"):
        self.depth = depth
        self.data_bits = data_bits
        self.addr_bits = max((depth - 1).bit_length(), 1)
        self._name = name
        super().__init__({
            "rd": In(SramReadSignature(self.addr_bits, data_bits)),
            "wr": In(SramWriteSignature(self.addr_bits, data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self.data_bits, depth=self.depth, init=[])
        rp = mem.read_port()
        wp = mem.write_port()
        m.d.comb += [rp.addr.eq(self.rd.addr), self.rd.data.eq(rp.data),
                     wp.addr.eq(self.wr.addr), wp.data.eq(self.wr.data), wp.en.eq(self.wr.en)]
        return m
