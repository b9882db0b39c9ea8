"""``graph.profile`` (in ``graph.profiler``): where the time of one inference goes, layer by layer, cycle by cycle.

::

    prof = graph.profile(ex, x, device="tsim", placement=graph.placement(pmod))
    print(prof.table())                      # per layer: cycles, MACs/cycle against peak, DRAM bytes, MB/s, bound
    prof.write_trace("trace.json")           # Chrome / Perfetto trace (ui.perfetto.dev, chrome://tracing)
    prof.plot_roofline("roofline.png")       # the layers against the board's peak and bandwidth
    prof.plot_timeline("timeline.png")       # the trace as a picture

On ``device="tsim"`` the run uses tsim's profile build (``TsimDevice(profile=True)``): every instruction's
start, wait and end cycles in every module, from the hardware's own signals. The trace has one track per
module (fetch, load, compute's UOP/ACC loads, compute GEMM, compute ALU, store) with each instruction's
busy slice and its wait for a dependency token (fetch: for room in a command queue), the GEMM array's and
the ALU's active stretches inside their instructions, a track of the layers (one span per VTA kernel call,
named as in the placement report, its runs inside) and two host tracks: the host operators and the VTA
kernel calls as the host sees them (the runtime's work, and waiting for VTA).

Time in the trace is the inference as it would run with this machine as the host: host code keeps its
measured wall time; each VTA run takes its cycle count at the board's clock (``clock_mhz``, the
configuration's ``fpga_freq`` unless given) instead of the simulator's wall time.

On ``device="fsim"`` there are no cycles: the table has the same columns from the device counters alone,
with the cycles a lower bound (the busiest of GEMM at one uop a cycle, ALU at one uop a cycle, and DRAM
traffic at one bus beat a cycle), and no timeline.

What bounds a layer: ``host`` when the runtime's host work inside its kernel call takes longer than VTA;
else the module busy for the largest share of the layer's cycles: compute (GEMM and ALU take turns in it,
so the bound is the one of the two with more cycles: ``GEMM``, the array active, or ``ALU``), ``load`` (the
load module or compute's UOP/ACC loads) or ``store``; or ``dependency wait`` when no module is busy for half
of the cycles (the modules mostly wait for each other's tokens).
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .ir import GraphError

#: no unit busy for this share of a layer's cycles: the layer is bound by its dependency waits
BUSY_SHARE_BOUND = 0.5
#: device counters of the DRAM traffic (bytes)
DRAM_COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes")
INSN_BYTES = 16
#: trace tracks: (pid, tid, name); module tracks are filled from tsim's intervals
VTA_PID, HOST_PID = 1, 2
LAYER_TID = 1
MODULE_TIDS = {"fetch": 2, "load": 3, "compute": 4, "gemm": 5, "alu": 6, "store": 7, "gemm engine": 8,
               "alu engine": 9}
MODULE_TRACK_NAMES = {"fetch": "fetch", "load": "load", "compute": "compute: UOP/ACC loads", "gemm": "compute: GEMM",
                      "alu": "compute: ALU", "store": "store", "gemm engine": "GEMM engine",
                      "alu engine": "ALU engine"}
HOST_OPS_TID, HOST_CALLS_TID, HOST_BUILTINS_TID = 1, 2, 3
BOUNDS = ("GEMM", "ALU", "load", "store", "dependency wait", "host")


class ProfileUsageError(GraphError):
    """A profile that cannot be made as asked (the device, the inputs)."""


# ------------------------------------------------------------------------------------------------ recording
class _RunLog:
    """A device proxy for the command queue: the wall time and counters of every run, and the VM call it
    happened in."""

    def __init__(self, device, calls: _CallLog):
        self._dev = device
        self.config = device.config
        self.calls = calls
        self.runs: list[dict] = []
        if hasattr(device, "run_stream"):       # the command queue's one-call hand-over, logged as a run
            self.run_stream = self._run_stream

    def run(self, insn_phys, insn_count, timeout=None):
        return self._logged(insn_count, self._dev.run, insn_phys, insn_count, timeout)

    def _run_stream(self, stream, count, insn_phys, uops, uop_phys, timeout=None):
        return self._logged(count, self._dev.run_stream, stream, count, insn_phys, uops, uop_phys, timeout)

    def _logged(self, insn_count, fn, *args):
        before = dict(self._dev.stats())
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            t1 = time.perf_counter()
            after = self._dev.stats()
            self.runs.append({"call": self.calls.current, "t0": t0, "t1": t1, "insns": int(insn_count),
                              "counters": {k: int(after[k]) - int(before.get(k, 0)) for k in after}})

    def __getattr__(self, name):
        return getattr(self._dev, name)


class _CallLog:
    """A Relax VM instrument: the wall time of every call the VM makes."""

    def __init__(self):
        self.calls: list[dict] = []
        self.current: int | None = None

    def __call__(self, func, name, before, ret, *args):
        now = time.perf_counter()
        if before:
            self.calls.append({"name": str(name), "t0": now, "t1": None})
            self.current = len(self.calls) - 1
        else:
            # calls do not nest in the VM's instruction stream: the after belongs to the last before
            self.calls[self.current]["t1"] = now
            self.current = None
        return 0


def _short(name: str, width: int = 48) -> str:
    """A long fused function's name cut for the table's summary line (the trace keeps it whole)."""
    return name if len(name) <= width else name[:width - 3] + "..."


def _host_op_name(name: str) -> str:
    """A host function's name without the target tags that legalization for VDevices adds to each fused
    operator (``fused_transpose1_llvm_reshape2_llvm`` -> ``fused_transpose1_reshape2``)."""
    return re.sub(r"_(llvm|ext_dev)(?=_|$)", "", name)


def _is_bookkeeping(name: str) -> bool:
    """The VM's own builtins (allocation, shape checks) and the runtime's: not host operators."""
    return name.startswith("vm.builtin.") or name.startswith("vta.runtime.")


# ------------------------------------------------------------------------------------------------ results
@dataclass
class LayerProfile:
    """One VTA layer (all calls of its kernel in the inference)."""
    name: str                      # the placement report's layer name (the kernel's, without a placement)
    kernel: str
    op: str
    calls: int
    runs: int
    insns: int
    macs: int                      # useful multiply-accumulates (the placement's), else issued
    issued_macs: int               # GEMM uops x the array's MACs per uop
    counters: dict[str, int]
    host_seconds: float            # runtime work on the host inside the kernel call(s), VTA runs excluded
    cycles: int | None             # measured (tsim); None on fsim
    bound_cycles: int              # the counters' lower bound
    busy: dict[str, int] = field(default_factory=dict)   # tsim: busy cycles of GEMM, ALU, load, store
    bound: str = ""

    @property
    def dram_bytes(self) -> int:
        return sum(self.counters.get(k, 0) for k in DRAM_COUNTERS) + INSN_BYTES * self.insns

    def effective_cycles(self) -> int:
        return self.cycles if self.cycles is not None else self.bound_cycles


@dataclass
class HostOp:
    name: str
    calls: int
    seconds: float


@dataclass
class Profile:
    """The result of :func:`profile`: per-layer figures, host operators, the trace (tsim) and the outputs."""
    device: str
    model: str
    clock_mhz: float
    peak_macs_per_cycle: int
    bus_bytes_per_cycle: int
    layers: list[LayerProfile]
    host_ops: list[HostOp]
    builtins: list[HostOp]         # the VM's and the runtime's builtins (allocation, copies, constants)
    outputs: list[np.ndarray]
    trace_events: list[dict] | None = None
    total_us: float = 0.0          # the inference on the trace's time line (host wall time + VTA at the clock)
    wall_seconds: float = 0.0      # how long the profiled run took here (simulation included)
    warmup: int = 0                # inferences run before the profiled one (warm-up and other repeats)
    between_calls_seconds: float = 0.0   # host time between the VM's calls (its own work, the instrument's)

    # -- figures
    @property
    def peak_gmacs(self) -> float:
        return self.peak_macs_per_cycle * self.clock_mhz / 1e3

    @property
    def peak_mbps(self) -> float:
        return self.bus_bytes_per_cycle * self.clock_mhz

    def vta_cycles(self) -> int:
        return sum(ly.effective_cycles() for ly in self.layers)

    def host_seconds(self) -> float:
        return sum(h.seconds for h in self.host_ops)

    def rows(self) -> list[dict]:
        """The table as dicts (what ``table()`` prints and the JSON holds)."""
        out = []
        for ly in self.layers:
            cyc = ly.effective_cycles()
            secs = cyc / (self.clock_mhz * 1e6) if cyc else 0.0
            mpc = ly.macs / cyc if cyc else 0.0
            out.append({
                "layer": ly.name, "kernel": ly.kernel, "op": ly.op, "calls": ly.calls, "runs": ly.runs,
                "cycles": ly.cycles, "cycles_lower_bound": ly.bound_cycles, "macs": ly.macs,
                "issued_macs": ly.issued_macs, "macs_per_cycle": mpc, "peak_fraction": mpc / self.peak_macs_per_cycle,
                "dram_bytes": ly.dram_bytes, "mb_per_s": ly.dram_bytes / secs / 1e6 if secs else 0.0,
                "intensity": ly.macs / ly.dram_bytes if ly.dram_bytes else 0.0,
                "busy": {k: v / ly.cycles for k, v in ly.busy.items()} if ly.cycles else {},
                "host_ms": ly.host_seconds * 1e3, "bound": ly.bound,
            })
        return out

    def table(self) -> str:
        """The per-layer table (tsim: measured cycles; fsim: ``>=`` a lower bound from the counters)."""
        measured = self.device == "tsim"
        head = ["#", "layer", "cycles", "MACs", "MAC/cyc", "% peak", "DRAM KiB", "MB/s", "GEMM", "ALU", "load",
                "store", "host ms", "bound"]
        lines = [head]
        for k, r in enumerate(self.rows()):
            cyc = f"{r['cycles']:,}" if measured else f">={r['cycles_lower_bound']:,}"
            shares = [f"{100 * r['busy'][u]:.0f}%" if u in r["busy"] else "" for u in ("GEMM", "ALU", "load", "store")]
            lines.append([str(k), r["layer"], cyc, f"{r['macs']:,}", f"{r['macs_per_cycle']:.1f}",
                          f"{100 * r['peak_fraction']:.1f}", f"{r['dram_bytes'] / 1024:,.1f}", f"{r['mb_per_s']:,.0f}",
                          *shares, f"{r['host_ms']:.2f}", r["bound"]])
        widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
        right = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
        text = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                for row in lines]
        cyc = self.vta_cycles()
        macs = sum(ly.macs for ly in self.layers)
        vta_ms = cyc / (self.clock_mhz * 1e3)
        what = "VTA" if measured else "VTA at least (fsim: lower bounds)"
        text.append(f"{what}: {cyc:,} cycles = {vta_ms:.3f} ms at {self.clock_mhz:g} MHz, "
                    f"{macs / cyc if cyc else 0:.1f} MACs/cycle of a peak {self.peak_macs_per_cycle} "
                    f"({100 * macs / cyc / self.peak_macs_per_cycle if cyc else 0:.1f}%); bus peak "
                    f"{self.peak_mbps:,.0f} MB/s")
        hs = sorted(self.host_ops, key=lambda h: -h.seconds)
        top = ", ".join(f"{_short(h.name)} {h.seconds * 1e3:.2f} ms" + (f" ({h.calls}x)" if h.calls > 1 else "")
                        for h in hs[:5])
        runtime_ms = sum(ly.host_seconds for ly in self.layers) * 1e3
        builtin_ms = sum(h.seconds for h in self.builtins) * 1e3
        text.append(f"host operators: {self.host_seconds() * 1e3:.2f} ms in {sum(h.calls for h in hs)} calls"
                    + (f" ({top})" if top else "") + f"; VTA runtime inside the kernel calls: {runtime_ms:.2f} ms; "
                    f"VM builtins: {builtin_ms:.2f} ms; between the VM's calls: "
                    f"{self.between_calls_seconds * 1e3:.2f} ms")
        if self.total_us:
            text.append(f"inference on the trace's time line: {self.total_us / 1e3:.3f} ms (host measured on this "
                        f"machine, VTA at {self.clock_mhz:g} MHz)")
        if not self.warmup:
            text.append("(the first inference: one-time host costs, such as the runtime's buffers and constants copied "
                        "to the device, are in; a warm-up inference leaves them out)")
        return "\n".join(text)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "model": self.model, "clock_mhz": self.clock_mhz,
                "peak_macs_per_cycle": self.peak_macs_per_cycle, "bus_bytes_per_cycle": self.bus_bytes_per_cycle,
                "vta_cycles": self.vta_cycles(), "total_us": self.total_us, "layers": self.rows(),
                "layer_counters": {ly.name: ly.counters for ly in self.layers},
                "host_ops": [asdict(h) for h in self.host_ops], "builtins": [asdict(h) for h in self.builtins]}

    # -- files
    def trace(self) -> dict:
        """The Chrome/Perfetto trace (Trace Event Format, JSON object form)."""
        if self.trace_events is None:
            raise ProfileUsageError(f"a profile on {self.device} has no timeline: profile on tsim for a trace "
                                    "(fsim has no cycles)")
        return {"traceEvents": self.trace_events, "displayTimeUnit": "ns",
                "otherData": {"model": self.model, "device": self.device, "clock_mhz": self.clock_mhz,
                              "time": "host code at its measured wall time, VTA runs at their cycles / clock"}}

    def write_trace(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.trace(), separators=(",", ":")))
        return path

    def write_table(self, path) -> Path:
        """``.json``: :meth:`to_dict`; anything else: the text table."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n" if path.suffix == ".json" else self.table() + "\n")
        return path

    def plot_roofline(self, path=None, title: str | None = None):
        return plot_roofline(self.to_dict(), path, title=title)

    def plot_timeline(self, path=None, window_us: tuple[float, float] | None = None, title: str | None = None,
                      layer: str | None = None):
        """The trace as a picture: all of it, ``window_us`` (start, end), or the span of ``layer``."""
        trace = self.trace()
        if layer is not None:
            spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "layer" and e["name"] == layer]
            if not spans:
                names = [ly.name for ly in self.layers]
                raise ProfileUsageError(f"no layer {layer!r} in this profile; its layers are {names}")
            window_us = (spans[0]["ts"], spans[-1]["ts"] + spans[-1]["dur"])
        return plot_timeline(trace, path, window_us=window_us, title=title)


