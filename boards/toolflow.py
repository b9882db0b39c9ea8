"""What every vendor's bitstream flow does (``boards.flow`` runs these steps for any board), and its error."""

from __future__ import annotations

from pathlib import Path

from vta_hw.spec import Config


class FlowError(RuntimeError):
    """The flow cannot go on; the message says why and what to do."""


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
