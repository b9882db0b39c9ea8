"""Measurement: build a candidate, run it on tsim or a board over TVM's RPC, count its cycles, check it.

Every candidate is built on this machine in a builder process (``tvm.support.popen_pool``: a build
that hangs is killed at ``build_timeout``, one that crashes takes only its worker with it) and
exported as a ``.tar`` of object files, which the server links (as the original's AutoTVM did, so
a board needs no cross compiler here). It then runs on a measurement server: a session from TVM's
RPC tracker (``RPCMeasure``: servers started with ``python -m vta_compiler.exec.rpc_server --tracker
HOST:PORT --key KEY``, on this machine or on boards), or from tsim servers that ``TsimMeasure`` starts
on loopback behind a tracker of its own. Before measuring, ``module_loader`` pushes the
configuration (``reconfig_runtime``) and programs the FPGA (``program_fpga``; nothing on tsim). The
session's time limit is ``timeout``: a run that takes longer is killed by the server and recorded
as a timeout; a session that dies is recorded as a crash. The cost is the device's cycle counter
(``cycle_count``) over one run of the layer; the output is compared with the numpy reference and a
difference is an error, never a result.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vta_hw.spec import Config

from ..build_module import build
from ..environment import SIMULATED_TARGETS, Environment
from ..tiling import LayerData, Task

#: the counters a server reports that matter for a breakdown (cycles per module, bus)
BREAKDOWN_COUNTERS = ("cycle_count", "gemm_counter", "alu_counter", "load_busy_cycles", "load_stall_cycles",
                      "compute_busy_cycles", "compute_stall_cycles", "store_busy_cycles", "store_stall_cycles",
                      "fetch_busy_cycles", "fetch_stall_cycles", "gemm_busy_cycles", "alu_busy_cycles",
                      "axi_read_beats", "axi_write_beats", "axi_read_stall_cycles", "inp_load_nbytes",
                      "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes")


class MeasureError(RuntimeError):
    """A measurement set-up that cannot work (no server, a server without a cycle counter, ...)."""


@dataclass
class MeasureResult:
    """One run on a server: cycles (None on failure), the error if any, the device counters kept."""
    cycles: int | None
    error: str | None
    stats: dict = field(default_factory=dict)
    build_s: float = 0.0
    run_s: float = 0.0
    server: str = ""               # which server measured it (its state directory)


# ------------------------------------------------------------------------------------------------ build
def build_candidate(task_json: dict, knobs: dict, cfg_dict: dict, shift, path: str, op_module: str) -> float:
    """Runs in a builder process: the scheduled layer through ``vta.build``, exported to ``path`` (.tar).
    ``op_module`` registers the task's operator (imported first: operators may live outside vta_compiler)."""
    t0 = time.perf_counter()
    importlib.import_module(op_module)
    task = Task.from_json(task_json)
    env = Environment(Config(cfg_dict, source="the tuner's configuration"))
    with env:
        t = task.op.tiling_from_knobs(knobs)
        sch = task.op.scheduled(task.workload, t, env, task.acc_operands, shift)
        mod = build(sch, target=measurement_target(env))
        mod.export_library(path)
    return time.perf_counter() - t0


def measurement_target(env: Environment):
    """``env.target`` with the host code compiled without LLVM optimisation: the instruction stream the device
    runs, and so its cycles, are the same as an optimised build's (the host only issues runtime calls before
    the device starts), and the build takes about a quarter of the time."""
    import tvm

    from ..environment import TARGET_HOSTS
    return tvm.target.Target(env.target, host=tvm.target.Target({**TARGET_HOSTS[env.TARGET], "opt-level": 0}))


def _limit(timeout: float) -> int:
    """The session limit TVM's server enforces (whole seconds)."""
    return max(1, math.ceil(timeout))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM wraps Python errors in a traceback; the last line names the error
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:400]
    return (lines[-1] if lines else type(exc).__name__)[:400]


