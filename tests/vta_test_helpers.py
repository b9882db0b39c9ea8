"""Helpers for instruction-level tests: numpy references and ways to observe on-chip buffers.

On-chip buffers are observed only through the device's public behaviour (stores to DRAM), so the
same tests run on every device.
"""

from __future__ import annotations

import numpy as np

from vta_hw.spec import AluOp, Config, MemType, Stage
from vta_runtime import CommandQueue

L, C, S = Stage.LOAD, Stage.COMPUTE, Stage.STORE


def shr_reference(a: np.ndarray, b, acc_log_width: int = 5) -> np.ndarray:
    """Project semantics of SHR: shift by the low LOG_ACC_WIDTH+1 bits of b read as signed; negative = left."""
    bits = acc_log_width + 1
    half = 1 << (bits - 1)
    a = np.asarray(a, np.int64)
    amount = ((np.asarray(b, np.int64) & ((1 << bits) - 1)) ^ half) - half
    amount = np.broadcast_to(amount, a.shape)
    res = np.where(amount >= 0, a >> np.clip(amount, 0, 63), a << np.clip(-amount, 0, 32))
    return res.astype(np.int32)


def alu_reference(op: int, a: np.ndarray, b) -> np.ndarray:
    a64 = np.asarray(a, np.int64)
    if op == AluOp.MIN:
        return np.minimum(a64, b).astype(np.int32)
    if op == AluOp.MAX:
        return np.maximum(a64, b).astype(np.int32)
    if op == AluOp.ADD:
        return (a64 + b).astype(np.int32)
    if op == AluOp.SHR:
        return shr_reference(a64, b)
    raise ValueError(op)


def run_alu(cq: CommandQueue, base: int, count: int, op: int, imm: int = 0, use_imm: bool = True,
            src_base: int | None = None, key=None) -> None:
    """One ALU instruction over ``count`` ACC elements starting at ``base`` (in place with imm, or with a source)."""
    src = base if src_base is None else src_base

    def record(_sig):
        cq.uop_loop_begin(count, 1, 1, 0)
        cq.uop_push(1, 0, base, src, 0, op, int(use_imm), imm)
        cq.uop_loop_end()
    cq.push_alu_op(key or ("alu", base, count, op, imm, use_imm, src), record)


def store_out(cq: CommandQueue, sram_base: int, count: int, dst, dst_offset: int = 0) -> None:
    """compute -> store hand-off, then a 1-row STORE of ``count`` OUT elements, then hand back."""
    cq.dep_push(C, S)
    cq.dep_pop(C, S)
    cq.store_buffer_2d(sram_base, MemType.OUT, dst, dst_offset, count, 1, count)
    cq.dep_push(S, C)
    cq.dep_pop(S, C)


def read_acc(cq: CommandQueue, base: int, count: int) -> np.ndarray:
    """Read ``count`` ACC elements as int32 through the OUT buffer: store byte 0, shift by 8, store byte 1, ...

    Destroys the ACC contents (they end shifted right by 24).
    """
    cfg: Config = cq.config
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    buf = cq.buffer_alloc(4 * count * lanes)
    run_alu(cq, base, count, AluOp.SHR, 0)                     # OUT <- byte 0
    for k in range(4):
        if k:
            run_alu(cq, base, count, AluOp.SHR, 8)
        store_out(cq, base, count, buf, k * count)
    cq.synchronize()
    planes = np.frombuffer(cq.buffer_read(buf, 4 * count * lanes), np.uint8).reshape(4, count, lanes)
    cq.buffer_free(buf)
    word = sum(planes[k].astype(np.uint32) << np.uint32(8 * k) for k in range(4))
    # byte k of (x >> 8k) is byte k of x, whatever the sign
    return word.astype(np.uint32).view(np.int32)


def write_array(cq: CommandQueue, arr: np.ndarray):
    buf = cq.buffer_alloc(arr.nbytes)
    cq.buffer_write(buf, np.ascontiguousarray(arr))
    return buf


def read_array(cq: CommandQueue, buf, shape, dtype) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(cq.buffer_read(buf, n), dtype).reshape(shape).copy()
