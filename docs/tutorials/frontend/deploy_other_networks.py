"""
.. _vta-deploy-other-networks:

Deploy MobileNet and a DCGAN generator
======================================

ResNet has only plain convolutions. Two other common networks need more of VTA's operators:

* **MobileNet v1** alternates *depthwise* 3x3 convolutions (one group per channel) with pointwise 1x1
  convolutions. ``graph_pack`` runs the depthwise layers as grouped convolutions with block-diagonal
  16x16 weight tiles, so the network stays in VTA's packed layout from its first layer to its last;
  the depthwise layers use 1/16 of the GEMM core's lanes.
* **A DCGAN generator** upsamples a latent vector with *transposed* convolutions, which VTA computes
  in stride² phases (no GEMM meets a zero of the dilation); its last ``tanh`` runs on the CPU.

The flow is the one of the :ref:`classification tutorial <vta-deploy-classification>`: import,
quantize, ``graph_pack``, build, run on fsim, and compare with the CPU run of the quantized network,
which must agree bit for bit. Both networks are built in code with seeded random weights.
"""

import os
import time

import matplotlib.pyplot as plt
import numpy as np
import tvm
from tvm import relax

import vta_compiler as vta
from vta_compiler import graph
from vta_compiler.graph.models import dcgan_generator_onnx, imagenet_like, latent_like, mobilenet_v1_onnx

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages


def run_both(qmod, ex, x):
    """The network on VTA (fsim) and on the CPU, for one input."""
    vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
    cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())
    xt = tvm.runtime.tensor(x)
    t0 = time.perf_counter()
    got = vm["main"](xt).numpy()
    print(f"one inference on fsim in {time.perf_counter() - t0:.2f} s")
    return got, cpu["main"](xt).numpy()


######################################################################
# MobileNet v1
# ------------
# 224x224 images at width 1.0, as published (the quick build of this page uses 64x64 images at width
# 0.25, whose first depthwise layers have 8 channels: they are padded to a block with whole groups of
# zero weights).

image, width = (64, 0.25) if FAST else (224, 1.0)
mod, params = graph.from_onnx(mobilenet_v1_onnx(image=image, width=width))
qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, image, seed=s) for s in (11, 12)])
t0 = time.perf_counter()
pmod = graph.graph_pack(qmod)
ex = graph.build(pmod)
print(f"graph_pack + build in {time.perf_counter() - t0:.1f} s")
pl = graph.placement(pmod)
print(pl.summary())
print("\n".join(str(pl).splitlines()[:8]), "\n...")

######################################################################
# Every depthwise row says where it went and why. Each output channel of a depthwise layer issues a
# whole 16-lane block per kernel tap, so VTA issues 16 times the useful MACs there (32 times in a layer
# of 8 channels padded to 16):

for r in [r for r in pl.rows if r["op"].startswith("depthwise_conv2d")][:3]:
    print(f"{r['name']:<20} {r['device']}  useful {r['macs']:>10,} MACs, issued {r['issued_macs']:>11,}: {r['note']}")

######################################################################
# The placement is a choice: ``graph_pack(qmod, depthwise="cpu")`` runs the depthwise layers on the
# CPU instead, each with a layout change before and after it. With a fast desktop CPU that can win;
# with the boards' ARM cores VTA does (see :doc:`the networks guide </guide/networks>` for the
# measurements). The placement alone shows the cost in layout changes:

for where in ("vta", "cpu"):
    p = graph.graph_pack(qmod, depthwise=where)
    print(f"depthwise={where!r}: {graph.placement(p).summary()}; "
          f"{p['main'].script().count('R.to_vdevice(')} layout changes between the CPU and VTA")

######################################################################
# One image on fsim, checked against the CPU:

x = imagenet_like(1, image, seed=13)
vta.testing.simulator.clear_stats()
got, want = run_both(qmod, ex, x)
print("top-5 classes:", [int(k) for k in np.argsort(-got[0])[:5]], "; exact against the CPU:",
      np.array_equal(got, want))
assert np.array_equal(got, want)
stats = vta.testing.simulator.stats()
print(f"GEMM micro-ops {stats['gemm_counter']:,}, ALU micro-ops {stats['alu_counter']:,}")

######################################################################
# The profile shows what the 16 issued MACs per useful one cost. Profiled on fsim (counters only: the
# cycles are lower bounds, a GEMM micro-op or a bus beat a cycle, so the MACs per cycle are upper bounds;
# :func:`~vta_compiler.graph.profile` on tsim measures them), a depthwise layer can reach at most a sixteenth
# of the GEMM array's peak, while a pointwise layer is limited by its data and its size alone. "host" says
# the runtime's work on the host in the layer's kernel call takes longer than VTA would at best:

prof = graph.profile(ex, x, "fsim", placement=pl, warmup=1, repeat=3)
for r in prof.rows()[1:5]:
    print(f"{r['layer']:<22} {r['op'].split()[0]:<18} {r['macs_per_cycle']:6.1f} useful MACs/cycle at most "
          f"({100 * r['peak_fraction']:5.1f}% of peak), bound by {r['bound']}")

######################################################################
# A DCGAN generator
# -----------------
# A 100-dimensional latent vector becomes a 4x4 feature map through a 4x4 transposed convolution, then
# stride-2 transposed convolutions with batch norm and ReLU double the size up to the image; the last
# one has 3 output channels and ``tanh``. 64x64 images with 64 features (DCGAN's sizes; the quick
# build: 32x32 with 16 features).

image, features = (32, 16) if FAST else (64, 64)
mod, params = graph.from_onnx(dcgan_generator_onnx(features=features, image=image))
qmod = graph.quantize(mod, params, calibration=[latent_like(seed=s) for s in (1, 2)])
pmod = graph.graph_pack(qmod)
ex = graph.build(pmod)
pl = graph.placement(pmod)
print(pl.summary())
for r in pl.rows:
    if r["device"] == "VTA":
        print(f"{r['name']:<20} useful {r['macs']:>11,} MACs, issued {r['issued_macs']:>11,}  {r.get('kernel', '')}")
print("tanh on the", next(r["device"] for r in pl.rows if r["op"] == "tanh"))

######################################################################
# Generate from four latent vectors on fsim, each checked against the CPU:

images = []
for seed in range(4):
    got, want = run_both(qmod, ex, latent_like(seed=20 + seed))
    assert np.array_equal(got, want), f"latent {seed}: VTA differs from the CPU"
    images.append(got[0])
print(f"4 images, each exact against the CPU; values in [{np.min(images):.3f}, {np.max(images):.3f}]")

######################################################################
# With random weights the generator draws textures, not faces; what matters is that VTA drew the same
# ones as the CPU:

fig, axes = plt.subplots(1, 4, figsize=(8, 2.3))
for ax, img in zip(axes, images):
    ax.imshow((np.transpose(img, (1, 2, 0)) + 1) / 2)
    ax.axis("off")
fig.suptitle("DCGAN generator with random weights, int8 on VTA (fsim)")
fig.tight_layout()
