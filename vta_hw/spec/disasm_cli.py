"""``vta-disasm``: print an instruction stream file (16-byte little-endian instructions), one per line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ConfigError, load_config
from .disasm import disassemble


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vta-disasm", description=__doc__)
    p.add_argument("stream", type=Path, help="binary instruction stream")
    p.add_argument("--use-cfg", metavar="PATH", help="configuration (default: $VTA_CONFIG or the repository's)")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.use_cfg)
    except ConfigError as exc:
        print(f"vta-disasm: error: {exc}", file=sys.stderr)
        return 2
    data = args.stream.read_bytes()
    if len(data) % 16:
        print(f"vta-disasm: error: {args.stream} has {len(data)} bytes, not a whole number of 16-byte "
              "instructions", file=sys.stderr)
        return 2
    print("\n".join(disassemble(data, cfg.isa)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