class Builder:
    """Builder processes (popen workers kept between builds; a timed-out or crashed one is replaced)."""

    def __init__(self, n_workers: int, timeout: float, workdir: str):
        from tvm.support.popen_pool import PopenPoolExecutor
        self.pool = PopenPoolExecutor(max_workers=max(1, n_workers), timeout=timeout)
        self.timeout = timeout
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._n = 0

    def build(self, task: Task, knobs: dict, config: Config, shift) -> tuple[str | None, str | None, float]:
        """(path, error, seconds)."""
        self._n += 1
        path = str(self.dir / f"cand_{os.getpid()}_{self._n}_{time.monotonic_ns()}.tar")
        t0 = time.perf_counter()
        fut = self.pool.submit(build_candidate, task.to_json(), knobs, config.cfg_dict, shift, path,
                               type(task.op).__module__)
        try:
            secs = fut.result()
            return path, None, secs
        except TimeoutError:
            return None, f"build timeout: more than {self.timeout:.0f} s", time.perf_counter() - t0
        except ChildProcessError as exc:
            return None, f"build crashed: {exc}", time.perf_counter() - t0
        except Exception as exc:       # noqa: BLE001 (a build error of any kind is a result)
            return None, f"build failed: {_first_line(exc)}", time.perf_counter() - t0

    def close(self) -> None:
        self.pool.shutdown(wait=False)


# ------------------------------------------------------------------------------------------------ run
def default_module_loader(remote, env: Environment) -> None:
    """What runs before each measurement on a remote (the original's ``vta.autotvm.module_loader``): push
    the configuration, and program the FPGA unless it already holds the bitstream (nothing on tsim)."""
    from ..rpc_client import program_fpga, reconfig_runtime
    reconfig_runtime(remote, env)
    if env.TARGET not in SIMULATED_TARGETS:
        from ..bitstream import file_digest, get_bitstream_path
        want = get_bitstream_path(env.config)
        status = json.loads(remote.get_function("tvm.contrib.vta.status")())
        have = (status.get("bitstream") or {}).get("sha256")
        if not (os.path.isfile(want) and have == file_digest(want)):
            program_fpga(remote, env=env)
    else:
        program_fpga(remote, env=env)


def server_id(remote) -> str:
    """The server a session runs on (its state directory)."""
    return str(json.loads(remote.get_function("tvm.contrib.vta.status")()).get("server", ""))


def run_on_remote(remote, lib_path: str, data: LayerData, unpack) -> tuple[dict, np.ndarray]:
    """Upload, load and run a built layer once on ``remote``; its device counters and unpacked output."""
    import tvm
    name = os.path.basename(lib_path)
    remote.upload(lib_path)
    f = remote.load_module(name)
    dev = remote.ext_dev(0)
    args = [tvm.runtime.tensor(a, device=dev) for a in data.args]
    out = tvm.runtime.empty(data.out_shape, "int8", device=dev)
    remote.get_function("tvm.contrib.vta.clear_stats")()
    f(*args, out)
    stats = json.loads(remote.get_function("tvm.contrib.vta.stats")())
    return stats, unpack(out.numpy())


def check_output(got: np.ndarray, expected: np.ndarray) -> str | None:
    got = got[tuple(slice(0, n) for n in expected.shape)]
    if got.shape != expected.shape:
        return f"wrong result: output shape {got.shape}, expected {expected.shape}"
    bad = int(np.count_nonzero(got != expected))
    return None if bad == 0 else f"wrong result: {bad} of {expected.size} outputs differ from numpy"


