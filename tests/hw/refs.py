"""Sequential numpy references for the unit suites (the semantics of spec 2.11 / README)."""

from __future__ import annotations

import numpy as np

from vta_hw.spec import AluOp


def shr(a, b, bits: int = 6):
    half = 1 << (bits - 1)
    amt = ((int(b) & ((1 << bits) - 1)) ^ half) - half
    a = int(a)
    r = a >> amt if amt >= 0 else a << -amt
    return _wrap(r)


def _wrap(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def alu_scalar(op: int, a: int, b: int) -> int:
    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.ADD:
        return _wrap(a + b)
    if op == AluOp.SHR:
        return shr(a, b)
    if op == AluOp.MUL:   # the alu_mul extension: the low 16 bits of both, signed, an exact product
        return s16(a) * s16(b)
    raise ValueError(op)


def s16(x: int) -> int:
    x = int(x) & 0xFFFF
    return x - (1 << 16) if x >> 15 else x


def loop_indices(uops, it_out, it_in, f):
    for o in range(it_out):
        for i in range(it_in):
            for d, s, w in uops:
                yield (d + o * f["dst_out"] + i * f["dst_in"], s + o * f["src_out"] + i * f["src_in"],
                       w + o * f["wgt_out"] + i * f["wgt_in"])


def gemm(acc, out, inp, wgt, uops, it_out, it_in, f, reset, batch, block_in, block_out):
    """acc: (n, batch*block_out) int64 (modified), out likewise int64; inp (n, batch*block_in);
    wgt (n, block_out*block_in)."""
    for a, x, w in loop_indices(uops, it_out, it_in, f):
        if reset:
            acc[a] = 0
            continue
        prod = inp[x].reshape(batch, block_in).astype(np.int64) @ wgt[w].reshape(block_out, block_in).astype(
            np.int64).T
        acc[a] = ((acc[a] + prod.reshape(-1) + 2**31) % 2**32) - 2**31
        out[a] = ((acc[a] + 128) % 256) - 128


def alu(acc, out, uops, it_out, it_in, f, op, use_imm, imm):
    for a, s, _ in loop_indices(uops, it_out, it_in, f):
        for lane in range(acc.shape[1]):
            b = imm if use_imm else int(acc[s, lane])
            acc[a, lane] = alu_scalar(op, int(acc[a, lane]), b)
        out[a] = ((acc[a] + 128) % 256) - 128
