"""AXI (AXI3 or AXI4, any data width >= 32) slave to 32-bit AXI4-Lite master, for the PS's
general-purpose master port (Zynq-7000 M_AXI_GP0, Zynq UltraScale+ M_AXI_HPM0_FPD) in front of
the core's register file.

One transaction at a time, one 32-bit word at a time: register accesses are rare and short.
A beat wider than 32 bits becomes several AXI-Lite accesses at consecutive word addresses; a
narrow beat (8, 16 or 32 bits) one access with the byte strobes of its lanes. Bursts step the
address as AXI says (INCR, and conservatively WRAP, by the transfer size; FIXED not at all).
IDs are echoed and any failing word makes the response SLVERR. Only the low ``LITE_ADDR_BITS``
address bits reach the register file.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.axi import LITE_ADDR_BITS, LITE_DATA_BITS, LiteSignature

WORD_BYTES = LITE_DATA_BITS // 8


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
            members["wid"] = In(id_bits)   # AXI3: writes are in order here, so WID is not needed
        super().__init__(members)


class AxiToLite(wiring.Component):
    def __init__(self, data_bits: int = 32, addr_bits: int = 32, id_bits: int = 12, len_bits: int = 4,
                 axi3: bool = True):
        if data_bits < LITE_DATA_BITS or data_bits & (data_bits - 1):
            raise ValueError(f"AXI data width {data_bits} must be a power of two of at least {LITE_DATA_BITS}")
        self.lanes = data_bits // LITE_DATA_BITS
        super().__init__({
            "axi": Out(AxiSlaveSignature(data_bits, addr_bits, id_bits, len_bits, axi3)),
            "lite": In(LiteSignature()),   # flipped: the bridge drives the register file's awaddr, wdata, ...
        })

    def elaborate(self, platform):
        m = Module()
        s, lite = self.axi, self.lite
        sig = s.signature
        lane_bits = (self.lanes - 1).bit_length()

        addr = Signal(sig.addr_bits)          # address of the current beat
        size = Signal(3)
        burst = Signal(2)
        beats_left = Signal(sig.len_bits)
        tid = Signal(sig.id_bits)
        err = Signal()
        word = Signal(range(self.lanes))      # word of the current beat being transferred
        wbuf = Signal(sig.data_bits)
        sbuf = Signal(sig.data_bits // 8)
        rbuf = Signal(sig.data_bits)
        aw_done, w_done = Signal(), Signal()

        # words per beat: 1 for beats of up to 32 bits, else the beat's 32-bit words
        last_word = Signal(range(self.lanes))
        m.d.comb += last_word.eq(Mux(size > 2, (Const(1, self.lanes.bit_length() + 1) << (size - 2)[:3]) - 1, 0))
        cur_word = Signal(sig.addr_bits - 2)  # word address being accessed
        if lane_bits:
            first_lane = Signal(lane_bits)    # a wide beat starts at its first word, a narrow one at its own
            m.d.comb += [first_lane.eq(addr[2:2 + lane_bits] & ~last_word),
                         cur_word.eq(Cat((first_lane + word)[:lane_bits], addr[2 + lane_bits:]))]
        else:
            m.d.comb += cur_word.eq(addr[2:])
        lane = cur_word[:lane_bits] if lane_bits else Const(0, 1)
        step = Signal(sig.addr_bits)
        m.d.comb += step.eq(Const(1, sig.addr_bits) << size)
        next_beat = Mux(burst == 0, addr, (addr & ~(step - 1)) + step)

        m.d.comb += [lite.awaddr.eq(Cat(Const(0, 2), cur_word)[:LITE_ADDR_BITS]),
                     lite.araddr.eq(Cat(Const(0, 2), cur_word)[:LITE_ADDR_BITS]),
                     lite.awprot.eq(0), lite.arprot.eq(0), s.bid.eq(tid), s.rid.eq(tid)]
        if self.lanes == 1:
            m.d.comb += [lite.wdata.eq(wbuf), lite.wstrb.eq(sbuf)]
        else:
            m.d.comb += [lite.wdata.eq(wbuf.word_select(lane, LITE_DATA_BITS)),
                         lite.wstrb.eq(sbuf.word_select(lane, WORD_BYTES))]

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
                                 tid.eq(s.arid), err.eq(0), word.eq(0)]
                    m.next = "AR"
            with m.State("W_BEAT"):
                m.d.comb += s.wready.eq(1)
                with m.If(s.wvalid):
                    m.d.sync += [wbuf.eq(s.wdata), sbuf.eq(s.wstrb), word.eq(0), aw_done.eq(0), w_done.eq(0)]
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
                    m.d.sync += err.eq(err | (lite.bresp != 0))
                    with m.If(word != last_word):
                        m.d.sync += [word.eq(word + 1), aw_done.eq(0), w_done.eq(0)]
                        m.next = "W_LITE"
                    with m.Elif(beats_left == 0):
                        m.next = "B"
                    with m.Else():
                        m.d.sync += [addr.eq(next_beat), beats_left.eq(beats_left - 1)]
                        m.next = "W_BEAT"
            with m.State("B"):
                m.d.comb += [s.bvalid.eq(1), s.bresp.eq(err << 1)]   # SLVERR if any word failed
                with m.If(s.bready):
                    m.next = "IDLE"
            with m.State("AR"):
                m.d.comb += lite.arvalid.eq(1)
                with m.If(lite.arready):
                    m.next = "R_LITE"
            with m.State("R_LITE"):
                m.d.comb += lite.rready.eq(1)
                with m.If(lite.rvalid):
                    m.d.sync += err.eq(err | (lite.rresp != 0))
                    with m.If(last_word == 0):     # narrow beat: the word in every lane
                        m.d.sync += rbuf.eq(lite.rdata.replicate(self.lanes))
                    with m.Else():
                        for k in range(self.lanes):
                            with m.If(lane == k):
                                m.d.sync += rbuf.word_select(k, LITE_DATA_BITS).eq(lite.rdata)
                    with m.If(word != last_word):
                        m.d.sync += word.eq(word + 1)
                        m.next = "AR"
                    with m.Else():
                        m.next = "R"
            with m.State("R"):
                m.d.comb += [s.rvalid.eq(1), s.rdata.eq(rbuf), s.rresp.eq(err << 1), s.rlast.eq(beats_left == 0)]
                with m.If(s.rready):
                    m.d.sync += [addr.eq(next_beat), beats_left.eq(beats_left - 1), word.eq(0), err.eq(0)]
                    with m.If(beats_left == 0):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "AR"
        return m
