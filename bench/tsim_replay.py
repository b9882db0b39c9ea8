"""tsim libraries compared on the same device runs: ResNet-18's C1-C11 recorded once, replayed on two builds.

    python -m bench.tsim_replay record                       # C1-C11 on the current build -> build/tsim_replay/
    python -m bench.tsim_replay compare OLD.so NEW.so        # both replay every run: same cycles, counters, memory?
    python -m bench.tsim_replay compare OLD.so NEW.so --rounds 3   # ... and CPU time side by side
    python -m bench.tsim_replay run LIB.so --layers C10      # one library alone (for callgrind)

``record`` runs each layer (the cost model's tiling, seed 0) on tsim and keeps, for every device run, the
allocations and their bytes before the run, the instruction stream's address and length, and the cycles,
counters and allocations' bytes after it. A replay loads a library (a copy of the ``.so``, so that two builds
of one config can be loaded in one process), gives a fresh device each layer's runs in order, and checks them
against the record. ``compare`` alternates the libraries layer by layer, so both see the same machine load,
and reports the CPU time of the device's runs (``time.thread_time``: the harness runs in the calling thread).
"""

from __future__ import annotations

import argparse
import copy
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RECORD = Path(__file__).resolve().parent.parent / "build" / "tsim_replay" / "resnet18_c1_c11.pkl"
LAYERS = tuple(f"C{k}" for k in range(1, 12))


def _snapshot(dram) -> list[tuple[int, int, bytes]]:
    return [(s, n, bytes(dram.data[s:s + n])) for s, n in dram.pages.allocations()]


class _Recorder:
    """A TsimDevice proxy that records every run."""

    def __init__(self, dev):
        self._dev = dev
        self.config = dev.config
        self.runs: list[dict] = []

    def run(self, insn_phys, insn_count, timeout=None):
        before = _snapshot(self._dev.dram)
        pages = copy.deepcopy(self._dev.dram.pages)
        c0 = self._dev.cycles()
        out = self._dev.run(insn_phys, insn_count, timeout)
        self.runs.append({"insn": (int(insn_phys), int(insn_count)), "pages": pages, "before": before,
                          "cycles": self._dev.cycles() - c0, "stats": dict(self._dev.stats()),
                          "after": _snapshot(self._dev.dram)})
        return out

    def __getattr__(self, name):
        return getattr(self._dev, name)


def record(layers=LAYERS, path: Path = RECORD) -> None:
    import vta_runtime
    from sim.tsim import TsimDevice
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top import RESNET18

    out = {}
    for name in layers:
        dev = _Recorder(TsimDevice())
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            r = run_conv2d(RESNET18[name], seed=0, name=name)
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()
        assert r.correct, f"{name}: tsim's result differs from numpy"
        out[name] = dev.runs
        print(f"{name}: {len(dev.runs)} runs, {sum(x['cycles'] for x in dev.runs):,} cycles", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(out))
    print(f"recorded {path}")


_COPIES: dict[Path, Path] = {}
_TMP = tempfile.TemporaryDirectory(prefix="tsim_replay_")


def _device(lib: Path):
    """A TsimDevice on the library ``lib`` (loaded from a private copy, one per library)."""
    import sim.tsim as T
    if lib not in _COPIES:
        _COPIES[lib] = Path(_TMP.name) / f"{len(_COPIES)}" / "libvta_tsim.so"
        _COPIES[lib].parent.mkdir()
        shutil.copy(lib, _COPIES[lib])
    tmp = _COPIES[lib]
    real = T.build
    T.build = lambda *a, **k: tmp
    try:
        return T.TsimDevice()
    finally:
        T.build = real


def replay(lib: Path, runs: list[dict]) -> tuple[float, int, list[str]]:
    """Replay one layer's runs on a fresh device of ``lib``: (CPU seconds in the runs, cycles, differences)."""
    dev = _device(lib)
    cpu, cycles, problems = 0.0, 0, []
    try:
        for i, r in enumerate(runs):
            dev.dram.data[:] = 0
            for s, n, data in r["before"]:
                dev.dram.data[s:s + n] = np.frombuffer(data, np.uint8)
            pages = copy.deepcopy(r["pages"])
            dev.dram.pages, dev.dram.check, dev.dram.allocation_of = pages, pages.check, pages.allocation_of
            c0 = dev.cycles()
            t0 = time.thread_time()
            dev.run(*r["insn"], timeout=3600)
            cpu += time.thread_time() - t0
            n = dev.cycles() - c0
            cycles += n
            if n != r["cycles"]:
                problems.append(f"run {i}: {n} cycles, recorded {r['cycles']}")
            st = dict(dev.stats())
            if st != r["stats"]:
                diff = {k: (st.get(k), r["stats"].get(k)) for k in set(st) | set(r["stats"])
                        if st.get(k) != r["stats"].get(k)}
                problems.append(f"run {i}: counters differ (now, recorded): {diff}")
            if _snapshot(dev.dram) != r["after"]:
                problems.append(f"run {i}: memory after the run differs")
    finally:
        dev.close()
    return cpu, cycles, problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tsim_replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("record", "compare", "run"))
    p.add_argument("libs", nargs="*", type=Path)
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--rounds", type=int, default=1, help="replays per library and layer (the fastest counts)")
    p.add_argument("--record", type=Path, default=RECORD)
    a = p.parse_args(argv)
    layers = a.layers.split(",")
    if a.what == "record":
        record(layers, a.record)
        return 0
    rec = pickle.loads(a.record.read_bytes())
    if a.what == "run":
        for name in layers:
            cpu, cycles, problems = replay(a.libs[0], rec[name])
            print(f"{name}: {cycles:,} cycles, {cpu:.2f} s CPU, {cycles / cpu / 1e3:,.0f} k cycles/s"
                  + "".join(f"\n  {x}" for x in problems))
        return 0
    best = {lib: {} for lib in a.libs}
    bad = 0
    total_cycles = 0
    for name in layers:
        for _ in range(a.rounds):
            for lib in a.libs:
                cpu, cycles, problems = replay(lib, rec[name])
                best[lib][name] = min(best[lib].get(name, cpu), cpu)
                bad += len(problems)
                for x in problems:
                    print(f"  {lib} {name}: {x}")
        total_cycles += cycles
        print(f"{name}: {cycles:,} cycles; " + ", ".join(f"{lib.parent.name or lib}: {best[lib][name]:.2f} s"
                                                          for lib in a.libs), flush=True)
    for lib in a.libs:
        cpu = sum(best[lib].values())
        print(f"{lib}: {total_cycles:,} cycles in {cpu:.2f} s CPU -> {total_cycles / cpu / 1e3:,.0f} k cycles/s")
    print("identical cycles, counters and memory on every run" if not bad else f"{bad} DIFFERENCES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
