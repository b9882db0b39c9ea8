"""The board-side AXI pieces between a processing system and the core.

``AxiToLite``: AXI (AXI3 or AXI4, any data width >= 32) slave to 32-bit AXI4-Lite master, for the
PS's general-purpose master port (Zynq-7000 M_AXI_GP0, Zynq UltraScale+ M_AXI_HPM0_FPD, the
Cyclone V HPS's lightweight HPS-to-FPGA bridge) in front of the core's register file.

One transaction at a time, one 32-bit word at a time: register accesses are rare and short.
A beat wider than 32 bits becomes several AXI-Lite accesses at consecutive word addresses; a
narrow beat (8, 16 or 32 bits) one access with the byte strobes of its lanes. Bursts step the
address as AXI says (INCR, and conservatively WRAP, by the transfer size; FIXED not at all).
IDs are echoed and any failing word makes the response SLVERR. Only the low ``LITE_ADDR_BITS``
address bits reach the register file.

``AxiWindow``: the core's AXI4 master onto a PS slave port that reaches memory through an address
window (the Cyclone V FPGA-to-HPS bridge, whose ACP window is coherent with the CPU caches).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.axi import ADDR_BITS, ID_BITS, LEN_BITS, LITE_ADDR_BITS, LITE_DATA_BITS, LiteSignature

WORD_BYTES = LITE_DATA_BITS // 8


class AxiSlaveSignature(wiring.Signature):
    """A full AXI slave port, from the slave's side (``awaddr`` is an input). With ``attrs`` it
    also carries AxLOCK (2 bits on AXI3), AxCACHE, AxPROT and ``user_bits`` of AxUSER."""

    def __init__(self, data_bits: int, addr_bits: int, id_bits: int, len_bits: int, axi3: bool,
                 attrs: bool = False, user_bits: int = 0):
        self.data_bits, self.addr_bits, self.id_bits, self.len_bits, self.axi3 = \
            data_bits, addr_bits, id_bits, len_bits, axi3
        self.attrs, self.user_bits = attrs, user_bits
        members = {}
        for ch in ("aw", "ar"):
            members.update({f"{ch}id": In(id_bits), f"{ch}addr": In(addr_bits), f"{ch}len": In(len_bits),
                            f"{ch}size": In(3), f"{ch}burst": In(2), f"{ch}valid": In(1), f"{ch}ready": Out(1)})
            if attrs:
                members.update({f"{ch}lock": In(2 if axi3 else 1), f"{ch}cache": In(4), f"{ch}prot": In(3)})
            if user_bits:
                members[f"{ch}user"] = In(user_bits)
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


class AxiWindow(wiring.Component):
    """The core's AXI4 master (``core``, flat names without the ``m_axi_`` prefix) onto a PS slave
    port (``port``) that reaches memory through a window: address ``a`` goes out as ``base + (a mod
    size)``. AXI3 ports get 4-bit lengths (the core must be built for bursts of at most 16 beats),
    AxLOCK widened to 2 bits and WID (the core writes with one ID, in order); AxUSER is ``user``
    (bit 0: a shared, coherent transaction). Everything else passes through unchanged.
    """

    def __init__(self, data_bits: int, port_id_bits: int, base: int, size: int, *, len_bits: int = 4,
                 axi3: bool = True, user_bits: int = 5, user: int = 1, write_id: int = 0,
                 port_addr_bits: int = ADDR_BITS):
        if size & (size - 1) or base % size or base + size > 1 << port_addr_bits:
            raise ValueError(f"window {base:#x}+{size:#x} must be a power-of-two size, aligned, inside the port's "
                             f"{port_addr_bits}-bit address space")
        if port_id_bits < ID_BITS:
            raise ValueError(f"the port's {port_id_bits}-bit IDs cannot carry the core's {ID_BITS}-bit IDs")
        self.base, self.size, self.user, self.write_id = base, size, user, write_id
        super().__init__({
            "core": Out(AxiSlaveSignature(data_bits, ADDR_BITS, ID_BITS, LEN_BITS, False, attrs=True)),
            "port": In(AxiSlaveSignature(data_bits, port_addr_bits, port_id_bits, len_bits, axi3, attrs=True,
                                         user_bits=user_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        c, p = self.core, self.port
        offset_bits = (self.size - 1).bit_length()
        for ch in ("aw", "ar"):
            def g(obj, name, ch=ch):
                return getattr(obj, f"{ch}{name}")
            m.d.comb += [
                g(p, "addr").eq(Cat(g(c, "addr")[:offset_bits], Const(self.base >> offset_bits,
                                                                      len(g(p, "addr")) - offset_bits))),
                g(p, "id").eq(g(c, "id")), g(p, "len").eq(g(c, "len")), g(p, "size").eq(g(c, "size")),
                g(p, "burst").eq(g(c, "burst")), g(p, "lock").eq(g(c, "lock")), g(p, "cache").eq(g(c, "cache")),
                g(p, "prot").eq(g(c, "prot")), g(p, "valid").eq(g(c, "valid")), g(c, "ready").eq(g(p, "ready")),
            ]
            if p.signature.user_bits:
                m.d.comb += g(p, "user").eq(self.user)
        m.d.comb += [
            p.wdata.eq(c.wdata), p.wstrb.eq(c.wstrb), p.wlast.eq(c.wlast), p.wvalid.eq(c.wvalid),
            c.wready.eq(p.wready),
            c.bid.eq(p.bid), c.bresp.eq(p.bresp), c.bvalid.eq(p.bvalid), p.bready.eq(c.bready),
            c.rid.eq(p.rid), c.rdata.eq(p.rdata), c.rresp.eq(p.rresp), c.rlast.eq(p.rlast), c.rvalid.eq(p.rvalid),
            p.rready.eq(c.rready),
        ]
        if p.signature.axi3:
            m.d.comb += p.wid.eq(self.write_id)
        return m


def connect_core_master(m: Module, core, window: AxiWindow) -> None:
    """Wire the core's flat ``m_axi_*`` ports to ``window.core``."""
    for name, member in window.core.signature.members.items():
        outer, inner = getattr(core, f"m_axi_{name}"), getattr(window.core, name)
        if member.flow == In:
            m.d.comb += inner.eq(outer if len(outer) == len(inner) else outer[:len(inner)])
        else:
            m.d.comb += outer.eq(inner)
