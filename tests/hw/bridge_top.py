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
