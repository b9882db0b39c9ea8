"""The Vivado flow of the Xilinx boards (Pynq-Z1/Z2, Ultra96, ZCU104), behind ``nox -s bitstream``.

Writes ``vivado/`` (the whole design's Verilog, constraints and the non-project Tcl with its build script,
as Amaranth's Xilinx platform produces them), the plan as one archive, ``plan.json``, and the yosys
``synth_xilinx`` utilization and timing estimates; runs Vivado when it is on PATH (or ``$VIVADO``), else
says what to run where it is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from vta_hw import timing
from vta_hw.spec import Config, load_config
from vta_hw.synth import run_yosys, sram_styles, summarise

from .platforms import Board
from .toolflow import RPC_WARNING, FlowError, ToolFlow, write_plan
from .zynq import TOPS

TOP_NAME = "vta_top"
FAMILY_OF = {"zynq7": "xc7", "zynqmp": "xcup"}
#: PS address of the GP master port window each family uses for the register file
GP_WINDOW = {"zynq7": (0x4000_0000, 0x7FFF_FFFF), "zynqmp": (0xA000_0000, 0xAFFF_FFFF)}
MEMORY_PORT = {"zynq7": "S_AXI_ACP (coherent, 64-bit AXI3)", "zynqmp": "S_AXI_HPC0_FPD (coherent, 128-bit AXI4)"}
MEMORY_PORTS_2 = "S_AXI_HPC0_FPD + S_AXI_HPC1_FPD (coherent, 2 x 128-bit AXI4; reads split over both, writes on HPC0)"


def make_plan(board: Board, cfg: Config, out: Path, progress) -> dict:
    """Elaborate the board top and write the Vivado plan; returns the plan description."""
    window = GP_WINDOW[board.family]
    if not window[0] <= cfg.fetch_base_addr <= window[1]:
        raise FlowError(f"register window {cfg.fetch_base_addr:#x} is outside the PS's GP port window "
                        f"{window[0]:#x}-{window[1]:#x}")
    t0 = time.perf_counter()
    progress(f"[bitstream] {board.name}: elaborating {cfg.MODEL} for {board.part} at {cfg.fpga_freq} MHz")
    platform = board.platform()
    styles = sram_styles(cfg, board.capacity) if board.capacity is not None and board.capacity.uram else None
    if styles:
        platform.vta_sram_styles = styles     # vta_hw.sram.Sram reads it
    top = TOPS[board.family](cfg)
    plan = platform.build(top, name=TOP_NAME, do_build=False)
    vivado = write_plan(plan, out, "vivado", TOP_NAME, cfg.BITSTREAM)
    progress(f"[bitstream] {board.name}: plan written to {vivado} ({time.perf_counter() - t0:.1f} s)")
    desc = {
        "board": board.name, "part": board.part, "family": board.family, "clock_mhz": cfg.fpga_freq,
        "model": cfg.MODEL, "bitstream": cfg.BITSTREAM, "config": cfg.cfg_dict,
        "register_window": f"{cfg.fetch_base_addr:#010x}", "register_window_bytes": cfg.ip_reg_map_range,
        "memory_port": MEMORY_PORT[board.family] if cfg.AXI_PORTS == 1 else MEMORY_PORTS_2,
        "axi_data_bits": cfg.AXI_DATA_BITS, "axi_ports": cfg.AXI_PORTS, "sram_styles": styles,
        "top": TOP_NAME, "verilog": f"vivado/{TOP_NAME}.v", "constraints": f"vivado/{TOP_NAME}.xdc",
        "vivado_script": f"vivado/build_{TOP_NAME}.sh",
    }
    (out / "plan.json").write_text(json.dumps(desc, indent=2) + "\n")
    return desc


def fit_report(board: Board, cells: dict[str, int]) -> tuple[dict, str, list[str]]:
    """(summary, report text, resources over capacity) of synthesised cells on the board's device."""
    dev = board.capacity
    s = summarise(cells, dev)
    rows = [("LUT", s["luts"], dev.luts), ("FF", s["ffs"], dev.ffs), ("BRAM36", s["bram36"], dev.bram36),
            (dev.dsp_cell, s["dsps"], dev.dsps)] + ([("URAM288", s["uram"], dev.uram)] if dev.uram else [])
    text = [f"yosys synth_xilinx estimate for {board.name} ({dev.name}), processing system as a black box:",
            f"{'resource':<10} {'used':>10} {'available':>10} {'use':>6}"]
    over = []
    for name, used, cap in rows:
        text.append(f"{name:<10} {used:>10,.0f} {cap:>10,} {100 * used / cap:>5.0f}%")
        if used > cap:
            over.append(f"{name} {used:,.0f} > {cap:,}")
    return s, "\n".join(text) + "\n", over