# ------------------------------------------------------------------------------------------------ profile
def profile(ex, inputs, device: str = "tsim", *, env=None, placement=None, clock_mhz: float | None = None,
            warmup: int = 0, repeat: int = 1, progress=None) -> Profile:
    """Run one inference of the executable ``ex`` (``graph.build``'s result, or a module loaded from its
    exported library) on ``inputs`` (an array, or one per model input) on ``device`` ("tsim" or "fsim") and
    measure it. ``placement``: ``graph.placement(pmod)`` (or its rows) to name the layers; ``clock_mhz``:
    the board's clock (default: the configuration's); ``warmup``: inferences run first and not measured;
    ``repeat``: inferences measured, of which the profile keeps the one with the least host time (the least
    disturbed by other work on this machine; VTA's cycles are the same in each)."""
    import tvm
    from tvm import relax

    import vta_runtime
    from vta_hw.spec import load_config

    from ..environment import get_env
    if device not in ("tsim", "fsim"):
        raise ProfileUsageError(f"graph.profile: device {device!r}; choose tsim (the timeline and cycles) or fsim "
                                "(counters only)")
    if warmup < 0 or repeat < 1:
        raise ProfileUsageError(f"graph.profile: warmup={warmup}, repeat={repeat}; need warmup >= 0 and repeat >= 1")
    env = env or get_env()
    cfg = load_config(dict(env.config.cfg_dict, TARGET="tsim" if device == "tsim" else "sim"))
    rows = placement.rows if hasattr(placement, "rows") else list(placement or [])
    arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    if device == "tsim":
        from sim.tsim import TsimDevice
        dev = TsimDevice(cfg, profile=True, progress=progress)
    else:
        dev = vta_runtime.open_device(cfg)
    calls = _CallLog()
    log = _RunLog(dev, calls)
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(log))
    try:
        vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
        args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays]
        for _ in range(warmup):
            vm["main"](*args)
        vm.set_instrument(calls)
        best = None
        for k in range(repeat):
            calls.calls = []
            log.runs.clear()
            if device == "tsim":
                dev.clear_profile()
            collecting = gc.isenabled()
            gc.disable()              # a collection inside a timed call would be charged to it (as timeit does)
            try:
                t0 = time.perf_counter()
                res = vm["main"](*args)
                wall = time.perf_counter() - t0
            finally:
                if collecting:
                    gc.enable()
            host = wall - sum(r["t1"] - r["t0"] for r in log.runs)
            if best is None or host < best[0]:
                outputs = [res.numpy()] if hasattr(res, "numpy") else [r.numpy() for r in res]
                profiled = dev.profiled_runs() if device == "tsim" else None
                best = (host, calls.calls, list(log.runs), profiled, outputs, wall, warmup + k)
    finally:
        vta_runtime.set_command_queue(None)
        if hasattr(dev, "close"):
            dev.close()
    _, calls_made, runs, profiled, outputs, wall, before = best
    return _assemble(device, cfg, rows, calls_made, runs, profiled, outputs, wall,
                     clock_mhz or float(cfg.fpga_freq), before)


