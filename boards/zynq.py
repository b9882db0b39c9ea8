"""Zynq tops: the processing system (PS7 or PS8 hard block) around the VTA core.

* The core runs in the ``sync`` domain clocked by PS clock 0 (FCLK0 / pl_clk0) through a global
  buffer; its frequency is the config's ``fpga_freq`` (set in the PS, by the boot image or at run
  time by the driver); the PS's PL reset is synchronised into the domain.
* The core's register file sits behind the PS's general-purpose master port (Zynq-7000
  M_AXI_GP0 at 0x4000_0000, register window at the config's ``fetch_base_addr``; ZynqMP
  M_AXI_HPM0_FPD at 0xA000_0000) through :class:`boards.axi_bridge.AxiToLite`.
* The core's AXI master drives the coherent port the original VTA used: Zynq-7000 S_AXI_ACP (AXI3,
  64-bit, bursts of at most 16 beats, AxUSER[0]=1 for coherent transactions) or ZynqMP
  S_AXI_HPC0_FPD (AXI4, 128-bit). With ``AXI_PORTS = 2`` (ZynqMP) the core's 256-bit master goes through
  :class:`vta_hw.axi_split.AxiSplit` onto S_AXI_HPC0_FPD and S_AXI_HPC1_FPD, the two coherent ports.
* The core's interrupt goes to the PS (IRQ_F2P[0] / pl_ps_irq0[0]).

Port names are those of the hard-block primitives (yosys ``cells_xtra.v``); the PS itself is a
black box for synthesis, configured by the boot image (DDR, MIO, clocks).
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, ClockDomain, ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In

from vta_hw.axi_split import AxiSplit
from vta_hw.core import VtaCore
from vta_hw.spec import Config

from .axi_bridge import AxiToLite

#: Largest burst the AXI3 ports of the Zynq-7000 PS accept.
AXI3_MAX_BURST = 16

# (primitive prefix, address bits, id bits, len bits, size bits, lock bits, user bits, axi3)
PS7_GP0 = ("MAXIGP0", 32, 12, 4, 2, 2, 0, True)
PS7_ACP = ("SAXIACP", 32, 3, 4, 2, 2, 5, True)
PS8_HPM0 = ("MAXIGP0", 40, 16, 8, 3, 1, 16, False)
PS8_HPC0 = ("SAXIGP0", 49, 6, 8, 3, 1, 1, False)
PS8_HPC1 = ("SAXIGP1", 49, 6, 8, 3, 1, 1, False)


def _gp_master_ports(m: Module, port, bridge: AxiToLite, aclk) -> dict:
    """Instance arguments that connect the PS's general-purpose master port to the bridge."""
    p, addr_bits, id_bits, len_bits, size_bits, lock_bits, user_bits, axi3 = port
    s = bridge.axi
    args = {f"i_{p}ACLK": aclk}
    for ch in ("AW", "AR"):
        lc = ch.lower()
        args.update({
            f"o_{p}{ch}ADDR": getattr(s, f"{lc}addr")[:addr_bits], f"o_{p}{ch}ID": getattr(s, f"{lc}id"),
            f"o_{p}{ch}LEN": getattr(s, f"{lc}len"), f"o_{p}{ch}SIZE": getattr(s, f"{lc}size")[:size_bits],
            f"o_{p}{ch}BURST": getattr(s, f"{lc}burst"), f"o_{p}{ch}VALID": getattr(s, f"{lc}valid"),
            f"i_{p}{ch}READY": getattr(s, f"{lc}ready"),
        })
    args.update({
        f"o_{p}WDATA": s.wdata, f"o_{p}WSTRB": s.wstrb, f"o_{p}WLAST": s.wlast, f"o_{p}WVALID": s.wvalid,
        f"i_{p}WREADY": s.wready, f"i_{p}BID": s.bid, f"i_{p}BRESP": s.bresp, f"i_{p}BVALID": s.bvalid,
        f"o_{p}BREADY": s.bready, f"i_{p}RID": s.rid, f"i_{p}RDATA": s.rdata, f"i_{p}RRESP": s.rresp,
        f"i_{p}RLAST": s.rlast, f"i_{p}RVALID": s.rvalid, f"o_{p}RREADY": s.rready,
    })
    if axi3:
        args[f"o_{p}WID"] = s.wid
    return args


