"""The AXI4 master shared by every DMA client: a round-robin AR arbiter, an R demultiplexer by ID,
and the single write client (store) passed through.

Read clients are numbered by :class:`vta_hw.spec.regmap.DmaClient`; that number is the AXI ID,
so read data can come back in any order between clients (in order within one client, as AXI
requires for one ID). The AR channel goes through a one-entry register slot so that ARVALID and
its payload stay stable until ARREADY, whatever the clients do.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import BURST_INCR, ID_BITS, MasterSignature, ReadClientSignature, WriteClientSignature


class AxiArbiter(wiring.Component):
    def __init__(self, data_bits: int, read_ids: list[int], write_id: int, cache_bits: int = 0b1111,
                 prot_bits: int = 0):
        self.data_bits = data_bits
        self.read_ids = list(read_ids)
        self.write_id = write_id
        self.cache_bits = cache_bits
        self.prot_bits = prot_bits
        members = {f"rd{i}": In(ReadClientSignature(data_bits)) for i in self.read_ids}
        members.update({
            "wr": In(WriteClientSignature(data_bits)),
            "bus": Out(MasterSignature(data_bits)),
            # activity, for the performance counters
            "r_beat": Out(1), "w_beat": Out(1), "ar_stall": Out(1),
            "idle": Out(1),
        })
        super().__init__(members)

    def client(self, cid: int):
        return getattr(self, f"rd{cid}")

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        size = (self.data_bits // 8).bit_length() - 1
        ids = self.read_ids
        n = len(ids)

        # ---- AR: round-robin into a register slot
        slot_valid = Signal()
        slot_addr = Signal.like(bus.araddr)
        slot_len = Signal.like(bus.arlen)
        slot_id = Signal(ID_BITS)
        rr = Signal(range(max(n, 1)))
        can_load = ~slot_valid | bus.arready
        m.d.comb += [
            bus.arvalid.eq(slot_valid), bus.araddr.eq(slot_addr), bus.arlen.eq(slot_len), bus.arid.eq(slot_id),
            bus.arsize.eq(size), bus.arburst.eq(BURST_INCR), bus.arcache.eq(self.cache_bits),
            bus.arprot.eq(self.prot_bits), bus.arlock.eq(0), bus.arqos.eq(0),
            self.ar_stall.eq(slot_valid & ~bus.arready),
        ]
        with m.If(bus.arready):
            m.d.sync += slot_valid.eq(0)
        with m.If(can_load & (n > 0)):
            with m.Switch(rr):
                for start in range(n):
                    with m.Case(start):
                        order = [(start + k) % n for k in range(n)]
                        first = True
                        for k in order:
                            c = self.client(ids[k]).ar
                            with (m.If(c.valid) if first else m.Elif(c.valid)):
                                m.d.comb += c.ready.eq(1)
                                m.d.sync += [slot_valid.eq(1), slot_addr.eq(c.payload.addr),
                                             slot_len.eq(c.payload.len), slot_id.eq(ids[k]),
                                             rr.eq((k + 1) % n)]
                            first = False

        # ---- R: demultiplex by RID
        m.d.comb += bus.rready.eq(1)  # data for an unknown ID is dropped
        for cid in ids:
            r = self.client(cid).r
            m.d.comb += [r.payload.data.eq(bus.rdata), r.payload.last.eq(bus.rlast), r.payload.resp.eq(bus.rresp),
                         r.valid.eq(bus.rvalid & (bus.rid == cid))]
            with m.If(bus.rid == cid):
                m.d.comb += bus.rready.eq(r.ready)
        m.d.comb += self.r_beat.eq(bus.rvalid & bus.rready)

        # ---- AW / W / B: the single write client
        wr = self.wr
        m.d.comb += [
            bus.awvalid.eq(wr.aw.valid), wr.aw.ready.eq(bus.awready), bus.awaddr.eq(wr.aw.payload.addr),
            bus.awlen.eq(wr.aw.payload.len), bus.awid.eq(self.write_id), bus.awsize.eq(size),
            bus.awburst.eq(BURST_INCR), bus.awcache.eq(self.cache_bits), bus.awprot.eq(self.prot_bits),
            bus.awlock.eq(0), bus.awqos.eq(0),
            bus.wvalid.eq(wr.w.valid), wr.w.ready.eq(bus.wready), bus.wdata.eq(wr.w.payload.data),
            bus.wstrb.eq(wr.w.payload.strb), bus.wlast.eq(wr.w.payload.last),
            wr.b.valid.eq(bus.bvalid), bus.bready.eq(wr.b.ready), wr.b.payload.eq(bus.bresp),
            self.w_beat.eq(bus.wvalid & bus.wready),
            self.idle.eq(~slot_valid),
        ]
        return m