class RPCMeasure:
    """Measure on the servers a TVM RPC tracker holds under ``key`` (tsim servers or boards).

    Each measurement takes a session from the tracker, runs ``module_loader(remote, env)``, uploads the
    candidate (exported here as a ``.tar`` that the server links), runs it once on random data and
    reads the device's ``cycle_count``. Start the servers with
    ``python -m vta_compiler.exec.rpc_server --tracker HOST:PORT --key KEY`` (TARGET tsim or a board).

    Args:
        tracker: the tracker's ``(host, port)``.
        key: the key the servers registered under.
        n_parallel: measurements in flight; default: one per server registered under the key, counting the
            servers that register while tuning runs (up to ``max_parallel``).
        timeout: seconds one run may take (the session's limit, enforced by the server).
        priority: the tracker's request priority.
        module_loader: ``module_loader(remote, env)`` runs before each measurement (default:
            ``reconfig_runtime`` and ``program_fpga``; a board that already holds the bitstream is not
            programmed again).
        wait_for_servers: seconds to wait at the start for ``n_parallel`` servers.
        request_timeout: how long to wait for a free server (default: 3 x ``timeout``, at least 10
            minutes).
        max_parallel: the most measurements in flight when ``n_parallel`` follows the servers.
        system: the board TARGET whose memory system the tsim servers must simulate (servers started with
            ``--tsim-system``); None: any (a server of another system is refused when ``system`` is set).

    Raises:
        MeasureError: (from :func:`tune`) the tracker cannot be reached, no server is registered under
            ``key`` (the message says how to start one), the servers run TARGET ``sim``, or no server
            gave a session within ``request_timeout``.

    Example:
        >>> measure = autotune.RPCMeasure(tracker=("10.0.0.2", 9190), key="pynq", timeout=60)
        >>> autotune.tune(tasks, "pynq.jsonl", measure, trials=32)
    """

    def __init__(self, tracker: tuple[str, int] = ("127.0.0.1", 9190), key: str = "tsim",
                 n_parallel: int | None = None, timeout: float = 300.0, priority: int = 1,
                 module_loader=default_module_loader, wait_for_servers: float = 0.0,
                 request_timeout: float | None = None, max_parallel: int = 16, system: str | None = None):
        self.tracker = (str(tracker[0]), int(tracker[1]))
        self.follows_servers = n_parallel is None    # more measurements in flight as servers register
        self.max_parallel = max(1, int(max_parallel))
        self.request_timeout = request_timeout
        self.key = key
        self.n_parallel = n_parallel
        self.timeout = timeout
        self.priority = priority
        self.module_loader = module_loader
        self.wait_for_servers = wait_for_servers
        self.system = system
        self.device = ""

    # -- set-up
    def servers(self) -> int:
        import socket

        from tvm import rpc
        # TVM's tracker session retries a refused connection for a minute; nothing listening is an error now
        socket.create_connection(self.tracker, timeout=10).close()
        summary = rpc.connect_tracker(*self.tracker).summary()
        return sum(1 for s in summary.get("server_info", []) if s.get("key") == f"server:{self.key}")

    def start(self, env: Environment) -> Environment:
        """Check the servers and return the environment to build for (the servers' TARGET)."""
        deadline = time.monotonic() + self.wait_for_servers
        try:
            n = self.servers()
            while n < (self.n_parallel or 1) and time.monotonic() < deadline:
                time.sleep(0.5)
                n = self.servers()
        except (OSError, RuntimeError) as exc:
            raise MeasureError(f"cannot reach the RPC tracker at {self.tracker[0]}:{self.tracker[1]}: {exc}") from None
        if n == 0:
            h, p = self.tracker
            raise MeasureError(f"no server is registered under key {self.key!r} at the tracker {h}:{p}; start one "
                               f"with: python -m vta_compiler.exec.rpc_server --tracker {h}:{p} --key {self.key}")
        self.n_parallel = self.n_parallel or n
        remote = self._session(120)
        try:
            status = json.loads(remote.get_function("tvm.contrib.vta.status")())
        finally:
            del remote
            gc.collect()
        target = status["config"]["TARGET"]
        if self.system is not None and status.get("system") != self.system:
            raise MeasureError(f"the servers under key {self.key!r} simulate the memory system of "
                               f"{status.get('system') or 'the Pynq (TARGET tsim)'}, not {self.system}'s; start them "
                               f"with --tsim-system {self.system}")
        if target == "sim":
            raise MeasureError(f"the servers under key {self.key!r} run TARGET sim (fsim), which counts no cycles; "
                               "tune on tsim or on a board")
        self.device = target
        return Environment(env.config.replace(TARGET=target))

    def _session(self, timeout: float):
        """A session on a free server; waits at most ``request_timeout`` for one (a MeasureError after that:
        the servers are gone or stuck, which no candidate can fix)."""
        from tvm import rpc
        wait = self.request_timeout or max(600.0, 3 * self.timeout)
        tracker = rpc.connect_tracker(*self.tracker)
        tracker._sock.settimeout(wait)      # bounds the wait for a match (TVM's request blocks otherwise)
        try:
            return tracker.request(self.key, priority=self.priority, session_timeout=_limit(timeout), max_retry=1)
        except (OSError, RuntimeError) as exc:
            raise MeasureError(f"no server under key {self.key!r} at the tracker {self.tracker[0]}:{self.tracker[1]} "
                               f"gave a session within {wait:.0f} s: {_first_line(exc)}") from None
        finally:
            tracker.close()

    # -- one measurement
    def run(self, lib_path: str, data: LayerData, unpack, env: Environment) -> MeasureResult:
        remote = self._session(self.timeout)
        t0 = time.perf_counter()
        try:
            self.module_loader(remote, env)
            server = server_id(remote)
            stats, got = run_on_remote(remote, lib_path, data, unpack)
        except Exception as exc:       # noqa: BLE001 (a failed run is a result)
            secs = time.perf_counter() - t0
            msg = _first_line(exc)
            if "SessionTimeout" in str(exc) or secs > _limit(self.timeout):
                return MeasureResult(None, f"run timeout: the session passed its {_limit(self.timeout)} s limit "
                                     f"({msg})", run_s=secs)
            if any(s in str(exc).lower() for s in ("socket", "connection", "closed", "terminated", "eof")):
                return MeasureResult(None, f"run crashed: the server's session ended ({msg})", run_s=secs)
            return MeasureResult(None, f"run failed: {msg}", run_s=secs)
        finally:
            del remote
            gc.collect()
        secs = time.perf_counter() - t0
        if "cycle_count" not in stats:
            return MeasureResult(None, f"the device of the {self.device} server has no cycle counter", stats,
                                 run_s=secs, server=server)
        kept = {k: int(stats[k]) for k in BREAKDOWN_COUNTERS if stats.get(k)}
        wrong = check_output(got, data.expected)
        return MeasureResult(int(stats["cycle_count"]), wrong, kept, run_s=secs, server=server)

    def close(self) -> None:
        pass


