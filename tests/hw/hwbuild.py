"""Building Verilog and cocotb/Verilator simulators for the hardware tests, cached by hash.

Every build lands in ``build/cocotb/<name>-<hash>/``; the hash covers the Verilog text and the
cocotb/Verilator versions, so an unchanged design is never rebuilt. Builds are serialised with a
file lock (the machine may be shared) and use at most 2 compiler jobs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD = REPO / "build" / "cocotb"
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--x-assign", "fast", "--x-initial", "fast"]


def _hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:16]


def unit_verilog(cfg, units=None, name: str = "units") -> Path:
    """Verilog of ``unit_top.UnitTop`` for ``cfg`` (cached), of every unit or only ``units``, with the
    top module ``name``."""
    from vta_hw.verilog import source_hash, strip_zero_init

    sys.path.insert(0, str(HERE))
    from unit_top import ALL_UNITS, UnitTop
    units = tuple(units or ALL_UNITS)
    key = _hash(cfg.hash(hardware_only=True).encode(), source_hash().encode(), (HERE / "unit_top.py").read_bytes(),
                repr(units).encode())
    if units == ALL_UNITS:   # the key of the full top as it always was
        key = _hash(cfg.hash(hardware_only=True).encode(), source_hash().encode(), (HERE / "unit_top.py").read_bytes())
    out = BUILD / f"{name}-{key}" / f"{name}.v"
    if out.exists():
        return out
    from amaranth.back import verilog
    out.parent.mkdir(parents=True, exist_ok=True)
    text = strip_zero_init(verilog.convert(UnitTop(cfg, units), name=name, emit_src=False))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return out


def core_verilog(cfg) -> Path:
    from vta_hw.verilog import generate

    return generate(cfg)


def cocotb_build(verilog: Path, toplevel: str) -> Path:
    """A Verilator+VPI simulator of ``verilog`` for cocotb (built once per Verilog text)."""
    import cocotb
    from cocotb_tools.runner import get_runner

    vl = subprocess.run(["verilator", "--version"], capture_output=True, text=True).stdout
    key = _hash(verilog.read_bytes(), vl.encode(), cocotb.__version__.encode(), repr(VERILATOR_ARGS).encode())
    bd = BUILD / f"{toplevel}-{key}"
    done = bd / ".built"
    if done.exists():
        return bd
    bd.mkdir(parents=True, exist_ok=True)
    with open(bd / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if done.exists():
            return bd
        t0 = time.perf_counter()
        print(f"[cocotb] building {toplevel} simulator in {bd} ...", file=sys.stderr, flush=True)
        os.environ.setdefault("MAKEFLAGS", "-j2")
        runner = get_runner("verilator")
        runner.build(sources=[verilog], hdl_toplevel=toplevel, build_dir=bd, build_args=VERILATOR_ARGS,
                     always=True, log_file=bd / "build.log")
        done.write_text(f"{time.perf_counter() - t0:.1f}\n")
        print(f"[cocotb] built {toplevel} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return bd


def cocotb_run(build_dir: Path, toplevel: str, module: str, testcase=None, env=None) -> None:
    """Run the cocotb tests of ``module`` (a file in tests/hw) against a built simulator."""
    from cocotb_tools.runner import get_runner

    runner = get_runner("verilator")
    extra = {"PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")])}
    extra.setdefault("COCOTB_LOG_LEVEL", os.environ.get("COCOTB_LOG_LEVEL", "WARNING"))
    extra.update(env or {})
    results = runner.test(hdl_toplevel=toplevel, hdl_toplevel_lang="verilog", test_module=module,
                          build_dir=build_dir, test_dir=HERE,
                          testcase=testcase, extra_env=extra, results_xml=str(build_dir / f"results_{module}.xml"))
    from cocotb_tools.runner import get_results

    total, failed = get_results(results)
    assert failed == 0, f"{failed} of {total} cocotb tests in {module} failed (see the log above)"
    assert total > 0, f"no cocotb tests ran in {module}"
