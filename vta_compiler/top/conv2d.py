"""``conv2d_packed``: 2-D convolution in VTA's packed layouts, its schedule and its tiling.

Layouts (spec 5.6): data ``(N/B, CI/BI, H, W, B, BI)`` int8, kernel ``(CO/BO, CI/BI, KH, KW, BO, BI)``
int8, result ``(N/B, CO/BO, OH, OW, B, BO)`` int32. Zero padding is a ``pad`` stage that the
schedule folds into the input DMA (VTA pads while loading).

The schedule tiles the output (``tile_co`` channel blocks x ``tile_h`` rows x ``tile_w`` columns),
splits the output channels and/or the rows of a tile over virtual threads (``oc_nthread``,
``h_nthread``: each thread has its own accumulator tile and, where they differ, its own input or
weight tile, so one thread's loads overlap another's GEMMs), and walks the input channels in
chunks of ``tile_ci`` blocks. Weights are loaded per chunk (``wgt_at="ko"``) or, when the weights
of a whole channel tile fit the WGT buffer, once per channel tile (``wgt_at="co"``) so that they
are not reloaded for every spatial tile. With ``ko_nthread=2`` two chunks are in flight (the chunk
loop is pipelined like a virtual thread), so the next chunk loads while this one computes.
``conv2d_tiling`` chooses all of this from the shape
and the buffer sizes with a small cost model (DRAM traffic, exposed load latency, ALU work).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tvm import s_tir, te, topi

from ..environment import Environment, get_env
from ..transform.common import VTACompileError
from ..transform.uop import kernel_uop_budget
from ..transform.vthread import PIPELINE
from .common import attach_epilogue, divisors, epilogue, find_blocks, mock_names, pragma
from .tuned import tuned_tiling

#: weight of DRAM traffic (in bus cycles) in the tiling cost, on top of the exposed latencies
TRAFFIC_WEIGHT = 0.5


@dataclass(frozen=True)
class Conv2DWorkload:
    batch: int
    height: int
    width: int
    in_filter: int
    out_filter: int
    hkernel: int
    wkernel: int
    hpad: int
    wpad: int
    hstride: int
    wstride: int

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.hpad - self.hkernel) // self.hstride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.wpad - self.wkernel) // self.wstride + 1

    @property
    def macs(self) -> int:
        return self.batch * self.out_filter * self.out_height * self.out_width * self.in_filter * self.hkernel * \
            self.wkernel


#: ResNet-18's convolutions (spec 5.9): (H, W, CI, CO, K, pad, stride); C1 has 3 input channels.
RESNET18 = {
    "C1": Conv2DWorkload(1, 224, 224, 3, 64, 7, 7, 3, 3, 2, 2),
    "C2": Conv2DWorkload(1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1),
    "C3": Conv2DWorkload(1, 56, 56, 64, 128, 3, 3, 1, 1, 2, 2),
    "C4": Conv2DWorkload(1, 56, 56, 64, 128, 1, 1, 0, 0, 2, 2),
    "C5": Conv2DWorkload(1, 28, 28, 128, 128, 3, 3, 1, 1, 1, 1),
    "C6": Conv2DWorkload(1, 28, 28, 128, 256, 3, 3, 1, 1, 2, 2),
    "C7": Conv2DWorkload(1, 28, 28, 128, 256, 1, 1, 0, 0, 2, 2),
    "C8": Conv2DWorkload(1, 14, 14, 256, 256, 3, 3, 1, 1, 1, 1),
    "C9": Conv2DWorkload(1, 14, 14, 256, 512, 3, 3, 1, 1, 2, 2),
    "C10": Conv2DWorkload(1, 14, 14, 256, 512, 1, 1, 0, 0, 2, 2),
    "C11": Conv2DWorkload(1, 7, 7, 512, 512, 3, 3, 1, 1, 1, 1),
}


@dataclass(frozen=True)
class Conv2DTiling:
    tile_co: int = 1        # output channel blocks per tile (all threads together)
    tile_h: int = 1         # output rows per tile (all threads together)
    tile_w: int = 1         # output columns per tile
    tile_ci: int = 1        # input channel blocks per input load
    oc_nthread: int = 1     # virtual threads over the tile's output channels
    h_nthread: int = 1      # virtual threads over the tile's rows
    wgt_at: str = "ko"      # "ko": weights per input chunk; "co": once per output-channel tile
    ko_nthread: int = 1     # input chunks in flight (2: double-buffered input/weight tiles, see vta.pipeline)


def padded_channels(n: int, block: int) -> int:
    return -(-n // block) * block


def conv2d_packed(data: te.Tensor, kernel: te.Tensor, padding: tuple[int, int], strides: tuple[int, int],
                  out_dtype: str = "int32", name: str = "conv2d") -> te.Tensor:
    """The packed convolution (dilation 1): int8 data and kernel, int32 result."""
    nb, cib, h, w, bb, bi = (int(x) for x in data.shape)
    cob, cib2, kh, kw, bo, bi2 = (int(x) for x in kernel.shape)
    if cib != cib2 or bi != bi2:
        raise VTACompileError(f"conv2d_packed: data has {cib}x{bi} input channels, the kernel {cib2}x{bi2}")
    (hp, wp), (hs, ws) = padding, strides
    oh, ow = (h + 2 * hp - kh) // hs + 1, (w + 2 * wp - kw) // ws + 1
    dpad = topi.nn.pad(data, [0, 0, hp, wp, 0, 0], name="data_pad") if hp or wp else data
    ko = te.reduce_axis((0, cib), "ko")
    ki = te.reduce_axis((0, bi), "ki")
    dy = te.reduce_axis((0, kh), "dy")
    dx = te.reduce_axis((0, kw), "dx")
    return te.compute(
        (nb, cob, oh, ow, bb, bo),
        lambda b, co, i, j, b_i, c_i: te.sum(
            dpad[b, ko, i * hs + dy, j * ws + dx, b_i, ki].astype(out_dtype)
            * kernel[co, ko, dy, dx, c_i, ki].astype(out_dtype), axis=[ko, dy, dx, ki]),
        name=name, tag="conv2d_dense")


def conv2d_layer(wkl: Conv2DWorkload, env: Environment | None = None, shift: int = 8, bias: bool = True,
                 clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A whole layer as a PrimFunc: ``res = int8(clip((conv2d(data, kernel) + bias) >> shift))``.

    Parameters of the function: data, kernel, [bias], [shift], res in packed layouts; input channels
    are rounded up to the block (C1's 3 channels become BLOCK_IN, zero-padded by the caller). With
    ``channel_shift`` the shift is a per-output-channel int32 tensor shaped like the bias.
    """
    env = env or get_env()
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    if wkl.batch % bb or wkl.out_filter % bo:
        raise VTACompileError(f"conv2d: batch {wkl.batch} and output channels {wkl.out_filter} must be multiples "
                              f"of BATCH={bb} and BLOCK_OUT={bo}")
    ci = padded_channels(wkl.in_filter, bi)
    data = te.placeholder((wkl.batch // bb, ci // bi, wkl.height, wkl.width, bb, bi), env.inp_dtype, name="data")
    kernel = te.placeholder((wkl.out_filter // bo, ci // bi, wkl.hkernel, wkl.wkernel, bo, bi), env.wgt_dtype,
                            name="kernel")
    conv = conv2d_packed(data, kernel, (wkl.hpad, wkl.wpad), (wkl.hstride, wkl.wstride), env.acc_dtype)
    args = [data, kernel]
    b = None
    per_channel = (wkl.batch // bb, wkl.out_filter // bo, 1, 1, bb, bo)
    if bias:
        b = te.placeholder(per_channel, env.acc_dtype, name="bias")
        args.append(b)
    if channel_shift:
        shift = te.placeholder(per_channel, env.acc_dtype, name="shift")
        args.append(shift)
    _, res = epilogue(env, conv, b, shift, clip, lambda i: (i[0], i[1], 0, 0, i[4], i[5]))
    func = te.create_prim_func(args + [res])
    return func.with_attr("vta.workload", str(wkl))


# ------------------------------------------------------------------------------------------------ tiling
def _sizes(env: Environment, wkl: Conv2DWorkload, t: Conv2DTiling, acc_operands: int = 1):
    """SRAM elements (inp, wgt, acc) and GEMM kernel uops of one tiling; ``acc_operands`` per-channel
    tensors (bias, shift) share ACC with the accumulators."""
    kh, kw, hs, ws = wkl.hkernel, wkl.wkernel, wkl.hstride, wkl.wstride
    th, tw = t.tile_h // t.h_nthread, t.tile_w
    th_in, tw_in = (th - 1) * hs + kh, (tw - 1) * ws + kw
    inp = t.tile_ci * th_in * tw_in * t.h_nthread * t.ko_nthread
    cib = padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN
    wgt = t.tile_co * (cib if t.wgt_at == "co" else t.tile_ci * t.ko_nthread) * kh * kw
    acc = t.tile_co * t.tile_h * t.tile_w + acc_operands * t.tile_co      # accumulators + bias, shift
    loops = sorted([t.tile_co // t.oc_nthread, th, tw, t.tile_ci, kh, kw], reverse=True)
    uops = math.prod(loops[2:])
    return inp, wgt, acc, uops


def fits(env: Environment, wkl: Conv2DWorkload, t: Conv2DTiling, acc_operands: int = 1) -> bool:
    inp, wgt, acc, uops = _sizes(env, wkl, t, acc_operands)
    return inp <= env.INP_BUFF_DEPTH and wgt <= env.WGT_BUFF_DEPTH and acc <= env.ACC_BUFF_DEPTH and \
        uops <= kernel_uop_budget(env)


def estimate_cycles(env: Environment, wkl: Conv2DWorkload, t: Conv2DTiling) -> float:
    """A rough cost in cycles: per tile, chunks are pipelined when there are virtual threads; plus traffic."""
    bus = env.AXI_DATA_BYTES
    cib = padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN
    cob, nb = wkl.out_filter // env.BLOCK_OUT, wkl.batch // env.BATCH
    oh, ow = wkl.out_height, wkl.out_width
    kh, kw = wkl.hkernel, wkl.wkernel
    th = t.tile_h // t.h_nthread
    th_in, tw_in = (th - 1) * wkl.hstride + kh, (t.tile_w - 1) * wkl.wstride + kw
    chunks = cib // t.tile_ci
    n_co, n_sp = cob // t.tile_co, nb * (oh // t.tile_h) * (ow // t.tile_w)
    inp_c = t.tile_ci * th_in * tw_in * t.h_nthread * env.INP_ELEM_BYTES / bus
    wgt_c = 0 if t.wgt_at == "co" else t.tile_co * t.tile_ci * kh * kw * env.WGT_ELEM_BYTES / bus
    gemm_c = t.tile_co * t.tile_h * t.tile_w * t.tile_ci * kh * kw
    threads = t.oc_nthread * t.h_nthread
    if t.ko_nthread > 1:          # chunks double-buffered: loads hide behind the previous chunk's GEMMs
        tile = inp_c + wgt_c + chunks * max(inp_c + wgt_c, gemm_c)
    elif threads > 1:             # a shared tile waits for every GEMM of the chunk; the first thread's own
        shared = inp_c if t.h_nthread == 1 else (wgt_c if t.oc_nthread == 1 else 0.5 * max(inp_c, wgt_c))
        tile = chunks * (shared + (inp_c + wgt_c - shared) / threads + gemm_c)     # tile waits too
    else:
        tile = chunks * (inp_c + wgt_c + gemm_c)
    acc_elems = t.tile_co * t.tile_h * t.tile_w
    tile += 4 * acc_elems / threads + acc_elems * env.OUT_ELEM_BYTES / bus / threads + 40
    total = n_co * n_sp * tile
    wgt_bytes = cob * cib * kh * kw * env.WGT_ELEM_BYTES
    if t.wgt_at == "co":
        total += wgt_bytes / bus
    else:
        wgt_bytes *= n_sp
    # DRAM traffic is mostly hidden behind the GEMMs, but it is shared with the host: count half of it
    inp_bytes = n_co * n_sp * cib * th_in * tw_in * t.h_nthread * env.INP_ELEM_BYTES
    return total + TRAFFIC_WEIGHT * (inp_bytes + wgt_bytes) / bus


def conv2d_tiling(wkl: Conv2DWorkload, env: Environment | None = None, acc_operands: int = 1,
                  tuned: bool = True) -> Conv2DTiling:
    """The tiling of a workload: the best measured one (``vta_compiler.autotune`` records: the active
    ``apply_history_best``, else the records shipped with the package) when ``tuned`` and there is one,
    else the cheapest (by ``estimate_cycles``) that fits the on-chip buffers and the uop budget
    (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and a shift)."""
    env = env or get_env()
    if tuned:
        best = tuned_tiling("conv2d", wkl, env, acc_operands)
        if best is not None:
            return best
    cib = padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN
    cob = wkl.out_filter // env.BLOCK_OUT
    oh, ow = wkl.out_height, wkl.out_width
    best, best_cost = None, None
    for oc_n, h_n, ko_n in itertools.product((1, 2), (1, 2), (1, 2)):
        for tco, th, tw, tci, wgt_at in itertools.product(divisors(cob), divisors(oh), divisors(ow), divisors(cib),
                                                          ("ko", "co")):
            if tco % oc_n or th % h_n or (cib // tci) % ko_n:
                continue
            t = Conv2DTiling(tco, th, tw, tci, oc_n, h_n, wgt_at, ko_n)
            if not fits(env, wkl, t, acc_operands):
                continue
            cost = estimate_cycles(env, wkl, t)
            if best_cost is None or cost < best_cost:
                best, best_cost = t, cost
    if best is None:
        raise VTACompileError(f"conv2d {wkl}: no tiling fits the on-chip buffers of {env.MODEL}: "
                              + _smallest_tile_needs(env, wkl))
    return best


def _smallest_tile_needs(env: Environment, wkl: Conv2DWorkload) -> str:
    """What the smallest tile (one block of every loop) needs, beside each capacity it exceeds."""
    needs = _sizes(env, wkl, Conv2DTiling())
    limits = (env.INP_BUFF_DEPTH, env.WGT_BUFF_DEPTH, env.ACC_BUFF_DEPTH, kernel_uop_budget(env))
    names = ("INP buffer elements", "WGT buffer elements", "ACC buffer elements", "GEMM kernel uops")
    over = [f"{name} {need} > {limit}" for name, need, limit in zip(names, needs, limits) if need > limit]
    return "the smallest tile (one block of every loop) needs " + ", ".join(over or ["more than fits"])


# ------------------------------------------------------------------------------------------------ schedule
def schedule_conv2d_packed(func, tiling: Conv2DTiling | None = None, wkl: Conv2DWorkload | None = None,
                           env: Environment | None = None, mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a conv2d_packed function (with any element-wise epilogue and a final int8 cast).

    ``mock``: parts to skip ("dma", "alu", "gemm"), for GEMM-only or ALU-only measurements.
    """
    env = env or get_env()
    dma_copy, alu, gemm, gemm_reset = mock_names(env, mock)
    if tiling is None:
        if wkl is None:
            raise VTACompileError("schedule_conv2d_packed: give a tiling or the workload to choose one")
        tiling = conv2d_tiling(wkl, env)
    t = tiling
    sch = s_tir.Schedule(func)
    conv, producers, ewise, out = find_blocks(sch, "conv2d")
    pad = [b for b in producers]
    sch.set_scope(conv, 0, env.acc_scope)
    for b in ewise:
        sch.set_scope(b, 0, env.acc_scope)

    b, co, h, w, b_i, c_i, ko, dy, dx, k_i = sch.get_loops(conv)
    extents = [int(sch.get(lp).extent) for lp in (b, co, h, w, ko)]
    nb, cob, oh, ow, cib = extents
    for name, n, tl in (("output channel blocks", cob, t.tile_co), ("output rows", oh, t.tile_h),
                        ("output columns", ow, t.tile_w), ("input channel blocks", cib, t.tile_ci)):
        if n % tl:
            raise VTACompileError(f"conv2d tiling {t}: {tl} does not divide the {n} {name}")
    if t.tile_co % t.oc_nthread or t.tile_h % t.h_nthread or (cib // t.tile_ci) % t.ko_nthread:
        raise VTACompileError(f"conv2d tiling {t}: the virtual threads must divide the tile")
    co_o, co_v, co_i = sch.split(co, [cob // t.tile_co, t.oc_nthread, t.tile_co // t.oc_nthread])
    h_o, h_v, h_i = sch.split(h, [oh // t.tile_h, t.h_nthread, t.tile_h // t.h_nthread])
    w_o, w_i = sch.split(w, [ow // t.tile_w, t.tile_w])
    ko_o, ko_v, ko_i = sch.split(ko, [cib // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
    sch.reorder(co_o, b, h_o, w_o, co_v, h_v, ko_o, ko_v, co_i, h_i, w_i, ko_i, dy, dx, b_i, c_i, k_i)
    if t.ko_nthread > 1:
        sch.annotate(ko_v, PIPELINE, 1)
    attach = w_o
    if t.oc_nthread > 1:
        sch.bind(co_v, "vthread.x")
        attach = co_v
    if t.h_nthread > 1:
        sch.bind(h_v, "vthread.y")
        attach = h_v
    if t.h_nthread == 1 and t.oc_nthread == 1:
        attach = h_v

    # epilogue and store per tile (per thread)
    attach_epilogue(sch, env, func, ewise, out, attach, dma_copy)

    # input and weight tiles
    inp = sch.cache_read(conv, 0, env.inp_scope)
    sch.compute_at(inp, ko_v, preserve_unit_loops=True)
    for p in pad:
        sch.compute_inline(p)
    wgt = sch.cache_read(conv, 1, env.wgt_scope)
    sch.compute_at(wgt, co_o if t.wgt_at == "co" else ko_v, preserve_unit_loops=True)

    init = sch.decompose_reduction(conv, ko_o)
    if env.BATCH == 1:
        sch.tensorize(sch.get_loops(init)[-1], gemm_reset)
        sch.tensorize(c_i, gemm)
    else:
        sch.tensorize(sch.get_loops(init)[-2], gemm_reset)
        sch.tensorize(b_i, gemm)

    pragma(sch, sch.get_loops(inp)[-4], dma_copy)     # per input-channel block: rows x columns, padded
    pragma(sch, sch.get_loops(wgt)[-6], dma_copy)     # output-channel rows x (ci, kh, kw) columns
    for blk in ewise:
        pragma(sch, sch.get_loops(blk)[-6], alu)
    pragma(sch, sch.get_loops(out)[-4], dma_copy)     # per output-channel block: rows x columns
    return sch
