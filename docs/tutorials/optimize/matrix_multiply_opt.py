"""
.. _vta-matrix-multiply-opt:

Optimized matrix multiply: tiles and virtual threads
====================================================

:ref:`The first matrix multiply <vta-matrix-multiply>` loaded both matrices whole. Real layers do
not fit VTA's SRAMs, so a schedule *tiles* the output, walks the input channels in chunks and
loads each chunk next to the GEMMs that use it. Then it hides the loads behind the GEMMs with
*virtual threads*: VTA's load, compute and store modules run in parallel, synchronised by
dependency tokens, and two threads give the load module the next tile's data to fetch while the
compute module multiplies the current one.

fsim computes exact results but has no clock; tsim, the Verilated hardware, counts cycles. This
tutorial checks every schedule on fsim and, when Verilator is installed, times it on tsim.
"""

import os

import numpy as np
import tvm
from tvm import s_tir, te

import vta_compiler as vta
import vta_runtime
from vta_compiler.testing.reference import calibrated_shift, dense_accumulators, requantize
from vta_compiler.top.packing import pack_nc, pack_oi, unpack_nc

env = vta.get_env()
FAST = os.environ.get("VTA_DOCS_FAST") == "1"      # the test suite's quick build of these pages

######################################################################
# The layer
# ---------
# A fully connected layer with VTA's usual epilogue: int32 accumulators, ``>> shift``, clip to
# ``[0, 127]``, int8. ``in_features x out_features`` int8 weights are far more than the weight
# SRAM holds.

batch, in_features, out_features = 16 * env.BATCH, 512 if FAST else 1024, 512 if FAST else 1024
print(f"weights: {in_features * out_features // 1024} KiB; weight SRAM: {env.WGT_BUFF_SIZE // 1024} KiB")

rng = np.random.default_rng(0)
x = rng.integers(-128, 128, (batch, in_features), dtype=np.int8)
w = rng.integers(-128, 128, (out_features, in_features), dtype=np.int8)
acc = dense_accumulators(x, w, None)
shift = calibrated_shift(acc, (0, 127))           # a shift that leaves most outputs inside the clip range
expected = requantize(acc, shift, (0, 127))

nb, cib, cob = batch // env.BATCH, in_features // env.BLOCK_IN, out_features // env.BLOCK_OUT
data = te.placeholder((nb, cib, env.BATCH, env.BLOCK_IN), name="data", dtype=env.inp_dtype)
weight = te.placeholder((cob, cib, env.BLOCK_OUT, env.BLOCK_IN), name="weight", dtype=env.wgt_dtype)
ko = te.reduce_axis((0, cib), name="ko")
ki = te.reduce_axis((0, env.BLOCK_IN), name="ki")
res_gemm = te.compute((nb, cob, env.BATCH, env.BLOCK_OUT), lambda b, co, bi, ci: te.sum(
    data[b, ko, bi, ki].astype(env.acc_dtype) * weight[co, ko, ci, ki].astype(env.acc_dtype), axis=[ko, ki]),
    name="res_gemm")
res_shr = te.compute(res_gemm.shape, lambda *i: res_gemm(*i) >> shift, name="res_shr")
res_clip = te.compute(res_gemm.shape, lambda *i: te.min(te.max(res_shr(*i), 0), 127), name="res_clip")
res = te.compute(res_gemm.shape, lambda *i: res_clip(*i).astype(env.out_dtype), name="res")
func = te.create_prim_func([data, weight, res])

######################################################################
# A tiled schedule
# ----------------
# The schedule below is the whole recipe, written out:
#
# * split the output channels and the input channels into tiles (``tile_co`` output blocks by
#   ``tile_ci`` input blocks; the 16 batch rows stay together, so each weight is loaded once);
# * ``cache_read`` the data and the weights into their SRAMs *inside* the input-channel loop, so
#   each chunk is loaded just before its GEMMs;
# * compute the epilogue (ALU) and the store per output tile (``reverse_compute_at``);
# * optionally split the output tile between ``vthreads`` virtual threads (``bind(..., "vthread.x")``):
#   each thread gets its own copies of the on-chip buffers, and the compiler interleaves the
#   threads' instructions so that one thread's loads overlap another's GEMMs.


