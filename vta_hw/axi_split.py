"""Two memory ports for one core: the core's AXI4 master, twice a port's width, onto two AXI4 ports.

With ``AXI_PORTS = 2`` the core's bus is two board ports wide (ZynqMP: 256 bits over S_AXI_HPC0_FPD and
S_AXI_HPC1_FPD, 128 bits each), so one DMA stream can use both ports' bandwidth. This component sits in
the board top between the core and the two ports (``boards.zynq``); tsim runs the core on one port of
the core's width.

* **Reads**: a burst of ``n`` beats of the core's width (at most ``SPLIT_MAX_BURST``) is split into two
  bursts of port beats: the first ``ceil(n/2)`` core beats from port 0, the other ``floor(n/2)`` from
  port 1 (none if that is 0). Both run at once; each port's beats are paired into core beats in a FIFO of
  its own, and the bursts are answered in the order they were accepted, each with its own ID (the ports
  see one ID each, so each returns its bursts in order). A burst's response is the worse of its beats'.
* **Writes** go to port 0 alone, each core beat as two port beats (stores move little data).
* Port 1 never writes; port 0's write response is the core's.

Timing: every output of the read path comes from a register or a FIFO's registered output; the write
path is combinational (a beat-select bit), as the core registers its AW and W.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring

from .axi import BURST_INCR, ID_BITS, LEN_BITS, axi4_master_members

#: bursts accepted but not yet answered (the order of the answers)
ORDER_DEPTH = 16


class AxiSplit(wiring.Component):
    """``s_axi_*``: the core's master (``wide_bits``); ``m0_axi_*``, ``m1_axi_*``: the two ports
    (``wide_bits // 2`` each). ``max_burst``: the longest burst the core issues, in its beats."""

    def __init__(self, wide_bits: int, max_burst: int):
        assert wide_bits % 2 == 0 and 1 <= max_burst <= 128
        self.wide_bits = wide_bits
        self.port_bits = wide_bits // 2
        self.max_burst = max_burst
        members = {}
        for name, member in axi4_master_members("s_axi", wide_bits).items():
            members[name] = member.flip()
        members.update(axi4_master_members("m0_axi", self.port_bits))
        members.update(axi4_master_members("m1_axi", self.port_bits))
        super().__init__(members)

    def _port(self, k: int, sig: str):
        return getattr(self, f"m{k}_axi_{sig}")

    def elaborate(self, platform):
        m = Module()
        wb, pb = self.wide_bits, self.port_bits
        wide_bytes = wb // 8
        log_wide = wide_bytes.bit_length() - 1
        port_size = (pb // 8).bit_length() - 1
        half_bits = (self.max_burst + 1).bit_length()
        s = self

        def aligned(addr):
            """A burst's first beat covers the core's beat around ``addr``: the ports start there too (a port
            burst from ``addr`` itself could run past the 4 KiB boundary the core's burst respects)."""
            return Cat(Const(0, log_wide), addr[log_wide:])

        # ---- AR: one core burst -> a burst on each port (port 1's may be empty)
        order_layout = data.StructLayout({"id": ID_BITS, "n0": half_bits, "n1": half_bits})
        m.submodules.order = order = fifo.SyncFIFOBuffered(width=order_layout.size, depth=ORDER_DEPTH)
        slot_valid = [Signal(name=f"ar{k}_valid") for k in range(2)]
        slot_addr = [Signal(32, name=f"ar{k}_addr") for k in range(2)]
        slot_len = [Signal(LEN_BITS, name=f"ar{k}_len") for k in range(2)]
        attrs = {a: Signal(len(getattr(s, f"s_axi_ar{a}")), name=f"ar_{a}") for a in ("cache", "prot", "qos", "lock")}
        for k in range(2):
            with m.If(self._port(k, "arready")):
                m.d.sync += slot_valid[k].eq(0)
            m.d.comb += [self._port(k, "arvalid").eq(slot_valid[k]), self._port(k, "araddr").eq(slot_addr[k]),
                         self._port(k, "arlen").eq(slot_len[k]), self._port(k, "arid").eq(0),
                         self._port(k, "arsize").eq(port_size), self._port(k, "arburst").eq(BURST_INCR)]
            for a, reg in attrs.items():
                m.d.comb += self._port(k, f"ar{a}").eq(reg)
        n = Signal(LEN_BITS + 1)
        n0, n1 = Signal(half_bits), Signal(half_bits)
        m.d.comb += [n.eq(s.s_axi_arlen + 1), n0.eq((n + 1) >> 1), n1.eq(n >> 1)]
        w_order = data.View(order_layout, order.w_data)
        m.d.comb += [s.s_axi_arready.eq(order.w_rdy & ~slot_valid[0] & ~slot_valid[1]),
                     w_order.id.eq(s.s_axi_arid), w_order.n0.eq(n0), w_order.n1.eq(n1)]
        with m.If(s.s_axi_arvalid & s.s_axi_arready):
            m.d.comb += order.w_en.eq(1)
            m.d.sync += [slot_valid[0].eq(1), slot_addr[0].eq(aligned(s.s_axi_araddr)), slot_len[0].eq(2 * n0 - 1),
                         slot_valid[1].eq(n1 != 0), slot_addr[1].eq(aligned(s.s_axi_araddr) + n0 * wide_bytes),
                         slot_len[1].eq(2 * n1 - 1)]
            m.d.sync += [reg.eq(getattr(s, f"s_axi_ar{a}")) for a, reg in attrs.items()]

        # ---- R: each port's beats paired into core beats (with the worse response), in a FIFO per port
        beats = []
        for k in range(2):
            q = fifo.SyncFIFOBuffered(width=wb + 2, depth=2 * ((self.max_burst + 1) // 2))
            m.submodules[f"r{k}"] = q
            half, half_valid, half_resp = Signal(pb, name=f"r{k}_half"), Signal(name=f"r{k}_half_valid"), \
                Signal(2, name=f"r{k}_half_resp")
            rdata, rresp = self._port(k, "rdata"), self._port(k, "rresp")
            m.d.comb += [self._port(k, "rready").eq(~half_valid | q.w_rdy),
                         q.w_data.eq(Cat(half, rdata, Mux(rresp > half_resp, rresp, half_resp)))]
            with m.If(self._port(k, "rvalid") & self._port(k, "rready")):
                with m.If(half_valid):
                    m.d.comb += q.w_en.eq(1)
                    m.d.sync += half_valid.eq(0)
                with m.Else():
                    m.d.sync += [half.eq(rdata), half_resp.eq(rresp), half_valid.eq(1)]
            beats.append(q)

        # ---- the core's R: the oldest burst, its first n0 beats from port 0, then n1 from port 1
        head = data.View(order_layout, order.r_data)
        k_beat = Signal(half_bits + 1)
        from_1 = Signal()
        m.d.comb += from_1.eq(k_beat >= head.n0)
        sel_rdy = Mux(from_1, beats[1].r_rdy, beats[0].r_rdy)
        sel = Mux(from_1, beats[1].r_data, beats[0].r_data)
        last = Signal()
        m.d.comb += [last.eq(k_beat == head.n0 + head.n1 - 1),
                     s.s_axi_rvalid.eq(order.r_rdy & sel_rdy), s.s_axi_rdata.eq(sel[:wb]),
                     s.s_axi_rresp.eq(sel[wb:]), s.s_axi_rid.eq(head.id), s.s_axi_rlast.eq(last)]
        with m.If(s.s_axi_rvalid & s.s_axi_rready):
            m.d.comb += [beats[0].r_en.eq(~from_1), beats[1].r_en.eq(from_1)]
            m.d.sync += k_beat.eq(Mux(last, 0, k_beat + 1))
            with m.If(last):
                m.d.comb += order.r_en.eq(1)

        # ---- writes: port 0, each core beat as two port beats
        p0 = {sig: self._port(0, sig) for sig in ("awvalid", "awready", "awaddr", "awlen", "awid", "awsize",
                                                  "awburst", "awcache", "awprot", "awqos", "awlock", "wvalid",
                                                  "wready", "wdata", "wstrb", "wlast", "bvalid", "bready", "bid",
                                                  "bresp")}
        upper = Signal()
        m.d.comb += [
            p0["awvalid"].eq(s.s_axi_awvalid), s.s_axi_awready.eq(p0["awready"]),
            p0["awaddr"].eq(aligned(s.s_axi_awaddr)),
            p0["awlen"].eq(Cat(Const(1, 1), s.s_axi_awlen)[:LEN_BITS]), p0["awid"].eq(s.s_axi_awid),
            p0["awsize"].eq(port_size), p0["awburst"].eq(s.s_axi_awburst), p0["awcache"].eq(s.s_axi_awcache),
            p0["awprot"].eq(s.s_axi_awprot), p0["awqos"].eq(s.s_axi_awqos), p0["awlock"].eq(s.s_axi_awlock),
            p0["wvalid"].eq(s.s_axi_wvalid), s.s_axi_wready.eq(p0["wready"] & upper),
            p0["wdata"].eq(Mux(upper, s.s_axi_wdata[pb:], s.s_axi_wdata[:pb])),
            p0["wstrb"].eq(Mux(upper, s.s_axi_wstrb[pb // 8:], s.s_axi_wstrb[:pb // 8])),
            p0["wlast"].eq(s.s_axi_wlast & upper),
            s.s_axi_bvalid.eq(p0["bvalid"]), p0["bready"].eq(s.s_axi_bready), s.s_axi_bid.eq(p0["bid"]),
            s.s_axi_bresp.eq(p0["bresp"]),
            self.m1_axi_awvalid.eq(0), self.m1_axi_wvalid.eq(0), self.m1_axi_bready.eq(1),
            self.m1_axi_awsize.eq(port_size), self.m1_axi_awburst.eq(BURST_INCR),
        ]
        with m.If(p0["wvalid"] & p0["wready"]):
            m.d.sync += upper.eq(~upper)
        return m
