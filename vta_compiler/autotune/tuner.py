"""``tune``: measured schedule search, spread over every measurement server at once.

For each task the candidates are the space's tilings that fit, ranked by the schedule's cost model
(the model's own choice first, so the first measurement is what a build would use without records
and the tuned result can only be as fast or faster). The first few trials follow that ranking; then
the picks alternate between the model's ranking, a ridge regression of log(cycles) on the candidate's
features fitted to the measurements so far (the model's estimate, log2 of every tile size and thread
count, one-hot of the other knobs), and the neighbours of the best so far (one knob changed); the
last two choose among the cost model's best tenth (at least 64), where a regression fitted to a few
points can be trusted. Several
candidates are in flight at a time, one per free server; a task whose remaining trials are all in
flight lets the next task start, so no server waits for the slowest measurement of a task.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..environment import Environment, get_env
from ..tiling import Knob, LayerData, Task
from ..tiling.records import History, Record, append_record, config_hash, read_records
from .measure import Builder, MeasureResult, TsimMeasure

#: trials that follow the cost model's ranking before the learned model joins in
WARMUP = 4
RIDGE = 1.0
#: the learned model picks among the cost model's best candidates: this fraction of them, at least TOP_MIN
TOP_FRACTION = 0.1
TOP_MIN = 64


@dataclass
class TaskState:
    task: Task
    index: int
    budget: int
    candidates: list
    knobs: list[Knob]
    records: list[Record] = field(default_factory=list)     # this configuration's records of the task
    inflight: set = field(default_factory=set)
    proposed: int = 0
    data: LayerData | None = None
    features: np.ndarray | None = None
    started: float = 0.0
    finished: bool = False
    since_best: int = 0

    def __post_init__(self):
        self.keys = [_knobs_key(self.task.op.knob_values(t)) for t in self.candidates]
        self.index_of = {k: i for i, k in enumerate(self.keys)}
        self.lock = threading.Lock()
        self.trial_of: dict[int, int] = {}        # candidate in flight -> its trial number (proposal order)
        self.next_trial = 0

    @property
    def measured(self) -> set[str]:
        return {r.knobs_key for r in self.records}

    def best(self) -> Record | None:
        ok = [r for r in self.records if r.ok]
        return min(ok, key=lambda r: r.cycles) if ok else None

    def remaining(self) -> int:
        return min(self.budget, len(self.candidates)) - len(self.records) - len(self.inflight)


def _knobs_key(knobs: dict) -> str:
    import json
    return json.dumps(knobs, sort_keys=True)


class Search:
    """Chooses the next candidate of each task (see the module docstring)."""

    def __init__(self, env: Environment, seed: int = 0):
        self.env = env
        self.rng = np.random.default_rng(seed)

    def _features(self, st: TaskState) -> np.ndarray:
        if st.features is None:
            sp, w = st.task.op, st.task.workload
            f = np.array([sp.features(w, t, self.env, st.knobs) for t in st.candidates], dtype=np.float64)
            mu, sd = f.mean(axis=0), f.std(axis=0)
            sd[sd == 0] = 1.0
            st.features = np.hstack([np.ones((len(f), 1)), (f - mu) / sd])
        return st.features

    def _predict(self, st: TaskState) -> np.ndarray | None:
        ok = [r for r in st.records if r.ok and r.knobs_key in st.index_of]
        if len(ok) < 3:
            return None
        x = self._features(st)
        rows = [st.index_of[r.knobs_key] for r in ok]
        a, y = x[rows], np.log([float(r.cycles) for r in ok])
        reg = RIDGE * np.eye(a.shape[1])
        reg[0, 0] = 0.0                          # the intercept is not shrunk
        w = np.linalg.solve(a.T @ a + reg, a.T @ y)
        return x @ w

    def propose(self, st: TaskState) -> int | None:
        taken = st.measured | {st.keys[i] for i in st.inflight}
        pool = [i for i, k in enumerate(st.keys) if k not in taken]
        if not pool or st.remaining() <= 0:
            return None
        k = st.proposed
        st.proposed += 1
        n_ok = sum(1 for r in st.records if r.ok)
        if n_ok < min(WARMUP, st.budget) or k % 3 == 0:
            return pool[0]                                   # the cost model's ranking
        pred = self._predict(st)
        if pred is None:
            return pool[0]
        # the learned model only re-ranks the cost model's better candidates: with a few measurements it
        # extrapolates badly far from them
        top = [i for i in pool if i < max(TOP_MIN, len(st.candidates) * TOP_FRACTION)] or pool[:TOP_MIN]
        if k % 3 == 2:                                       # a neighbour of the best so far
            best = st.best()
            if best is not None and best.knobs_key in st.index_of:
                b = st.candidates[st.index_of[best.knobs_key]]
                names = [kn.name for kn in st.knobs]
                near = [i for i in top if sum(getattr(st.candidates[i], n) != getattr(b, n) for n in names) == 1]
                if near:
                    return min(near, key=lambda i: pred[i])
        return min(top, key=lambda i: pred[i])


# ------------------------------------------------------------------------------------------------ progress
class Progress:
    """One bar per task with the best so far; redrawn in place on a terminal, a line per event otherwise."""

    def __init__(self, states: list[TaskState], peak: int, stream=None, enabled: bool = True):
        self.states, self.peak = states, peak
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = max([len(s.task.label) for s in states] + [4])
        self.t0 = time.perf_counter()
        self._live = False
        self.lock = threading.Lock()

    def line(self, st: TaskState) -> str:
        n, total = len(st.records), min(st.budget, len(st.candidates))
        fill = int(20 * n / max(total, 1))
        best = st.best()
        errs = sum(1 for r in st.records if not r.ok)
        if best is not None:
            macs = st.data.macs if st.data is not None else None
            eff = f" ({macs / best.cycles / self.peak:.2f} of peak)" if macs else ""
            b = f"best {best.cycles:>10,} cycles{eff}"
        else:
            b = "best          -"
        return (f"{st.task.label:<{self.width}} [{'#' * fill}{'-' * (20 - fill)}] {n:>3}/{total:<3} {b}"
                + (f"  {errs} error{'s' * (errs != 1)}" if errs else ""))

    def _clear(self):
        if self._live:
            self.stream.write("\r\x1b[K")
            self._live = False

    def update(self, st: TaskState, improved: bool) -> None:
        if not self.enabled:
            return
        with self.lock:
            if self.tty:
                self._clear()
                active = [s for s in self.states if not s.finished and (s.records or s.inflight)]
                text = " | ".join(self.line(s) for s in active[:1])
                self.stream.write(text[:200])
                self._live = True
            elif improved:
                self.stream.write(self.line(st) + "\n")
            self.stream.flush()

    def done(self, st: TaskState) -> None:
        if not self.enabled:
            return
        with self.lock:
            self._clear()
            self.stream.write(self.line(st) + f"  [{time.perf_counter() - self.t0:.0f} s]\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.enabled:
            with self.lock:
                self._clear()
                self.stream.write(text + "\n")
                self.stream.flush()


# ------------------------------------------------------------------------------------------------ tune
@dataclass
class TuneResult:
    """What :func:`tune` did: per task (in the order given) its best correct record (None if none ran
    correctly) and every record in trial order, the measurements this call made, its wall time, the device
    measured on and the hardware configuration's hash."""
    tasks: list[Task]
    best: list[Record | None]
    records: list[list[Record]]          # per task, in trial order (resumed ones first)
    measured: int                        # new measurements made by this call
    seconds: float                       # the whole call, servers' start-up included
    measure_seconds: float               # from the first candidate to the last result
    device: str
    config: str


