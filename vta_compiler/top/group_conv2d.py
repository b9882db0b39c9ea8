"""``group_conv2d_packed`` and depthwise convolution in VTA's packed layouts, schedules and tilings.

Layouts (spec 5.6): data ``(N/B, CI/BI, H, W, B, BI)`` int8, kernel ``(CO/BO, CIG/BI, KH, KW, BO, BI)``
int8 where ``CIG`` is the input channels of one *hardware group*, result ``(N/B, CO/BO, OH, OW, B, BO)``
int32. Output channel block ``co`` reads the input channel blocks of its group only.

Two kinds of grouping reach the 16x16 GEMM:

* **whole blocks per group** (channels per group a multiple of the block, as the original required):
  the hardware groups are the groups;
* **block-diagonal** (channels per group a divisor of the block, the same for input and output:
  depthwise convolution is the case of one channel per group): each 16-channel block is one
  hardware group whose 16x16 weight tile is block-diagonal (``pack_group_conv2d_kernel`` puts each
  group's weights on the diagonal, zeros elsewhere). Only ``cpg/16`` of each GEMM's MACs are useful,
  but data stays in the packed layout of its neighbours, so no layout change is needed around it.

The schedule is conv2d's (see ``conv2d.py``) with the output channels split into groups and the
channel blocks of a group: a tile holds ``tile_g`` groups x ``tile_co`` blocks of each; when a
tile spans several groups it takes each group's input channels whole (``tile_ci`` = the group's
input blocks), so the input and weight tiles stay contiguous. Virtual threads split the tile's
groups (``tile_g > 1``: private input tiles) or its channel blocks (input tile shared), and/or its
rows. ``group_conv2d_tiling`` picks the tiling: a measured one (``vta_compiler.autotune`` records, kind
"group_conv2d") if there is one, else conv2d's cost model.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, topi

from ..environment import Environment, get_env
from ..transform.common import VTACompileError
from ..transform.uop import kernel_uop_budget
from ..transform.vthread import PIPELINE
from .common import attach_epilogue, chunk_cycles, divisors, epilogue, find_blocks, mock_names, pragma
from .conv2d import TRAFFIC_WEIGHT
from .tuned import tuned_tiling


@dataclass(frozen=True)
class GroupConv2DWorkload:
    batch: int
    height: int
    width: int
    in_filter: int
    out_filter: int
    groups: int
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
    def in_per_group(self) -> int:
        return self.in_filter // self.groups

    @property
    def out_per_group(self) -> int:
        return self.out_filter // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.in_filter == self.out_filter

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (padding taps included, as for conv2d)."""
        return self.batch * self.out_filter * self.out_height * self.out_width * self.in_per_group * \
            self.hkernel * self.wkernel


def depthwise_workload(batch: int, height: int, width: int, channels: int, kernel: int, pad: int,
                       stride: int) -> GroupConv2DWorkload:
    """A depthwise convolution (one channel per group, channel multiplier 1) as a group-conv workload."""
    return GroupConv2DWorkload(batch, height, width, channels, channels, channels, kernel, kernel, pad, pad, stride,
                               stride)


#: The original's MobileNet-style group convolutions (spec 5.9): (H, W, CI, CO, groups, K, pad, stride).
#: 16 channels per group: MobileNet-v1's depthwise layers with the groups the original's GEMM could take.
MOBILENET_GROUP = {
    "D1": GroupConv2DWorkload(1, 112, 112, 32, 32, 2, 3, 3, 1, 1, 1, 1),
    "D2": GroupConv2DWorkload(1, 112, 112, 64, 64, 4, 3, 3, 1, 1, 2, 2),
    "D3": GroupConv2DWorkload(1, 56, 56, 128, 128, 8, 3, 3, 1, 1, 1, 1),
    "D4": GroupConv2DWorkload(1, 56, 56, 128, 128, 8, 3, 3, 1, 1, 2, 2),
    "D5": GroupConv2DWorkload(1, 28, 28, 256, 256, 16, 3, 3, 1, 1, 1, 1),
    "D6": GroupConv2DWorkload(1, 28, 28, 256, 256, 16, 3, 3, 1, 1, 2, 2),
    "D7": GroupConv2DWorkload(1, 14, 14, 512, 512, 32, 3, 3, 1, 1, 1, 1),
    "D8": GroupConv2DWorkload(1, 14, 14, 512, 512, 32, 3, 3, 1, 1, 2, 2),
    "D9": GroupConv2DWorkload(1, 7, 7, 1024, 1024, 64, 3, 3, 1, 1, 1, 1),
}

