"""A small AXI4 master with the ports of ``vta_core``, for negative controls of tsim's bus checker
through the real harness: AXI-Lite registers set one transaction and the rule it should break.

Registers: ADDR (0x00), LEN (0x04: AxLEN), CTRL (0x08: the bits below), GO (0x0C: any write
starts the transaction and lowers irq). irq rises when the transaction is over (or at once, with
IRQ_EARLY, after the address handshake). Write data beat k is k + 1 in every byte.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from vta_hw.axi import axi4_lite_slave_members, axi4_master_members

ADDR, LEN, CTRL, GO = 0x00, 0x04, 0x08, 0x0C
# CTRL bits
WRITE = 1 << 0
SIZE_SHIFT = 1          # 3 bits: AxSIZE
BURST_SHIFT = 4         # 2 bits: AxBURST
ID_SHIFT = 6            # 3 bits: AxID
DROP_VALID = 1 << 9     # VALID high for one cycle only
CHANGE_PAYLOAD = 1 << 10    # the address moves while VALID waits for READY
WLAST_EARLY = 1 << 11   # WLAST on the first beat
WLAST_NEVER = 1 << 12   # no WLAST
PARTIAL_STRB = 1 << 13  # WSTRB 0x0F
IRQ_EARLY = 1 << 14     # irq right after the address handshake


class ScriptedMaster(wiring.Component):
    def __init__(self, data_bits: int = 64):
        self.data_bits = data_bits
        super().__init__({**axi4_master_members("m_axi", data_bits), **axi4_lite_slave_members("s_axi"),
                          "irq": Out(1)})

    def elaborate(self, platform):
        m = Module()
        dw = self.data_bits
        addr, length, ctrl = Signal(32), Signal(8), Signal(16)
        go = Signal()

        # ---- AXI-Lite: take AW and W together, answer OKAY; reads return 0
        bvalid, rvalid = Signal(), Signal()
        take = self.s_axi_awvalid & self.s_axi_wvalid & ~bvalid
        m.d.comb += [self.s_axi_awready.eq(take), self.s_axi_wready.eq(take), self.s_axi_bvalid.eq(bvalid),
                     self.s_axi_bresp.eq(0), self.s_axi_arready.eq(~rvalid), self.s_axi_rvalid.eq(rvalid),
                     self.s_axi_rdata.eq(0), self.s_axi_rresp.eq(0)]
        with m.If(take):
            m.d.sync += bvalid.eq(1)
            with m.Switch(self.s_axi_awaddr):
                with m.Case(ADDR):
                    m.d.sync += addr.eq(self.s_axi_wdata)
                with m.Case(LEN):
                    m.d.sync += length.eq(self.s_axi_wdata)
                with m.Case(CTRL):
                    m.d.sync += ctrl.eq(self.s_axi_wdata)
                with m.Case(GO):
                    m.d.comb += go.eq(1)
        with m.If(bvalid & self.s_axi_bready):
            m.d.sync += bvalid.eq(0)
        with m.If(self.s_axi_arvalid & ~rvalid):
            m.d.sync += rvalid.eq(1)
        with m.If(rvalid & self.s_axi_rready):
            m.d.sync += rvalid.eq(0)

        # ---- the transaction
        write = ctrl[0]
        beat = Signal(8)
        cur_addr = Signal(32)
        for ch in ("ar", "aw"):
            m.d.comb += [getattr(self, f"m_axi_{ch}addr").eq(cur_addr), getattr(self, f"m_axi_{ch}len").eq(length),
                         getattr(self, f"m_axi_{ch}size").eq(ctrl[SIZE_SHIFT:SIZE_SHIFT + 3]),
                         getattr(self, f"m_axi_{ch}burst").eq(ctrl[BURST_SHIFT:BURST_SHIFT + 2]),
                         getattr(self, f"m_axi_{ch}id").eq(ctrl[ID_SHIFT:ID_SHIFT + 3])]
        m.d.comb += [self.m_axi_wdata.eq(Cat(*[(beat + 1)[:8]] * (dw // 8))),
                     self.m_axi_wstrb.eq(Mux((ctrl & PARTIAL_STRB).any(), 0x0F, Const(-1, dw // 8))),
                     self.m_axi_wlast.eq(Mux((ctrl & WLAST_EARLY).any(), beat == 0,
                                             ~(ctrl & WLAST_NEVER).any() & (beat == length))),
                     self.m_axi_bready.eq(1), self.m_axi_rready.eq(1)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(go):
                    m.d.sync += [self.irq.eq(0), beat.eq(0), cur_addr.eq(addr)]
                    m.next = "ADDRESS"
            with m.State("ADDRESS"):
                m.d.comb += [self.m_axi_awvalid.eq(write), self.m_axi_arvalid.eq(~write)]
                with m.If(Mux(write, self.m_axi_awready, self.m_axi_arready)):
                    with m.If(ctrl & IRQ_EARLY):
                        m.next = "DONE"
                    with m.Elif(write):
                        m.next = "DATA"
                    with m.Else():
                        m.next = "READ"
                with m.Elif(ctrl & DROP_VALID):
                    m.next = "DONE"
                with m.Elif(ctrl & CHANGE_PAYLOAD):
                    m.d.sync += cur_addr.eq(cur_addr + 64)
            with m.State("DATA"):
                m.d.comb += self.m_axi_wvalid.eq(1)
                with m.If(self.m_axi_wready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == length):
                        m.next = "RESPONSE"
            with m.State("RESPONSE"):
                with m.If(self.m_axi_bvalid):
                    m.next = "DONE"
            with m.State("READ"):
                with m.If(self.m_axi_rvalid & self.m_axi_rlast):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.sync += self.irq.eq(1)
                m.next = "IDLE"
        return m