def utilization(board: Board, out: Path, progress) -> dict:
    """yosys estimate of the whole top (PS black box) against the device; raises FlowError if it does not fit."""
    family = FAMILY_OF[board.family]
    dev = board.capacity
    cells = run_yosys(out / "vivado" / f"{TOP_NAME}.v", family, out / "yosys", progress, top=TOP_NAME, netlist=True,
                      uram=bool(dev.uram))
    s, report, over = fit_report(board, cells)
    clock_mhz = json.loads((out / "plan.json").read_text())["clock_mhz"]
    rep = timing.analyse(out / "yosys" / f"netlist_{family}.json", family, top=TOP_NAME)
    timing_text = timing.format_report(rep, 1000 / clock_mhz, n=8)
    (out / "utilization.txt").write_text(report)
    (out / "timing.txt").write_text(timing_text + "\n")
    (out / "utilization.json").write_text(json.dumps({"cells": cells, "summary": s, "clock_mhz": clock_mhz,
                                                      "timing": rep.to_json()}, indent=2) + "\n")
    progress(report.rstrip())
    progress(timing_text)
    if over:
        raise FlowError(f"the design does not fit {dev.name}: {'; '.join(over)} (see {out / 'utilization.txt'})")
    return s


def find_vivado() -> str | None:
    return os.environ.get("VIVADO") or shutil.which("vivado")


def run_vivado(out: Path, vivado: str, progress) -> Path:
    script = out / "vivado" / f"build_{TOP_NAME}.sh"
    env = dict(os.environ, VIVADO=vivado)
    progress(f"[bitstream] running Vivado ({script}); this takes tens of minutes")
    res = subprocess.run(["sh", script.name], cwd=script.parent, env=env)
    bit = script.parent / f"{TOP_NAME}.bit"
    if res.returncode or not bit.exists():
        raise FlowError(f"Vivado failed (exit {res.returncode}); see the logs in {script.parent}")
    dest = out / f"{load_config(json.loads((out / 'plan.json').read_text())['config']).BITSTREAM}.bit"
    shutil.copyfile(bit, dest)
    return dest


def instructions(out: Path, board: Board, cfg: Config) -> str:
    zip_name = f"{cfg.BITSTREAM}_plan.zip"
    return (f"Vivado was not found (set $VIVADO or put vivado on PATH). On a machine with Vivado:\n"
            f"  1. copy {out / zip_name} there and unzip it into an empty directory\n"
            f"  2. run `sh build_{TOP_NAME}.sh` in that directory (non-project flow: synthesis, place, route, "
            f"bitstream for {board.part})\n"
            f"  3. copy {TOP_NAME}.bit back to this machine as {out / (cfg.BITSTREAM + '.bit')}\n"
            f"  4. install it into the bitstream cache: vta-bitstream install {out / (cfg.BITSTREAM + '.bit')}\n"
            f"  5. on the board: python -m vta_compiler.exec.rpc_server --host 0.0.0.0, then from the host\n"
            f"     vta.program_fpga(remote) and vta.reconfig_runtime(remote) (see README, 'Boards').\n"
            + RPC_WARNING)


class Vivado(ToolFlow):
    """AMD/Xilinx: Vivado's non-project flow."""
    name = "Vivado"

    def make_plan(self, board, cfg, out, progress):
        return make_plan(board, cfg, out, progress)

    def utilization(self, board, out, progress):
        return utilization(board, out, progress)

    def find_tool(self):
        return find_vivado()

    def run(self, out, tool, progress):
        return run_vivado(out, tool, progress)

    def instructions(self, out, board, cfg):
        return instructions(out, board, cfg)


VIVADO = Vivado()