def _layer_names(rows: list[dict]) -> dict[str, list[dict]]:
    by_kernel: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("device") == "VTA" and r.get("kernel"):
            by_kernel[r["kernel"]].append(r)
    return by_kernel


def _merged_length(spans: list[tuple[int, int]]) -> int:
    """Cycles covered by a union of [a, b) spans."""
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _busy_of_run(run) -> dict[str, int]:
    """GEMM, ALU, load, store busy cycles of one profiled tsim run."""
    comp = run.intervals["compute"]
    loads = [(iv.busy_start, iv.end) for iv in run.intervals["load"]]
    loads += [(iv.busy_start, iv.end) for iv in comp if iv.name.startswith("LOAD") and "NOP" not in iv.name]
    return {"GEMM": sum(b - a for a, b in run.engines["gemm"]), "ALU": sum(b - a for a, b in run.engines["alu"]),
            "load": _merged_length(loads), "store": sum(iv.end - iv.busy_start for iv in run.intervals["store"]
                                                         if "NOP" not in iv.name)}


def layer_bound(ly: LayerProfile, clock_mhz: float, bus_bytes: int) -> str:
    """What bounds a layer (see the module's docstring): one of :data:`BOUNDS`."""
    host_cycles = ly.host_seconds * clock_mhz * 1e6
    if ly.cycles is not None:
        if host_cycles > ly.cycles:
            return "host"
        b = ly.busy
        # GEMM and ALU are the compute module's two engines: they take turns, so their cycles add up
        compute = b.get("GEMM", 0) + b.get("ALU", 0)
        unit, busy = max((("compute", compute), ("load", b.get("load", 0)), ("store", b.get("store", 0))),
                         key=lambda kv: kv[1])
        if not ly.cycles or busy < BUSY_SHARE_BOUND * ly.cycles:
            return "dependency wait"
        return ("GEMM" if b.get("GEMM", 0) >= b.get("ALU", 0) else "ALU") if unit == "compute" else unit
    if host_cycles > ly.bound_cycles:
        return "host"
    return max(_lower_bounds(ly.counters, ly.insns, bus_bytes).items(), key=lambda kv: kv[1])[0]


