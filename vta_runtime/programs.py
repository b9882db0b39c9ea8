"""Hand-written runtime programs: packing helpers and a double-buffered blocked GEMM.

Used by the demo, the benchmarks and the tests; they drive any device through ``CommandQueue``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_hw.spec import AluOp, Config, MemType, Stage

from .command_queue import CommandQueue
from .errors import RuntimeUsageError

L, C, S = Stage.LOAD, Stage.COMPUTE, Stage.STORE


def pack_matrix(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """(R, K) -> (R/rows, K/cols, rows, cols): the blocked DRAM layout of INP (rows=BATCH) or WGT (rows=BLOCK_OUT)."""
    r, k = x.shape
    if r % rows or k % cols:
        raise RuntimeUsageError(f"a {r}x{k} matrix does not divide into {rows}x{cols} blocks")
    return np.ascontiguousarray(x.reshape(r // rows, rows, k // cols, cols).transpose(0, 2, 1, 3))


def unpack_matrix(x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_matrix`."""
    a, b, rows, cols = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(a * rows, b * cols))


def gemm_reference(a: np.ndarray, b: np.ndarray, shift: int) -> np.ndarray:
    """numpy reference of :func:`blocked_gemm`: clip((a @ b.T) >> shift, 0, 127) as int8."""
    acc = a.astype(np.int64) @ b.astype(np.int64).T
    acc = acc.astype(np.int32) >> shift
    return np.clip(acc, 0, 127).astype(np.int8)


def unsaturated_fraction(c: np.ndarray) -> float:
    """Fraction of :func:`gemm_reference` outputs strictly inside the clip range (0, 127)."""
    return float(np.mean((c > 0) & (c < 127)))


def informative_shift(a: np.ndarray, b: np.ndarray) -> int:
    """The shift that leaves the most outputs of :func:`gemm_reference` strictly inside (0, 127): with
    full-range int8 data a fixed shift saturates most outputs, and a comparison then checks only signs."""
    return max(range(32), key=lambda s: unsaturated_fraction(gemm_reference(a, b, s)))


@dataclass
class GemmTiling:
    tile_m: int = 1   # BATCH-row blocks per tile
    tile_n: int = 4   # BLOCK_OUT blocks per tile
    tile_k: int = 4   # BLOCK_IN blocks per tile
    vthreads: int = 2  # buffers in flight (1 = no overlap, 2 = double buffering)