def _hp_slave_ports(m: Module, core, port, clocks: dict, prefix: str = "m_axi", write_id: int = VtaCore.write_id) \
        -> dict:
    """Instance arguments that connect an AXI master (the core's, or one port of ``AxiSplit``: the flat
    ports ``<prefix>_*`` of ``core``) to the PS's coherent slave port.

    The core routes read data and write responses by AXI ID, so RID and BID come back whole
    (the PS echoes the IDs the core sent, which fit in the core's ID width)."""
    p, addr_bits, id_bits, len_bits, size_bits, lock_bits, user_bits, axi3 = port
    args = dict(clocks)
    rid, bid = Signal(id_bits, name=f"{p.lower()}_rid"), Signal(id_bits, name=f"{p.lower()}_bid")

    def pin(name):
        return getattr(core, f"{prefix}_{name}")
    m.d.comb += [pin("rid").eq(rid), pin("bid").eq(bid)]
    for ch in ("AW", "AR"):
        lc = ch.lower()

        def g(name, lc=lc):
            return pin(f"{lc}{name}")
        args.update({
            f"i_{p}{ch}ADDR": g("addr").as_unsigned() if addr_bits <= 32 else Cat(g("addr"), C(0, addr_bits - 32)),
            f"i_{p}{ch}ID": Cat(g("id"), C(0, id_bits - len(g("id")))) if id_bits > len(g("id")) else g("id"),
            f"i_{p}{ch}LEN": g("len")[:len_bits], f"i_{p}{ch}SIZE": g("size")[:size_bits],
            f"i_{p}{ch}BURST": g("burst"), f"i_{p}{ch}LOCK": Cat(g("lock"), C(0, lock_bits - 1)),
            f"i_{p}{ch}CACHE": g("cache"), f"i_{p}{ch}PROT": g("prot"), f"i_{p}{ch}QOS": g("qos"),
            f"i_{p}{ch}USER": C(1, user_bits),      # AxUSER[0]: a coherent (shared) transaction
            f"i_{p}{ch}VALID": g("valid"), f"o_{p}{ch}READY": g("ready"),
        })
    args.update({
        f"i_{p}WDATA": pin("wdata"), f"i_{p}WSTRB": pin("wstrb"), f"i_{p}WLAST": pin("wlast"),
        f"i_{p}WVALID": pin("wvalid"), f"o_{p}WREADY": pin("wready"),
        f"o_{p}BID": bid, f"o_{p}BRESP": pin("bresp"),
        f"o_{p}BVALID": pin("bvalid"), f"i_{p}BREADY": pin("bready"),
        f"o_{p}RID": rid, f"o_{p}RDATA": pin("rdata"),
        f"o_{p}RRESP": pin("rresp"), f"o_{p}RLAST": pin("rlast"), f"o_{p}RVALID": pin("rvalid"),
        f"i_{p}RREADY": pin("rready"),
    })
    if axi3:
        args[f"i_{p}WID"] = C(write_id, id_bits)   # the core writes with one ID, in order
    return args


class _ZynqTop(Elaboratable):
    family = ""

    def __init__(self, config: Config):
        self.config = config
        self.core = VtaCore(config, max_burst_beats=min(self.max_burst, config.AXI_MAX_BURST_BEATS))

    max_burst = 256

    def _common(self, m: Module, platform, clk0: Signal, rstn0: Signal, buf: str) -> None:
        m.domains.sync = ClockDomain("sync")
        m.submodules.clkbuf = Instance(buf, i_I=clk0, o_O=ClockSignal("sync"))
        m.submodules.reset_sync = ResetSynchronizer(~rstn0, domain="sync")
        if platform is not None:
            platform.add_clock_constraint(clk0, self.config.fpga_freq * 1e6)
        m.submodules.core = self.core
        m.submodules.bridge = self.bridge
        core, lite = self.core, self.bridge.lite
        for name in ("awaddr", "awprot", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr", "arprot",
                     "arvalid", "rready"):
            m.d.comb += getattr(core, f"s_axi_{name}").eq(getattr(lite, name))
        for name in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp", "rvalid"):
            m.d.comb += getattr(lite, name).eq(getattr(core, f"s_axi_{name}"))


