"""Verilog emission of the VTA core, cached under ``hw/<config hash>/`` of the cache folder
(``vta_hw.cache.cache_dir()``: ``$VTA_CACHE_DIR``, else the repository's ``build/``).

``python -m vta_hw.verilog [--config PATH] [--out FILE] [--clock-enables]`` writes the Verilog and prints
its path. Two forms of the same logic: Amaranth's own (``vta_core.v``: synthesis, the boards, the cocotb
tests) and the clock-enable form tsim simulates (``vta_core_ce.v``, see :func:`convert_with_clock_enables`).
The cache entry is keyed by ``cfg.hash(hardware_only=True)`` and checked against a hash of the
``vta_hw`` sources, so editing the hardware regenerates it. Concurrent writers take the entry's
lock and publish each file by an atomic rename, so no process sees a part of a file.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from pathlib import Path

from vta_hw.cache import cache_dir
from vta_hw.files import locked, write_atomic
from vta_hw.spec import Config, load_config

TOP_NAME = "vta_core"


_NOT_HARDWARE = {"synth.py", "timing.py", "lint.py", "cache.py"}
_SPEC_TOOLS = {"cli.py", "disasm.py", "disasm_cli.py"}


def source_hash() -> str:
    """Hash of every hardware source file (the Amaranth code and the spec it is generated from)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for p in sorted(root.rglob("*.py")):
        if p.name in _NOT_HARDWARE or "spec" in p.relative_to(root).parts[:-1] and p.name in _SPEC_TOOLS:
            continue
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


_ZERO_INIT = re.compile(r"  initial begin\n(?:    \w+\[\d+\] = \d+'[hdb]0+;\n)+  end\n")


def strip_zero_init(text: str) -> str:
    """Drop the all-zero ``initial`` blocks Amaranth writes for every memory (megabytes for the
    weight SRAM). Block RAM powers up as zero and Verilator zero-initialises, so nothing changes."""
    return _ZERO_INIT.sub("", text)


def verilog_dir(cfg: Config) -> Path:
    return cache_dir() / "hw" / cfg.hash(hardware_only=True)


#: yosys passes of the clock-enable form: Amaranth's processes become multiplexers (``proc``), and
#: ``opt_dff`` turns every register fed back through one (it holds its value on some cycles) into a
#: register with a clock enable (and a synchronous reset into one with a reset), written
#: ``if (en) q <= d``. Equivalent logic; ``memory_collect`` and ``write_verilog`` as Amaranth's own.
CLOCK_ENABLE_PASSES = ("proc -norom", "opt_expr", "opt_clean", "opt_dff", "opt_clean", "memory_collect")


def convert_with_clock_enables(elaboratable, name: str) -> str:
    """``elaboratable``'s Verilog in the clock-enable form (``CLOCK_ENABLE_PASSES``). Verilator
    evaluates a register written ``if (en) q <= d`` only when ``en`` and in place; Amaranth's own form
    (``q <= q_next`` with ``q_next = en ? d : q`` in a process) makes it copy every such register
    through a shadow variable every cycle and compute ``d`` whether enabled or not. tsim uses this form."""
    from amaranth._toolchain.yosys import find_yosys
    from amaranth.back import rtlil

    text = rtlil.convert(elaboratable, name=name, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", *CLOCK_ENABLE_PASSES, "write_verilog -norename"]
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)


def generate(config=None, *, force: bool = False, quiet: bool = True, clock_enables: bool = False) -> Path:
    """Write (or reuse) the core's Verilog for ``config``; returns the path of ``vta_core.v``
    (``clock_enables``: of ``vta_core_ce.v``, the same logic in the form of
    :func:`convert_with_clock_enables`, which tsim simulates; synthesis and the boards use the other)."""
    cfg = load_config(config)
    out_dir = verilog_dir(cfg)
    suffix = "_ce" if clock_enables else ""
    out = out_dir / f"{TOP_NAME}{suffix}.v"
    stamp = out_dir / f"sources{suffix}.sha"
    sh = source_hash()

    def fresh() -> bool:
        return out.exists() and stamp.exists() and stamp.read_text() == sh

    if not force and fresh():
        return out
    with locked(out_dir):             # one writer at a time; the others then find its result
        if not force and fresh():
            return out
        out_dir.mkdir(parents=True, exist_ok=True)
        from amaranth.back import verilog

        from .core import VtaCore
        t0 = time.perf_counter()
        if not quiet:
            print(f"[vta_hw] generating Verilog for {cfg.MODEL} (AXI {cfg.AXI_DATA_BITS}-bit) ...", flush=True)
        if clock_enables:
            text = strip_zero_init(convert_with_clock_enables(VtaCore(cfg), TOP_NAME))
        else:
            text = strip_zero_init(verilog.convert(VtaCore(cfg), name=TOP_NAME, emit_src=False))
        write_atomic(out, text)           # the Verilog first: a stamp never vouches for an older file
        write_atomic(stamp, sh)
        write_atomic(out_dir / "config.json", cfg.to_json())
    if not quiet:
        print(f"[vta_hw] {out} ({len(text.splitlines())} lines, {time.perf_counter() - t0:.1f} s)", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vta_hw.verilog", description=__doc__)
    p.add_argument("--config", help="configuration file (default: $VTA_CONFIG or the repository's)")
    p.add_argument("--out", help="also copy the Verilog to this file")
    p.add_argument("--force", action="store_true")
    p.add_argument("--clock-enables", action="store_true", help="the clock-enable form tsim simulates")
    args = p.parse_args(argv)
    path = generate(args.config, force=args.force, quiet=False, clock_enables=args.clock_enables)
    if args.out:
        Path(args.out).write_text(path.read_text())
        print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