def matmul_schedule(tile_co: int, tile_ci: int, vthreads: int = 1) -> s_tir.Schedule:
    sch = s_tir.Schedule(func)
    gemm = sch.get_sblock("res_gemm")
    ewise = [sch.get_sblock("res_shr"), sch.get_sblock("res_clip")]
    out = sch.get_sblock("res")
    for blk in [gemm, *ewise]:
        sch.set_scope(blk, 0, env.acc_scope)
    b, co, bi, ci, ko_l, ki_l = sch.get_loops(gemm)
    co_o, co_v, co_i = sch.split(co, [cob // tile_co, vthreads, tile_co // vthreads])
    ko_o, ko_i = sch.split(ko_l, [cib // tile_ci, tile_ci])
    sch.reorder(co_o, co_v, ko_o, b, co_i, ko_i, bi, ci, ki_l)   # every batch row inside a chunk
    if vthreads > 1:
        sch.bind(co_v, "vthread.x")
    for blk in [*ewise, out]:                                # epilogue and store per tile and thread
        sch.reverse_compute_at(blk, co_v, preserve_unit_loops=True)
    for arg, scope in ((0, env.inp_scope), (1, env.wgt_scope)):
        buf = sch.cache_read(gemm, arg, scope)              # one chunk of data / weights per ko_o
        sch.compute_at(buf, ko_o, preserve_unit_loops=True)
        sch.annotate(sch.get_loops(buf)[-4], "pragma_" + env.dma_copy, 1)
    init = sch.decompose_reduction(gemm, ko_o)
    if env.BATCH == 1:
        sch.tensorize(sch.get_loops(init)[-1], env.gemm_reset)
        sch.tensorize(ci, env.gemm)
    else:
        sch.tensorize(sch.get_loops(init)[-2], env.gemm_reset)
        sch.tensorize(bi, env.gemm)
    for blk in ewise:
        sch.annotate(sch.get_loops(blk)[-4], "pragma_" + env.alu, 1)
    sch.annotate(sch.get_loops(out)[-4], "pragma_" + env.dma_copy, 1)
    return sch


######################################################################
# Running a schedule
# ------------------
# The same compiled module runs on whichever device the runtime's command queue holds, so one
# helper checks it on fsim and times it on tsim.

from sim.fsim import FsimDevice  # noqa: E402
from sim.tsim import TsimDevice, verilator_available  # noqa: E402

args_np = [pack_nc(x, env.BATCH, env.BLOCK_IN), pack_oi(w, env.BLOCK_OUT, env.BLOCK_IN)]
out_shape = (nb, cob, env.BATCH, env.BLOCK_OUT)
devices = {"fsim": FsimDevice}
if verilator_available():
    devices["tsim"] = TsimDevice
else:
    print("Verilator is not installed: no cycle counts (fsim only)")


def run(mod, device_class):
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(device_class(env.config)))
    dev = tvm.ext_dev(0)
    args = [tvm.runtime.tensor(a, device=dev) for a in args_np]
    out = tvm.runtime.empty(out_shape, env.out_dtype, device=dev)
    mod(*args, out)
    np.testing.assert_array_equal(unpack_nc(out.numpy()), expected)     # exact, on every device
    stats = vta.testing.simulator.stats()
    vta_runtime.set_command_queue(None)
    return stats


macs = batch * in_features * out_features
peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
results = {}


def measure(label, sch):
    mod = vta.build(sch)
    line = []
    for name, device_class in devices.items():
        stats = run(mod, device_class)
        if name == "fsim":
            line.append(f"DRAM bytes loaded {stats['inp_load_nbytes'] + stats['wgt_load_nbytes']:>8}")
        else:
            cycles = stats["cycle_count"]
            results[label] = cycles
            line.append(f"tsim {cycles:>7} cycles, {macs / cycles:6.1f} MACs/cycle "
                        f"({macs / cycles / peak:.0%} of peak)")
    print(f"{label:<34} exact; " + "; ".join(line))


######################################################################
# One thread, then two
# --------------------
# With one thread, the compute module waits for every chunk's loads and the load module waits for
# the GEMMs to release the buffers: the two take turns. With two virtual threads the loads of one
# thread run while the other thread's GEMMs do.

measure("tiles 8x8, one thread", matmul_schedule(tile_co=8, tile_ci=8))
measure("tiles 8x8, two virtual threads", matmul_schedule(tile_co=8, tile_ci=8, vthreads=2))

######################################################################
# The instruction stream of a threaded schedule shows the interleaving: each thread's GEMMs pop a
# token from the load module (``l2g``) and push one back (``g2l``) when its buffers are free again.

with vta.build_config(debug_flag=env.DEBUG_DUMP_INSN):
    small = vta.build(matmul_schedule(tile_co=min(cob, 32), tile_ci=min(cib // 2, 16), vthreads=2))
import contextlib  # noqa: E402
import io  # noqa: E402

buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    run(small, FsimDevice)
print("\n".join(buf.getvalue().splitlines()[:16]))

######################################################################
# The library's schedule
# ----------------------
# :func:`vta_compiler.top.schedule_dense_packed` is this schedule with more options (virtual
# threads over the batch too, two input chunks in flight), and
# :func:`~vta_compiler.top.dense_tiling` picks the tiles from the buffer sizes with a small cost
# model.

from vta_compiler.top import DenseWorkload, dense_tiling, schedule_dense_packed  # noqa: E402

tiling = dense_tiling(DenseWorkload(batch, in_features, out_features))
print(tiling)
measure("vta.top.schedule_dense_packed", schedule_dense_packed(func, tiling))

if results:
    one = results["tiles 8x8, one thread"]
    for label, cycles in results.items():
        print(f"{label:<34} {one / cycles:.2f}x the one-thread schedule")