def tune(tasks: list[Task], log: str | os.PathLike[str], measure=None, trials: int = 32,
         early_stopping: int | None = None, n_builders: int | None = None, build_timeout: float = 300.0,
         env: Environment | None = None, seed: int = 0, progress: bool = True, stream=None) -> TuneResult:
    """Tune every task: measure up to ``trials`` candidates each (records already in ``log`` for this hardware
    configuration count and are not measured again), append one JSON line per measurement to ``log``.

    The first candidate of a task is the cost model's own choice (what a build uses without records), so the
    best record is never slower than an untuned build; the next ones alternate between the cost model's
    ranking, a regression fitted to the measurements so far and the neighbours of the best. Every
    candidate is built here, run once on a server and its output compared with numpy: a wrong result, a
    build failure or a run past its time limit is recorded with the reason and never chosen.

    Args:
        tasks: from :func:`extract_tasks`.
        log: the JSON-lines file to append to (created if missing); a log is resumed.
        measure: ``TsimMeasure()`` (default: one tsim server on this machine) or ``RPCMeasure(tracker=(host,
            port), key=...)``.
        trials: candidates per task, resumed records included.
        early_stopping: end a task after this many trials without a better one.
        n_builders: builder processes (default: one per measurement in flight).
        build_timeout: seconds a candidate's build may take (a hang is killed).
        env: the environment to tune for (default: :func:`vta_compiler.get_env`); the servers' TARGET
            replaces its own.
        seed: the search's random seed.
        progress: one progress bar per task on ``stream`` (default: stderr).

    Returns:
        TuneResult: per task its best record (None if no candidate ran correctly) and every record.

    Raises:
        MeasureError: the tracker cannot be reached, no server is registered under the key, the servers
            run TARGET ``sim`` (fsim counts no cycles), the tsim servers did not start, or no server
            gave a session within the measurer's ``request_timeout``.

    Example:
        >>> from vta_compiler import autotune
        >>> from vta_compiler.top import RESNET18
        >>> tasks = autotune.extract_tasks({"C10": RESNET18["C10"]})
        >>> res = autotune.tune(tasks, "c10.jsonl", autotune.TsimMeasure(), trials=8)
        >>> res.records[0][0].cycles, res.best[0].cycles     # the cost model's choice, the best (tsim cycles)
        (45955, 40420)
    """
    env = env or get_env()
    measure = measure if measure is not None else TsimMeasure()
    tasks = list(tasks)
    t_start = time.perf_counter()
    menv = measure.start(env)
    try:
        res = _tune(tasks, str(log), measure, menv, trials, early_stopping, n_builders, build_timeout, seed,
                    progress, stream)
        res.seconds = time.perf_counter() - t_start
        return res
    finally:
        measure.close()