def blocked_gemm(cq: CommandQueue, a: np.ndarray, b: np.ndarray, shift: int = 8,
                 tiling: GemmTiling | None = None) -> np.ndarray:
    """C = clip((A @ B.T) >> shift, 0, 127) on the device, A (M,K) int8 and B (N,K) int8.

    Tiles of A and B are double buffered across ``vthreads`` SRAM regions; the dependency tokens
    (g2l for input buffers, s2g for accumulator/output tiles) let load, compute and store overlap.
    """
    cfg: Config = cq.config
    t = tiling or GemmTiling()
    bt, bi, bo = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    m, k = a.shape
    n, k2 = b.shape
    if k != k2:
        raise RuntimeUsageError(f"blocked_gemm: A is {m}x{k} but B is {n}x{k2}")
    mb, nb, kb = m // bt, n // bo, k // bi
    if mb % t.tile_m or nb % t.tile_n or kb % t.tile_k:
        raise RuntimeUsageError(f"blocked_gemm: {mb}x{nb}x{kb} blocks do not divide into tiles "
                                f"{t.tile_m}x{t.tile_n}x{t.tile_k}")
    nv = t.vthreads
    inp_tile, wgt_tile, acc_tile = t.tile_m * t.tile_k, t.tile_n * t.tile_k, t.tile_m * t.tile_n
    for name, need, depth in (("INP", nv * inp_tile, cfg.INP_BUFF_DEPTH), ("WGT", nv * wgt_tile, cfg.WGT_BUFF_DEPTH),
                              ("ACC", nv * acc_tile, cfg.ACC_BUFF_DEPTH)):
        if need > depth:
            raise RuntimeUsageError(f"blocked_gemm: {nv} {name} tiles need {need} elements but the {name} buffer "
                                    f"holds {depth}")

    a_buf = cq.buffer_alloc(a.nbytes)
    b_buf = cq.buffer_alloc(b.nbytes)
    c_buf = cq.buffer_alloc(m * n)
    try:
        cq.buffer_write(a_buf, pack_matrix(a, bt, bi))
        cq.buffer_write(b_buf, pack_matrix(b, bo, bi))

        for _ in range(nv):           # every input buffer and every output tile starts free
            cq.dep_push(C, L)
            cq.dep_push(S, C)
        step = 0
        tiles = [(mo, no) for mo in range(mb // t.tile_m) for no in range(nb // t.tile_n)]
        for tile_no, (mo, no) in enumerate(tiles):
            q = tile_no % nv
            acc_base = q * acc_tile
            for ko in range(kb // t.tile_k):
                p = step % nv
                step += 1
                inp_base, wgt_base = p * inp_tile, p * wgt_tile
                cq.dep_pop(C, L)
                cq.load_buffer_2d(a_buf, (mo * t.tile_m) * kb + ko * t.tile_k, t.tile_k, t.tile_m, kb,
                                  0, 0, 0, 0, inp_base, MemType.INP)
                cq.load_buffer_2d(b_buf, (no * t.tile_n) * kb + ko * t.tile_k, t.tile_k, t.tile_n, kb,
                                  0, 0, 0, 0, wgt_base, MemType.WGT)
                cq.dep_push(L, C)
                cq.dep_pop(L, C)
                if ko == 0:
                    cq.dep_pop(S, C)
                    cq.push_gemm_op(("gemm_reset", q), _reset_kernel(cq, t, acc_base))
                cq.push_gemm_op(("gemm", p, q), _gemm_kernel(cq, t, acc_base, inp_base, wgt_base))
                cq.dep_push(C, L)
            for op, imm in ((AluOp.SHR, shift), (AluOp.MAX, 0), (AluOp.MIN, 127)):
                cq.push_alu_op(("alu", int(op), imm, q), _alu_kernel(cq, acc_base, acc_tile, op, imm))
            cq.dep_push(C, S)
            cq.dep_pop(C, S)
            cq.store_buffer_2d(acc_base, MemType.OUT, c_buf, (mo * t.tile_m) * nb + no * t.tile_n,
                               t.tile_n, t.tile_m, nb)
            cq.dep_push(S, C)
        for _ in range(nv):           # consume the tokens the last tiles handed back
            cq.dep_pop(C, L)
            cq.dep_pop(S, C)
        cq.synchronize()
        out = np.frombuffer(cq.buffer_read(c_buf, m * n), np.int8).reshape(mb, nb, bt, bo)
        return unpack_matrix(out)
    finally:
        for buf in (a_buf, b_buf, c_buf):
            cq.buffer_free(buf)


def _reset_kernel(cq: CommandQueue, t: GemmTiling, acc_base: int):
    def record(_sig):
        cq.uop_loop_begin(t.tile_m, t.tile_n, 0, 0)
        cq.uop_loop_begin(t.tile_n, 1, 0, 0)
        cq.uop_push(0, 1, acc_base, 0, 0)
        cq.uop_loop_end()
        cq.uop_loop_end()
    return record


def _gemm_kernel(cq: CommandQueue, t: GemmTiling, acc_base: int, inp_base: int, wgt_base: int):
    def record(_sig):
        cq.uop_loop_begin(t.tile_m, t.tile_n, t.tile_k, 0)
        cq.uop_loop_begin(t.tile_n, 1, 0, t.tile_k)
        for kk in range(t.tile_k):
            cq.uop_push(0, 0, acc_base, inp_base + kk, wgt_base + kk)
        cq.uop_loop_end()
        cq.uop_loop_end()
    return record


def _alu_kernel(cq: CommandQueue, acc_base: int, count: int, op: int, imm: int):
    def record(_sig):
        cq.uop_loop_begin(count, 1, 1, 0)
        cq.uop_push(1, 0, acc_base, acc_base, 0, op, 1, imm)
        cq.uop_loop_end()
    return record
