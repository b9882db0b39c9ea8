"""Shared pieces of the operator schedules: block discovery, the ALU epilogue, pragmas."""

from __future__ import annotations

from tvm import s_tir, te, tirx

from ..environment import Environment
from ..transform.common import VTACompileError


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def epilogue(env: Environment, acc: te.Tensor, bias: te.Tensor | None, shift: int | te.Tensor,
             clip: tuple[int, int] | None, bias_index, name: str = "epilogue") -> tuple[te.Tensor, te.Tensor]:
    """The usual int8 requantisation after a GEMM: ``clip((acc + bias) >> shift)`` then cast to int8.

    ``shift`` is an immediate or a per-channel tensor indexed like the bias (ALU SHR with a register
    operand). Returns (epilogue tensor in int32, output tensor in int8). One element-wise stage: the
    ALU pass turns it into a chain of in-place ALU instructions (ADD, SHR, MAX, MIN).
    """
    def f(*i):
        x = acc(*i)
        if bias is not None:
            x = x + bias(*bias_index(i))
        if isinstance(shift, te.Tensor):
            x = x >> shift(*bias_index(i))
        elif shift:
            x = x >> shift
        if clip is not None:
            x = te.min(te.max(x, clip[0]), clip[1])
        return x
    epi = te.compute(acc.shape, f, name=name)
    res = te.compute(acc.shape, lambda *i: epi(*i).astype(env.out_dtype), name="res")
    return epi, res


def find_blocks(sch: s_tir.Schedule, what: str):
    """(reduction block, its producers, element-wise blocks in order, output block) of a GEMM-like function."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    red = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(red) != 1:
        raise VTACompileError(f"{what}: expected exactly one reduction (the GEMM/convolution), found {len(red)}")
    red = red[0]
    producers = sch.get_producers(red)
    chain, cur = [], red
    while True:
        cons = sch.get_consumers(cur)
        if not cons:
            break
        if len(cons) != 1:
            raise VTACompileError(f"{what}: the stages after the reduction must form a chain; "
                                  f"{sch.get(cur).name_hint} has {len(cons)} consumers")
        cur = cons[0]
        chain.append(cur)
    if not chain:
        raise VTACompileError(f"{what}: the reduction's int32 result must be converted to int8 by a final stage "
                              "(VTA stores int8)")
    return red, producers, chain[:-1], chain[-1]


def pragma(sch: s_tir.Schedule, loop, name: str) -> None:
    sch.annotate(loop, "pragma_" + name, 1)


def attach_epilogue(sch: s_tir.Schedule, env: Environment, func: tirx.PrimFunc, ewise: list, out, attach,
                    dma_copy: str) -> None:
    """Compute the element-wise stages and the output store at ``attach`` (one tile, one thread), and
    load the operands they read straight from function parameters (bias) into ACC there by DMA."""
    params = list(func.params)
    extra = []
    for blk in ewise:
        sch.reverse_compute_at(blk, attach, preserve_unit_loops=True)
        extra += [(blk, n) for n, region in enumerate(sch.get(blk).reads)
                  if any(region.source.same_as(p) for p in params)]
    sch.reverse_compute_at(out, attach, preserve_unit_loops=True)
    for blk, n in extra:
        cb = sch.cache_read(blk, n, env.acc_scope)
        sch.compute_at(cb, attach, preserve_unit_loops=True)
        rank = len(sch.get(cb).writes[0].region)
        pragma(sch, sch.get_loops(cb)[-rank], dma_copy)


def mock_names(env: Environment, mock) -> tuple[str, str, str, str]:
    """(dma pragma, alu pragma, gemm intrinsic, gemm reset intrinsic), with the parts in ``mock`` skipped."""
    unknown = set(mock) - {"dma", "alu", "gemm"}
    if unknown:
        raise ValueError(f"mock parts must be among dma, alu, gemm; got {sorted(unknown)}")
    m = env.mock
    return (m.dma_copy if "dma" in mock else env.dma_copy, m.alu if "alu" in mock else env.alu,
            m.gemm if "gemm" in mock else env.gemm, m.gemm_reset if "gemm" in mock else env.gemm_reset)
