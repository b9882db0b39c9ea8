"""Test top for ``boards.axi_bridge.AxiToLite``: the bridge with flat ``axi__*`` and ``lite__*`` ports."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from boards.axi_bridge import AxiSlaveSignature, AxiToLite
from vta_hw.axi import LiteSignature

VARIANTS = {
    "axi3_32": dict(data_bits=32, addr_bits=32, id_bits=12, len_bits=4, axi3=True),     # Zynq-7000 M_AXI_GP0
    "axi4_128": dict(data_bits=128, addr_bits=40, id_bits=16, len_bits=8, axi3=False),  # ZynqMP M_AXI_HPM0_FPD
    "axi3_32_lw": dict(data_bits=32, addr_bits=21, id_bits=12, len_bits=4, axi3=True),  # Cyclone V HPS lightweight
}


class BridgeTop(wiring.Component):
    """The bridge with 8-bit AxLEN ports (cocotbext-axi speaks AXI4); AXI3 variants see the low 4 bits."""

    def __init__(self, variant: str):
        p = VARIANTS[variant]
        self.bridge = AxiToLite(**p)
        super().__init__({"axi": Out(AxiSlaveSignature(p["data_bits"], p["addr_bits"], p["id_bits"], 8, p["axi3"])),
                          "lite": In(LiteSignature())})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = b = self.bridge
        for name, member in b.axi.signature.members.items():
            outer, inner = getattr(self.axi, name), getattr(b.axi, name)
            m.d.comb += inner.eq(outer) if member.flow == wiring.In else outer.eq(inner)
        wiring.connect(m, b.lite, wiring.flipped(self.lite))
        return m


class De10FabricTop(wiring.Component):
    """``boards.cyclonev.De10Fabric`` with ports cocotbext-axi can drive: 8-bit AxLEN on both (the
    AXI3 ports use the low 4 bits), a 1-bit AxLOCK on the FPGA-to-HPS side; that port's AXI3-only
    signals come out beside it (``f2h_wid``, ``f2h_awlock``/``f2h_arlock`` with both bits)."""

    def __init__(self, config):
        from boards.cyclonev import De10Fabric
        self.fabric = De10Fabric(config)
        lw, f2h = self.fabric.lw.signature, self.fabric.f2h.signature
        super().__init__({
            "lw": Out(AxiSlaveSignature(32, lw.addr_bits, lw.id_bits, 8, True)),
            "f2h": In(AxiSlaveSignature(f2h.data_bits, f2h.addr_bits, f2h.id_bits, 8, False, attrs=True,
                                        user_bits=f2h.user_bits)),
            "f2h_wid": Out(f2h.id_bits), "f2h_awlock": Out(2), "f2h_arlock": Out(2), "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fabric = fab = self.fabric
        for outer_port, inner_port in ((self.lw, fab.lw), (self.f2h, fab.f2h)):
            for name, member in inner_port.signature.members.items():
                if name == "wid" and inner_port is fab.f2h:
                    continue
                outer, inner = getattr(outer_port, name), getattr(inner_port, name)
                if member.flow == wiring.In:
                    m.d.comb += inner.eq(outer)
                else:
                    m.d.comb += outer.eq(inner)
        m.d.comb += [self.f2h_wid.eq(fab.f2h.wid), self.f2h_awlock.eq(fab.f2h.awlock),
                     self.f2h_arlock.eq(fab.f2h.arlock), self.irq.eq(fab.irq)]
        return m