class Zynq7Top(_ZynqTop):
    """PYNQ-Z1/Z2: PS7 + core. FCLK0 -> BUFG -> sync; M_AXI_GP0 -> registers; core -> S_AXI_ACP."""
    family = "zynq7"
    max_burst = AXI3_MAX_BURST

    def __init__(self, config: Config):
        super().__init__(config)
        self.bridge = AxiToLite(data_bits=32, addr_bits=32, id_bits=12, len_bits=4, axi3=True)

    def elaborate(self, platform):
        m = Module()
        fclk, fclk_rstn = Signal(4), Signal(4)
        clk0, rstn0 = Signal(name="fclk0"), Signal(name="fclk0_resetn")
        m.d.comb += [clk0.eq(fclk[0]), rstn0.eq(fclk_rstn[0])]
        self._common(m, platform, clk0, rstn0, "BUFG")
        irq = Signal(20)
        m.d.comb += irq[0].eq(self.core.irq)
        ps_args = {"o_FCLKCLK": fclk, "o_FCLKRESETN": fclk_rstn, "i_IRQF2P": irq}
        ps_args.update(_gp_master_ports(m, PS7_GP0, self.bridge, ClockSignal("sync")))
        ps_args.update(_hp_slave_ports(m, self.core, PS7_ACP, {"i_SAXIACPACLK": ClockSignal("sync")}))
        m.submodules.ps7 = Instance("PS7", **ps_args)
        return m


class ZynqMPTop(_ZynqTop):
    """Ultra96: PS8 + core. pl_clk0 -> BUFG_PS -> sync; M_AXI_HPM0_FPD -> registers; core -> S_AXI_HPC0_FPD."""
    family = "zynqmp"

    def __init__(self, config: Config):
        super().__init__(config)
        self.bridge = AxiToLite(data_bits=128, addr_bits=40, id_bits=16, len_bits=8, axi3=False)

    def elaborate(self, platform):
        m = Module()
        plclk = Signal(4)
        emio = Signal(96)
        clk0, rstn0 = Signal(name="pl_clk0"), Signal(name="pl_resetn0")
        # pl_resetn0 is EMIO GPIO 95, as in Vivado's zynq_ultra_ps_e wrapper
        m.d.comb += [clk0.eq(plclk[0]), rstn0.eq(emio[95])]
        self._common(m, platform, clk0, rstn0, "BUFG_PS")
        irq = Signal(8)
        m.d.comb += irq[0].eq(self.core.irq)
        ps_args = {"o_PLCLK": plclk, "o_EMIOGPIOO": emio, "i_PLPSIRQ0": irq}
        ps_args.update(_gp_master_ports(m, PS8_HPM0, self.bridge, ClockSignal("sync")))
        clk = ClockSignal("sync")
        if self.config.AXI_PORTS == 1:
            ps_args.update(_hp_slave_ports(m, self.core, PS8_HPC0, {"i_SAXIGP0RCLK": clk, "i_SAXIGP0WCLK": clk}))
        else:   # the core's reads spread over HPC0 and HPC1
            cfg = self.config
            m.submodules.split = split = AxiSplit(cfg.AXI_DATA_BITS, cfg.AXI_MAX_BURST_BEATS)
            for name, member in split.signature.members.items():
                if name.startswith("s_axi_"):
                    core_pin, split_pin = getattr(self.core, "m_axi_" + name[6:]), getattr(split, name)
                    m.d.comb += (split_pin.eq(core_pin) if member.flow == In else core_pin.eq(split_pin))
            ps_args.update(_hp_slave_ports(m, split, PS8_HPC0, {"i_SAXIGP0RCLK": clk, "i_SAXIGP0WCLK": clk},
                                           prefix="m0_axi"))
            ps_args.update(_hp_slave_ports(m, split, PS8_HPC1, {"i_SAXIGP1RCLK": clk, "i_SAXIGP1WCLK": clk},
                                           prefix="m1_axi"))
        m.submodules.ps8 = Instance("PS8", **ps_args)
        return m


TOPS = {"zynq7": Zynq7Top, "zynqmp": ZynqMPTop}
