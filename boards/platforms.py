"""Amaranth platforms of the supported boards, and what each board means for the configuration.

No PL pins are used: the core is clocked and reset by the processing system and talks to it over
AXI only, so the platforms mostly name the part and the toolchain (Vivado).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.vendor import XilinxPlatform
from amaranth_boards.arty_z7 import ArtyZ720Platform

from vta_hw.spec import Config, ConfigError, load_config


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


@dataclass(frozen=True)
class Board:
    name: str
    platform: type
    target: str          # the config TARGET whose derived numbers (clock, AXI width, addresses) apply
    family: str          # "zynq7" or "zynqmp"
    part: str

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
    "pynq-z1": Board("pynq-z1", PynqZ1Platform, "pynq", "zynq7", "xc7z020clg400-1"),
    "pynq-z2": Board("pynq-z2", PynqZ2Platform, "pynq", "zynq7", "xc7z020clg400-1"),
    "ultra96": Board("ultra96", Ultra96V2Platform, "ultra96", "zynqmp", "xczu3eg-sbva484-1-i"),
}
DEFAULT_BOARD = {"sim": "pynq-z1", "tsim": "pynq-z1", "pynq": "pynq-z1", "ultra96": "ultra96"}


def board_for(name: str | None, cfg: Config | None = None) -> Board:
    cfg = load_config(cfg)
    name = name or DEFAULT_BOARD[cfg.TARGET]
    try:
        return BOARDS[name]
    except KeyError:
        raise ConfigError(f"unknown board {name!r}; supported boards are {', '.join(BOARDS)}") from None
