"""Where one inference's time goes on a simulated VTA, per part.

``breakdown(vm, args, queue)`` runs ``vm["main"](*args)`` a few times and splits the wall time into:

* ``device``: the device's ``run`` or ``run_stream`` (fsim: writing the stream, its static checks and the
  engine executing it), and of it ``engine`` (fsim's C++ engine alone, when the device has one);
* ``runtime_callback``: the runtime handing finished streams to the device (Python), outside ``device``;
* ``kernel_host_code``: the rest of the VTA kernels' calls: their host code and the runtime building the
  instruction and uop streams (or replaying cached ones);
* ``host_ops``: the host operators (every other compiled function);
* ``vm``: what remains: the Relax VM's per-instruction work and its built-ins (allocation, copies,
  reshapes, device constants), which are too short and too many to time one by one.

Times are the process's CPU time (``time.process_time``), which a busy machine disturbs less than wall time.
The parts are timed with a VM instrument, whose own cost inside each timed call (the smallest interval of a
call that does nothing, ``vm.builtin.null_value``) is subtracted; ``total`` is the smallest time of plain runs
(no instrument), and ``vm`` is that minus the other parts. Every part is the smallest over the rounds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

#: CPU time of the process: steadier than wall time on a shared machine (all of it runs in this process)
_clock = time.process_time

PARTS = ("device", "engine", "runtime_callback", "kernel_host_code", "host_ops", "vm")


class _Timed:
    """A proxy that adds the time of calls of some methods of ``target`` to ``sink[key]``."""

    def __init__(self, target, methods: tuple[str, ...], sink: dict, key: str):
        self._target, self._methods, self._sink, self._key = target, methods, sink, key

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if name not in self._methods:
            return attr

        def timed(*args, **kwargs):
            t0 = _clock()
            try:
                return attr(*args, **kwargs)
            finally:
                self._sink[self._key] += _clock() - t0
        return timed


def breakdown(vm, args: list, queue, rounds: int = 5) -> dict[str, Any]:
    """Per-part seconds of one inference (see the module's docstring), the counts of calls, and ``total``."""
    best: dict[str, float] = {}
    counts: dict[str, int] = {}
    total = float("inf")
    for _ in range(rounds):
        t0 = _clock()
        vm["main"](*args)
        total = min(total, _clock() - t0)
    device = queue.device
    engine = getattr(device, "engine", None)
    acc: dict[str, float] = defaultdict(float)
    n: dict[str, int] = defaultdict(int)
    start: dict[str, float] = {}
    floor = [float("inf")]

    def instrument(func, name, before, ret, *a):
        name = str(name)
        if before:
            start[name] = _clock()
            return 0
        dt = _clock() - start.pop(name)
        if name == "vm.builtin.null_value":      # does nothing: its interval is the instrument's own cost
            floor[0] = min(floor[0], dt)
        kind = "kernel" if name.startswith("vta_") else \
            "vm_builtins" if name.startswith(("vm.builtin", "vta.runtime")) else "host_ops"
        acc[kind] += dt
        n[kind] += 1
        return 0

    vm.set_instrument(instrument)
    queue.device = _Timed(device, ("run",), acc, "device")
    run_at = queue._run_stream_at     # the device's one-call write + run, which the queue prefers
    if run_at is not None:
        queue._run_stream_at = _Timed(device, ("run_stream",), acc, "device").run_stream
    run_stream = queue._run_stream

    def timed_run_stream(*a):
        t0 = _clock()
        try:
            return run_stream(*a)
        finally:
            acc["callback"] += _clock() - t0
            n["streams"] += 1
    queue._run_stream = timed_run_stream
    if engine is not None:
        device.engine = _Timed(engine, ("run", "stream"), acc, "engine")
    try:
        for _ in range(rounds):
            acc.clear()
            n.clear()
            vm["main"](*args)
            over = floor[0] if floor[0] < float("inf") else 0.0
            parts = {"device": acc["device"], "engine": acc["engine"] if engine is not None else None,
                     "runtime_callback": acc["callback"] - acc["device"],
                     "kernel_host_code": acc["kernel"] - acc["callback"] - over * n["kernel"],
                     "host_ops": acc["host_ops"] - over * n["host_ops"]}
            for k, v in parts.items():
                if v is not None:
                    best[k] = min(best.get(k, float("inf")), v)
            counts = {"vta_kernels": n["kernel"], "streams": n["streams"], "host_ops": n["host_ops"],
                      "vm_builtins": n["vm_builtins"]}
    finally:
        vm.set_instrument(None)
        queue.device = device
        queue._run_stream_at = run_at
        del queue._run_stream
        if engine is not None:
            device.engine = engine
    best["vm"] = total - sum(v for k, v in best.items() if k != "engine")
    return {"total": total, **{k: best[k] for k in PARTS if k in best}, "counts": counts}


def format_breakdown(b: dict[str, Any]) -> str:
    """One line: total and parts in ms, with the call counts."""
    ms = [f"{k} {1e3 * b[k]:.2f}" for k in PARTS if b.get(k) is not None]
    c = b["counts"]
    return (f"{1e3 * b['total']:.2f} ms = " + ", ".join(ms) +
            f" (ms; {c['vta_kernels']} VTA kernels, {c['streams']} streams, {c['host_ops']} host op calls, "
            f"{c['vm_builtins']} VM built-in calls)")
