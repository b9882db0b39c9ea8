"""What every vendor's bitstream flow does (``boards.flow`` runs these steps for any board), and its error."""

from __future__ import annotations

import shutil
from pathlib import Path

from vta_hw.spec import Config
from vta_hw.verilog import strip_zero_init

#: the last lines of every flow's instructions: starting the board's RPC server safely
RPC_WARNING = ("     WARNING: TVM's RPC has no authentication and accepts uploads and native modules: anyone who\n"
               "     reaches that port runs code on the board (as root). Use --host 0.0.0.0 only on a private link\n"
               "     (the board cabled to the host) or a private network behind the tracker; otherwise keep the\n"
               "     default 127.0.0.1 and connect through an SSH tunnel: ssh -L 9091:localhost:9091 <board>")


class FlowError(RuntimeError):
    """The flow cannot go on; the message says why and what to do."""


def write_plan(plan, out: Path, folder: str, top_name: str, bitstream: str) -> Path:
    """An Amaranth build plan extracted into ``out/folder`` (replacing what was there) and archived as
    ``out/<bitstream>_plan.zip``, its Verilog without the all-zero memory initialisers; the folder."""
    for name in (f"{top_name}.v", f"{top_name}.debug.v"):   # megabytes of all-zero memory initialisers
        if name in plan.files:
            plan.files[name] = strip_zero_init(plan.files[name])
    dest = out / folder
    if dest.exists():
        shutil.rmtree(dest)
    plan.extract(dest)
    with open(out / f"{bitstream}_plan.zip", "wb") as f:
        plan.archive(f)
    return dest


class ToolFlow:
    """One vendor's tools: write the plan, estimate the utilization, run the vendor tool or say how to."""

    name = ""

    def make_plan(self, board, cfg: Config, out: Path, progress) -> dict:
        """Elaborate the board's top and write the vendor tool's project into ``out``; the plan's description."""
        raise NotImplementedError

    def utilization(self, board, out: Path, progress) -> dict:
        """An open-source estimate of the design against the part; a FlowError if it does not fit."""
        raise NotImplementedError

    def find_tool(self) -> str | None:
        """The vendor tool on this machine, or None."""
        raise NotImplementedError

    def run(self, out: Path, tool: str, progress) -> Path:
        """Run the vendor tool on the plan; the bitstream's path."""
        raise NotImplementedError

    def instructions(self, out: Path, board, cfg: Config) -> str:
        """What to run where the vendor tool is installed."""
        raise NotImplementedError
