"""Loading, validating and deriving the VTA configuration (``vta_config.json``).

Everything numeric that the hardware, runtime, simulators and compiler need is derived here
from the eleven configuration keys (and the optional ones, ``OPTIONAL_KEYS``); nothing else in the
project hard-codes these numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .isa import EXTENSIONS, Isa, IsaLayoutError

#: The repository's configuration file (the single source of truth).
DEFAULT_CONFIG_PATH = (Path(__file__).parent / "default_config.json").resolve()

#: Environment variable naming a configuration file that replaces the default one.
CONFIG_ENV_VAR = "VTA_CONFIG"

HW_VER = "0.0.2"
PAGE_BITS = 12
PAGE_BYTES = 1 << PAGE_BITS
#: Largest transfer (instruction or uop stream) the runtime hands to a device at once.
MAX_XFER = 1 << 25
INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8
UOP_BITS = 32
UOP_ELEM_BYTES = UOP_BITS // 8

# key -> (type, inclusive range or allowed set, why the limit exists)
_INT_KEYS: dict[str, tuple[int, int, str]] = {
    "LOG_INP_WIDTH": (3, 3, "only 8-bit signed inputs are implemented"),
    "LOG_WGT_WIDTH": (3, 3, "only 8-bit signed weights are implemented"),
    "LOG_ACC_WIDTH": (5, 5, "only 32-bit accumulators are implemented"),
    "LOG_BATCH": (0, 4, "BATCH is 1..16"),
    "LOG_BLOCK": (1, 6, "BLOCK is 2..64 (a weight element must fit a 4 KiB page)"),
    "LOG_UOP_BUFF_SIZE": (2, 24, "buffer sizes are 2^x bytes"),
    "LOG_INP_BUFF_SIZE": (4, 24, "buffer sizes are 2^x bytes"),
    "LOG_WGT_BUFF_SIZE": (4, 24, "buffer sizes are 2^x bytes"),
    "LOG_ACC_BUFF_SIZE": (4, 24, "buffer sizes are 2^x bytes"),
}
KEYS = ("TARGET", "HW_VER", *_INT_KEYS)
# Optional keys: a configuration without them is exactly what it was before they existed (same derived
# numbers, same hash); one that states the target's default is normalised to leave it out.
# key -> (inclusive range, what it means)
_OPTIONAL_INT_KEYS: dict[str, tuple[int, int, str]] = {
    "FPGA_FREQ": (10, 1000, "the clock the core is built for, in MHz (default: the TARGET's)"),
    "AXI_PORTS": (1, 2, "memory ports the core's DMA reads are spread over (default 1)"),
}
#: Keys a configuration may leave out; without them it is exactly HW_VER 0.0.2.
OPTIONAL_KEYS = ("ISA_EXTENSIONS", *_OPTIONAL_INT_KEYS)
#: Longest burst (in beats of the core's bus) when the core's reads are spread over several ports: the
#: board top splits every burst into one per port and buffers the halves (``vta_hw.axi_split``).
SPLIT_MAX_BURST = 32

# Per-target FPGA facts (spec 1.4). sim and tsim model the Pynq system.
_PYNQ = {
    "fpga_device": "xc7z020clg400-1",
    "fpga_family": "zynq-7000",
    "fpga_board": None,
    "fpga_board_rev": None,
    "fpga_freq": 100,
    "fpga_per": 7,
    "fpga_log_axi_bus_width": 6,
    "fpga_axi_max_burst": 16,   # the Zynq-7000's S_AXI_ACP is AXI3: bursts of at most 16 beats
    "fpga_axi_ports": 1,        # coherent memory ports for the core: S_AXI_ACP
    "axi_prot_bits": "000",
    "axi_cache_bits": "1111",
    "ip_reg_map_range": 0x1000,
    "fetch_base_addr": 0x43C00000,
    "load_base_addr": 0x43C01000,
    "compute_base_addr": 0x43C02000,
    "store_base_addr": 0x43C03000,
    "bitstream_ext": ".bit",   # what the vendor flow produces and the board's loader takes
}
_ULTRA96 = {
    **_PYNQ,
    "fpga_device": "xczu3eg-sbva484-1-i",  # Ultra96-V2 (V1 was -1-e)
    "fpga_family": "zynq-ultrascale+",
    "fpga_freq": 333,
    "fpga_per": 2,
    "fpga_log_axi_bus_width": 7,
    "fpga_axi_max_burst": 256,  # S_AXI_HPC0_FPD is AXI4
    "fpga_axi_ports": 2,        # coherent memory ports: S_AXI_HPC0_FPD and S_AXI_HPC1_FPD
    "axi_prot_bits": "010",
    "fetch_base_addr": 0xA0000000,
    "load_base_addr": 0xA0001000,
    "compute_base_addr": 0xA0002000,
    "store_base_addr": 0xA0003000,
}
# ZCU104: the Ultra96's system (PS8, 333 MHz, 128-bit AXI, the same register window) on a larger part
_ZCU104 = {
    **_ULTRA96,
    "fpga_device": "xczu7ev-ffvc1156-2-e",
    "fpga_board": "xilinx.com:zcu104:part0",
    "fpga_board_rev": "1.1",
}
# DE10-Nano: Cyclone V SoC; the registers sit on the HPS's lightweight bridge (0xFF200000 + 0x20000)
_DE10NANO = {
    **_PYNQ,
    "fpga_device": "5CSEBA6U23I7",
    "fpga_family": "Cyclone V",
    "fpga_freq": 100,
    "fpga_per": 2,
    "fpga_log_axi_bus_width": 6,
    "axi_prot_bits": "100",
    "fetch_base_addr": 0xFF220000,
    "load_base_addr": 0xFF221000,
    "compute_base_addr": 0xFF222000,
    "store_base_addr": 0xFF223000,
    "bitstream_ext": ".rbf",   # raw binary (compressed), what the Linux FPGA manager of a Cyclone V takes
}
# sim and tsim model the Pynq system; they take a board's AXI_PORTS so that a board's configuration can be
# compiled with TARGET sim (tsim runs it with the board's system: TsimDevice(board_config))
_SIM = {**_PYNQ, "fpga_axi_ports": 2}
TARGETS: dict[str, dict[str, Any]] = {"sim": _SIM, "tsim": _SIM, "pynq": _PYNQ, "ultra96": _ULTRA96,
                                      "zcu104": _ZCU104, "de10nano": _DE10NANO}
#: Targets whose device is a simulator on this machine, and those that are boards.
SIMULATED_TARGETS = ("sim", "tsim")
BOARD_TARGETS = tuple(t for t in TARGETS if t not in SIMULATED_TARGETS)

# Register offsets of the original HLS design (spec 1.5); exported by ``--defs`` for compatibility.
HLS_REG_OFFSETS = {
    "FETCH_INSN_COUNT_OFFSET": 16,
    "FETCH_INSN_ADDR_OFFSET": 24,
    "LOAD_INP_ADDR_OFFSET": 16,
    "LOAD_WGT_ADDR_OFFSET": 24,
    "COMPUTE_DONE_WR_OFFSET": 16,
    "COMPUTE_DONE_RD_OFFSET": 24,
    "COMPUTE_UOP_ADDR_OFFSET": 32,
    "COMPUTE_BIAS_ADDR_OFFSET": 40,
    "STORE_OUT_ADDR_OFFSET": 16,
}


class ConfigError(ValueError):
    """A configuration that this VTA cannot build; the message names key, value and limit."""


class Config:
    """A validated VTA configuration and every number derived from it.

    Build one with :func:`load_config`. Attributes use the original VTA names
    (``BATCH``, ``INP_ELEM_BYTES``, ``LOG_ACC_BUFF_DEPTH``, ``MODEL`` ...).
    """

    def __init__(self, cfg: Mapping[str, Any], source: str = "<dict>", *, _explain: bool = True):
        self.source = source
        raw = _validate_keys(dict(cfg), source)
        self._raw = raw
        for k, v in raw.items():
            setattr(self, k, v)
        self.AXI_PORTS: int = raw.get("AXI_PORTS", 1)
        #: the enabled ISA extensions in canonical order (empty: HW_VER 0.0.2 exactly)
        self.ISA_EXTENSIONS: tuple[str, ...] = tuple(raw.get("ISA_EXTENSIONS", ()))
        self._derive()
        try:
            self.isa = Isa(self.LOG_UOP_BUFF_DEPTH, self.LOG_ACC_BUFF_DEPTH, self.LOG_INP_BUFF_DEPTH,
                           self.LOG_WGT_BUFF_DEPTH, self.ISA_EXTENSIONS)
        except IsaLayoutError as exc:
            raise ConfigError(self._explain_isa_misfit(exc) if _explain else str(exc)) from None

    # ------------------------------------------------------------------ derivation
    def _derive(self) -> None:
        self.LOG_BLOCK_IN = self.LOG_BLOCK_OUT = self.LOG_BLOCK
        self.LOG_OUT_WIDTH = self.LOG_INP_WIDTH
        self.LOG_OUT_BUFF_SIZE = self.LOG_ACC_BUFF_SIZE + self.LOG_OUT_WIDTH - self.LOG_ACC_WIDTH

        self.INP_WIDTH = 1 << self.LOG_INP_WIDTH
        self.WGT_WIDTH = 1 << self.LOG_WGT_WIDTH
        self.ACC_WIDTH = 1 << self.LOG_ACC_WIDTH
        self.OUT_WIDTH = 1 << self.LOG_OUT_WIDTH
        self.BATCH = 1 << self.LOG_BATCH
        self.BLOCK_IN = 1 << self.LOG_BLOCK_IN
        self.BLOCK_OUT = 1 << self.LOG_BLOCK_OUT

        self.INP_ELEM_BITS = self.INP_WIDTH * self.BATCH * self.BLOCK_IN
        self.WGT_ELEM_BITS = self.WGT_WIDTH * self.BLOCK_OUT * self.BLOCK_IN
        self.ACC_ELEM_BITS = self.ACC_WIDTH * self.BATCH * self.BLOCK_OUT
        self.OUT_ELEM_BITS = self.OUT_WIDTH * self.BATCH * self.BLOCK_OUT
        self.UOP_ELEM_BITS = UOP_BITS
        for n in ("INP", "WGT", "ACC", "OUT", "UOP"):
            setattr(self, f"{n}_ELEM_BYTES", getattr(self, f"{n}_ELEM_BITS") // 8)
        # the original names for the same numbers
        self.INP_MATRIX_WIDTH = self.INP_ELEM_BITS
        self.WGT_MATRIX_WIDTH = self.WGT_ELEM_BITS
        self.ACC_MATRIX_WIDTH = self.ACC_ELEM_BITS
        self.OUT_MATRIX_WIDTH = self.OUT_ELEM_BITS
        self.INSN_BYTES = INSN_BYTES

        if self.WGT_ELEM_BYTES > PAGE_BYTES:
            raise ConfigError(
                f"{self.source}: LOG_BLOCK={self.LOG_BLOCK} gives a weight element of {self.WGT_ELEM_BYTES} bytes; "
                f"an element must fit one {PAGE_BYTES}-byte page, so LOG_BLOCK must be at most 6")

        for n in ("UOP", "INP", "WGT", "ACC", "OUT"):
            log_size = getattr(self, f"LOG_{n}_BUFF_SIZE")
            elem_bytes = getattr(self, f"{n}_ELEM_BYTES")
            log_elem = elem_bytes.bit_length() - 1
            if log_size < log_elem:
                key = "LOG_ACC_BUFF_SIZE" if n == "OUT" else f"LOG_{n}_BUFF_SIZE"
                raise ConfigError(
                    f"{self.source}: {key}={getattr(self, key)} makes the {n} buffer ({1 << log_size} bytes) smaller "
                    f"than one {n} element ({elem_bytes} bytes); it must be at least "
                    f"{log_elem + getattr(self, key) - log_size}")
            setattr(self, f"{n}_BUFF_SIZE", 1 << log_size)
            setattr(self, f"LOG_{n}_BUFF_DEPTH", log_size - log_elem)
            setattr(self, f"{n}_BUFF_DEPTH", 1 << (log_size - log_elem))

        t = TARGETS[self.TARGET]
        for k, v in t.items():
            setattr(self, k, v)
        if "FPGA_FREQ" in self._raw:
            self.fpga_freq = self._raw["FPGA_FREQ"]
            self.fpga_per = max(1, int(700 / self.fpga_freq))   # the original's HLS period: 70% of the clock's
        #: one memory port of the board (bits per beat); the core's own bus is AXI_PORTS of them side by side
        self.AXI_PORT_DATA_BITS = 1 << self.fpga_log_axi_bus_width
        self.AXI_DATA_BITS = self.AXI_PORT_DATA_BITS * self.AXI_PORTS
        self.LOG_BUS_WIDTH = self.AXI_DATA_BITS.bit_length() - 1
        self.AXI_DATA_BYTES = self.AXI_DATA_BITS // 8
        self.AXI_MAX_BURST_BEATS = self.fpga_axi_max_burst if self.AXI_PORTS == 1 else \
            min(self.fpga_axi_max_burst, SPLIT_MAX_BURST)

        # optional keys add their tags (..._17_mul_acc8_p2_300mhz): a core built with one never matches a config
        # without it
        self.BITSTREAM = (f"{self.BATCH}x{self.BLOCK_IN}_i{self.INP_WIDTH}w{self.WGT_WIDTH}a{self.ACC_WIDTH}"
                          f"_{self.LOG_UOP_BUFF_SIZE}_{self.LOG_INP_BUFF_SIZE}_{self.LOG_WGT_BUFF_SIZE}"
                          f"_{self.LOG_ACC_BUFF_SIZE}"
                          + "".join(f"_{EXTENSIONS[n].tag}" for n in self.ISA_EXTENSIONS)
                          + (f"_p{self.AXI_PORTS}" if "AXI_PORTS" in self._raw else "")
                          + (f"_{self.fpga_freq}mhz" if "FPGA_FREQ" in self._raw else ""))
        self.MODEL = f"{self.TARGET}_{self.BITSTREAM}"
        self.MAX_XFER = MAX_XFER
        self.PAGE_BYTES = PAGE_BYTES

    def _explain_isa_misfit(self, exc: IsaLayoutError) -> str:
        """Turn an ISA layout overflow into a message naming the config key(s) and their limits."""
        keys = {"LUD": "LOG_UOP_BUFF_SIZE", "LAD": "LOG_ACC_BUFF_SIZE", "LID": "LOG_INP_BUFF_SIZE",
                "LWD": "LOG_WGT_BUFF_SIZE"}
        fixes, involved = [], []
        for sym in exc.depends_on:
            key = keys[sym]
            depth_name = f"LOG_{key.split('_')[1]}_BUFF_DEPTH"
            involved.append(f"{key}={getattr(self, key)} ({depth_name}={getattr(self, depth_name)})")
            for v in range(getattr(self, key) - 1, _INT_KEYS[key][0] - 1, -1):
                try:
                    Config({**self._raw, key: v}, _explain=False)
                except ConfigError:
                    continue
                fixes.append(f"{key}={getattr(self, key)} ({depth_name}={getattr(self, depth_name)}) "
                             f"must be at most {v}")
                break
        advice = "; or ".join(fixes) if fixes else "reduce " + ", ".join(involved)
        return f"{self.source}: the configuration does not fit the VTA ISA: {exc}: {advice}"

    # ------------------------------------------------------------------ views
    @property
    def cfg_dict(self) -> dict[str, Any]:
        """The eleven configuration keys and the optional ones it sets (what ``vta_config.json`` holds)."""
        d = dict(self._raw)
        if "ISA_EXTENSIONS" in d:
            d["ISA_EXTENSIONS"] = list(d["ISA_EXTENSIONS"])
        return d

    def pkg_dict(self) -> dict[str, Any]:
        """The keys plus the derived keys the original PkgConfig exported."""
        d = self.cfg_dict
        d.update(LOG_BLOCK_IN=self.LOG_BLOCK_IN, LOG_BLOCK_OUT=self.LOG_BLOCK_OUT,
                 LOG_OUT_WIDTH=self.LOG_OUT_WIDTH, LOG_OUT_BUFF_SIZE=self.LOG_OUT_BUFF_SIZE)
        return d

    def to_json(self) -> str:
        return json.dumps(self.cfg_dict, indent=2) + "\n"

    def hash(self, *, hardware_only: bool = False) -> str:
        """A short, stable hash of the configuration, used to key build caches.

        ``hardware_only`` ignores the fields that do not change the generated hardware
        (TARGET only matters through the AXI data width, burst length and the AxCACHE/AxPROT bits the core
        drives; FPGA_FREQ not at all: the same core runs at any clock it meets).
        """
        d = self.cfg_dict
        if hardware_only:
            d.pop("TARGET")
            d.pop("FPGA_FREQ", None)
            d["AXI_DATA_BITS"] = self.AXI_DATA_BITS
            d["AXI_MAX_BURST_BEATS"] = self.AXI_MAX_BURST_BEATS
            d["AXI_ATTRS"] = self.axi_cache_bits + self.axi_prot_bits
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def replace(self, **changes: Any) -> Config:
        """A new validated config with some keys changed."""
        return Config({**self._raw, **changes}, source=f"{self.source} (modified)")

    def mem_bank(self, name: str) -> dict[str, int]:
        """SRAM bank geometry of the original Vivado block design for ``inp``, ``wgt`` or ``out``."""
        bits = {"inp": self.INP_ELEM_BITS, "wgt": self.WGT_ELEM_BITS, "out": self.OUT_ELEM_BITS}[name]
        size = {"inp": self.INP_BUFF_SIZE, "wgt": self.WGT_BUFF_SIZE, "out": self.OUT_BUFF_SIZE}[name]
        max_bus = 1024
        width = min(bits, max_bus)
        return {
            "banks": -(-bits // max_bus),
            "width": width,
            "depth": size * 8 // bits,
            "axi_ratio": max(width // self.AXI_DATA_BITS, 1),
        }

    def defs(self) -> list[str]:
        """The ``-DVTA_*`` macro list of the original ``vta_config.py --defs``."""
        out = [f"-DVTA_{k}={v}" for k, v in self.pkg_dict().items() if k != "ISA_EXTENSIONS"]
        out += [f"-DVTA_EXT_{n.upper()}=1" for n in self.ISA_EXTENSIONS]
        out.append(f"-DVTA_LOG_BUS_WIDTH={self.LOG_BUS_WIDTH}")
        out.append(f"-DVTA_IP_REG_MAP_RANGE=0x{self.ip_reg_map_range:X}")
        for blk in ("fetch", "load", "compute", "store"):
            out.append(f"-DVTA_{blk.upper()}_ADDR=0x{getattr(self, blk + '_base_addr'):08X}")
        out += [f"-DVTA_{k}={v}" for k, v in HLS_REG_OFFSETS.items()]
        out.append("-DVTA_COHERENT_ACCESSES=true")
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in self._raw.items())))

    def __repr__(self) -> str:
        return f"Config({self.MODEL!r}, source={self.source!r})"


def _validate_keys(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    unknown = sorted(set(cfg) - set(KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        hint = ""
        if set(unknown) & {"HW_FREQ", "HW_CLK_TARGET"}:
            hint = " (HW_FREQ/HW_CLK_TARGET were removed from VTA; the clock follows TARGET, or FPGA_FREQ in MHz)"
        raise ConfigError(f"{source}: unknown configuration key(s) {', '.join(unknown)}{hint}; "
                          f"the valid keys are {', '.join(KEYS)} and the optional {', '.join(OPTIONAL_KEYS)}")
    missing = [k for k in KEYS if k not in cfg]
    if missing:
        raise ConfigError(f"{source}: missing configuration key(s) {', '.join(missing)}")
    target = cfg["TARGET"]
    if not isinstance(target, str):
        raise ConfigError(f"{source}: TARGET must be a string, got {type(target).__name__} {target!r}")
    if target not in TARGETS:
        raise ConfigError(f"{source}: unknown TARGET {target!r}; supported targets are {', '.join(TARGETS)}")
    hw_ver = cfg["HW_VER"]
    if hw_ver != HW_VER:
        raise ConfigError(f"{source}: HW_VER {hw_ver!r} is not supported; this VTA implements ISA {HW_VER!r} "
                          "(0.0.1 is binary-incompatible)")
    for key, (lo, hi, why) in _INT_KEYS.items():
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{source}: {key} must be an integer, got {type(v).__name__} {v!r}")
        if not lo <= v <= hi:
            rng = f"{lo}" if lo == hi else f"between {lo} and {hi}"
            raise ConfigError(f"{source}: {key}={v} is out of range: it must be {rng} ({why})")
    out = {k: cfg[k] for k in KEYS}
    defaults = {"FPGA_FREQ": TARGETS[target]["fpga_freq"], "AXI_PORTS": 1}
    for key, (lo, hi, what) in _OPTIONAL_INT_KEYS.items():
        if key not in cfg:
            continue
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{source}: {key} must be an integer, got {type(v).__name__} {v!r} ({what})")
        if not lo <= v <= hi:
            raise ConfigError(f"{source}: {key}={v} is out of range: it must be between {lo} and {hi} ({what})")
        if v != defaults[key]:
            out[key] = v
    ports = TARGETS[target]["fpga_axi_ports"]
    if out.get("AXI_PORTS", 1) > ports:
        raise ConfigError(f"{source}: AXI_PORTS={out['AXI_PORTS']} but TARGET={target} has {ports} coherent memory "
                          f"port{'s' if ports > 1 else ''} for the core; AXI_PORTS must be at most {ports}")
    extensions = _validate_extensions(cfg.get("ISA_EXTENSIONS", []), source)
    if extensions:   # an empty list is the same as no key: the config (and its hash) is HW_VER 0.0.2's
        out["ISA_EXTENSIONS"] = extensions
    return out


def _validate_extensions(value: Any, source: str) -> list[str]:
    """ISA_EXTENSIONS as a list of known names in canonical order, or a ConfigError naming the key."""
    known = ", ".join(f"{e.name} ({e.summary.split(':')[0]})" for e in EXTENSIONS.values())
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) for n in value):
        raise ConfigError(f"{source}: ISA_EXTENSIONS must be a list of extension names such as "
                          f"[\"alu_mul\", \"acc_8bit\"], got {type(value).__name__} {value!r}; the extensions are "
                          f"{known}")
    for name in value:
        if name not in EXTENSIONS:
            raise ConfigError(f"{source}: ISA_EXTENSIONS names an unknown extension {name!r}; the extensions are "
                              f"{known}")
    dup = sorted({n for n in value if list(value).count(n) > 1})
    if dup:
        raise ConfigError(f"{source}: ISA_EXTENSIONS names {', '.join(dup)} more than once")
    return [n for n in EXTENSIONS if n in value]


def load_config(cfg: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None) -> Config:
    """Load a configuration from a Config, a dict, a JSON file path, ``$VTA_CONFIG`` or the default file."""
    if isinstance(cfg, Config):
        return cfg
    if isinstance(cfg, Mapping):
        return Config(cfg)
    if cfg is None:
        env = os.environ.get(CONFIG_ENV_VAR)
        path = Path(env) if env else DEFAULT_CONFIG_PATH
        source = f"{path} (from ${CONFIG_ENV_VAR})" if env else str(path)
    else:
        path = Path(cfg)
        source = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {source}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a configuration must be a JSON object, got {type(data).__name__}")
    return Config(data, source=source)
