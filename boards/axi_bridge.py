"""AXI (AXI3 or AXI4, any data width >= 32) slave to 32-bit AXI4-Lite master, for the PS's
general-purpose master port (Zynq-7000 M_AXI_GP0, Zynq UltraScale+ M_AXI_HPM0_FPD) in front of
the core's register file.

One transaction at a time, one beat at a time: register accesses are rare and short. Bursts are
split into single AXI-Lite accesses at incrementing addresses; IDs are echoed; a narrow 32-bit
access on a wider bus uses the byte lanes its address selects, and read data is replicated into
every 32-bit lane. Only the low ``LITE_ADDR_BITS`` address bits reach the register file.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.axi import LITE_ADDR_BITS, LITE_DATA_BITS, LiteSignature


class AxiSlaveSignature(wiring.Signature):
    """A full AXI slave port, from the slave's side (``awaddr`` is an input)."""

    def __init__(self, data_bits: int, addr_bits: int, id_bits: int, len_bits: int, axi3: bool):
        self.data_bits, self.addr_bits, self.id_bits, self.len_bits, self.axi3 = \
            data_bits, addr_bits, id_bits, len_bits, axi3
        members = {}
        for ch in ("aw", "ar"):
            members.update({f"{ch}id": In(id_bits), f"{ch}addr": In(addr_bits), f"{ch}len": In(len_bits),
                            f"{ch}size": In(3), f"{ch}burst": In(2), f"{ch}valid": In(1), f"{ch}ready": Out(1)})
        members.update({"wdata": In(data_bits), "wstrb": In(data_bits // 8), "wlast": In(1), "wvalid": In(1),
                        "wready": Out(1), "bid": Out(id_bits), "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
                        "rid": Out(id_bits), "rdata": Out(data_bits), "rresp": Out(2), "rlast": Out(1),
                        "rvalid": Out(1), "rready": In(1)})
        if axi3:
            members["wid"] = In(id_bits)
        super().__init__(members)


class AxiToLite(wiring.Component):
    def __init__(self, data_bits: int = 32, addr_bits: int = 32, id_bits: int = 12, len_bits: int = 4,
                 axi3: bool = True):
        if data_bits < LITE_DATA_BITS or data_bits & (data_bits - 1):
            raise ValueError(f"AXI data width {data_bits} must be a power of two of at least {LITE_DATA_BITS}")
        self.lanes = data_bits // LITE_DATA_BITS
        super().__init__({
            "axi": In(AxiSlaveSignature(data_bits, addr_bits, id_bits, len_bits, axi3)),
            "lite": In(LiteSignature()),   # flipped: the bridge drives awaddr/wdata/... of the register file
        })

    def elaborate(self, platform):
        m = Module()
        s, lite = self.axi, self.lite
        sig = s.signature
        addr = Signal(sig.addr_bits)
        size = Signal(3)
        burst = Signal(2)
        beats_left = Signal(sig.len_bits)
        tid = Signal(sig.id_bits)
        data = Signal(LITE_DATA_BITS)
        strb = Signal(LITE_DATA_BITS // 8)
        err = Signal()
        aw_done = Signal()
        w_done = Signal()
        lane = Signal(range(self.lanes)) if self.lanes > 1 else None

        def next_addr():
            # FIXED bursts stay put; INCR (and, conservatively, WRAP) step by the transfer size
            return Mux(burst == 0, addr, addr + (1 << size))

        m.d.comb += [lite.awaddr.eq(addr[:LITE_ADDR_BITS]), lite.araddr.eq(addr[:LITE_ADDR_BITS]),
                     lite.wdata.eq(data), lite.wstrb.eq(strb), lite.awprot.eq(0), lite.arprot.eq(0),
                     s.bid.eq(tid), s.rid.eq(tid)]
        if lane is not None:
            m.d.comb += lane.eq(addr[2:2 + (self.lanes - 1).bit_length()])

        with m.FSM():
            with m.State("IDLE"):
                with m.If(s.awvalid):
                    m.d.comb += s.awready.eq(1)
                    m.d.sync += [addr.eq(s.awaddr), size.eq(s.awsize), burst.eq(s.awburst), beats_left.eq(s.awlen),
                                 tid.eq(s.awid), err.eq(0)]
                    m.next = "W_BEAT"
                with m.Elif(s.arvalid):
                    m.d.comb += s.arready.eq(1)
                    m.d.sync += [addr.eq(s.araddr), size.eq(s.arsize), burst.eq(s.arburst), beats_left.eq(s.arlen),
                                 tid.eq(s.arid), err.eq(0)]
                    m.next = "AR"
            with m.State("W_BEAT"):
                m.d.comb += s.wready.eq(1)
                with m.If(s.wvalid):
                    if lane is None:
                        m.d.sync += [data.eq(s.wdata), strb.eq(s.wstrb)]
                    else:
                        with m.Switch(lane):
                            for k in range(self.lanes):
                                with m.Case(k):
                                    m.d.sync += [data.eq(s.wdata.word_select(k, LITE_DATA_BITS)),
                                                 strb.eq(s.wstrb.word_select(k, LITE_DATA_BITS // 8))]
                    m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                    m.next = "W_LITE"
            with m.State("W_LITE"):
                m.d.comb += [lite.awvalid.eq(~aw_done), lite.wvalid.eq(~w_done)]
                aw_now = aw_done | lite.awready
                w_now = w_done | lite.wready
                m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
                with m.If(aw_now & w_now):
                    m.next = "W_RESP"
            with m.State("W_RESP"):
                m.d.comb += lite.bready.eq(1)
                with m.If(lite.bvalid):
                    m.d.sync += [err.eq(err | (lite.bresp != 0)), addr.eq(next_addr()), beats_left.eq(beats_left - 1)]
                    with m.If(beats_left == 0):
                        m.next = "B"
                    with m.Else():
                        m.next = "W_BEAT"
            with m.State("B"):
                m.d.comb += [s.bvalid.eq(1), s.bresp.eq(err << 1)]   # SLVERR if any beat failed
                with m.If(s.bready):
                    m.next = "IDLE"
            with m.State("AR"):
                m.d.comb += lite.arvalid.eq(1)
                with m.If(lite.arready):
                    m.next = "R_LITE"
            with m.State("R_LITE"):
                m.d.comb += lite.rready.eq(1)
                with m.If(lite.rvalid):
                    m.d.sync += [data.eq(lite.rdata), err.eq(lite.rresp != 0)]
                    m.next = "R"
            with m.State("R"):
                m.d.comb += [s.rvalid.eq(1), s.rdata.eq(data.replicate(self.lanes)), s.rresp.eq(err << 1),
                             s.rlast.eq(beats_left == 0)]
                with m.If(s.rready):
                    m.d.sync += [addr.eq(next_addr()), beats_left.eq(beats_left - 1)]
                    with m.If(beats_left == 0):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "AR"
        return m
