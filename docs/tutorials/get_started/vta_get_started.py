"""
.. _vta-get-started:

Get started: vector add on VTA's ALU
====================================

This is the first program a VTA user writes: add two vectors on VTA's vector ALU and bring the
result back to the CPU. On the way it shows each step of compiling for VTA with TVM 0.27:

1. describe the computation with TVM's tensor expressions (TE);
2. write a *schedule* that tells TVM what runs where: which buffers live in VTA's on-chip SRAM,
   which loops are DMA transfers and which are ALU work;
3. lower and build it with :func:`vta_compiler.build` (the "vta" TIR pipeline);
4. run it on the device the runtime is configured for: here fsim, the functional simulator,
   because ``vta_config.json`` says ``"TARGET": "sim"``.

The same script runs unchanged on tsim or, over RPC, on a board (see
:doc:`/guide/boards`).
"""

######################################################################
# The configuration
# -----------------
# ``import vta_compiler as vta`` gives the names the original VTA package had. ``vta.get_env()``
# returns the :class:`~vta_compiler.Environment`: every hardware number, read from
# ``vta_config.json`` (or ``$VTA_CONFIG``) through :mod:`vta_hw.spec`.

import numpy as np
import tvm
from tvm import s_tir, te

import vta_compiler as vta
import vta_runtime

env = vta.get_env()
print(env)
print(f"TARGET {env.TARGET}: GEMM core {env.BATCH}x{env.BLOCK_IN} by {env.BLOCK_IN}x{env.BLOCK_OUT}, "
      f"{env.inp_dtype} inputs, {env.acc_dtype} accumulators")
print(f"ACC SRAM: {env.ACC_BUFF_DEPTH} elements of {env.BATCH}x{env.BLOCK_OUT} {env.acc_dtype} values")

######################################################################
# The computation
# ---------------
# VTA's tensors are *packed*: the innermost axes are the shape of one SRAM element. An ACC element
# holds ``BATCH x BLOCK_OUT`` int32 values, so a vector of ``m * BLOCK_OUT`` values is the tensor
# ``(1, m, BATCH, BLOCK_OUT)``. The computation has four stages: copy ``A`` and ``B`` into the
# accumulator SRAM, add them there, and cast to int8 on the way out (VTA stores int8).

m = 64                                                     # ACC elements per vector
shape = (1, m, env.BATCH, env.BLOCK_OUT)
A = te.placeholder(shape, name="A", dtype=env.acc_dtype)
B = te.placeholder(shape, name="B", dtype=env.acc_dtype)
A_buf = te.compute(shape, lambda *i: A(*i), name="A_buf")  # DRAM -> ACC
B_buf = te.compute(shape, lambda *i: B(*i), name="B_buf")  # DRAM -> ACC
C_buf = te.compute(shape, lambda *i: A_buf(*i) + B_buf(*i), name="C_buf")   # ALU ADD
C = te.compute(shape, lambda *i: C_buf(*i).astype(env.out_dtype), name="C")  # ACC -> OUT -> DRAM

######################################################################
# The schedule
# ------------
# TVM 0.27 schedules TIR functions with ``s_tir.Schedule``. Three things make a function run on
# VTA, and a schedule written by hand says all three:
#
# * ``set_scope(..., env.acc_scope)`` puts a stage's buffer in the accumulator SRAM;
# * the ``pragma_dma_copy`` annotation turns a loop nest that copies between DRAM and SRAM into
#   one 2-D DMA instruction (``LoadBuffer2D`` / ``StoreBuffer2D``);
# * the ``pragma_alu`` annotation turns an element-wise loop nest into ALU instructions.
#
# A copy or an addition without its pragma would stay a loop on the CPU, and the compiler refuses
# a CPU access to an on-chip buffer, naming it.

sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
for name in ("A_buf", "B_buf"):
    blk = sch.get_sblock(name)
    sch.set_scope(blk, 0, env.acc_scope)
    sch.annotate(sch.get_loops(blk)[0], "pragma_" + env.dma_copy, 1)
add = sch.get_sblock("C_buf")
sch.set_scope(add, 0, env.acc_scope)
sch.annotate(sch.get_loops(add)[0], "pragma_" + env.alu, 1)
sch.annotate(sch.get_loops(sch.get_sblock("C"))[0], "pragma_" + env.dma_copy, 1)

######################################################################
# Lowering
# --------
# :func:`vta_compiler.lower` runs the VTA passes and returns the TIR the host will execute: the
# loops are gone, replaced by calls into the runtime (``vta.runtime.*``) that record instructions
# and micro-op kernels.

print(vta.lower(sch)["main"].script())

######################################################################
# Building and running
# --------------------
# :func:`vta_compiler.build` compiles the host code for the target's CPU (here: this machine's)
# and returns a module whose function takes ``ext_dev`` tensors: arrays in VTA's device memory
# (here: fsim's simulated DRAM). The process-wide command queue (``vta_runtime.command_handle()``)
# opens the device the configuration's TARGET names.

mod = vta.build(sch)
dev = tvm.ext_dev(0)
print("device:", type(vta_runtime.command_handle().device).__name__)

rng = np.random.default_rng(0)
a = rng.integers(-64, 64, shape, dtype=np.int32)
b = rng.integers(-64, 64, shape, dtype=np.int32)
c = tvm.runtime.empty(shape, env.out_dtype, device=dev)
mod(tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev), c)

expected = (a + b).astype(np.int8)
np.testing.assert_array_equal(c.numpy(), expected)
print("first values:", c.numpy().ravel()[:8], "... equal to numpy:", np.array_equal(c.numpy(), expected))

######################################################################
# What the device did
# -------------------
# The simulator counts what every device counts: bytes moved by each kind of load and store,
# GEMM and ALU micro-ops. Two loads of ``m`` ACC elements, one ALU micro-op per element, one store.

vta.testing.simulator.clear_stats()
mod(tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev), c)
stats = vta.testing.simulator.stats()
print(stats)
assert stats["acc_load_nbytes"] == 2 * m * env.ACC_ELEM_BYTES
assert stats["alu_counter"] == m

######################################################################
# The instruction stream
# ----------------------
# ``build_config(debug_flag=env.DEBUG_DUMP_INSN)`` makes the kernel print the instructions it
# sends, with the running counts of the four dependency-token queues: two ACC loads, the micro-op
# load, the ALU instruction, the store, FINISH. The store pops the token the ALU pushed (``g2s``),
# so it waits for the sum; the two NOPs before FINISH collect the tokens still in flight, so that
# the run ends balanced.

with vta.build_config(debug_flag=env.DEBUG_DUMP_INSN):
    dump = vta.build(sch)
dump(tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev), c)

######################################################################
# Next
# ----
# VTA is a GEMM engine first: :ref:`the matrix multiply tutorial <vta-matrix-multiply>` adds the
# input and weight buffers and the GEMM tensor intrinsic.
