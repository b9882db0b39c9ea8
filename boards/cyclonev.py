"""DE10-Nano: the Cyclone V SoC's hard processor system (HPS) around the VTA core.

* Clock: the board's 50 MHz oscillator (FPGA_CLK1_50) through a fabric PLL (``altera_pll``) to the
  config's ``fpga_freq`` (100 MHz); the ``sync`` domain is held in reset until the PLL locks and
  while the HPS holds the fabric in reset (``h2f_rst_n``), synchronised.
* Registers: the HPS's lightweight HPS-to-FPGA bridge (AXI3, 32-bit, 21-bit addresses: the window
  0xFF20_0000-0xFF3F_FFFF) through :class:`boards.axi_bridge.AxiToLite`; the register file answers
  at the config's ``fetch_base_addr`` (0xFF22_0000, offset 0x2_0000 in the window, as the
  original's Platform Designer system placed it). Only the low 12 address bits reach the register
  file, so the whole 2 MiB window aliases it every 4 KiB: the driver maps only its own 4 KiB.
* Memory: the core's AXI master goes to the FPGA-to-HPS bridge (AXI3, 64-bit, 8-bit IDs, 5-bit
  AxUSER, bursts of at most 16 beats), through its ACP window: address ``a`` goes out as
  ``0x8000_0000 + a`` (the first GiB of SDRAM, which is all of the DE10-Nano's DDR3), so the
  accesses are coherent with the Cortex-A9 caches (AxCACHE 0b1111, AxUSER[0] shared) and the
  runtime needs no cache maintenance, as everywhere else (``VTA_COHERENT_ACCESSES``). This is the
  port the original used (its driver added 0x8000_0000 to CMA addresses; here the top does, so
  the runtime passes plain physical addresses as on every board). An FPGA-to-SDRAM port would be
  faster but not coherent, and its port configuration must be applied to the SDRAM controller
  while the SDRAM is idle (by the boot loader), which a bitstream loaded from Linux cannot do.
* Interrupt: the core's irq on f2h_irq0[0] (GIC SPI 40).

The HPS is the hard block's interface atoms (``cyclonev_hps_interface_*``, as a Platform Designer
system instantiates them), black boxes for synthesis; its configuration (SDRAM, clocks, pin
multiplexing) is the boot image's. The DSP blocks take one int8 product per 9x9 multiplier
(``vta_pack_int8_products = False``, see ``vta_hw.gemm``).
"""

from __future__ import annotations

from amaranth.hdl import C, ClockDomain, ClockSignal, Elaboratable, Instance, Module, Shape, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out
from amaranth.vendor import AlteraPlatform
from amaranth_boards.de10_nano import DE10NanoPlatform

from vta_hw.core import VtaCore
from vta_hw.spec import Config, ConfigError

from .axi_bridge import AxiSlaveSignature, AxiToLite, AxiWindow, connect_core_master

#: The HPS address window of the lightweight HPS-to-FPGA bridge (2 MiB, 21 address bits).
LW_BRIDGE_BASE, LW_BRIDGE_BYTES = 0xFF20_0000, 1 << 21
#: The ACP window of the FPGA-to-HPS bridge: coherent access to the first GiB of SDRAM.
ACP_WINDOW_BASE, ACP_WINDOW_BYTES = 0x8000_0000, 1 << 30
#: The board oscillator the PLL runs from.
REFCLK_MHZ = 50
#: AXI3 burst limit of both HPS bridges.
HPS_MAX_BURST = 16

# HPS bridge ports: (address bits, id bits, user bits); data widths the FPGA-to-HPS bridge takes
LW_PORT = (21, 12, 0)
F2H_PORT = (32, 8, 5)
F2H_PORT_SIZE = {32: 0b00, 64: 0b01, 128: 0b10}   # port_size_config; 0b11 = disabled


def lw_signature() -> AxiSlaveSignature:
    """The lightweight HPS-to-FPGA bridge's port, seen from the fabric (the slave)."""
    addr, ids, _ = LW_PORT
    return AxiSlaveSignature(32, addr, ids, 4, axi3=True)


def f2h_signature(config: Config) -> AxiSlaveSignature:
    """The FPGA-to-HPS bridge's port as a slave signature (the fabric is its master)."""
    addr, ids, user = F2H_PORT
    return AxiSlaveSignature(config.AXI_DATA_BITS, addr, ids, 4, axi3=True, attrs=True, user_bits=user)


