"""``dense_packed``: matrix multiply in VTA's packed layouts, its schedule and its tiling.

data ``(N/B, CI/BI, B, BI)`` int8, weight ``(CO/BO, CI/BI, BO, BI)`` int8, result
``(N/B, CO/BO, B, BO)`` int32. Tiles of ``tile_b`` batch blocks x ``tile_co`` output blocks,
input chunks of ``tile_ci`` blocks (``ko_nthread=2``: two chunks in flight), virtual threads over
the tile's output channels (``oc_nthread``) and/or batch (``b_nthread``). The blocked GEMM benchmark of the original
(``test_benchmark_gemm``) is this operator too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tvm import s_tir, te

from ..environment import Environment, get_env
from ..transform.common import VTACompileError
from ..transform.uop import kernel_uop_budget
from ..transform.vthread import PIPELINE
from .common import attach_epilogue, divisors, epilogue, find_blocks, mock_names, pragma
from .tuned import tuned_tiling


@dataclass(frozen=True)
class DenseTiling:
    tile_b: int = 1
    tile_co: int = 1
    tile_ci: int = 1
    oc_nthread: int = 1
    b_nthread: int = 1
    ko_nthread: int = 1     # input chunks in flight (double-buffered tiles, see vta.pipeline)


def dense_packed(data: te.Tensor, weight: te.Tensor, out_dtype: str = "int32", name: str = "dense") -> te.Tensor:
    nb, cib, bb, bi = (int(x) for x in data.shape)
    cob, cib2, bo, bi2 = (int(x) for x in weight.shape)
    if cib != cib2 or bi != bi2:
        raise VTACompileError(f"dense_packed: data has {cib}x{bi} input channels, the weight {cib2}x{bi2}")
    ko = te.reduce_axis((0, cib), "ko")
    ki = te.reduce_axis((0, bi), "ki")
    return te.compute((nb, cob, bb, bo), lambda b, co, b_i, c_i: te.sum(
        data[b, ko, b_i, ki].astype(out_dtype) * weight[co, ko, c_i, ki].astype(out_dtype), axis=[ko, ki]),
        name=name, tag="dense_pack")


def dense_layer(batch: int, in_features: int, out_features: int, env: Environment | None = None, shift: int = 8,
                bias: bool = True, clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """``res = int8(clip((data @ weight.T + bias) >> shift))`` as a PrimFunc over packed tensors.

    With ``channel_shift`` the shift is a per-output-feature int32 tensor shaped like the bias."""
    env = env or get_env()
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    for n, k, what in ((batch, bb, "batch"), (in_features, bi, "input features"), (out_features, bo,
                                                                                    "output features")):
        if n % k:
            raise VTACompileError(f"dense: {what} {n} must be a multiple of {k}")
    data = te.placeholder((batch // bb, in_features // bi, bb, bi), env.inp_dtype, name="data")
    weight = te.placeholder((out_features // bo, in_features // bi, bo, bi), env.wgt_dtype, name="weight")
    acc = dense_packed(data, weight, env.acc_dtype)
    args = [data, weight]
    b = None
    if bias:
        b = te.placeholder((batch // bb, out_features // bo, bb, bo), env.acc_dtype, name="bias")
        args.append(b)
    if channel_shift:
        shift = te.placeholder((batch // bb, out_features // bo, bb, bo), env.acc_dtype, name="shift")
        args.append(shift)
    _, res = epilogue(env, acc, b, shift, clip, lambda i: i)
    return te.create_prim_func(args + [res])


def _sizes(t: DenseTiling, acc_operands: int = 1):
    inp = t.tile_b * t.tile_ci * t.ko_nthread
    wgt = t.tile_co * t.tile_ci * t.ko_nthread
    acc = (1 + acc_operands) * t.tile_b * t.tile_co         # accumulators + bias (+ shift)
    loops = sorted([t.tile_b // t.b_nthread, t.tile_co // t.oc_nthread, t.tile_ci], reverse=True)
    return inp, wgt, acc, loops[2]


def fits(env: Environment, t: DenseTiling, acc_operands: int = 1) -> bool:
    inp, wgt, acc, uops = _sizes(t, acc_operands)
    return inp <= env.INP_BUFF_DEPTH and wgt <= env.WGT_BUFF_DEPTH and acc <= env.ACC_BUFF_DEPTH and \
        uops <= kernel_uop_budget(env)


def estimate_cycles(env: Environment, batch: int, in_features: int, out_features: int, t: DenseTiling) -> float:
    """A rough cost in cycles, as for conv2d: per tile, chunks pipelined when there are threads; plus traffic."""
    nb, cib, cob = batch // env.BATCH, in_features // env.BLOCK_IN, out_features // env.BLOCK_OUT
    bus = env.AXI_DATA_BYTES
    tb, tco, tci = t.tile_b, t.tile_co, t.tile_ci
    chunks = cib // tci
    inp_c = tb * tci * env.INP_ELEM_BYTES / bus
    wgt_c = tco * tci * env.WGT_ELEM_BYTES / bus
    gemm_c = tb * tco * tci
    threads = t.oc_nthread * t.b_nthread
    if t.ko_nthread > 1:
        tile = inp_c + wgt_c + chunks * max(inp_c + wgt_c, gemm_c)
    elif threads > 1:
        shared = inp_c if t.b_nthread == 1 else (wgt_c if t.oc_nthread == 1 else 0.5 * max(inp_c, wgt_c))
        tile = chunks * (shared + (inp_c + wgt_c - shared) / threads + gemm_c)
    else:
        tile = chunks * (inp_c + wgt_c + gemm_c)
    tile += 4 * tb * tco / threads + 40
    n_tiles = (nb // tb) * (cob // tco)
    traffic = n_tiles * chunks * (inp_c + wgt_c)
    return n_tiles * tile + 0.5 * traffic


def dense_tiling(batch: int, in_features: int, out_features: int, env: Environment | None = None,
                 acc_operands: int = 1, tuned: bool = True) -> DenseTiling:
    """The best measured tiling (``vta_compiler.autotune`` records) when ``tuned`` and there is one, else the
    cheapest by ``estimate_cycles`` that fits."""
    env = env or get_env()
    if tuned:
        best = tuned_tiling("dense", (batch, in_features, out_features), env, acc_operands)
        if best is not None:
            return best
    nb, cib, cob = batch // env.BATCH, in_features // env.BLOCK_IN, out_features // env.BLOCK_OUT
    best, best_cost = None, None
    for oc_n, b_n, ko_n in itertools.product((1, 2), (1, 2), (1, 2)):
        for tb, tco, tci in itertools.product(divisors(nb), divisors(cob), divisors(cib)):
            if tb % b_n or tco % oc_n or (cib // tci) % ko_n:
                continue
            t = DenseTiling(tb, tco, tci, oc_n, b_n, ko_n)
            if not fits(env, t, acc_operands):
                continue
            cost = estimate_cycles(env, batch, in_features, out_features, t)
            if best_cost is None or cost < best_cost:
                best, best_cost = t, cost
    if best is None:
        raise VTACompileError(f"dense {batch}x{in_features}->{out_features}: no tiling fits {env.MODEL}")
    return best


def schedule_dense_packed(func, tiling: DenseTiling | None = None, env: Environment | None = None,
                          mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a dense_packed function; ``mock``: parts to skip ("dma", "alu", "gemm")."""
    env = env or get_env()
    dma_copy, alu, gemm, gemm_reset = mock_names(env, mock)
    sch = s_tir.Schedule(func)
    dense, _, ewise, out = find_blocks(sch, "dense")
    sch.set_scope(dense, 0, env.acc_scope)
    for b in ewise:
        sch.set_scope(b, 0, env.acc_scope)
    b, co, b_i, c_i, ko, k_i = sch.get_loops(dense)
    nb, cob, cib = (int(sch.get(lp).extent) for lp in (b, co, ko))
    t = tiling or dense_tiling(nb * env.BATCH, cib * env.BLOCK_IN, cob * env.BLOCK_OUT, env)
    for name, n, tl in (("batch blocks", nb, t.tile_b), ("output blocks", cob, t.tile_co),
                        ("input blocks", cib, t.tile_ci)):
        if n % tl:
            raise VTACompileError(f"dense tiling {t}: {tl} does not divide the {n} {name}")
    if t.tile_b % t.b_nthread or t.tile_co % t.oc_nthread or (cib // t.tile_ci) % t.ko_nthread:
        raise VTACompileError(f"dense tiling {t}: the virtual threads must divide the tile")
    b_o, b_v, b_ii = sch.split(b, [nb // t.tile_b, t.b_nthread, t.tile_b // t.b_nthread])
    co_o, co_v, co_i = sch.split(co, [cob // t.tile_co, t.oc_nthread, t.tile_co // t.oc_nthread])
    ko_o, ko_v, ko_i = sch.split(ko, [cib // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
    sch.reorder(b_o, co_o, b_v, co_v, ko_o, ko_v, b_ii, co_i, ko_i, b_i, c_i, k_i)
    if t.ko_nthread > 1:
        sch.annotate(ko_v, PIPELINE, 1)
    attach = co_v
    if t.b_nthread > 1:
        sch.bind(b_v, "vthread.y")
    if t.oc_nthread > 1:
        sch.bind(co_v, "vthread.x")
    attach_epilogue(sch, env, func, ewise, out, attach, dma_copy)
    inp = sch.cache_read(dense, 0, env.inp_scope)
    sch.compute_at(inp, ko_v, preserve_unit_loops=True)
    wgt = sch.cache_read(dense, 1, env.wgt_scope)
    sch.compute_at(wgt, ko_v, preserve_unit_loops=True)
    init = sch.decompose_reduction(dense, ko_o)
    if env.BATCH == 1:
        sch.tensorize(sch.get_loops(init)[-1], gemm_reset)
        sch.tensorize(c_i, gemm)
    else:
        sch.tensorize(sch.get_loops(init)[-2], gemm_reset)
        sch.tensorize(b_i, gemm)
    pragma(sch, sch.get_loops(inp)[-4], dma_copy)
    pragma(sch, sch.get_loops(wgt)[-4], dma_copy)
    for blk in ewise:
        pragma(sch, sch.get_loops(blk)[-4], alu)
    pragma(sch, sch.get_loops(out)[-4], dma_copy)
    return sch
