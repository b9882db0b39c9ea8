"""
.. _vta-config-to-bitstream:

From a configuration to a bitstream
===================================

One file, ``vta_config.json``, decides the shape of the accelerator: the GEMM core's size, the
data widths and the size of each on-chip buffer. Everything else follows it: the ISA's field
widths (:mod:`vta_hw.spec`), the Amaranth hardware, fsim, tsim, the compiler's schedules and the
board build. This tutorial changes the configuration and watches each part follow.

The tutorial writes its configuration to a temporary file and passes the path around; in your own
checkout you would edit ``vta_config.json`` (or point ``$VTA_CONFIG`` at another file) and run the
same commands.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import vta_compiler as vta
import vta_runtime
from vta_hw.spec import ConfigError, load_config
from vta_hw.spec.regmap import describe_hwconfig, hwconfig_word

FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages

######################################################################
# The default configuration
# -------------------------
# Eleven keys. ``LOG_BATCH`` and ``LOG_BLOCK`` give the GEMM core (1 x 16 by 16 x 16 by default),
# the ``LOG_*_BUFF_SIZE`` keys the SRAM sizes in bytes; :doc:`/hardware/config` lists them all.

default = load_config()
print(default.to_json())

######################################################################
# A new configuration
# -------------------
# A 2 x 8 by 8 x 8 GEMM core (two batch rows, 8-channel blocks) with a 64 KiB weight buffer.
# ``load_config`` validates it and derives every number.

workdir = Path(tempfile.mkdtemp(prefix="vta-config-"))
config_file = workdir / "vta_config.json"
config_file.write_text(default.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16).to_json())
cfg = load_config(config_file)
print(f"{'':<22}{'default':>28}{'new':>28}")
for name in ("BATCH", "BLOCK_IN", "BLOCK_OUT", "INP_ELEM_BYTES", "WGT_ELEM_BYTES", "ACC_ELEM_BYTES",
             "INP_BUFF_DEPTH", "WGT_BUFF_DEPTH", "ACC_BUFF_DEPTH", "BITSTREAM"):
    print(f"{name:<22}{getattr(default, name)!s:>28}{getattr(cfg, name)!s:>28}")

######################################################################
# The ISA follows: the GEMM instruction's index fields are as wide as the buffers are deep. The new
# weight buffer still holds 1024 elements (64 KiB of 64-byte elements), so its fields keep their
# 10 bits; a 128 KiB weight buffer with 16x16 blocks (512 elements) would have 9-bit fields.

for c in (default, cfg, default.replace(LOG_WGT_BUFF_SIZE=17)):
    print(c.BITSTREAM, "GEMM fields:", ", ".join(f"{f.name}[{f.msb}:{f.lsb}]" for f in c.isa.gemm.fields[-6:]))

######################################################################
# A configuration that cannot be built is refused with the key, the value and the limit. Here the
# accumulator buffer would need more index bits than the ALU instruction has room for:

try:
    default.replace(LOG_ACC_BUFF_SIZE=21)
except ConfigError as exc:
    print("ConfigError:", exc)

######################################################################
# The compiler and fsim follow
# ----------------------------
# ``with vta.Environment(cfg):`` makes the compiler use the configuration; the device must have
# the same one. A dense layer, compiled and run on fsim with each configuration, checked against
# numpy: the same code, other packed layouts (8-channel blocks, 2-row batches), about as many
# GEMM micro-ops times four (each does a quarter of the MACs).

from sim.fsim import FsimDevice  # noqa: E402
from vta_compiler.testing.layers import run_dense  # noqa: E402

fsim_stats = {}
for c in (default, cfg):
    with vta.Environment(c) as env:
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(c)))
        r = run_dense((16, 256, 256))
        vta_runtime.set_command_queue(None)
        fsim_stats[c.MODEL] = r.stats
        print(f"{env.MODEL:<32} exact: {r.correct}; GEMM micro-ops {r.stats['gemm_counter']:>5} "
              f"of {env.BATCH * env.BLOCK_IN * env.BLOCK_OUT} MACs; tiling {r.tiling}")
        assert r.correct

######################################################################
# The hardware and tsim follow
# ----------------------------
# The Amaranth core is elaborated from the configuration; tsim compiles its Verilog with
# Verilator (a few minutes for a configuration it has not seen) and runs the same layer. The core
# reports its parameters in the ``HWCONFIG`` register, which the drivers check against the
# configuration they were given. (The quick build of this page skips tsim.)

from sim.tsim import TsimDevice, verilator_available  # noqa: E402

print("HWCONFIG the core must report:", describe_hwconfig(hwconfig_word(cfg)))
if FAST or not verilator_available():
    print("tsim skipped here (quick build, or no Verilator)")
else:
    dev = TsimDevice(cfg)
    print("HWCONFIG read from the Verilated core:", describe_hwconfig(dev.mmio.reg("HWCONFIG")))
    with vta.Environment(cfg):
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        r = run_dense((16, 256, 256))
        vta_runtime.set_command_queue(None)
    same = all(r.stats[k] == v for k, v in fsim_stats[cfg.MODEL].items())
    print(f"tsim: exact: {r.correct}; {r.stats['cycle_count']} cycles; its seven counters equal fsim's: {same}")
    assert r.correct

######################################################################
# The bitstream
# -------------
# ``nox -s bitstream -- --board pynq-z2 --config FILE`` runs ``python -m boards.flow``: it
# elaborates the board's top (the Zynq processing system and the core), writes the Verilog, the
# constraints and the Vivado Tcl, checks the design against the device with a yosys synthesis
# estimate, and runs Vivado if it is installed (no open toolchain places and routes Zynq parts).
# Here we run the same command into the temporary folder (the quick build of this page skips
# the yosys estimate, which takes a few minutes).

cmd = [sys.executable, "-m", "boards.flow", "--board", "pynq-z2", "--config", str(config_file),
       "--out", str(workdir / "build")] + (["--skip-utilization"] if FAST else [])
proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, VIVADO=""))
print(proc.stdout, proc.stderr)
assert proc.returncode == 0
plan = workdir / "build" / "pynq-z2" / cfg.BITSTREAM
print("\n".join(sorted(str(p.relative_to(plan)) for p in plan.rglob("*") if p.is_file())))

######################################################################
# With the bitstream built on a Vivado machine, ``vta-bitstream install`` puts it in the cache,
# and on the board :func:`vta_compiler.program_fpga` loads it (:doc:`/guide/boards`).