def _tune(tasks, log, measure, menv, trials, early_stopping, n_builders, build_timeout, seed, progress,
          stream) -> TuneResult:
    return _Tuning(tasks, log, measure, menv, trials, early_stopping, n_builders, seed, progress, stream) \
        .run(build_timeout)


class _Tuning:
    """One call of :func:`tune`: the tasks' states, the slots that measure, the log."""

    def __init__(self, tasks, log, measure, menv, trials, early_stopping, n_builders, seed, progress, stream):
        self.t_start = time.perf_counter()
        self.tasks, self.log, self.measure, self.menv = tasks, log, measure, menv
        self.early_stopping, self.n_builders, self.seed = early_stopping, n_builders, seed
        self.cfg_hash = config_hash(menv.config)
        old, report = read_records(log)
        hist = History(old, self.cfg_hash, log)
        self.search = Search(menv, seed)
        self.states = []
        for i, task in enumerate(tasks):
            op = task.op
            st = TaskState(task, i, trials, op.candidates(task.workload, menv, task.acc_operands),
                           op.knobs(task.workload, menv))
            st.records = list(hist.records(task))
            st.next_trial = 1 + max([r.trial for r in st.records if r.trial is not None],
                                    default=len(st.records) - 1)
            best = st.best()
            if best is not None:                       # resumed: trials since the best count for early stopping
                st.since_best = len(st.records) - 1 - max(k for k, r in enumerate(st.records) if r is best)
            self.states.append(st)
        self.progress = Progress(self.states, menv.BATCH * menv.BLOCK_IN * menv.BLOCK_OUT, stream, progress)
        other = report.records - len(hist)
        self.progress.note(
            f"tuning {len(tasks)} task(s) on {measure.device} x{measure.n_parallel} ({menv.MODEL}, hardware "
            f"config {self.cfg_hash}); log {log}: {len(hist)} record(s) resumed"
            + (f", {other} of other configurations ignored" if other else "")
            + (f", {report.skipped} unreadable line(s) skipped" if report.skipped else ""))
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.measured = 0
        self.first_start: float | None = None       # the first candidate's build
        self.last_result: float | None = None
        self.stop = threading.Event()
        self.builder: Builder | None = None

    def stale(self, st: TaskState) -> bool:
        return self.early_stopping is not None and st.since_best >= self.early_stopping

    def finish_if_done(self, st: TaskState) -> None:
        if st.finished or st.inflight:
            return
        if st.remaining() <= 0 or len(st.measured) >= len(st.candidates) or self.stale(st):
            st.finished = True
            self.progress.done(st)

    def next_job(self):
        """(state, candidate index) to measure, (state, None) when a task's data must be made first, or
        (None, None) when nothing can start now."""
        with self.lock:
            for st in self.states:
                if st.finished:
                    continue
                if st.data is None and st.remaining() > 0:
                    return st, None                         # its data first (outside the lock)
                i = None if self.stale(st) else self.search.propose(st)
                if i is not None:
                    st.inflight.add(i)
                    st.trial_of[i] = st.next_trial
                    st.next_trial += 1
                    now = time.perf_counter()
                    st.started = st.started or now
                    self.first_start = self.first_start or now
                    return st, i
                self.finish_if_done(st)
            return None, None

    def measure_one(self, st: TaskState, i: int) -> None:
        op, menv = st.task.op, self.menv
        t = st.candidates[i]
        knobs = op.knob_values(t)
        path, err, build_s = self.builder.build(st.task, knobs, menv.config, st.data.shift)
        if err is None:
            res = self.measure.run(path, st.data, op.unpack, menv)
            res.build_s = build_s
            try:
                os.remove(path)
            except OSError:
                pass
        else:
            res = MeasureResult(None, err, build_s=build_s)
        rec = Record(st.task, knobs, res.cycles, res.error, self.cfg_hash, menv.MODEL, self.measure.device,
                     op.estimate(st.task.workload, t, menv), res.stats, res.build_s, res.run_s, server=res.server,
                     trial=st.trial_of.pop(i))
        with self.lock:
            append_record(self.log, rec)
            prev = st.best()
            st.records.append(rec)
            st.inflight.discard(i)
            self.measured += 1
            self.last_result = time.perf_counter()
            improved = rec.ok and (prev is None or rec.cycles < prev.cycles)
            st.since_best = 0 if improved else st.since_best + 1
            self.progress.update(st, improved)
            self.finish_if_done(st)

    def slot(self) -> None:
        try:
            while not self.stop.is_set():
                st, i = self.next_job()
                if st is None:
                    with self.lock:
                        if all(s.finished for s in self.states):
                            return
                    time.sleep(0.2)
                elif i is None:
                    with st.lock:
                        if st.data is None:
                            st.data = st.task.op.data(st.task.workload, self.menv, st.task.acc_operands, self.seed)
                else:
                    self.measure_one(st, i)
        except BaseException as exc:      # noqa: BLE001 (re-raised by tune)
            self.errors.append(exc)
            self.stop.set()

    def add_slots(self, n: int) -> None:
        for _ in range(n):
            th = threading.Thread(target=self.slot, name=f"vta-tune-{len(self.threads)}", daemon=True)
            self.threads.append(th)
            th.start()

    def follow_servers(self, measuring: int) -> int:
        """More slots when servers have registered under the key since the last look (``RPCMeasure`` without
        ``n_parallel``); returns the servers now used."""
        try:
            n = min(self.measure.servers(), self.measure.max_parallel)
        except (OSError, RuntimeError):
            return measuring                      # the tracker is busy or gone: the sessions will say
        if n > measuring and not all(s.finished for s in self.states):
            self.add_slots(2 * (n - measuring))   # one measuring and one building per new server
            self.progress.note(f"{n - measuring} more {self.measure.device} server(s) registered: {n} measuring")
            return n
        return measuring

    def run(self, build_timeout: float) -> TuneResult:
        n_par = self.measure.n_parallel
        follow = getattr(self.measure, "follows_servers", False)
        builders = self.n_builders or (self.measure.max_parallel if follow else n_par)
        self.builder = Builder(builders, build_timeout, tempfile.mkdtemp(prefix="vta_tune_build_"))
        self.threads: list[threading.Thread] = []
        measuring, looked = n_par, time.monotonic()
        try:
            self.add_slots(n_par + (self.n_builders or n_par))
            while alive := [th for th in self.threads if th.is_alive()]:
                alive[0].join(0.5)
                if follow and time.monotonic() - looked > 2.0:
                    measuring, looked = self.follow_servers(measuring), time.monotonic()
        except KeyboardInterrupt:
            self.stop.set()
            raise
        finally:
            self.builder.close()
        if self.errors:
            raise self.errors[0]
        for st in self.states:
            if not st.finished:
                st.finished = True
                self.progress.done(st)
        elapsed = time.perf_counter() - self.t_start
        measuring = (self.last_result - self.first_start) if self.first_start and self.last_result else 0.0
        self.progress.note(f"tuned {len(self.tasks)} task(s): {self.measured} measurement(s) in {elapsed:.0f} s")
        return TuneResult(self.tasks, [st.best() for st in self.states], [st.records for st in self.states],
                          self.measured, elapsed, measuring, self.measure.device, self.cfg_hash)


def efficiency(record: Record, macs: int, env: Environment) -> float:
    """MACs per cycle over the peak (BATCH x BLOCK_IN x BLOCK_OUT)."""
    return macs / record.cycles / (env.BATCH * env.BLOCK_IN * env.BLOCK_OUT) if record.cycles else math.nan
