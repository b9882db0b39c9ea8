"""The AXI4-Lite register file (the map is ``vta_hw.spec.regmap``).

One write and one read in flight at a time; AW and W may arrive in either order. Byte strobes
are honoured for the writable registers. Reads of unmapped offsets return 0, writes to read-only
or unmapped offsets are acknowledged and ignored (OKAY response: a driver probing the window
never faults).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec.regmap import OFFSET, REGISTERS

from .axi import LiteSignature

WRITABLE = ("INSN_ADDR", "INSN_COUNT")


class RegFile(wiring.Component):
    def __init__(self):
        members = {"bus": Out(LiteSignature()), "start": Out(1), "abort": Out(1)}
        for name in WRITABLE:
            members[name.lower()] = Out(32)
        for r in REGISTERS:
            if r.name not in WRITABLE:
                members[f"rd_{r.name.lower()}"] = In(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        b = self.bus
        # ---- writes
        aw_got = Signal()
        w_got = Signal()
        waddr = Signal.like(b.awaddr)
        wdata = Signal(32)
        wstrb = Signal(4)
        m.d.comb += [b.awready.eq(~aw_got & ~b.bvalid), b.wready.eq(~w_got & ~b.bvalid), b.bresp.eq(0)]
        with m.If(b.awvalid & b.awready):
            m.d.sync += [aw_got.eq(1), waddr.eq(b.awaddr)]
        with m.If(b.wvalid & b.wready):
            m.d.sync += [w_got.eq(1), wdata.eq(b.wdata), wstrb.eq(b.wstrb)]
        with m.If(b.bvalid & b.bready):
            m.d.sync += b.bvalid.eq(0)
        with m.If(aw_got & w_got):
            m.d.sync += [aw_got.eq(0), w_got.eq(0), b.bvalid.eq(1)]
            word = waddr[2:]
            # a byte mask per strobe bit (a Mux: a replicated bit is a concatenation of single wires in the
            # Verilog, which Verilator evaluates bit by bit, every cycle)
            mask = Cat(*[Mux(wstrb[k], 0xFF, 0x00) for k in range(4)])
            with m.If(word == OFFSET["CONTROL"] >> 2):
                m.d.comb += [self.start.eq(wstrb[0] & wdata[0]),
                             self.abort.eq(wstrb[0] & wdata[1])]
            for name in WRITABLE:
                reg = getattr(self, name.lower())
                with m.If(word == OFFSET[name] >> 2):
                    m.d.sync += reg.eq((wdata & mask) | (reg & ~mask))
        # ---- reads
        m.d.comb += [b.arready.eq(~b.rvalid), b.rresp.eq(0)]
        with m.If(b.rvalid & b.rready):
            m.d.sync += b.rvalid.eq(0)
        with m.If(b.arvalid & b.arready):
            m.d.sync += [b.rvalid.eq(1), b.rdata.eq(0)]
            with m.Switch(b.araddr[2:]):
                for r in REGISTERS:
                    with m.Case(r.offset >> 2):
                        name = r.name.lower()
                        src = getattr(self, name) if r.name in WRITABLE else getattr(self, f"rd_{name}")
                        m.d.sync += b.rdata.eq(src)
        return m