#: Group convolutions with 32 or more channels per group (ResNeXt/RegNet-style), where the GEMM has
#: a reduction of two or more blocks per tap.
WIDE_GROUP = {
    "G1": GroupConv2DWorkload(1, 56, 56, 128, 128, 4, 3, 3, 1, 1, 1, 1),
    "G2": GroupConv2DWorkload(1, 28, 28, 256, 256, 8, 3, 3, 1, 1, 1, 1),
    "G3": GroupConv2DWorkload(1, 28, 28, 256, 256, 4, 3, 3, 1, 1, 2, 2),
    "G4": GroupConv2DWorkload(1, 14, 14, 512, 512, 8, 3, 3, 1, 1, 1, 1),
}

#: MobileNet-v1's depthwise layers (the D-workload shapes with one channel per group).
MOBILENET_DEPTHWISE = {f"DW{n[1:]}": depthwise_workload(w.batch, w.height, w.width, w.in_filter, w.hkernel, w.hpad,
                                                          w.hstride) for n, w in MOBILENET_GROUP.items()}


@dataclass(frozen=True)
class GroupConv2DTiling:
    tile_g: int = 1         # hardware groups per tile
    tile_co: int = 1        # output channel blocks of each group per tile (all of them when tile_g > 1)
    tile_h: int = 1         # output rows per tile (all threads together)
    tile_w: int = 1         # output columns per tile
    tile_ci: int = 1        # input channel blocks (of each group) per input load (all of them when tile_g > 1)
    oc_nthread: int = 1     # virtual threads over the tile's groups (tile_g > 1) or channel blocks
    h_nthread: int = 1      # virtual threads over the tile's rows
    wgt_at: str = "ko"      # "ko": weights per input chunk; "co": once per channel tile
    ko_nthread: int = 1     # input chunks in flight (double-buffered input/weight tiles)


@dataclass(frozen=True)
class _HwGroups:
    """How a workload maps onto VTA: hardware groups and channel blocks per hardware group."""
    groups: int
    cib_g: int              # input channel blocks per hardware group
    cob_g: int              # output channel blocks per hardware group
    block_diagonal: bool    # several groups share one block (their weights on the tile's diagonal)


