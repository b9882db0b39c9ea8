"""Amaranth platforms of the supported boards, and what each board means for the configuration.

On the Zynq boards no PL pins are used: the core is clocked and reset by the processing system
and talks to it over AXI only, so the platforms mostly name the part and the toolchain (Vivado).
The DE10-Nano's core runs from the board oscillator through a PLL (``boards.cyclonev``; Quartus).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.build import Attrs
from amaranth.vendor import XilinxPlatform
from amaranth_boards.arty_z7 import ArtyZ720Platform
from amaranth_boards.resources import ButtonResources, LEDResources, SwitchResources

from vta_hw.spec import Config, ConfigError, load_config
from vta_hw.synth import DEVICES, Device

from .cyclonev import De10NanoVtaPlatform


class PynqZ1Platform(ArtyZ720Platform):
    """Digilent PYNQ-Z1: xc7z020clg400-1, like the Arty Z7-20 (same part, 125 MHz clock on H16, LEDs,
    buttons and switches); its Arduino/RPi headers are not described here."""


class PynqZ2Platform(ArtyZ720Platform):
    """TUL PYNQ-Z2: xc7z020clg400-1 with the same basic PL resources as the Arty Z7-20."""


class Ultra96V2Platform(XilinxPlatform):
    """Avnet Ultra96-V2: xczu3eg-sbva484-1-i. The PL has no oscillator; clocks come from the PS."""
    device = "xczu3eg"
    package = "sbva484"
    speed = "1-i"
    resources = []
    connectors = []


class ZCU104Platform(XilinxPlatform):
    """Xilinx ZCU104 (rev 1.0): xczu7ev-ffvc1156-2-e. The VTA top uses no PL pins (PS clock and
    reset); the board's PL LEDs, push buttons and DIP switches (bank 88, 3.3 V) are here for users."""
    device = "xczu7ev"
    package = "ffvc1156"
    speed = "2-e"
    resources = [
        *LEDResources(pins="D5 D6 A5 B5", attrs=Attrs(IOSTANDARD="LVCMOS33")),
        *ButtonResources(pins="B4 C4 B3 C3", attrs=Attrs(IOSTANDARD="LVCMOS33")),
        *SwitchResources(pins="E4 D4 F5 F4", attrs=Attrs(IOSTANDARD="LVCMOS33")),
    ]
    connectors = []


#: Capacity of the ZCU104's part, for the utilization check (xczu7ev: 230,400 LUTs, 312 BRAM36)
XCZU7EV = Device("xczu7ev (ZCU104)", "xcup", 230_400, 460_800, 312, 1_728, "DSP48E2")


@dataclass(frozen=True)
class Board:
    name: str
    platform: type
    target: str          # the config TARGET whose derived numbers (clock, AXI width, addresses) apply
    family: str          # "zynq7", "zynqmp" or "cyclonev"
    part: str
    capacity: Device | None = None   # Xilinx parts: what the yosys estimate is checked against
    flow: str = "vivado"             # the vendor's bitstream flow (boards.flow.FLOWS): "vivado" or "quartus"

    def config_for(self, cfg: Config) -> Config:
        """The config to build for this board: sim/tsim configs take the board's TARGET; a board
        TARGET must match."""
        if cfg.TARGET in ("sim", "tsim"):
            return cfg.replace(TARGET=self.target)
        if cfg.TARGET != self.target:
            raise ConfigError(f"{cfg.source}: TARGET {cfg.TARGET!r} does not match board {self.name} (TARGET "
                              f"{self.target!r}); pass a configuration with TARGET {self.target!r}")
        return cfg


BOARDS = {
    "pynq-z1": Board("pynq-z1", PynqZ1Platform, "pynq", "zynq7", "xc7z020clg400-1", DEVICES["xc7"]),
    "pynq-z2": Board("pynq-z2", PynqZ2Platform, "pynq", "zynq7", "xc7z020clg400-1", DEVICES["xc7"]),
    "ultra96": Board("ultra96", Ultra96V2Platform, "ultra96", "zynqmp", "xczu3eg-sbva484-1-i", DEVICES["xcup"]),
    "zcu104": Board("zcu104", ZCU104Platform, "zcu104", "zynqmp", "xczu7ev-ffvc1156-2-e", XCZU7EV),
    "de10-nano": Board("de10-nano", De10NanoVtaPlatform, "de10nano", "cyclonev", "5CSEBA6U23I7", flow="quartus"),
}
DEFAULT_BOARD = {"sim": "pynq-z1", "tsim": "pynq-z1", "pynq": "pynq-z1", "ultra96": "ultra96", "zcu104": "zcu104",
                 "de10nano": "de10-nano"}


def board_for(name: str | None, cfg: Config | None = None) -> Board:
    cfg = load_config(cfg)
    name = name or DEFAULT_BOARD[cfg.TARGET]
    try:
        return BOARDS[name]
    except KeyError:
        raise ConfigError(f"unknown board {name!r}; supported boards are {', '.join(BOARDS)}") from None
