"""
.. _vta-deploy-classification:

Deploy a classifier end to end
==============================

A whole network on VTA takes five calls of :mod:`vta_compiler.graph`:

1. :func:`~vta_compiler.graph.from_onnx` imports an ONNX model as a Relax module and its weights;
2. :func:`~vta_compiler.graph.quantize` turns it into VTA's integer form (int8 activations and
   weights, int32 accumulation, power-of-two scales), calibrated on a few inputs;
3. :func:`~vta_compiler.graph.graph_pack` puts every layer VTA can compute on VTA, in packed
   layouts, and leaves the rest on the CPU;
4. :func:`~vta_compiler.graph.build` compiles everything into one Relax executable;
5. ``relax.VirtualMachine`` runs it, on the CPU and ``ext_dev`` (VTA) together.

We do it twice: first for a small classifier trained on scikit-learn's digits, where accuracy
can be measured, then for ResNet-18. Both run on fsim; :func:`~vta_compiler.graph.profile` then shows
where the time of an inference goes (on tsim, cycle by cycle).
"""

import os
import time

import matplotlib.pyplot as plt
import numpy as np
import tvm
from tvm import relax

import vta_compiler as vta
from vta_compiler import graph
from vta_compiler.graph.models import digits, imagenet_like, resnet_onnx

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages

######################################################################
# The digits classifier
# ---------------------
# Two convolutions and a dense layer, trained with numpy on the 8x8 digit images that
# scikit-learn ships (the weights are in the repository). The ONNX model takes a batch of
# ``(1, 8, 8)`` images; a batch of 40 fills the GEMM core better than one image at a time.

xtr, ytr, xte, yte = digits.load_split()
batch = 40
mod, params = graph.from_onnx(digits.digits_onnx(batch=batch))
print(mod.script())

######################################################################
# Quantization
# ------------
# Scales come from calibration batches: each activation's largest magnitude maps to 127. Every
# layer then computes ``int8(clip((conv(x, w) + bias) >> shift))``, VTA's GEMM and ALU epilogue
# exactly. The result is an ordinary Relax module, so the CPU can run the quantized network: that
# is the reference VTA must match bit for bit.

t0 = time.perf_counter()
qmod = graph.quantize(mod, params, calibration=[xtr[k:k + batch] for k in range(0, 400, batch)])
print(f"quantized in {time.perf_counter() - t0:.1f} s")

######################################################################
# Packing and placement
# ---------------------
# ``graph_pack`` matches each convolution or dense layer with its epilogue (Relax dataflow
# patterns of the registered operators, :func:`vta_compiler.graph.patterns`) and replaces it with a ``vta.top``
# kernel.
# :func:`~vta_compiler.graph.placement` says where each operator runs and why.

pmod = graph.graph_pack(qmod)
print(graph.placement(pmod))

######################################################################
# Build and run
# -------------
# The executable holds the VTA kernels and the host code. The virtual machine gets two devices:
# the CPU for host operators and ``ext_dev(0)``, whose memory is the simulated DRAM of the device
# behind the runtime (fsim here).

t0 = time.perf_counter()
ex = graph.build(pmod)
print(f"built in {time.perf_counter() - t0:.1f} s")
vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())

n_test = 120 if FAST else len(xte)
pred, exact = [], True
t0 = time.perf_counter()
for k in range(0, n_test, batch):
    x = tvm.runtime.tensor(xte[k:k + batch])
    y = vm["main"](x).numpy()
    exact &= bool(np.array_equal(y, cpu["main"](x).numpy()))
    pred.append(y.argmax(1))
pred = np.concatenate(pred)
print(f"{n_test} images on fsim in {time.perf_counter() - t0:.1f} s")
acc_vta = (pred == yte[:n_test]).mean()
acc_float = (digits.forward(digits.load_weights(), xte[:n_test]).argmax(1) == yte[:n_test]).mean()
print(f"accuracy on {n_test} held-out images: float on the CPU {acc_float:.2%}, int8 on VTA {acc_vta:.2%}")
print("VTA equals the CPU run of the quantized network, bit for bit:", exact)
assert exact

######################################################################
# A few of them, with VTA's answers:

fig, axes = plt.subplots(2, 8, figsize=(9, 2.8))
for ax, img, label, guess in zip(axes.ravel(), xte, yte, pred):
    ax.imshow(img[0], cmap="gray_r")
    ax.set_title(f"VTA: {guess}", color="black" if guess == label else "red", fontsize=10)
    ax.axis("off")
