"""The bitstream flow behind ``nox -s bitstream -- [--board pynq-z1|pynq-z2|ultra96|zcu104|de10-nano]
[--config PATH]``: the same steps for every board, each done by the board's vendor flow (one object per
vendor: ``boards.vivado.VIVADO`` for the Xilinx boards, ``boards.quartus.QUARTUS`` for the DE10-Nano), with
the same files.

Writes ``build/<board>/<bitstream-name>/``:

* ``vivado/``: the Verilog of the whole design (PS + core), the constraints, and the Vivado Tcl
  (non-project flow) with the build script, as Amaranth's Xilinx platform produces them;
* ``<bitstream-name>_plan.zip``: the same plan as one archive, to copy to a Vivado machine;
* ``plan.json``: board, part, clock, configuration, register window and memory port;
* ``utilization.txt`` / ``.json``: a yosys ``synth_xilinx`` estimate (PS as a black box) against
  the device's capacity. A design that does not fit stops the flow with the numbers.
* ``timing.txt``: the timing estimate of the same netlist (``vta_hw.timing``) against the board's
  clock; a path over the target is reported, not fatal (it is an estimate: Vivado decides).

Then, if Vivado is on PATH (or ``$VIVADO`` names it) it runs the plan and copies the bitstream
next to the plan; otherwise it prints exactly what to run where Vivado is installed. No open
toolchain places and routes Zynq parts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vta_hw.spec import Config, ConfigError, load_config

from . import quartus, vivado
from .platforms import BOARDS, Board, board_for
from .toolflow import FlowError, ToolFlow
from .vivado import fit_report  # noqa: F401  (the Xilinx utilization report, for tests and scripts)

BUILD_ROOT = Path(__file__).resolve().parent.parent / "build"
#: the vendor flows, by the boards' ``flow`` field
FLOWS: dict[str, ToolFlow] = {"vivado": vivado.VIVADO, "quartus": quartus.QUARTUS}

__all__ = ["BUILD_ROOT", "FLOWS", "FlowError", "fit_report", "flow_of", "main", "make_plan", "plan_dir",
           "utilization"]


def _say(msg: str) -> None:
    print(msg, flush=True)


def flow_of(board: Board) -> ToolFlow:
    return FLOWS[board.flow]


def plan_dir(board: Board, cfg: Config, root: Path = BUILD_ROOT) -> Path:
    return root / board.name / cfg.BITSTREAM


def make_plan(board: Board, cfg: Config, out: Path, progress=_say) -> dict:
    """Elaborate the board top and write the vendor tool's plan; returns the plan description."""
    cfg = board.config_for(cfg)
    if cfg.fpga_device != board.part:
        raise FlowError(f"the configuration's part {cfg.fpga_device} is not the {board.name}'s part {board.part}")
    return flow_of(board).make_plan(board, cfg, out, progress)


def utilization(board: Board, out: Path, progress=_say) -> dict:
    """The yosys estimate of the whole top against the part; raises FlowError if it does not fit."""
    return flow_of(board).utilization(board, out, progress)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nox -s bitstream --", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", choices=sorted(BOARDS), help="default: from the config's TARGET")
    p.add_argument("--config", help="configuration file (default: $VTA_CONFIG or the repository's)")
    p.add_argument("--out", type=Path, help="output root (default: build/)")
    p.add_argument("--skip-utilization", action="store_true", help="do not run the yosys estimate")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        board = board_for(args.board, cfg)
        cfg = board.config_for(cfg)
        out = plan_dir(board, cfg, args.out or BUILD_ROOT)
        out.mkdir(parents=True, exist_ok=True)
        make_plan(board, cfg, out)
        if not args.skip_utilization:
            utilization(board, out)
        tools = flow_of(board)
        tool = tools.find_tool()
        _say(f"[bitstream] bitstream: {tools.run(out, tool, _say)}" if tool else tools.instructions(out, board, cfg))
    except (ConfigError, FlowError) as exc:
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
