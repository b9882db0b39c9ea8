"""Shared benchmark helpers: timing, a device proxy that times runs, result recording."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent.parent / "build" / "bench"


def best_of(fn, repeat: int = 3) -> tuple[float, Any]:
    """Smallest wall time of ``repeat`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


class TimedDevice:
    """Wraps a device and adds the wall time spent in ``run``."""

    def __init__(self, device):
        self._dev = device
        self.config = device.config
        self.run_seconds = 0.0

    def run(self, insn_phys, insn_count, timeout=None):
        t0 = time.perf_counter()
        try:
            return self._dev.run(insn_phys, insn_count, timeout)
        finally:
            self.run_seconds += time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self._dev, name)


def write_results(results: dict[str, Any], name: str = "results.json") -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    doc = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "results": results}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
