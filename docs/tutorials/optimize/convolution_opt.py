"""
.. _vta-convolution-opt:

Optimized convolution
=====================

A convolution is a GEMM with a sliding window: for every output pixel, the input channels of a
``KH x KW`` window times the kernel. On VTA each GEMM instruction multiplies one ``BLOCK_IN``-channel
slice of one pixel by a ``BLOCK_IN x BLOCK_OUT`` kernel block; the micro-op kernel walks the window,
and the schedule decides what lives on chip when.

This tutorial takes a ResNet-18 layer and tries the knobs of :func:`vta_compiler.top.schedule_conv2d_packed`
(tile sizes, virtual threads over output channels and over rows, weights loaded once per channel
tile, two input chunks in flight), checks each result exactly against numpy on fsim, and times it
on tsim when Verilator is installed.
"""

import os

import vta_compiler as vta
import vta_runtime
from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import RESNET18, Conv2DTiling, Conv2DWorkload, conv2d_layer, conv2d_tiling, schedule_conv2d_packed
from vta_compiler.top.conv2d import fits

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages

######################################################################
# The layer
# ---------
# ResNet-18's C5: 28x28 pixels, 128 to 128 channels, 3x3 kernel, stride 1, padding 1 (the quick
# build of this page uses a 14x14, 64-channel layer of the same shape).

wkl = Conv2DWorkload(1, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1) if FAST else RESNET18["C5"]
print(wkl)
print(f"{wkl.macs / 1e6:.1f} M MACs, {wkl.macs // (env.BATCH * env.BLOCK_IN * env.BLOCK_OUT)} GEMM micro-ops at least")

######################################################################
# The computation in packed layouts
# ---------------------------------
# :func:`~vta_compiler.top.conv2d_layer` builds the TE function: data ``(N/B, CI/16, H, W, B, 16)``,
# kernel ``(CO/16, CI/16, KH, KW, 16, 16)``, a ``pad`` stage that the DMA performs while loading
# (VTA's loads insert zero rows and columns), the convolution in int32, then ``+ bias``,
# ``>> shift``, clip and the int8 cast, which become ALU instructions.

func = conv2d_layer(wkl, shift=8)
print(func.script())

######################################################################
# Measuring a tiling
# ------------------
# :func:`vta_compiler.testing.layers.run_conv2d` builds the layer with a tiling, runs it on the
# runtime's device with random int8 data and compares it with a numpy convolution. We run it on
# fsim (exact result, DRAM traffic) and on tsim (cycles).

from sim.fsim import FsimDevice  # noqa: E402
from sim.tsim import TsimDevice, verilator_available  # noqa: E402

peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT


def measure(label: str, tiling: Conv2DTiling) -> None:
    assert fits(wkl, tiling, env), f"{tiling} does not fit the SRAMs"
    line = []
    for device_class in (FsimDevice, TsimDevice) if verilator_available() else (FsimDevice,):
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(device_class(env.config)))
        r = run_conv2d(wkl, tiling)
        vta_runtime.set_command_queue(None)
        assert r.correct, f"{label}: wrong result on {device_class.__name__}"
        if device_class is FsimDevice:
            line.append(f"DRAM bytes / compulsory {r.dram_ratio:4.2f}")
        else:
            cycles = r.stats["cycle_count"]
            line.append(f"tsim {cycles:>8} cycles = {r.macs / cycles / peak:4.0%} of peak")
    print(f"{label:<44} exact; " + "; ".join(line))


######################################################################
# From one thread to the library's choice
# ---------------------------------------
# Each line changes one thing:
#
# 1. a tile of 4 channel blocks x 7 rows x all columns, input channels in chunks of 2 blocks, one
#    thread: loads and GEMMs take turns;
# 2. two virtual threads over the tile's output channels: one thread's weight loads overlap the
#    other's GEMMs (they share the input tile);
# 3. two more over rows: four accumulator tiles in flight;
# 4. weights loaded once per channel tile (``wgt_at="co"``) and two input chunks in flight
#    (``ko_nthread=2``, the chunk loop pipelined), chunks of one block (two chunks of two blocks,
#    with their halo rows, would not fit the input buffer on the full-size layer);
# 5. :func:`~vta_compiler.top.conv2d_tiling`'s choice, from a cost model of the same effects.

ow = wkl.out_width
measure("1. 4 blocks x 7 rows, one thread", Conv2DTiling(tile_co=4, tile_h=7, tile_w=ow, tile_ci=2))
measure("2. + 2 virtual threads over channels", Conv2DTiling(4, 7, ow, 2, oc_nthread=2))
measure("3. + 2 virtual threads over rows", Conv2DTiling(4, 14, ow, 2, oc_nthread=2, h_nthread=2))
measure("4. weights once per tile, 2 chunks in flight", Conv2DTiling(4, 14, ow, 1, oc_nthread=2, h_nthread=2,
                                                                     wgt_at="co", ko_nthread=2))
best = conv2d_tiling(wkl)
print(best)
measure("5. conv2d_tiling's choice", best)

######################################################################
# What the compiler made of it
# ----------------------------
# The lowered function of the chosen schedule: loops over tiles and chunks around the runtime calls
# that record DMA instructions, cached micro-op kernels (``UopKernelBegin``) and the dependency
# tokens between the load, compute and store modules (``DepPush`` / ``DepPop``).

text = vta.lower(schedule_conv2d_packed(func, best))["main"].script()
for call in ("LoadBuffer2D", "StoreBuffer2D", "UopKernelBegin", "PushGEMMOp", "PushALUOp", "DepPush", "DepPop"):
    print(f"{call:<16} {text.count('vta.runtime.' + call):>3} call sites")
