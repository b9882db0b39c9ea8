"""
.. _vta-deploy-detection:

Deploy a detector written with ``relax.frontend.nn``
====================================================

Not every network is a ResNet imported from ONNX. This tutorial deploys a YOLO-tiny-style
detector written directly in TVM's ``relax.frontend.nn`` (:func:`vta_compiler.graph.models.yolo_tiny_nn`):
a stack of 3x3 convolutions and 2x2 max pools, then two detection heads. The fine head upsamples
the coarse features and concatenates them with an earlier feature map, as YOLOv3-tiny does, and
each head ends with a sigmoid, an operator VTA does not have. The weights are seeded random
numbers, so the boxes mean nothing: the point is the flow and where each operator runs.
"""

import os
import time

import matplotlib.pyplot as plt
import numpy as np
import tvm
from tvm import relax

from vta_compiler import graph
from vta_compiler.graph.models import imagenet_like, yolo_tiny_nn

FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages
image = 64 if FAST else 96

######################################################################
# The model
# ---------
# ``yolo_tiny_nn`` returns what ``nn.Module.export_tvm`` returns: a Relax module and the list of
# ``(name, Parameter)`` pairs, with the weights set on the parameters. ``quantize`` takes that list
# as it is.

mod, params = yolo_tiny_nn(image=image)
print(f"{len(params)} parameters:", ", ".join(name for name, _ in params[:6]), "...")
qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, image, seed=s) for s in (1, 2)])

######################################################################
# Placement
# ---------
# Every convolution goes to VTA. Between them, the max pools, the nearest-neighbour upsampling and
# the concatenation of whole 16-channel blocks run on the CPU *on the packed tensors*, so the data
# never changes layout between VTA layers; the sigmoids run in float on the CPU.

pmod = graph.graph_pack(qmod)
pl = graph.placement(pmod)
print(pl.summary())
print(pl)

######################################################################
# Build, run, compare
# -------------------
# The network has two outputs; both must equal the CPU run of the quantized module exactly.

t0 = time.perf_counter()
ex = graph.build(pmod)
print(f"built in {time.perf_counter() - t0:.1f} s")
x = tvm.runtime.tensor(imagenet_like(1, image, seed=3))
vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
coarse, fine = (t.numpy() for t in vm["main"](x))
want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](x)
print("coarse head", coarse.shape, "fine head", fine.shape)
print("exact against the CPU:", np.array_equal(coarse, want[0].numpy()) and np.array_equal(fine, want[1].numpy()))
assert np.array_equal(coarse, want[0].numpy()) and np.array_equal(fine, want[1].numpy())

######################################################################
# The objectness score of the first anchor (channel 4 of each head's 16) on the two grids, as a
# detector's post-processing would read it:

fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
for ax, head, name in zip(axes, (coarse, fine), ("coarse grid", "fine grid")):
    im = ax.imshow(head[0, 4], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"{name} {head.shape[2]}x{head.shape[3]}")
    ax.axis("off")
fig.colorbar(im, ax=axes, shrink=0.8)