class De10NanoVtaPlatform(DE10NanoPlatform):
    """The DE10-Nano (5CSEBA6U23I7) for the VTA top: Quartus flow ending in the compressed raw binary
    (``.rbf``) that the HPS's FPGA manager loads (fast passive parallel x32 with decompression,
    MSEL 01010)."""

    #: Cyclone V DSP blocks hold three 9x9 multipliers: one int8 product each (vta_hw.gemm)
    vta_pack_int8_products = False

    quartus_required_tools = [*AlteraPlatform.quartus_required_tools, "quartus_cpf"]
    # no second (debug) Verilog: it doubles the time to write the plan and Quartus does not read it
    quartus_file_templates = {k: v for k, v in AlteraPlatform.quartus_file_templates.items()
                              if k != "{{name}}.debug.v"}
    quartus_command_templates = [
        *AlteraPlatform.quartus_command_templates,
        r"""
        {{invoke_tool("quartus_cpf")}}
            -c -o bitstream_compression=on {{name}}.sof {{name}}.rbf
        """,
    ]


class De10Fabric(wiring.Component):
    """The fabric side of the DE10-Nano system: the core, the register bridge on the lightweight
    bridge's port (``lw``, the HPS is the master) and the ACP window onto the FPGA-to-HPS bridge's
    port (``f2h``, the fabric is the master). Everything but the hard block, so it can be
    simulated."""

    def __init__(self, config: Config):
        if config.AXI_DATA_BITS not in F2H_PORT_SIZE:
            raise ConfigError(f"{config.source}: the FPGA-to-HPS bridge is 32, 64 or 128 bits wide, not "
                              f"{config.AXI_DATA_BITS} (TARGET {config.TARGET})")
        self.config = config
        self.core = VtaCore(config, max_burst_beats=HPS_MAX_BURST)
        lw_addr, lw_id, _ = LW_PORT
        self.bridge = AxiToLite(data_bits=32, addr_bits=lw_addr, id_bits=lw_id, len_bits=4, axi3=True)
        f2h_addr, f2h_id, f2h_user = F2H_PORT
        self.window = AxiWindow(config.AXI_DATA_BITS, f2h_id, ACP_WINDOW_BASE, ACP_WINDOW_BYTES,
                                len_bits=4, axi3=True, user_bits=f2h_user, user=1, write_id=VtaCore.write_id,
                                port_addr_bits=f2h_addr)
        super().__init__({"lw": Out(lw_signature()), "f2h": In(f2h_signature(config)), "irq": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.bridge = bridge = self.bridge
        m.submodules.window = window = self.window
        wiring.connect(m, wiring.flipped(self.lw), bridge.axi)
        lite = bridge.lite
        for name in ("awaddr", "awprot", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr", "arprot",
                     "arvalid", "rready"):
            m.d.comb += getattr(core, f"s_axi_{name}").eq(getattr(lite, name))
        for name in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp", "rvalid"):
            m.d.comb += getattr(lite, name).eq(getattr(core, f"s_axi_{name}"))
        connect_core_master(m, core, window)
        wiring.connect(m, window.port, wiring.flipped(self.f2h))
        m.d.comb += self.irq.eq(core.irq)
        return m


def _axi_atom_ports(port) -> dict:
    """Instance arguments of an HPS bridge atom for the fabric's AXI port ``port``: the atom drives
    what the fabric receives."""
    return {("o_" if member.flow == In else "i_") + name: getattr(port, name)
            for name, member in port.signature.members.items()}


class CycloneVTop(Elaboratable):
    """DE10-Nano: HPS + core. 50 MHz -> PLL -> sync; lightweight bridge -> registers; core -> the
    FPGA-to-HPS bridge's ACP window."""

    def __init__(self, config: Config):
        self.config = config
        self.fabric = De10Fabric(config)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.fabric = fabric = self.fabric

        m.domains.sync = ClockDomain("sync")
        refclk = platform.request("clk50", 0).i if platform is not None else Signal(name="clk50")
        pll_clk, locked = Signal(1, name="pll_outclk"), Signal(name="pll_locked")
        m.submodules.pll = Instance(
            "altera_pll",
            p_fractional_vco_multiplier="false", p_reference_clock_frequency=f"{REFCLK_MHZ}.0 MHz",
            p_operation_mode="direct", p_number_of_clocks=1,
            p_output_clock_frequency0=f"{cfg.fpga_freq:.6f} MHz", p_phase_shift0="0 ps", p_duty_cycle0=50,
            p_pll_type="General", p_pll_subtype="General",
            i_refclk=refclk, i_rst=C(0), i_fbclk=C(0), o_outclk=pll_clk, o_locked=locked)
        m.d.comb += ClockSignal("sync").eq(pll_clk)

        h2f_rst_n = Signal(name="h2f_rst_n")
        m.submodules.reset_sync = ResetSynchronizer(~(h2f_rst_n & locked), domain="sync")
        m.submodules.hps_clocks_resets = Instance(
            "cyclonev_hps_interface_clocks_resets",
            o_h2f_rst_n=h2f_rst_n, i_f2h_pending_rst_ack=C(1), i_f2h_warm_rst_req_n=C(1),
            i_f2h_dbg_rst_req_n=C(1), i_f2h_cold_rst_req_n=C(1))
        m.submodules.hps_lw = Instance("cyclonev_hps_interface_hps2fpga_light_weight",
                                       i_clk=ClockSignal("sync"), **_axi_atom_ports(fabric.lw))
        m.submodules.hps_f2h = Instance("cyclonev_hps_interface_fpga2hps",
                                        i_port_size_config=C(F2H_PORT_SIZE[cfg.AXI_DATA_BITS], 2),
                                        i_clk=ClockSignal("sync"), **_axi_atom_ports(fabric.f2h))
        irq = Signal(64, name="f2h_irq")
        m.d.comb += irq[0].eq(fabric.irq)
        m.submodules.hps_interrupts = Instance("cyclonev_hps_interface_interrupts", i_irq=irq)
        # the interfaces this design does not use, disabled as Platform Designer leaves them
        m.submodules.hps_h2f = Instance("cyclonev_hps_interface_hps2fpga", i_port_size_config=C(0b11, 2))
        m.submodules.hps_boot = Instance(
            "cyclonev_hps_interface_boot_from_fpga",
            i_boot_from_fpga_ready=C(0), i_boot_from_fpga_on_failure=C(0), i_bsel_en=C(0), i_csel_en=C(0),
            i_csel=C(0b01, 2), i_bsel=C(0b001, 3))
        m.submodules.hps_dbg_apb = Instance("cyclonev_hps_interface_dbg_apb", i_DBG_APB_DISABLE=C(0),
                                            i_P_CLK_EN=C(0))
        m.submodules.hps_tpiu = Instance("cyclonev_hps_interface_tpiu_trace", i_traceclk_ctl=C(1))
        return m


def hps_blackboxes(config: Config) -> str:
    """Verilog black-box declarations of the HPS atoms the top instantiates (for yosys; Quartus
    knows them), with the port widths the top connects, kept as the hard block is."""
    def module(name: str, ports: dict[str, tuple[str, int]]) -> str:
        decl = ",\n".join(f"    {d} [{w - 1}:0] {p}" if w > 1 else f"    {d} {p}" for p, (d, w) in ports.items())
        # keep: the hard block is where everything ends, so without it yosys would remove the design
        return f"(* blackbox, keep *)\nmodule {name} (\n{decl}\n);\nendmodule\n"

    def axi(sig) -> dict:
        """The atom's side of a port whose signature is given from the fabric's side."""
        return {name: ("output" if member.flow == In else "input", Shape.cast(member.shape).width)
                for name, member in sig.members.items()}

    one = ("input", 1)
    return "\n".join([
        module("cyclonev_hps_interface_clocks_resets", {
            "h2f_rst_n": ("output", 1), "f2h_pending_rst_ack": one, "f2h_warm_rst_req_n": one,
            "f2h_dbg_rst_req_n": one, "f2h_cold_rst_req_n": one}),
        module("cyclonev_hps_interface_hps2fpga_light_weight", {"clk": one, **axi(lw_signature())}),
        module("cyclonev_hps_interface_fpga2hps", {"port_size_config": ("input", 2), "clk": one,
                                                   **axi(f2h_signature(config).flip())}),
        module("cyclonev_hps_interface_interrupts", {"irq": ("input", 64)}),
        module("cyclonev_hps_interface_hps2fpga", {"port_size_config": ("input", 2)}),
        module("cyclonev_hps_interface_boot_from_fpga", {
            "boot_from_fpga_ready": one, "boot_from_fpga_on_failure": one, "bsel_en": one, "csel_en": one,
            "csel": ("input", 2), "bsel": ("input", 3)}),
        module("cyclonev_hps_interface_dbg_apb", {"DBG_APB_DISABLE": one, "P_CLK_EN": one}),
        module("cyclonev_hps_interface_tpiu_trace", {"traceclk_ctl": one}),
    ])
