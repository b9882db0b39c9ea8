"""
.. _vta-deploy-ppocr:

Deploy a real model: PP-OCR's text detector
===========================================

The other tutorials build their networks in code. This one takes a model as its users get it: PP-OCRv4's
text detector (a DBNet on a MobileNetV3 backbone, exported from PaddlePaddle by Paddle2ONNX), as the
``rapidocr-onnxruntime`` wheel ships it, with no change to the file. It reads an image of a page and writes a
probability map: a pixel's chance of being inside a line of text. Thresholding the map and taking its
connected regions gives the text boxes.

We render a page of text, run the detector in float with ONNX Runtime and in int8 on VTA (the functional
simulator), and draw both sets of boxes side by side.
"""

import os
import time

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime as ort
import tvm
from scipy import ndimage
from tvm import relax

import vta_compiler as vta
from vta_compiler import graph
from vta_compiler.graph import zoo

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages
H, W = (64, 192) if FAST else (192, 320)            # the page size the model is compiled for

######################################################################
# The model and a page of text
# ----------------------------
# The detector takes any size; VTA compiles static shapes, so ``shape_dict`` fixes the page's. ``from_onnx``
# folds the shape arithmetic Paddle2ONNX writes and imports the file as it is.

det = zoo.MODELS["ppocr_det"]
path = det.path()
print(f"{path.name} from the {det.package} wheel, {path.stat().st_size / 1e6:.1f} MB, exported by {det.exporter}")
mod, params = graph.from_onnx(str(path), shape_dict={"x": [1, 3, H, W]})

rng = np.random.default_rng(7)
page, lines = zoo.render_page(H, W, rng, lines=max(1, H // 28))
x = zoo.ppocr_normalize(page)          # PP-OCR's preprocessing: (x / 255 - 0.5) / 0.5, CHW
print("page", page.shape, "with", len(lines), "lines of text")

######################################################################
# Quantize, pack, build
# ---------------------
# Calibration uses a few other rendered pages. ``graph_pack`` puts every convolution on VTA; the placement
# report says where each operator runs and why.

cal = [zoo.ppocr_normalize(zoo.render_page(H, W, np.random.default_rng(100 + k), lines=max(1, H // 28))[0])
       for k in range(2 if FAST else 4)]
t0 = time.perf_counter()
qmod = graph.quantize(mod, params, calibration=cal)
pmod = graph.graph_pack(qmod)
ex = graph.build(pmod)
print(f"quantized, packed and built in {time.perf_counter() - t0:.1f} s")
print(graph.placement(pmod).summary())

######################################################################
# Run in float and on VTA
# -----------------------
# ONNX Runtime runs the shipped file in float; VTA runs the int8 network, exactly as its CPU int8 run (the
# reference of every test here).

float_map = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0][0, 0]
vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
vta_out = vm["main"](tvm.runtime.tensor(x))
vta_map = (vta_out.numpy() if hasattr(vta_out, "numpy") else vta_out[0].numpy())[0, 0]
cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())
cpu_out = cpu["main"](tvm.runtime.tensor(x))
cpu_map = (cpu_out.numpy() if hasattr(cpu_out, "numpy") else cpu_out[0].numpy())[0, 0]
print("VTA equals the CPU int8 run:", bool(np.array_equal(vta_map, cpu_map)))
print(f"correlation of VTA's map with float: {zoo.correlation(float_map, vta_map):.3f}")

######################################################################
# From the map to text boxes
# --------------------------
# DBNet's post-processing, simplified: threshold the probability at 0.3, take the connected regions, drop
# specks, and grow each region's box a little (the map marks the shrunk core of a line).


def boxes(prob: np.ndarray, threshold: float = 0.3, min_area: int = 12, grow: float = 0.4):
    labels, n = ndimage.label(prob > threshold)
    out = []
    for sl in ndimage.find_objects(labels):
        y0, y1, x0, x1 = sl[0].start, sl[0].stop, sl[1].start, sl[1].stop
        if (y1 - y0) * (x1 - x0) < min_area:
            continue
        g = grow * (y1 - y0)
        out.append((max(0, x0 - g), max(0, y0 - g), min(prob.shape[1], x1 + g), min(prob.shape[0], y1 + g)))
    return out


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


fb, vb = boxes(float_map), boxes(vta_map)
matched = sum(1 for b in fb if any(iou(b, c) > 0.5 for c in vb))
print(f"float finds {len(fb)} boxes, VTA {len(vb)}; {matched} of the float boxes have a VTA box over half their "
      "union")

fig, axes = plt.subplots(1, 2, figsize=(10, 2.6 * H / 64 if FAST else 4.5))
for ax, title, bx in ((axes[0], "float (ONNX Runtime)", fb), (axes[1], "int8 on VTA (fsim)", vb)):
    ax.imshow(page)
    for x0, y0, x1, y1 in bx:
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, color="tab:red", linewidth=1.5))
    ax.set_title(f"{title}: {len(bx)} boxes")
    ax.axis("off")
fig.tight_layout()
plt.show()

######################################################################
# What to try next
# ----------------
# ``vta compile`` does the same from the command line (:doc:`the command line </guide/cli>`), and the
# zoo (``vta_compiler.graph.zoo``) holds PP-OCR's classifier and recogniser and models from other exporters,
# with the figures in the :doc:`networks guide </guide/networks>`.
