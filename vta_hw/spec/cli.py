"""``vta-config``: query the configuration, in the spirit of the original ``vta_config.py``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import Config, ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vta-config", description=__doc__)
    p.add_argument("--use-cfg", metavar="PATH", help="configuration file (default: $VTA_CONFIG or the repository's)")
    g = p.add_argument_group("queries (several may be given; each prints one line)")
    g.add_argument("--cfg-str", action="store_true", help="the MODEL string, e.g. sim_1x16_i8w8a32_15_15_18_17")
    g.add_argument("--bitstream", action="store_true", help="the bitstream name, e.g. 1x16_i8w8a32_15_15_18_17")
    g.add_argument("--cfg-json", action="store_true", help="the configuration keys and derived keys as JSON")
    g.add_argument("--cfg-hash", action="store_true", help="the hash that keys generated-hardware caches")
    g.add_argument("--defs", action="store_true", help="-DVTA_* macro definitions")
    g.add_argument("--cflags", action="store_true", help="same as --defs (there are no C include paths)")
    g.add_argument("--target", action="store_true", help="the TARGET")
    g.add_argument("--save-cfg-json", metavar="PATH", help="write the configuration keys to PATH")
    g.add_argument("--export-tcl", metavar="PATH", help="write Vivado Tcl constants to PATH")
    for field in ("dev", "family", "board", "board-rev", "freq", "per"):
        g.add_argument(f"--get-fpga-{field}", action="store_true")
    for field in ("axi-cache-bits", "axi-prot-bits", "ip-reg-map-range", "axi-data-bits"):
        g.add_argument(f"--get-{field}", action="store_true")
    for blk in ("fetch", "load", "compute", "store"):
        g.add_argument(f"--get-{blk}-base-addr", action="store_true")
    for mem in ("inp", "wgt", "out"):
        for field in ("banks", "width", "depth", "axi-ratio"):
            g.add_argument(f"--get-{mem}-mem-{field}", action="store_true")
    return p


def _tcl(cfg: Config) -> str:
    lines = [f"set TARGET {cfg.TARGET}", f"set FPGA_DEVICE {cfg.fpga_device}", f"set FPGA_FAMILY {cfg.fpga_family}",
             f"set FPGA_FREQ {cfg.fpga_freq}", f"set FPGA_PERIOD {cfg.fpga_per}",
             f"set AXI_DATA_BITS {cfg.AXI_DATA_BITS}",
             f"set AXI_CACHE_BITS {cfg.axi_cache_bits}", f"set AXI_PROT_BITS {cfg.axi_prot_bits}",
             f"set IP_REG_MAP_RANGE 0x{cfg.ip_reg_map_range:X}"]
    for mem in ("inp", "wgt", "out"):
        for k, v in cfg.mem_bank(mem).items():
            lines.append(f"set {mem.upper()}_MEM_{k.upper()} {v}")
    for blk in ("fetch", "load", "compute", "store"):
        lines.append(f"set {blk.upper()}_BASE_ADDR 0x{getattr(cfg, blk + '_base_addr'):08X}")
    lines.append(f"set CFLAGS \"{' '.join(cfg.defs())}\"")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.use_cfg)
    except ConfigError as exc:
        print(f"vta-config: error: {exc}", file=sys.stderr)
        return 2
    out: list[str] = []
    for name, value in vars(args).items():
        if not value or name == "use_cfg":
            continue
        if name == "cfg_str":
            out.append(cfg.MODEL)
        elif name == "bitstream":
            out.append(cfg.BITSTREAM)
        elif name == "cfg_json":
            out.append(json.dumps(cfg.pkg_dict(), indent=2))
        elif name == "cfg_hash":
            out.append(cfg.hash(hardware_only=True))
        elif name in ("defs", "cflags"):
            out.append(" ".join(cfg.defs()))
        elif name == "target":
            out.append(cfg.TARGET)
        elif name == "save_cfg_json":
            Path(value).write_text(cfg.to_json())
        elif name == "export_tcl":
            Path(value).write_text(_tcl(cfg))
        elif name.startswith("get_fpga_"):
            field = {"dev": "device"}.get(name[len("get_fpga_"):], name[len("get_fpga_"):])
            out.append(str(getattr(cfg, "fpga_" + field)))
        elif name.endswith("_base_addr"):
            out.append(f"0x{getattr(cfg, name[len('get_'):]):08X}")
        elif "_mem_" in name:
            mem, field = name[len("get_"):].split("_mem_")
            out.append(str(cfg.mem_bank(mem)[field]))
        elif name == "get_ip_reg_map_range":
            out.append(f"0x{cfg.ip_reg_map_range:X}")
        elif name == "get_axi_data_bits":
            out.append(str(cfg.AXI_DATA_BITS))
        else:
            out.append(str(getattr(cfg, name[len("get_"):])))
    if not out and not (args.save_cfg_json or args.export_tcl):
        _parser().print_help()
        return 1
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
