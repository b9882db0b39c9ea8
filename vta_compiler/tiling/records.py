"""Tuning records: one JSON line per measurement, keyed by the hardware configuration's hash.

A line holds the task (kind, workload, ACC operands), the knobs, the measured cycles or the error,
the cost model's estimate, the device counters of the run and where it ran::

    {"v": 1, "config": "a1b2c3d4e5f60718", "model": "1x16_i8w8a32_15_15_18_17", "device": "tsim",
     "task": {"kind": "conv2d", "workload": {...}, "acc_operands": 1, "name": "C4"},
     "knobs": {"tile_co": 8, ...}, "cycles": 85096, "error": null, "estimate": 45832.0,
     "stats": {"gemm_busy_cycles": 32144, ...}, "build_s": 1.4, "run_s": 3.1, "time": "2026-..."}

``config`` is ``Config.hash(hardware_only=True)``: the same for sim, tsim and a board of the same
hardware parameters, different for any other buffer size, block or bus width, so records measured on
one configuration are never applied to another. Appends are one ``write`` of a whole line on a file
opened for appending, under an advisory lock, so several tuners may share a log; a torn or foreign
line is skipped (and counted) when the log is read, and a log is resumed from whatever it holds.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import registry
from .task import Task, task_key

VERSION = 1


class RecordsError(ValueError):
    """A records file that cannot be used (for example, measured on another hardware configuration)."""


def config_hash(config) -> str:
    """The key of records: the hash of the hardware parameters (not TARGET, except through the bus width)."""
    cfg = getattr(config, "config", config)
    return cfg.hash(hardware_only=True)


@dataclass
class Record:
    """One measurement, one JSON line of a log: the task, the knobs (the tiling), the device's cycles or
    the error that disqualified the candidate, the hardware configuration's hash, the cost model's
    estimate, the device counters of the run, and where and when it was measured."""
    task: Task
    knobs: dict
    cycles: int | None
    error: str | None
    config: str
    model: str = ""
    device: str = ""
    estimate: float | None = None
    stats: dict = field(default_factory=dict)
    build_s: float = 0.0
    run_s: float = 0.0
    time: str = ""
    server: str = ""
    trial: int | None = None       # the task's trial number: the order the tuner chose candidates in

    @property
    def ok(self) -> bool:
        return self.error is None and self.cycles is not None

    @property
    def knobs_key(self) -> str:
        return json.dumps(self.knobs, sort_keys=True)

    def tiling(self):
        return self.task.op.tiling_from_knobs(self.knobs)

    def to_json(self) -> dict:
        return {"v": VERSION, "config": self.config, "model": self.model, "device": self.device,
                "task": self.task.to_json(), "knobs": self.knobs, "cycles": self.cycles, "error": self.error,
                "estimate": None if self.estimate is None else round(float(self.estimate), 1),
                "stats": self.stats, "build_s": round(self.build_s, 3), "run_s": round(self.run_s, 3),
                "time": self.time or time.strftime("%Y-%m-%dT%H:%M:%S%z"), "server": self.server, "trial": self.trial}

    @staticmethod
    def from_json(d: dict) -> Record:
        if d.get("v") != VERSION:
            raise ValueError(f"record version {d.get('v')!r} (this reader knows {VERSION})")
        cycles = d.get("cycles")
        return Record(Task.from_json(d["task"]), dict(d["knobs"]), None if cycles is None else int(cycles),
                      d.get("error"), str(d["config"]), d.get("model", ""), d.get("device", ""), d.get("estimate"),
                      dict(d.get("stats") or {}), float(d.get("build_s", 0)), float(d.get("run_s", 0)),
                      d.get("time", ""), d.get("server", ""), d.get("trial"))


def append_record(path: str | os.PathLike[str], record: Record) -> None:
    """Append one line; safe with other writers of the same file (one write, O_APPEND, flock)."""
    line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            # a previous writer killed mid-line leaves no newline: start on a fresh line
            size = os.fstat(fd).st_size
            if size:
                with open(path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
            os.write(fd, line)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass
class LoadReport:
    path: str
    records: int = 0
    skipped: int = 0                   # lines that are not records (torn, foreign, another version)
    configs: dict = field(default_factory=dict)     # config hash -> (model, count)


def read_records(path: str | os.PathLike[str]) -> tuple[list[Record], LoadReport]:
    """Every record of a log (any configuration), and what was read."""
    report = LoadReport(str(path))
    out = []
    if not Path(path).exists():
        return out, report
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = Record.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                report.skipped += 1
                continue
            out.append(r)
            model, n = report.configs.get(r.config, (r.model, 0))
            report.configs[r.config] = (model, n + 1)
    report.records = len(out)
    return out, report


class History:
    """Records of one hardware configuration, indexed by task: the best valid record per task."""

    def __init__(self, records: Iterable[Record] = (), config: str | None = None, source: str = ""):
        self.config = config
        self.source = source
        self.by_task: dict[str, list[Record]] = {}
        for r in records:
            self.add(r)

    def add(self, r: Record) -> None:
        if self.config is not None and r.config != self.config:
            return
        self.by_task.setdefault(r.task.key, []).append(r)

    def records(self, task: Task) -> list[Record]:
        return self.by_task.get(task.key, [])

    def best(self, task: Task) -> Record | None:
        ok = [r for r in self.records(task) if r.ok]
        return min(ok, key=lambda r: r.cycles) if ok else None

    def best_tiling(self, kind: str, workload_json: dict, acc_operands: int, env):
        """The fastest measured tiling that the schedule accepts with ``acc_operands`` ACC operands: records of
        the exact task first, then records of the same workload measured with another epilogue (a tiling
        measured with a bias alone also serves a layer with a per-channel shift, if it still fits)."""
        space = registry.get(kind)
        wkl = None
        keys = [task_key(kind, workload_json, acc_operands)] + \
            [task_key(kind, workload_json, a) for a in (1, 2, 3) if a != acc_operands]
        for key in keys:
            ok = sorted((r for r in self.by_task.get(key, []) if r.ok), key=lambda r: r.cycles)
            for r in ok:
                if wkl is None:
                    wkl = space.workload_from_json(workload_json)
                try:
                    t = space.tiling_from_knobs(r.knobs)
                except TypeError:
                    continue               # knobs of another version of the schedule
                if space.valid(wkl, t, env) and space.fits(wkl, t, env, acc_operands):
                    return t
        return None

    def tasks(self) -> list[Task]:
        return [recs[0].task for recs in self.by_task.values()]

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_task.values())


def load_history(path: str | os.PathLike[str], config, *, strict: bool = True) -> History:
    """The records of ``path`` measured on ``config``'s hardware. With ``strict``, a log that has records but
    none for this configuration is refused (``RecordsError``): they were measured on other hardware."""
    want = config_hash(config)
    records, report = read_records(path)
    hist = History(records, want, str(path))
    if strict and report.records and not len(hist):
        cfg = getattr(config, "config", config)
        others = ", ".join(f"{h} ({m}, {n} records)" for h, (m, n) in report.configs.items())
        raise RecordsError(f"{path}: every record was measured on another hardware configuration: {others}; "
                           f"this configuration is {want} ({cfg.MODEL}). Records are only applied to the "
                           "configuration they were measured on: tune again for this one")
    return hist


def best_per_task(records: Iterable[Record]) -> dict[str, Record]:
    out: dict[str, Record] = {}
    for r in records:
        if r.ok and (r.task.key not in out or r.cycles < out[r.task.key].cycles):
            out[r.task.key] = r
    return out


def in_trial_order(records: list[Record]) -> list[Record]:
    """Records in the order the tuner chose them (a log holds them in the order they finished)."""
    return sorted(records, key=lambda r: (r.trial is None, r.trial if r.trial is not None else 0))


def curve(records: list[Record]) -> list[float]:
    """Best cycles so far after each trial (errors keep the previous best; inf before the first success)."""
    best, out = math.inf, []
    for r in in_trial_order(records):
        if r.ok:
            best = min(best, r.cycles)
        out.append(best)
    return out