class TsimMeasure(RPCMeasure):
    """Measure on tsim on this machine: starts ``n_parallel`` tsim RPC servers on loopback behind a tracker of
    its own (so a crash or a hang takes only a server's session), and stops them when tuning ends.

    The servers run the tuned configuration with TARGET ``tsim``; the Verilated core is built once, here,
    before they start (Verilator is needed: ``sim.tsim.verilator_available()``). ``system``: a board TARGET
    whose memory system tsim simulates (the servers' ``--tsim-system``); default: the Pynq's.

    Args:
        n_parallel: tsim servers, hence measurements in flight (each takes one core).
        timeout: seconds one run may take.
        host: the loopback address to listen on.
        module_loader: as for :class:`RPCMeasure`.

    Raises:
        MeasureError: (from :func:`tune`) the servers did not start within 5 minutes (the message has
            the end of their logs).

    Example:
        >>> autotune.tune(tasks, "c10.jsonl", autotune.TsimMeasure(n_parallel=2), trials=8)
    """

    def __init__(self, n_parallel: int = 1, timeout: float = 300.0, host: str = "127.0.0.1",
                 module_loader=default_module_loader, system: str | None = None):
        super().__init__((host, 0), f"tsim-{os.getpid()}", n_parallel, timeout, module_loader=module_loader,
                         system=system)
        self.host = host
        self._tracker = None
        self._procs: list[subprocess.Popen] = []
        self._tmp: tempfile.TemporaryDirectory | None = None

    def start(self, env: Environment) -> Environment:
        from tvm.rpc.tracker import Tracker

        from sim.tsim import build as build_tsim
        cfg = env.config.replace(TARGET="tsim")
        build_tsim(cfg.replace(TARGET=self.system) if self.system else cfg)   # once here, not in every server
        self._tmp = tempfile.TemporaryDirectory(prefix="vta_tune_")
        cfg_path = Path(self._tmp.name) / "tsim_config.json"
        cfg_path.write_text(cfg.to_json())
        self._tracker = Tracker(host=self.host, port=9190, port_end=9390, silent=True)
        self.tracker = (self.host, self._tracker.port)
        root = str(Path(__file__).resolve().parents[2])
        penv = {**os.environ, "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                        if p])}
        for i in range(self.n_parallel):
            log = open(Path(self._tmp.name) / f"server{i}.log", "w")
            self._procs.append(subprocess.Popen(
                [sys.executable, "-m", "vta_compiler.exec.rpc_server", "--host", self.host, "--port", "9091",
                 "--port-end", "9391", "--tracker", f"{self.host}:{self._tracker.port}", "--key", self.key,
                 "--config", str(cfg_path), "--state-dir", str(Path(self._tmp.name) / f"state{i}"),
                 *(["--tsim-system", self.system] if self.system else [])],
                stdout=log, stderr=subprocess.STDOUT, env=penv))
            log.close()
        deadline = time.monotonic() + 300
        while self.servers() < self.n_parallel:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in Path(self._tmp.name).glob("server*.log"))
                self.close()
                raise MeasureError(f"the tsim RPC servers did not start:\n{logs}")
            time.sleep(0.5)
        return super().start(env)

    def close(self) -> None:
        for p in self._procs:
            p.terminate()
        for p in self._procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(20)
        self._procs = []
        if self._tracker is not None:
            self._tracker.terminate()
            self._tracker = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