fig.suptitle("held-out digits, classified by the int8 network on VTA (fsim)")
fig.tight_layout()

######################################################################
# Where the time goes
# -------------------
# fsim is exact but has no clock. :func:`~vta_compiler.graph.profile` runs one inference on tsim's profile
# build, which records every instruction of every module (fetch, load, compute's GEMM and ALU, store) from
# the hardware's own signals, and gives a per-layer table: cycles, MACs per cycle against the GEMM array's
# peak, DRAM traffic and what bounds the layer. ``prof.write_trace("trace.json")`` writes the timeline for
# Perfetto or ``chrome://tracing``; ``vta profile`` does the same from the command line (see
# :doc:`the profiling guide </guide/profiling>`). One batch of 40 digits, after a warm-up batch:

from sim.tsim import verilator_available  # noqa: E402

if verilator_available():
    prof = graph.profile(ex, xte[:batch], "tsim", placement=graph.placement(pmod), warmup=1, repeat=2)
    print(prof.table())
    prof.plot_timeline(layer="conv2d_1", title="the digits classifier on tsim: conv2d_1's kernel call")
else:
    print("tsim skipped here (no Verilator)")

######################################################################
# A network this small is bound by the host: the runtime's work in each kernel call (building and starting
# the instruction stream) takes longer than VTA's run. In the picture, the layer's span is mostly host time;
# VTA's run is the short stretch where the module tracks fill in, each instruction's wait for a dependency
# token in orange.

######################################################################
# ResNet-18
# ---------
# The same five calls for ResNet-18 (ImageNet shapes). :func:`~vta_compiler.graph.models.resnet_onnx`
# builds it in code with seeded random weights and batch norm (no download; the flow is what
# matters here, not the classes). Batch norm is folded into the convolutions, the residual adds,
# the max pool and the global average pool stay integer on the CPU between VTA layers, and the
# 7x7 stem on 3 channels is *folded* (its kernel columns move into the channels) so that VTA's
# 16-channel blocks are not mostly zeros. The quick build of this page uses 64x64 images.

image = 64 if FAST else 224
mod, params = graph.from_onnx(resnet_onnx(18, image=image))
t0 = time.perf_counter()
qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, image, seed=s) for s in (11, 12)])
print(f"quantized in {time.perf_counter() - t0:.1f} s")
t0 = time.perf_counter()
pmod = graph.graph_pack(qmod)
ex = graph.build(pmod)
print(f"graph_pack + build in {time.perf_counter() - t0:.1f} s")
pl = graph.placement(pmod)
print(pl.summary())
print("\n".join(str(pl).splitlines()[:14]), "\n...")

######################################################################
# One inference on fsim, checked against the CPU run of the quantized network:

vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
x = tvm.runtime.tensor(imagenet_like(1, image, seed=13))
vta.testing.simulator.clear_stats()
t0 = time.perf_counter()
y = vm["main"](x).numpy()
print(f"one inference on fsim in {time.perf_counter() - t0:.1f} s (the first run also records the micro-op kernels)")
want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](x).numpy()
print("top-5 classes:", [int(k) for k in np.argsort(-y[0])[:5]], "; exact against the CPU:", np.array_equal(y, want))
assert np.array_equal(y, want)
stats = vta.testing.simulator.stats()
issued = stats["gemm_counter"] * env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
print(f"GEMM micro-ops {stats['gemm_counter']:,}: {issued / 1e9:.2f} G MACs issued for {pl.vta_macs / 1e9:.2f} G "
      f"useful; weights loaded: {stats['wgt_load_nbytes'] / 2**20:.1f} MiB")

######################################################################
# The same inference profiled on fsim: without a clock, each layer's cycles are lower bounds from the
# counters (a GEMM or ALU micro-op a cycle, a bus beat a cycle), so MACs per cycle are upper bounds; they
# already say which unit a layer needs most. tsim measures them: :doc:`the profiling guide
# </guide/profiling>` has ResNet-18's trace, table and roofline from tsim.

prof = graph.profile(ex, imagenet_like(1, image, seed=13), "fsim", placement=pl, warmup=1, repeat=3)
print(prof.table())
prof.plot_roofline(title=f"ResNet-18 ({image}x{image}) on fsim: the counters' bounds under the roofline")
