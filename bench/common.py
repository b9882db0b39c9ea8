"""Shared benchmark helpers: timing, a device proxy that times runs, result recording."""

from __future__ import annotations

import json
import platform
import time
import tracemalloc
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


def interleaved_best(fns: dict[str, Any], rounds: int = 10, min_seconds: float = 0.0) -> dict[str, tuple[float, float]]:
    """Smallest wall time and smallest CPU time of the calling thread, per function, over rounds that call
    every function once in turn, so that all of them see the same machine load (the minimum is the least
    noisy estimate on a busy machine). At least ``rounds`` rounds, and more until ``min_seconds`` have passed."""
    wall = dict.fromkeys(fns, float("inf"))
    cpu = dict.fromkeys(fns, float("inf"))
    start = time.perf_counter()
    n = 0
    while n < rounds or time.perf_counter() - start < min_seconds:
        for name, fn in fns.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            wall[name] = min(wall[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.thread_time() - c0)
        n += 1
    return {name: (wall[name], cpu[name]) for name in fns}


def _rss_high_water() -> int | None:
    """Peak resident set of this process in bytes (Linux), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_memory(fn) -> dict[str, int | None]:
    """Extra memory while ``fn()`` runs: the tracemalloc peak (Python and numpy allocations) and, on Linux, the
    peak resident set over the resident set before (C++ allocations and touched pages included)."""
    rss = None
    try:
        with open("/proc/self/clear_refs", "w") as f:   # "5": reset the high-water mark to the current RSS
            f.write("5")
        rss = _rss_high_water()
    except OSError:
        pass
    tracemalloc.start()
    try:
        fn()
        _, traced = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    after = _rss_high_water() if rss is not None else None
    return {"tracemalloc_peak_bytes": traced, "rss_peak_increase_bytes": None if rss is None else after - rss}


class TimedDevice:
    """Wraps a device and adds the wall time spent in ``run`` and, for a simulator that counts its clock
    (tsim's ``cycles()``), the cycles simulated in it: ``cycles_per_second`` is the simulator's speed."""

    def __init__(self, device):
        self._dev = device
        self.config = device.config
        self.run_seconds = 0.0
        self.run_cycles = 0

    def run(self, insn_phys, insn_count, timeout=None):
        clock = getattr(self._dev, "cycles", None)
        c0 = clock() if clock else 0
        t0 = time.perf_counter()
        try:
            return self._dev.run(insn_phys, insn_count, timeout)
        finally:
            self.run_seconds += time.perf_counter() - t0
            if clock:
                self.run_cycles += clock() - c0

    @property
    def cycles_per_second(self) -> float | None:
        """Simulated cycles per second of ``run`` (None for a device without a clock, or before a run)."""
        return self.run_cycles / self.run_seconds if self.run_cycles and self.run_seconds else None

    def __getattr__(self, name):
        return getattr(self._dev, name)


def write_results(results: dict[str, Any], name: str = "results.json") -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    doc = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "results": results}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