def _lower_bounds(c: dict[str, int], insns: int, bus_bytes: int) -> dict[str, int]:
    """Cycles each unit needs at least: a GEMM or ALU uop a cycle, a bus beat a cycle."""
    loads = sum(c.get(k, 0) for k in DRAM_COUNTERS[:4]) + INSN_BYTES * insns
    return {"GEMM": c.get("gemm_counter", 0), "ALU": c.get("alu_counter", 0), "load": -(-loads // bus_bytes),
            "store": -(-c.get("out_store_nbytes", 0) // bus_bytes)}


def _assemble(device, cfg, rows, calls, runs, profiled, outputs, wall, clock_mhz, warmup) -> Profile:
    peak = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    bus = cfg.AXI_DATA_BYTES
    by_kernel = _layer_names(rows)
    kernels = set(by_kernel)
    run_calls = {r["call"] for r in runs}
    seen: dict[str, int] = defaultdict(int)
    layers: dict[str, LayerProfile] = {}
    call_layer: dict[int, str] = {}
    host: dict[str, HostOp] = {}
    builtins: dict[str, HostOp] = {}
    runs_of: dict[int, list[int]] = defaultdict(list)
    for k, r in enumerate(runs):
        runs_of[r["call"]].append(k)
    for ci, c in enumerate(calls):
        name = c["name"]
        if name in kernels or ci in run_calls or name.startswith("vta_"):
            cands = by_kernel.get(name, [])
            row = cands[min(seen[name], len(cands) - 1)] if cands else None
            seen[name] += 1
            lname = row["name"] if row else name
            call_layer[ci] = lname
            mine = [runs[k] for k in runs_of[ci]]
            counters: dict[str, int] = defaultdict(int)
            for r in mine:
                for key, v in r["counters"].items():
                    counters[key] += v
            run_wall = sum(r["t1"] - r["t0"] for r in mine)
            ly = layers.get(lname)
            if ly is None:
                ly = layers[lname] = LayerProfile(
                    name=lname, kernel=name, op=row["op"] if row else "", calls=0, runs=0, insns=0, macs=0,
                    issued_macs=0, counters={}, host_seconds=0.0, cycles=0 if device == "tsim" else None,
                    bound_cycles=0)
            ly.calls += 1
            ly.runs += len(mine)
            ly.insns += sum(r["insns"] for r in mine)
            for key, v in counters.items():
                ly.counters[key] = ly.counters.get(key, 0) + v
            ly.host_seconds += (c["t1"] - c["t0"]) - run_wall
            if device == "tsim":
                ly.cycles += sum(r["counters"].get("cycle_count", 0) for r in mine)
                for k in runs_of[ci]:
                    for unit, v in _busy_of_run(profiled[k]).items():
                        ly.busy[unit] = ly.busy.get(unit, 0) + v
        else:
            shown = name if _is_bookkeeping(name) else _host_op_name(name)
            h = (builtins if _is_bookkeeping(name) else host).setdefault(shown, HostOp(shown, 0, 0.0))
            h.calls += 1
            h.seconds += c["t1"] - c["t0"]
    for ly in layers.values():
        ly.issued_macs = ly.counters.get("gemm_counter", 0) * peak
        useful = [int(r["macs"]) for r in by_kernel.get(ly.kernel, []) if r["name"] == ly.name]
        ly.macs = useful[0] if useful else ly.issued_macs
        ly.bound_cycles = max(_lower_bounds(ly.counters, ly.insns, bus).values())
        ly.bound = layer_bound(ly, clock_mhz, bus)
    between = (calls[-1]["t1"] - calls[0]["t0"]) - sum(c["t1"] - c["t0"] for c in calls) if calls else 0.0
    prof = Profile(device, cfg.MODEL, clock_mhz, peak, bus, list(layers.values()), list(host.values()),
                   list(builtins.values()), outputs, wall_seconds=wall, warmup=warmup, between_calls_seconds=between)
    if device == "tsim":
        prof.trace_events, prof.total_us = _trace(cfg, calls, runs, profiled, call_layer, clock_mhz, prof)
    return prof


# ------------------------------------------------------------------------------------------------ the trace
class _Clock:
    """Wall time -> the trace's time (us): VTA runs take their cycles at the clock instead of their wall time."""

    def __init__(self, origin: float, runs: list[dict], clock_mhz: float):
        self.origin = origin
        self.t0 = np.array([r["t0"] for r in runs])
        self.t1 = np.array([r["t1"] for r in runs])
        self.dev_us = np.array([r["counters"].get("cycle_count", 0) / clock_mhz for r in runs])
        wall_us = (self.t1 - self.t0) * 1e6
        # trace time at each run's start: wall time since the origin, every earlier run replaced by its cycles
        self.start_us = (self.t0 - origin) * 1e6 + np.concatenate([[0.0], np.cumsum(self.dev_us - wall_us)[:-1]])
        self.wall_us = wall_us

    def __call__(self, t: float) -> float:
        k = int(np.searchsorted(self.t0, t, side="right")) - 1
        if k < 0:
            return (t - self.origin) * 1e6
        if t <= self.t1[k]:
            frac = (t - self.t0[k]) * 1e6 / self.wall_us[k] if self.wall_us[k] else 0.0
            return float(self.start_us[k] + frac * self.dev_us[k])
        return float(self.start_us[k] + self.dev_us[k] + (t - self.t1[k]) * 1e6)


def _x(name, cat, pid, tid, ts, dur, args=None) -> dict:
    # start and end rounded to the ns on their own, so a slice inside another stays inside
    a, b = round(ts, 3), round(ts + dur, 3)
    ev = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": a, "dur": round(b - a, 3)}
    if args:
        ev["args"] = args
    return ev


def _meta(pid, tid, what, value) -> dict:
    ev = {"name": what, "ph": "M", "pid": pid, "args": {"name" if what.endswith("_name") else "sort_index": value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _trace(cfg, calls, runs, profiled, call_layer, clock_mhz, prof) -> tuple[list[dict], float]:
    origin = calls[0]["t0"] if calls else 0.0
    clock = _Clock(origin, runs, clock_mhz)
    per_cycle = 1.0 / clock_mhz
    ev: list[dict] = [
        _meta(VTA_PID, None, "process_name", f"VTA {cfg.MODEL} (tsim, {clock_mhz:g} MHz)"),
        _meta(VTA_PID, None, "process_sort_index", 1),
        _meta(HOST_PID, None, "process_name", "host (measured on this machine)"),
        _meta(HOST_PID, None, "process_sort_index", 2),
        _meta(VTA_PID, LAYER_TID, "thread_name", "layers"),
        _meta(VTA_PID, LAYER_TID, "thread_sort_index", 0),
        _meta(HOST_PID, HOST_OPS_TID, "thread_name", "host operators"),
        _meta(HOST_PID, HOST_OPS_TID, "thread_sort_index", 1),
        _meta(HOST_PID, HOST_CALLS_TID, "thread_name", "VTA kernel calls (runtime, waiting for VTA)"),
        _meta(HOST_PID, HOST_CALLS_TID, "thread_sort_index", 2),
        _meta(HOST_PID, HOST_BUILTINS_TID, "thread_name", "VM and runtime builtins"),
        _meta(HOST_PID, HOST_BUILTINS_TID, "thread_sort_index", 3),
    ]
    for m, tid in MODULE_TIDS.items():
        ev.append(_meta(VTA_PID, tid, "thread_name", MODULE_TRACK_NAMES[m]))
        ev.append(_meta(VTA_PID, tid, "thread_sort_index", tid))
    body: list[dict] = []
    layer_rows = {ly.name: r for ly, r in zip(prof.layers, prof.rows())}
    # layers: a span per kernel call over its runs; host: operators and kernel calls
    runs_of: dict[int, list[int]] = defaultdict(list)
    for k, r in enumerate(runs):
        runs_of[r["call"]].append(k)
    end_us = 0.0
    for ci, c in enumerate(calls):
        a, b = clock(c["t0"]), clock(c["t1"])
        end_us = max(end_us, b)
        if ci in call_layer:
            lname = call_layer[ci]
            row = layer_rows[lname]
            body.append(_x(lname, "layer", VTA_PID, LAYER_TID, a, b - a, {
                "kernel": c["name"], "macs": row["macs"], "bound": row["bound"], "runs": len(runs_of[ci])}))
            body.append(_x(f"call {lname}", "vta call", HOST_PID, HOST_CALLS_TID, a, b - a, {"kernel": c["name"]}))
            for k in runs_of[ci]:
                r = runs[k]
                ra = float(clock.start_us[k])
                cyc = r["counters"].get("cycle_count", 0)
                body.append(_x(f"run {k}: {r['insns']} insns", "run", VTA_PID, LAYER_TID, ra, cyc * per_cycle,
                               {"cycles": cyc, "insns": r["insns"]}))
                body.append(_x("waiting for VTA", "wait", HOST_PID, HOST_CALLS_TID, ra, cyc * per_cycle))
                _module_slices(body, profiled[k], ra, per_cycle, lname, k)
        elif _is_bookkeeping(c["name"]):
            body.append(_x(c["name"], "builtin", HOST_PID, HOST_BUILTINS_TID, a, b - a))
        else:
            body.append(_x(c["name"], "host op", HOST_PID, HOST_OPS_TID, a, b - a))
    # per track: time order, an enclosing slice before the ones it holds
    body.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    return ev + body, end_us


def _module_slices(body: list[dict], run, start_us: float, per_cycle: float, layer: str, run_no: int) -> None:
    def us(c):
        return start_us + c * per_cycle

    for module, ivs in run.intervals.items():
        for iv in ivs:
            if module == "compute" and iv.name.startswith("GEMM"):
                track = "gemm"
            elif module == "compute" and iv.name.startswith("ALU"):
                track = "alu"
            else:
                track = module
            tid = MODULE_TIDS[track]
            args = {"index": iv.index, "run": run_no, "layer": layer}
            if module == "fetch":
                body.append(_x(f"dispatch {iv.name}", "busy", VTA_PID, tid, us(iv.start), iv.cycles * per_cycle, args))
                if iv.stall:
                    body.append(_x("queue full", "stall", VTA_PID, tid, us(iv.stall[0]),
                                   iv.stall_cycles * per_cycle, args))
                continue
            if iv.stall:
                body.append(_x(f"wait {'+'.join(iv.pops) or 'token'}", "stall", VTA_PID, tid, us(iv.stall[0]),
                               iv.stall_cycles * per_cycle, dict(args, waits_for=iv.name)))
            # compute: the sequencer's part (the engines run beside it and each other, on tracks of their own)
            end = iv.issued if iv.issued is not None else iv.end
            body.append(_x(iv.name, "busy", VTA_PID, tid, us(iv.busy_start), (end - iv.busy_start) * per_cycle,
                           dict(args, cycles=end - iv.busy_start, pushes="+".join(iv.pushes))))
            for a, b in iv.active:
                body.append(_x(f"{iv.name} (array)" if track == "gemm" else iv.name, "active", VTA_PID,
                               MODULE_TIDS[f"{track} engine"], us(a), (b - a) * per_cycle, args))


# ------------------------------------------------------------------------------------------------ pictures
def plot_roofline(data: dict, path=None, title: str | None = None):
    """The layers of :meth:`Profile.to_dict` (MACs per DRAM byte, GMAC/s at the clock) under the roof: the
    array's peak and the bus's bandwidth. fsim profiles are drawn hollow at their counters' bound. Writes a
    PNG to ``path`` (returned), or returns the matplotlib figure without one."""
    clock = data["clock_mhz"]
    peak = data["peak_macs_per_cycle"] * clock / 1e3               # GMAC/s
    bw = data["bus_bytes_per_cycle"] * clock / 1e3                # GB/s
    pts = [r for r in data["layers"] if r["dram_bytes"] and r["macs"]]
    measured = data["device"] == "tsim"
    fig = _figure(path, figsize=(7.5, 4.8), dpi=110)
    ax = fig.subplots()
    xs = np.array([r["intensity"] for r in pts]) if pts else np.array([1.0])
    lo, hi = min(xs.min() / 2, peak / bw / 8), max(xs.max() * 2, peak / bw * 8)
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(peak, grid * bw), color="black", lw=1.5)
    ax.axvline(peak / bw, color="grey", lw=0.6, ls=":")
    ax.text(hi, peak * 1.04, f"peak {peak:.1f} GMAC/s ({data['peak_macs_per_cycle']} MACs/cycle)", ha="right",
            va="bottom", fontsize=8)
    ax.text(lo * 1.5, lo * 1.5 * bw * 0.75, f"bus {bw * 1e3:,.0f} MB/s", fontsize=8, ha="left", va="top")
    colors = {"GEMM": "tab:blue", "ALU": "tab:purple", "load": "tab:orange", "store": "tab:green",
              "dependency wait": "tab:red", "host": "tab:gray"}
    for bound in BOUNDS:
        sel = [r for r in pts if r["bound"] == bound]
        if not sel:
            continue
        x = [r["intensity"] for r in sel]
        y = [r["macs_per_cycle"] * clock / 1e3 for r in sel]
        ax.scatter(x, y, s=28, label=f"{bound} ({len(sel)})", edgecolors=colors[bound],
                   facecolors=colors[bound] if measured else "none", zorder=3)
    # one label per distinct point (identical layers share one): "conv2d_1 +3" for four of them
    spots: dict[tuple[float, float], list[str]] = {}
    for r in pts:
        key = (round(math.log10(r["intensity"]), 2), round(math.log10(max(r["macs_per_cycle"], 1e-9)), 2))
        spots.setdefault(key, []).append(r["layer"])
    for (lx, ly), names in spots.items():
        label = names[0] + (f" +{len(names) - 1}" if len(names) > 1 else "")
        ax.annotate(label, (10 ** lx, 10 ** ly * clock / 1e3), fontsize=6.5, xytext=(4, -8), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel(f"GMAC/s at {clock:g} MHz")
    ax.set_title(title or f"{data['model']} on {data['device']}: the layers under the roofline", fontsize=10)
    ax.legend(title="bound by", fontsize=8, title_fontsize=8, loc="lower right")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.tight_layout()
    return _save(fig, path)


def _figure(path, **kw):
    """A figure for a file (on no GUI backend, pyplot untouched) or, without a path, pyplot's (to be shown)."""
    if path is None:
        import matplotlib.pyplot as plt
        return plt.figure(**kw)
    from matplotlib.figure import Figure
    return Figure(**kw)


def _save(fig, path):
    """Write the figure to ``path``; without a path, return it (a notebook or a gallery shows it)."""
    if path is None:
        return fig
    path = Path(path)
    fig.savefig(path)
    return path


#: slice colours of the timeline picture, by category
_CAT_COLORS = {"busy": "#4878cf", "stall": "#e8a33d", "active": "#1b3f8b", "layer": "#6aa86a", "run": "#a6d49f",
               "host op": "#8c8c8c", "vta call": "#c7c7c7", "wait": "#e5e5e5", "builtin": "#b59fd0"}
_CAT_LABELS = {"busy": "instruction (busy)", "stall": "waiting (token / queue room)", "active": "GEMM/ALU active",
               "layer": "layer", "run": "VTA run", "host op": "host operator", "vta call": "kernel call (host)",
               "wait": "host waits for VTA", "builtin": "VM builtin"}


def plot_timeline(trace: dict, path=None, window_us: tuple[float, float] | None = None, title: str | None = None,
                  max_labels: int = 40):
    """A Perfetto-like picture of a trace: one row per track, slices as boxes (nested slices drawn thinner).
    Writes a PNG to ``path`` (returned), or returns the matplotlib figure without one."""
    from matplotlib.patches import Patch

    evs = trace["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    order = {(e["pid"], e.get("tid")): e["args"]["sort_index"] for e in evs
             if e["ph"] == "M" and e["name"] == "thread_sort_index"}
    tracks = sorted(names, key=lambda k: (k[0], order.get(k, 0)))
    xs = [e for e in evs if e["ph"] == "X"]
    if window_us is None:
        window_us = (min((e["ts"] for e in xs), default=0.0), max((e["ts"] + e["dur"] for e in xs), default=1.0))
    w0, w1 = window_us
    fig = _figure(path, figsize=(12, 0.45 * len(tracks) + 1.2), dpi=110)
    ax = fig.subplots()
    row = {k: len(tracks) - 1 - i for i, k in enumerate(tracks)}
    labels = 0
    # one draw call per row, colour and width class (slices wider than 0.3% of the window get a white edge, so
    # that neighbours stay apart; narrower ones would be all edge)
    boxes: dict[tuple[int, str, bool], list[tuple[float, float]]] = defaultdict(list)
    span = w1 - w0
    used = set()
    for e in xs:
        a, b = e["ts"], e["ts"] + e["dur"]
        if b < w0 or a > w1 or (e["pid"], e["tid"]) not in row:
            continue
        y = row[(e["pid"], e["tid"])]
        boxes[(y, e["cat"], b - a > span * 3e-3)].append((a, max(b - a, span * 1e-4)))
        used.add(e["cat"])
        if e["cat"] == "layer" and labels < max_labels and (min(b, w1) - max(a, w0)) > span * 0.04:
            ax.text((max(a, w0) + min(b, w1)) / 2, y, e["name"], ha="center", va="center", fontsize=7, clip_on=True,
                    zorder=4)
            labels += 1
    for (y, cat, wide), spans in boxes.items():
        nested = cat in ("active", "run", "wait")       # drawn thinner, over their enclosing slices
        h = 0.4 if nested else 0.8
        ax.broken_barh(spans, (y - h / 2, h), facecolors=_CAT_COLORS.get(cat, "#999"),
                       edgecolor="white" if wide and not nested else "none", linewidth=0.4, zorder=3 if nested else 2)
    ax.set_yticks([row[k] for k in tracks])
    ax.set_yticklabels([f"{procs.get(k[0], str(k[0])).split()[0]}: {names[k]}" for k in tracks], fontsize=8)
    ax.set_xlim(w0, w1)
    ax.set_ylim(-0.7, len(tracks) - 0.3)
    ax.set_xlabel("time (us): host code at its measured wall time, VTA at its cycles / clock")
    ax.set_title(title or f"{trace.get('otherData', {}).get('model', '')} timeline", fontsize=10)
    ax.grid(True, axis="x", lw=0.3, alpha=0.5)
    legend = [Patch(color=c, label=_CAT_LABELS.get(k, k)) for k, c in _CAT_COLORS.items() if k in used]
    fig.legend(handles=legend, ncol=len(legend), fontsize=7, loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(fig, path)
