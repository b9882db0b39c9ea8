"""
.. _vta-matrix-multiply:

Matrix multiply on the GEMM core
================================

VTA's GEMM core multiplies a ``BATCH x BLOCK_IN`` block of int8 inputs by a
``BLOCK_IN x BLOCK_OUT`` block of int8 weights and adds the result into ``BATCH x BLOCK_OUT``
int32 accumulators, one block per cycle. This tutorial writes a matrix multiply for it by hand:
the packed layouts, the three on-chip buffers, and *tensorize*, which replaces the innermost loops
with the GEMM instruction. :ref:`The next tutorial <vta-matrix-multiply-opt>` tiles it for
matrices that do not fit on chip.
"""

import numpy as np
import tvm
from tvm import s_tir, te

import vta_compiler as vta

env = vta.get_env()

######################################################################
# Packed layouts
# --------------
# A ``(batch, in_features)`` input becomes ``(batch/BATCH, in/BLOCK_IN, BATCH, BLOCK_IN)``: the last
# two axes are one INP element. Weights ``(out, in)`` become ``(out/BLOCK_OUT, in/BLOCK_IN,
# BLOCK_OUT, BLOCK_IN)``: the last two axes are one WGT element. :mod:`vta_compiler.top.packing`
# has these in numpy (``pack_nc``, ``pack_oi``).

batch, in_features, out_features = env.BATCH, 256, 256
o, n, m = batch // env.BATCH, in_features // env.BLOCK_IN, out_features // env.BLOCK_OUT
A = te.placeholder((o, n, env.BATCH, env.BLOCK_IN), name="A", dtype=env.inp_dtype)
B = te.placeholder((m, n, env.BLOCK_OUT, env.BLOCK_IN), name="B", dtype=env.wgt_dtype)

######################################################################
# The computation
# ---------------
# Copies into the input and weight SRAMs, the reduction over both input axes in the accumulators,
# and the int8 result. ``astype(int8)`` keeps the low 8 bits, which is what the hardware's OUT SRAM
# does with an accumulator.

A_buf = te.compute(A.shape, lambda *i: A(*i), name="A_buf")
B_buf = te.compute(B.shape, lambda *i: B(*i), name="B_buf")
ko = te.reduce_axis((0, n), name="ko")
ki = te.reduce_axis((0, env.BLOCK_IN), name="ki")
C_buf = te.compute(
    (o, m, env.BATCH, env.BLOCK_OUT),
    lambda bo, co, bi, ci: te.sum(A_buf[bo, ko, bi, ki].astype(env.acc_dtype)
                                  * B_buf[co, ko, ci, ki].astype(env.acc_dtype), axis=[ko, ki]),
    name="C_buf")
C = te.compute(C_buf.shape, lambda *i: C_buf(*i).astype(env.out_dtype), name="C")

######################################################################
# Scopes and DMA
# --------------
# Each copy's buffer goes to its SRAM (``inp_scope``, ``wgt_scope``, ``acc_scope``) and its loop nest
# becomes one DMA transfer.

sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
for name, scope in (("A_buf", env.inp_scope), ("B_buf", env.wgt_scope)):
    blk = sch.get_sblock(name)
    sch.set_scope(blk, 0, scope)
    sch.annotate(sch.get_loops(blk)[0], "pragma_" + env.dma_copy, 1)
gemm = sch.get_sblock("C_buf")
sch.set_scope(gemm, 0, env.acc_scope)
sch.annotate(sch.get_loops(sch.get_sblock("C"))[0], "pragma_" + env.dma_copy, 1)

######################################################################
# Tensorize
# ---------
# The GEMM block has six loops: ``bo, co, bi, ci`` over the output and ``ko, ki`` over the
# reduction. The hardware computes a whole ``(bi, ci, ki)`` block per instruction, so the loops are
# reordered to put those three innermost, the reduction is split into its initialisation (zeroing
# the accumulators, the *reset* intrinsic) and its update, and both are tensorized with the
# intrinsics the :class:`~vta_compiler.Environment` registers (``env.gemm_reset``, ``env.gemm``).

bo, co, bi, ci, ko_l, ki_l = sch.get_loops(gemm)
sch.reorder(bo, co, ko_l, bi, ci, ki_l)
init = sch.decompose_reduction(gemm, ko_l)
if env.BATCH == 1:       # the intrinsics then cover (ci, ki): a batch loop of extent 1 is not part of them
    sch.tensorize(sch.get_loops(init)[-1], env.gemm_reset)
    sch.tensorize(ci, env.gemm)
else:
    sch.tensorize(sch.get_loops(init)[-2], env.gemm_reset)
    sch.tensorize(bi, env.gemm)
print(vta.lower(sch)["main"].script())

######################################################################
# Each GEMM instruction became a call to ``UopPush`` inside a *micro-op kernel*: the kernel is
# recorded once (``UopKernelBegin`` returns 0 the next time) and replayed by the runtime. Build,
# run and check against numpy:

mod = vta.build(sch)
dev = tvm.ext_dev(0)
rng = np.random.default_rng(0)
a = rng.integers(-128, 128, (batch, in_features), dtype=np.int8)
b = rng.integers(-128, 128, (out_features, in_features), dtype=np.int8)
from vta_compiler.top.packing import pack_nc, pack_oi, unpack_nc  # noqa: E402

c = tvm.runtime.empty(C.shape, env.out_dtype, device=dev)
vta.testing.simulator.clear_stats()
mod(tvm.runtime.tensor(pack_nc(a, env.BATCH, env.BLOCK_IN), device=dev),
    tvm.runtime.tensor(pack_oi(b, env.BLOCK_OUT, env.BLOCK_IN), device=dev), c)
expected = (a.astype(np.int32) @ b.astype(np.int32).T).astype(np.int8)
result = unpack_nc(c.numpy())
np.testing.assert_array_equal(result, expected)
print("equal to numpy:", np.array_equal(result, expected))
stats = vta.testing.simulator.stats()
print(stats)

######################################################################
# The counters show the shape of the work: ``n * m`` GEMM micro-ops (one per input block and
# output block) and every input and weight byte loaded exactly once.

assert stats["gemm_counter"] == n * m
assert stats["wgt_load_nbytes"] == b.size and stats["inp_load_nbytes"] == a.size
print(f"{stats['gemm_counter']} GEMM micro-ops of {env.BATCH * env.BLOCK_IN * env.BLOCK_OUT} MACs each")
