"""Build a C++ shared library once and cache it: the runtime's core (``runtime.cc``) and fsim's engine.

The library is compiled with the system C++ compiler (``$CXX``, else ``g++``, else ``c++``) and
cached under ``build/<name>/<hash>/`` of the repository (or ``$VTA_CACHE_DIR/<name>/<hash>/``, or
``~/.cache/vta-py`` when the repository is not writable). The hash covers the source, the full
compiler command and the compiler's version, and, for ``-march=native`` builds, the host CPU's
feature flags. Concurrent builders take a lock; the library appears atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vta_hw.cache import cache_dir as _cache_dir
from vta_hw.spec import AluOp, MemType, Opcode

from .errors import VTAError


class CxxBuildError(VTAError):
    """A C++ part of VTA could not be compiled (no compiler, or the compiler failed)."""


def cache_dir() -> Path:
    """Where compiled C++ parts are cached: ``$VTA_CACHE_DIR``, else the repository's ``build/`` when it is
    writable, else ``~/.cache/vta-py`` (``vta_hw.cache.cache_dir``)."""
    return _cache_dir()


def compiler(what: str) -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise CxxBuildError(f"{what} needs a C++ compiler: install g++ (Debian/Ubuntu: apt-get install g++) "
                            "or point $CXX at one")
    return cxx


def native_arch() -> list[str]:
    """``-march=native`` where the compiler understands it for the host."""
    return ["-march=native"] if platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64") else []


def enum_defines() -> list[str]:
    """The ISA's opcode, memory type and ALU opcode numbers as -D defines (OP_LOAD, MEM_INP, ALU_SHR, ...)."""
    enums = [(f"OP_{o.name}", o) for o in Opcode] + [(f"MEM_{m.name}", m) for m in MemType] + \
        [(f"ALU_{a.name}", a) for a in AluOp]
    return [f"-D{name}={int(value)}" for name, value in enums]


def cpu_flags() -> str:
    """The host CPU's feature flags (part of the cache key of a -march=native build)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def build(name: str, source: Path, flags: list[str], what: str) -> Path:
    """The path of lib<name>.so built from ``source`` with ``flags``, compiling it unless cached.
    ``what`` names the part in error messages."""
    cxx = compiler(what)
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    except OSError as exc:
        raise CxxBuildError(f"cannot run the C++ compiler {cxx!r} to build {what}: {exc}") from None

    def command(out: Path) -> list[str]:
        return [cxx, "-std=c++17", "-shared", "-fPIC", str(source), "-o", str(out), *flags]

    parts = [source.read_text(), *command(Path("OUT")), version]
    if "-march=native" in flags:
        parts.append(cpu_flags())
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    path = cache_dir() / name / key / f"lib{name}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)    # one builder at a time; the others find its result
        if path.exists():
            return path
        print(f"[vta] compiling {what} (once; cached in {path.parent})", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            out = Path(tmp) / path.name
            cmd = command(out)
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise CxxBuildError(f"building {what} failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}")
            os.replace(out, path)   # atomic: concurrent loaders never see a half-written file
        print(f"[vta] compiled {what} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return path