def _hw_groups(wkl: GroupConv2DWorkload, env: Environment) -> _HwGroups:
    reason = _shape_refusal(wkl, env)
    if reason:
        raise VTACompileError(f"group_conv2d {wkl}: {reason}")
    bi, bo = env.BLOCK_IN, env.BLOCK_OUT
    cpg_in, cpg_out = wkl.in_per_group, wkl.out_per_group
    if cpg_in % bi == 0 and cpg_out % bo == 0:
        return _HwGroups(wkl.groups, cpg_in // bi, cpg_out // bo, False)
    return _HwGroups(wkl.in_filter // bi, 1, 1, True)


def _shape_refusal(wkl: GroupConv2DWorkload, env: Environment) -> str | None:
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    if wkl.groups < 1 or wkl.in_filter % wkl.groups or wkl.out_filter % wkl.groups:
        return f"{wkl.groups} groups do not divide {wkl.in_filter} input and {wkl.out_filter} output channels"
    if wkl.batch % bb:
        return f"batch {wkl.batch} is not a multiple of BATCH={bb}"
    if wkl.out_height < 1 or wkl.out_width < 1:
        return f"the output would be {wkl.out_height}x{wkl.out_width}"
    cpg_in, cpg_out = wkl.in_per_group, wkl.out_per_group
    if cpg_in % bi == 0 and cpg_out % bo == 0:
        return None
    if cpg_in == cpg_out and bi == bo and bi % cpg_in == 0:
        if wkl.in_filter % bi:
            return (f"{wkl.in_filter} channels are not a whole number of {bi}-channel blocks (block-diagonal weights "
                    "need whole blocks)")
        return None
    return (f"{cpg_in} input and {cpg_out} output channels per group: VTA's GEMM needs whole {bi}-channel blocks "
            f"per group, or the same divisor of {bi} for input and output channels (block-diagonal weights, e.g. "
            "depthwise)")


def group_conv2d_supported(wkl: GroupConv2DWorkload, env: Environment | None = None,
                           acc_operands: int = 1) -> str | None:
    """None if VTA can run this group convolution, else the reason in one sentence (``acc_operands``
    as for ``group_conv2d_tiling``)."""
    env = env or get_env()
    reason = _shape_refusal(wkl, env)
    if reason:
        return reason
    try:
        group_conv2d_tiling(wkl, env, acc_operands)
    except VTACompileError as e:
        return str(e)
    return None


def depthwise_conv2d_supported(wkl: GroupConv2DWorkload, env: Environment | None = None,
                               acc_operands: int = 1) -> str | None:
    """None if VTA can run this depthwise convolution (block-diagonal weight tiles), else the reason."""
    if not wkl.is_depthwise:
        return (f"not a depthwise convolution ({wkl.groups} groups of {wkl.in_per_group} input and "
                f"{wkl.out_per_group} output channels)")
    return group_conv2d_supported(wkl, env, acc_operands)


# ------------------------------------------------------------------------------------------------ compute
def group_conv2d_packed(data: te.Tensor, kernel: te.Tensor, padding: tuple[int, int], strides: tuple[int, int],
                        groups: int, out_dtype: str = "int32", name: str = "group_conv2d") -> te.Tensor:
    """The packed group convolution (dilation 1) over ``groups`` hardware groups: int8 in, int32 out."""
    nb, cib, h, w, bb, bi = (int(x) for x in data.shape)
    cob, cib_g, kh, kw, bo, bi2 = (int(x) for x in kernel.shape)
    if bi != bi2:
        raise VTACompileError(f"group_conv2d_packed: data blocks have {bi} channels, the kernel's {bi2}")
    if cib % groups or cob % groups or cib // groups != cib_g:
        raise VTACompileError(f"group_conv2d_packed: {groups} groups must divide the {cib} input and {cob} output "
                              f"channel blocks, and the kernel must have {cib // max(groups, 1)} input blocks per "
                              f"group (it has {cib_g})")
    cob_g = cob // groups
    (hp, wp), (hs, ws) = padding, strides
    oh, ow = (h + 2 * hp - kh) // hs + 1, (w + 2 * wp - kw) // ws + 1
    dpad = topi.nn.pad(data, [0, 0, hp, wp, 0, 0], name="data_pad") if hp or wp else data
    ko = te.reduce_axis((0, cib_g), "ko")
    ki = te.reduce_axis((0, bi), "ki")
    dy = te.reduce_axis((0, kh), "dy")
    dx = te.reduce_axis((0, kw), "dx")
    return te.compute(
        (nb, cob, oh, ow, bb, bo),
        lambda b, co, i, j, b_i, c_i: te.sum(
            dpad[b, co // cob_g * cib_g + ko, i * hs + dy, j * ws + dx, b_i, ki].astype(out_dtype)
            * kernel[co, ko, dy, dx, c_i, ki].astype(out_dtype), axis=[ko, dy, dx, ki]),
        name=name, tag="packed_group_conv2d")


def group_conv2d_layer(wkl: GroupConv2DWorkload, env: Environment | None = None, shift: int = 8, bias: bool = True,
                       clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A whole layer as a PrimFunc: ``res = int8(clip((group_conv2d(data, kernel) + bias) >> shift))``.

    Parameters: data ``(N/B, CI/BI, H, W, B, BI)``, kernel ``(CO/BO, CIG/BI, KH, KW, BO, BI)`` as made by
    ``pack_group_conv2d_kernel``, [bias ``(N/B, CO/BO, 1, 1, B, BO)``], [shift], res. With ``channel_shift``
    the shift is a per-output-channel int32 tensor shaped like the bias.
    """
    env = env or get_env()
    hw = _hw_groups(wkl, env)
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    data = te.placeholder((wkl.batch // bb, wkl.in_filter // bi, wkl.height, wkl.width, bb, bi), env.inp_dtype,
                          name="data")
    kernel = te.placeholder((wkl.out_filter // bo, hw.cib_g, wkl.hkernel, wkl.wkernel, bo, bi), env.wgt_dtype,
                            name="kernel")
    conv = group_conv2d_packed(data, kernel, (wkl.hpad, wkl.wpad), (wkl.hstride, wkl.wstride), hw.groups,
                               env.acc_dtype)
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


def depthwise_conv2d_layer(wkl: GroupConv2DWorkload, env: Environment | None = None, shift: int = 8,
                           bias: bool = True, clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A depthwise layer (``wkl.groups`` == channels) as a PrimFunc; its kernel comes from
    ``pack_depthwise_kernel`` (block-diagonal 16x16 tiles)."""
    reason = depthwise_conv2d_supported(wkl, env, 1 + int(channel_shift))
    if reason:
        raise VTACompileError(f"depthwise_conv2d {wkl}: {reason}")
    return group_conv2d_layer(wkl, env, shift, bias, clip, channel_shift)


# ------------------------------------------------------------------------------------------------ packing
def pack_group_conv2d_kernel(w: np.ndarray, groups: int, block_out: int, block_in: int) -> np.ndarray:
    """A group-conv kernel ``(O, I/groups, KH, KW)`` -> ``(O/BO, CIG/BI, KH, KW, BO, BI)``.

    With whole blocks per group this is conv2d's packing of the per-group kernel; with fewer channels
    per group than a block, each 16-channel block becomes one hardware group whose tile holds the
    block's groups on its diagonal (zeros elsewhere).
    """
    o, cpg, kh, kw = w.shape
    if o % groups or o // groups == 0:
        raise ValueError(f"{groups} groups do not divide {o} output channels")
    cpg_out = o // groups
    if cpg % block_in == 0 and cpg_out % block_out == 0:
        return np.ascontiguousarray(w.reshape(o // block_out, block_out, cpg // block_in, block_in, kh, kw)
                                    .transpose(0, 2, 4, 5, 1, 3))
    if cpg != cpg_out or block_in != block_out or block_in % cpg or o % block_out:
        raise ValueError(f"{cpg} input and {cpg_out} output channels per group fit neither whole {block_in}-channel "
                         "blocks nor a block-diagonal tile")
    out = np.zeros((o // block_out, 1, kh, kw, block_out, block_in), w.dtype)
    for c in range(o):
        cb, lane = divmod(c, block_out)
        first = (c // cpg) * cpg - cb * block_in        # lane of the group's first input channel
        out[cb, 0, :, :, lane, first:first + cpg] = w[c].transpose(1, 2, 0)
    return out


def pack_depthwise_kernel(w: np.ndarray, block: int) -> np.ndarray:
    """A depthwise kernel ``(C, 1, KH, KW)`` -> block-diagonal tiles ``(C/16, 1, KH, KW, 16, 16)``."""
    if w.ndim != 4 or w.shape[1] != 1:
        raise ValueError(f"a depthwise kernel has shape (C, 1, KH, KW), not {w.shape}")
    return pack_group_conv2d_kernel(w, w.shape[0], block, block)


# ------------------------------------------------------------------------------------------------ tiling
def _check_tiling(hw: _HwGroups, t: GroupConv2DTiling) -> str | None:
    if hw.groups % t.tile_g or hw.cob_g % t.tile_co or hw.cib_g % t.tile_ci:
        return (f"the tile ({t.tile_g} groups, {t.tile_co} output and {t.tile_ci} input blocks per group) must "
                f"divide the {hw.groups} groups of {hw.cob_g} output and {hw.cib_g} input blocks")
    if t.tile_g > 1 and (t.tile_co != hw.cob_g or t.tile_ci != hw.cib_g):
        return "a tile of several groups must hold each group's channel blocks whole (tile_co, tile_ci)"
    oc_split = t.tile_g if t.tile_g > 1 else t.tile_co
    if oc_split % t.oc_nthread or t.tile_h % t.h_nthread or (hw.cib_g // t.tile_ci) % t.ko_nthread:
        return "the virtual threads must divide the tile"
    if t.wgt_at not in ("ko", "co"):
        return f"wgt_at must be 'ko' or 'co', not {t.wgt_at!r}"
    return None


def _sizes(env: Environment, wkl: GroupConv2DWorkload, hw: _HwGroups, t: GroupConv2DTiling, acc_operands: int = 1):
    """SRAM elements (inp, wgt, acc) and GEMM kernel uops of one tiling; ``acc_operands`` per-channel
    tensors (bias, shift) share ACC with the accumulators."""
    kh, kw, hs, ws = wkl.hkernel, wkl.wkernel, wkl.hstride, wkl.wstride
    th = t.tile_h // t.h_nthread
    th_in, tw_in = (th - 1) * hs + kh, (t.tile_w - 1) * ws + kw
    inp = t.tile_g * t.tile_ci * th_in * tw_in * t.h_nthread * t.ko_nthread
    wgt = t.tile_g * t.tile_co * (hw.cib_g if t.wgt_at == "co" else t.tile_ci * t.ko_nthread) * kh * kw
    acc = t.tile_g * t.tile_co * (t.tile_h * t.tile_w + acc_operands)      # accumulators + bias, shift
    g_loop, c_loop = (t.tile_g // t.oc_nthread, t.tile_co) if t.tile_g > 1 else (1, t.tile_co // t.oc_nthread)
    loops = sorted([g_loop, c_loop, th, t.tile_w, t.tile_ci, kh, kw], reverse=True)
    return inp, wgt, acc, math.prod(loops[2:])


def _fits(env: Environment, sizes) -> bool:
    inp, wgt, acc, uops = sizes
    return inp <= env.INP_BUFF_DEPTH and wgt <= env.WGT_BUFF_DEPTH and acc <= env.ACC_BUFF_DEPTH and \
        uops <= kernel_uop_budget(env)


def estimate_cycles(env: Environment, wkl: GroupConv2DWorkload, hw: _HwGroups, t: GroupConv2DTiling) -> float:
    """conv2d's cost model (exposed load latency, GEMM and ALU work, DRAM traffic) for a group tile."""
    bus = env.AXI_DATA_BYTES
    nb = wkl.batch // env.BATCH
    oh, ow, kh, kw = wkl.out_height, wkl.out_width, wkl.hkernel, wkl.wkernel
    th = t.tile_h // t.h_nthread
    th_in, tw_in = (th - 1) * wkl.hstride + kh, (t.tile_w - 1) * wkl.wstride + kw
    chunks = hw.cib_g // t.tile_ci
    n_co = (hw.groups // t.tile_g) * (hw.cob_g // t.tile_co)
    n_sp = nb * (oh // t.tile_h) * (ow // t.tile_w)
    inp_c = t.tile_g * t.tile_ci * th_in * tw_in * t.h_nthread * env.INP_ELEM_BYTES / bus
    wgt_c = 0 if t.wgt_at == "co" else t.tile_g * t.tile_co * t.tile_ci * kh * kw * env.WGT_ELEM_BYTES / bus
    gemm_c = t.tile_g * t.tile_co * t.tile_h * t.tile_w * t.tile_ci * kh * kw
    threads = t.oc_nthread * t.h_nthread
    tile = chunks * chunk_cycles(inp_c + wgt_c, gemm_c, threads, t.ko_nthread > 1, t.h_nthread)
    if t.ko_nthread > 1:
        tile += inp_c + wgt_c       # the first chunk's loads
    acc_elems = t.tile_g * t.tile_co * t.tile_h * t.tile_w
    tile += 5 * acc_elems + acc_elems * env.OUT_ELEM_BYTES / bus / threads + 40     # ALU: one compute module
    # the first tile's loads and the last one's GEMMs overlap nothing: big tiles pay for it
    chunk_wgt_c = t.tile_g * t.tile_co * t.tile_ci * kh * kw * env.WGT_ELEM_BYTES / bus
    total = n_co * n_sp * tile + (inp_c + chunk_wgt_c + gemm_c) / threads
    wgt_bytes = hw.groups * hw.cob_g * hw.cib_g * kh * kw * env.WGT_ELEM_BYTES
    if t.wgt_at == "co":
        total += wgt_bytes / bus
    else:
        wgt_bytes *= n_sp
    inp_bytes = n_co * n_sp * t.tile_g * hw.cib_g * th_in * tw_in * t.h_nthread * env.INP_ELEM_BYTES
    return total + TRAFFIC_WEIGHT * (inp_bytes + wgt_bytes) / bus


def candidate_tilings(wkl: GroupConv2DWorkload, env: Environment | None = None, acc_operands: int = 1):
    """Every legal tiling that fits the buffers and the uop budget."""
    env = env or get_env()
    hw = _hw_groups(wkl, env)
    oh, ow = wkl.out_height, wkl.out_width
    for oc_n, h_n, ko_n, wgt_at in itertools.product((1, 2), (1, 2), (1, 2), ("ko", "co")):
        for tg, tco, th, tw, tci in itertools.product(divisors(hw.groups), divisors(hw.cob_g), divisors(oh),
                                                      divisors(ow), divisors(hw.cib_g)):
            t = GroupConv2DTiling(tg, tco, th, tw, tci, oc_n, h_n, wgt_at, ko_n)
            if _check_tiling(hw, t) is None and _fits(env, _sizes(env, wkl, hw, t, acc_operands)):
                yield t


def group_conv2d_tiling(wkl: GroupConv2DWorkload, env: Environment | None = None,
                        acc_operands: int = 1, tuned: bool = True) -> GroupConv2DTiling:
    """The tiling of a workload: the best measured one (``vta_compiler.autotune`` records: the active
    ``apply_history_best``, else the records shipped with the package) when ``tuned`` and there is one,
    else the cheapest (by ``estimate_cycles``) that fits the on-chip buffers and the uop budget
    (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and a shift)."""
    env = env or get_env()
    hw = _hw_groups(wkl, env)
    if tuned:
        best = tuned_tiling("group_conv2d", wkl, env, acc_operands)
        if best is not None:
            return best
    best = min(candidate_tilings(wkl, env, acc_operands), key=lambda t: estimate_cycles(env, wkl, hw, t),
               default=None)
    if best is None:
        needs = _sizes(env, wkl, hw, GroupConv2DTiling(), acc_operands)
        limits = (env.INP_BUFF_DEPTH, env.WGT_BUFF_DEPTH, env.ACC_BUFF_DEPTH, kernel_uop_budget(env))
        names = ("INP buffer elements", "WGT buffer elements", "ACC buffer elements", "GEMM kernel uops")
        over = [f"{n} {need} > {lim}" for n, need, lim in zip(names, needs, limits) if need > lim]
        raise VTACompileError(f"group_conv2d {wkl}: no tiling fits the on-chip buffers of {env.MODEL}: the smallest "
                              f"tile needs {', '.join(over or ['more than fits'])}")
    return best


# ------------------------------------------------------------------------------------------------ schedule
def schedule_group_conv2d_packed(func, tiling: GroupConv2DTiling | None = None,
                                 wkl: GroupConv2DWorkload | None = None, env: Environment | None = None,
                                 mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a group_conv2d_packed function (with its element-wise epilogue and final int8 cast).

    ``mock``: parts to skip ("dma", "alu", "gemm"), for GEMM-only or ALU-only measurements.
    """
    env = env or get_env()
    dma_copy, alu, gemm, gemm_reset = mock_names(env, mock)
    sch = s_tir.Schedule(func)
    conv, producers, ewise, out = find_blocks(sch, "group_conv2d")
    kernel_shape = [int(x) for x in sch.get(conv).reads[1].source.ty.shape]
    b, co, h, w, b_i, c_i, ko, dy, dx, k_i = sch.get_loops(conv)
    nb, cob, oh, ow, cib_g = (int(sch.get(lp).extent) for lp in (b, co, h, w, ko))
    data_cib = int(sch.get(conv).reads[0].source.ty.shape[1])
    if kernel_shape[1] != cib_g or data_cib % cib_g:
        raise VTACompileError("schedule_group_conv2d_packed: the function is not a group_conv2d_packed layer")
    groups = data_cib // cib_g
    hw = _HwGroups(groups, cib_g, cob // groups, False)
    if tiling is None:
        if wkl is None:
            raise VTACompileError("schedule_group_conv2d_packed: give a tiling or the workload to choose one")
        tiling = group_conv2d_tiling(wkl, env)
    t = tiling
    reason = _check_tiling(hw, t)
    if reason is None and (oh % t.tile_h or ow % t.tile_w):
        reason = f"{t.tile_h}x{t.tile_w} tiles do not divide the {oh}x{ow} output"
    if reason:
        raise VTACompileError(f"group_conv2d tiling {t}: {reason}")
    sch.set_scope(conv, 0, env.acc_scope)
    for blk in ewise:
        sch.set_scope(blk, 0, env.acc_scope)

    g, c = sch.split(co, [groups, hw.cob_g])
    g_thr, c_thr = (t.oc_nthread, 1) if t.tile_g > 1 else (1, t.oc_nthread)
    g_o, g_v, g_i = sch.split(g, [groups // t.tile_g, g_thr, t.tile_g // g_thr])
    c_o, c_v, c_i2 = sch.split(c, [hw.cob_g // t.tile_co, c_thr, t.tile_co // c_thr])
    h_o, h_v, h_i = sch.split(h, [oh // t.tile_h, t.h_nthread, t.tile_h // t.h_nthread])
    w_o, w_i = sch.split(w, [ow // t.tile_w, t.tile_w])
    ko_o, ko_v, ko_i = sch.split(ko, [cib_g // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
    sch.reorder(g_o, c_o, b, h_o, w_o, g_v, c_v, h_v, ko_o, ko_v, g_i, c_i2, h_i, w_i, ko_i, dy, dx, b_i, c_i, k_i)
    if t.ko_nthread > 1:
        sch.annotate(ko_v, PIPELINE, 1)
    if g_thr > 1:
        sch.bind(g_v, "vthread.x")
    if c_thr > 1:
        sch.bind(c_v, "vthread.x")
    if t.h_nthread > 1:
        sch.bind(h_v, "vthread.y")

    attach_epilogue(sch, env, func, ewise, out, h_v, dma_copy)
    inp = sch.cache_read(conv, 0, env.inp_scope)
    sch.compute_at(inp, ko_v, preserve_unit_loops=True)
    for p in producers:
        sch.compute_inline(p)
    wgt = sch.cache_read(conv, 1, env.wgt_scope)
    sch.compute_at(wgt, c_o if t.wgt_at == "co" else ko_v, preserve_unit_loops=True)

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


def schedule_depthwise_conv2d_packed(func, tiling: GroupConv2DTiling | None = None,
                                     wkl: GroupConv2DWorkload | None = None, env: Environment | None = None,
                                     mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a ``depthwise_conv2d_layer`` (it is a block-diagonal group convolution)."""
    return schedule_group_conv2d_packed(func, tiling, wkl, env, mock)


def depthwise_conv2d_tiling(wkl: GroupConv2DWorkload, env: Environment | None = None,
                            acc_operands: int = 1, tuned: bool = True) -> GroupConv2DTiling:
    return group_conv2d_tiling(wkl, env, acc_operands, tuned)
