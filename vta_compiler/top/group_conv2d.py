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
"group_conv2d") if there is one, else the cost model's choice (``vta_compiler.top.conv_family``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, topi
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment, get_env
from ..reference import group_conv2d_accumulate, plus_bias
from ..tiling import Knob, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from ..transform.vthread import PIPELINE
from . import conv_family as F
from . import packing as P
from .common import WindowOutput, divisors, epilogue, find_blocks, mock_names


@dataclass(frozen=True)
class GroupConv2DWorkload(WindowOutput):
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
class HwGroups:
    """How a workload maps onto VTA: hardware groups and channel blocks per hardware group."""
    groups: int
    cib_g: int              # input channel blocks per hardware group
    cob_g: int              # output channel blocks per hardware group
    block_diagonal: bool    # several groups share one block (their weights on the tile's diagonal)


#: placement note of a depthwise layer on VTA / kept on the CPU (graph_pack(..., depthwise="vta" | "cpu")). On VTA
#: by default: the data stays packed (no layout change around the layer) and, measured on MobileNet v1 (224x224,
#: `python -m bench --only depthwise --tsim`), its 13 depthwise layers take 21 ms on VTA at 100 MHz (6 ms at
#: 333 MHz) against 16.5 ms of a server CPU for the CPU path (TVM's default lowering plus 26 layout changes); a
#: board's Cortex-A9 is several times slower than that CPU.
DEPTHWISE_NOTE = {
    "vta": "block-diagonal weight tiles (1/16 of the issued MACs are useful), the data stays packed; "
           "graph_pack(depthwise='cpu') runs it on the CPU",
    "cpu": "depthwise convolution kept on the CPU by graph_pack(depthwise='cpu') (with a layout change before "
           "and after it)",
}
DEPTHWISE_PLACES = tuple(DEPTHWISE_NOTE)


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


def pack_group_conv2d_kernel(w: np.ndarray, wkl: GroupConv2DWorkload, env: Environment | None = None) -> np.ndarray:
    """A group-conv kernel ``(O, I/groups, KH, KW)`` -> ``(O/BO, CIG/BI, KH, KW, BO, BI)``.

    With whole blocks per group this is conv2d's packing of the per-group kernel; with fewer channels
    per group than a block, each 16-channel block becomes one hardware group whose tile holds the
    block's groups on its diagonal (zeros elsewhere).
    """
    env = env or get_env()
    block_out, block_in, groups = env.BLOCK_OUT, env.BLOCK_IN, wkl.groups
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


def pack_depthwise_kernel(w: np.ndarray, wkl: GroupConv2DWorkload, env: Environment | None = None) -> np.ndarray:
    """A depthwise kernel ``(C, 1, KH, KW)`` -> block-diagonal tiles ``(C/16, 1, KH, KW, 16, 16)``."""
    if w.ndim != 4 or w.shape[1] != 1 or not wkl.is_depthwise:
        raise ValueError(f"a depthwise kernel has shape (C, 1, KH, KW) and a depthwise workload; got {w.shape} and "
                         f"{wkl}")
    return pack_group_conv2d_kernel(w, wkl, env)


class GroupConv2D(Operator):
    """Grouped and depthwise 2-D convolution (``relax.nn.conv2d`` with ``groups > 1``): whole channel blocks per
    group, or block-diagonal weight tiles (see the module docstring)."""

    kind = "group_conv2d"
    workload_type = GroupConv2DWorkload
    tiling_type = GroupConv2DTiling
    relax_ops = ("relax.nn.conv2d",)
    options = {"depthwise": DEPTHWISE_PLACES}

    def describe(self, w) -> str:
        what = "depthwise" if w.is_depthwise else f"group_conv2d g{w.groups}"
        return (f"{what} {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else ""))

    def label(self, wkl) -> str:
        return "depthwise_conv2d" if wkl.is_depthwise else "group_conv2d"

    def kernel_name(self, w) -> str:
        return (f"{w.height}x{w.width}_{w.in_filter}to{w.out_filter}_k{w.hkernel}x{w.wkernel}_s{w.hstride}"
                + ("" if w.is_depthwise else f"_g{w.groups}"))

    def hw_groups(self, wkl, env: Environment) -> HwGroups:
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"group_conv2d {wkl}: {reason}")
        bi, bo = env.BLOCK_IN, env.BLOCK_OUT
        cpg_in, cpg_out = wkl.in_per_group, wkl.out_per_group
        if cpg_in % bi == 0 and cpg_out % bo == 0:
            return HwGroups(wkl.groups, cpg_in // bi, cpg_out // bo, False)
        return HwGroups(wkl.in_filter // bi, 1, 1, True)

    def issued_macs(self, wkl, env):
        """A block-diagonal tile issues a whole block of input channels per output channel."""
        return wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * max(wkl.in_per_group, env.BLOCK_IN) * \
            wkl.hkernel * wkl.wkernel

    def shape_refusal(self, wkl, env):
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
                return (f"{wkl.in_filter} channels are not a whole number of {bi}-channel blocks (block-diagonal "
                        "weights need whole blocks)")
            return None
        return (f"{cpg_in} input and {cpg_out} output channels per group: VTA's GEMM needs whole {bi}-channel "
                f"blocks per group, or the same divisor of {bi} for input and output channels (block-diagonal "
                "weights, e.g. depthwise)")

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=8, bias=True, clip=(0, 127), channel_shift=False):
        env = env or get_env()
        hw = self.hw_groups(wkl, env)
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
        return with_workload(te.create_prim_func(args + [res]), self, wkl)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env):
        hw = self.hw_groups(wkl, env)
        return [Knob("tile_g", tuple(divisors(hw.groups))), Knob("tile_co", tuple(divisors(hw.cob_g))),
                Knob("tile_h", tuple(divisors(wkl.out_height))), Knob("tile_w", tuple(divisors(wkl.out_width))),
                Knob("tile_ci", tuple(divisors(hw.cib_g))), Knob("oc_nthread", F.THREADS),
                Knob("h_nthread", F.THREADS), Knob("wgt_at", F.WGT_AT), Knob("ko_nthread", F.CHUNKS_IN_FLIGHT)]

    def check(self, wkl, t, env):
        reason = check_tiling(self.hw_groups(wkl, env), t)
        if reason is None and (wkl.out_height % t.tile_h or wkl.out_width % t.tile_w):
            reason = f"{t.tile_h}x{t.tile_w} tiles do not divide the {wkl.out_height}x{wkl.out_width} output"
        return reason

    def shape(self, wkl, t, env) -> F.TileShape:
        hw = self.hw_groups(wkl, env)
        kh, kw = wkl.hkernel, wkl.wkernel
        th = t.tile_h // t.h_nthread
        th_in, tw_in = (th - 1) * wkl.hstride + kh, (t.tile_w - 1) * wkl.wstride + kw
        g_loop, c_loop = (t.tile_g // t.oc_nthread, t.tile_co) if t.tile_g > 1 else (1, t.tile_co // t.oc_nthread)
        loops = (hw.groups // t.tile_g, hw.cob_g // t.tile_co, wkl.batch // env.BATCH, wkl.out_height // t.tile_h,
                 wkl.out_width // t.tile_w)
        return F.TileShape(
            inp_chunk=t.tile_g * t.tile_ci * th_in * tw_in * t.h_nthread,
            wgt_chunk=t.tile_g * t.tile_co * t.tile_ci * kh * kw, wgt_tile=t.tile_g * t.tile_co * hw.cib_g * kh * kw,
            wgt_layer=hw.groups * hw.cob_g * hw.cib_g * kh * kw,
            gemm_chunk=t.tile_g * t.tile_co * t.tile_h * t.tile_w * t.tile_ci * kh * kw,
            acc_elems=t.tile_g * t.tile_co * t.tile_h * t.tile_w, acc_per_operand=t.tile_g * t.tile_co,
            chunks=hw.cib_g // t.tile_ci, out_tiles=loops[0] * loops[1], spatial_tiles=loops[2] * loops[3] * loops[4],
            oc_threads=t.oc_nthread, row_threads=t.h_nthread, chunks_in_flight=t.ko_nthread,
            wgt_at_co=t.wgt_at == "co", uops=F.kernel_uops([g_loop, c_loop, th, t.tile_w, t.tile_ci, kh, kw]),
            # threads over groups (tile_g > 1) load their groups' own input channels
            inp_loads=g_loop * t.tile_ci, inp_private=t.tile_g > 1, store_insns=g_loop * c_loop,
            run_tiles=F.innermost(loops),
            inp_padding=F.padding_fraction((wkl.out_height // th, -wkl.hpad, th * wkl.hstride, th_in, wkl.height),
                                           (wkl.out_width // t.tile_w, -wkl.wpad, t.tile_w * wkl.wstride, tw_in,
                                            wkl.width)))

    def needs(self, wkl, t, env, acc_operands=1):
        return self.shape(wkl, t, env).needs(acc_operands)

    def estimate(self, wkl, t, env):
        return F.estimate_cycles(self.shape(wkl, t, env), env)

    # ---------------------------------------------------------------------------------------- schedule
    def schedule(self, func, tiling=None, env=None, mock=(), wkl=None):
        env = env or get_env()
        names = mock_names(env, mock)
        sch = s_tir.Schedule(func)
        conv, producers, ewise, out = find_blocks(sch, "group_conv2d")
        kernel_shape = [int(x) for x in sch.get(conv).reads[1].source.ty.shape]
        b, co, h, w, b_i, c_i, ko, dy, dx, k_i = sch.get_loops(conv)
        nb, cob, oh, ow, cib_g = (int(sch.get(lp).extent) for lp in (b, co, h, w, ko))
        data_cib = int(sch.get(conv).reads[0].source.ty.shape[1])
        if kernel_shape[1] != cib_g or data_cib % cib_g:
            raise VTACompileError("schedule_group_conv2d_packed: the function is not a group_conv2d_packed layer")
        groups = data_cib // cib_g
        hw = HwGroups(groups, cib_g, cob // groups, False)
        if tiling is None:
            wkl = wkl or self.workload_of(func)
            if wkl is None:
                raise VTACompileError("schedule_group_conv2d_packed: give a tiling, or a function made by "
                                      "group_conv2d_layer (it records its workload)")
            tiling = self.tiling(wkl, env)
        t = tiling
        reason = check_tiling(hw, t)
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
        sch.reorder(g_o, c_o, b, h_o, w_o, g_v, c_v, h_v, ko_o, ko_v, g_i, c_i2, h_i, w_i, ko_i, dy, dx, b_i, c_i,
                    k_i)
        if t.ko_nthread > 1:
            sch.annotate(ko_v, PIPELINE, 1)
        if g_thr > 1:
            sch.bind(g_v, "vthread.x")
        if c_thr > 1:
            sch.bind(c_v, "vthread.x")
        if t.h_nthread > 1:
            sch.bind(h_v, "vthread.y")
        F.finish_schedule(sch, env, func, conv, producers, ewise, out, attach=h_v, ko_o=ko_o, ko_v=ko_v,
                          wgt_at=c_o if t.wgt_at == "co" else ko_v, lanes=(b_i, c_i), names=names)
        return sch

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        w = np.pad(w, ((0, wkl.out_filter - w.shape[0]), (0, 0), (0, 0), (0, 0)))    # padded groups: zero weights
        return pack_group_conv2d_kernel(w, wkl, env)

    def pack_channels(self, v, wkl, env):
        v = np.pad(np.asarray(v, np.int32), (0, wkl.out_filter - len(v)))
        return P.pack_bias_conv(v, wkl.batch, env.BATCH, env.BLOCK_OUT)

    def data(self, wkl, env, acc_operands, seed=0):
        rng = np.random.default_rng(seed)
        x, w, b = F.random_layer(rng, wkl, (wkl.out_filter, wkl.in_per_group, wkl.hkernel, wkl.wkernel))
        # the reference is a direct grouped convolution of the unpacked tensors (no blocks, no diagonal tiles)
        acc = plus_bias(group_conv2d_accumulate(x, w, wkl.groups, (wkl.hstride, wkl.wstride),
                                                (wkl.hpad, wkl.wpad)), b)
        return F.conv_layer_data(self, wkl, env, acc_operands, rng, x, w, b, acc, self.issued_macs(wkl, env))

    def unpack(self, out):
        return P.unpack_nchw(out)

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        return is_op("relax.nn.conv2d")(wildcard(), is_const())        # groups > 1 (conv2d takes groups == 1)

    def host_macs(self, out_shape, arg_shapes):
        return int(np.prod(out_shape) * np.prod(arg_shapes[1][1:]))

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        reason = F.layout_refusal(attrs, ("NCHW", "OIHW"))
        if reason:
            return reason
        groups = int(attrs.groups)
        if groups == 1:
            return None                 # conv2d's
        depthwise = groups == x_shape[1]
        if depthwise and options.get("depthwise", "vta") == "cpu":
            return DEPTHWISE_NOTE["cpu"]
        reason = F.window_refusal(attrs)
        if reason:
            return reason
        n, c, h, w = x_shape
        kh, kw = weight.shape[2:]
        (sh, sw), (pt, pl, _, _) = tuple(int(s) for s in attrs.strides), F.pads(attrs)
        o, g = out_shape[1], groups
        cpg = c // g
        bi, bo = env.BLOCK_IN, env.BLOCK_OUT
        if c % bi and cpg == o // g and bi == bo and bi % cpg == 0:     # pad with whole groups of zero weights
            c = o = F.ceil_to(c, bi)
            g = c // cpg
        return Offload(self, GroupConv2DWorkload(n, h, w, c, o, g, kh, kw, pt, pl, sh, sw), weight,
                       params={"depthwise": depthwise}, note=DEPTHWISE_NOTE["vta"] if depthwise else "")

    def placement_refusal(self, off, env, acc_operands):
        reason = self.refusal(off.workload, env, acc_operands)
        what = "depthwise" if off.params.get("depthwise") else "group"
        return f"VTA cannot run this {what} convolution: {reason}" if reason else None


def check_tiling(hw: HwGroups, t: GroupConv2DTiling) -> str | None:
    """Why the group_conv2d schedule refuses tiling ``t`` of hardware groups ``hw``, or None."""
    if min(t.tile_g, t.tile_co, t.tile_ci, t.tile_h, t.tile_w) < 1 or hw.groups % t.tile_g or hw.cob_g % t.tile_co \
            or hw.cib_g % t.tile_ci:
        return (f"the tile ({t.tile_g} groups, {t.tile_co} output and {t.tile_ci} input blocks per group) must "
                f"divide the {hw.groups} groups of {hw.cob_g} output and {hw.cib_g} input blocks")
    if t.tile_g > 1 and (t.tile_co != hw.cob_g or t.tile_ci != hw.cib_g):
        return "a tile of several groups must hold each group's channel blocks whole (tile_co, tile_ci)"
    oc_split = t.tile_g if t.tile_g > 1 else t.tile_co
    if min(t.oc_nthread, t.h_nthread, t.ko_nthread) < 1 or oc_split % t.oc_nthread or t.tile_h % t.h_nthread or \
            (hw.cib_g // t.tile_ci) % t.ko_nthread:
        return "the virtual threads must divide the tile"
    if t.wgt_at not in F.WGT_AT:
        return f"wgt_at must be 'ko' or 'co', not {t.wgt_at!r}"
    return None


GROUP_CONV2D = register(GroupConv2D())


# ------------------------------------------------------------------------------------------------ public names
def group_conv2d_supported(wkl: GroupConv2DWorkload, env: Environment | None = None,
                           acc_operands: int = 1) -> str | None:
    """None if VTA can run this group convolution, else the reason in one sentence (``acc_operands``
    as for ``group_conv2d_tiling``)."""
    return GROUP_CONV2D.refusal(wkl, env, acc_operands)


def depthwise_conv2d_supported(wkl: GroupConv2DWorkload, env: Environment | None = None,
                               acc_operands: int = 1) -> str | None:
    """None if VTA can run this depthwise convolution (block-diagonal weight tiles), else the reason."""
    if not wkl.is_depthwise:
        return (f"not a depthwise convolution ({wkl.groups} groups of {wkl.in_per_group} input and "
                f"{wkl.out_per_group} output channels)")
    return group_conv2d_supported(wkl, env, acc_operands)


def group_conv2d_layer(wkl: GroupConv2DWorkload, env: Environment | None = None, shift: int = 8, bias: bool = True,
                       clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A whole layer as a PrimFunc: ``res = int8(clip((group_conv2d(data, kernel) + bias) >> shift))``.

    Parameters: data ``(N/B, CI/BI, H, W, B, BI)``, kernel ``(CO/BO, CIG/BI, KH, KW, BO, BI)`` as made by
    ``pack_group_conv2d_kernel``, [bias ``(N/B, CO/BO, 1, 1, B, BO)``], [shift], res. With ``channel_shift``
    the shift is a per-output-channel int32 tensor shaped like the bias.
    """
    return GROUP_CONV2D.compute(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift)


def depthwise_conv2d_layer(wkl: GroupConv2DWorkload, env: Environment | None = None, shift: int = 8,
                           bias: bool = True, clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A depthwise layer (``wkl.groups`` == channels) as a PrimFunc; its kernel comes from
    ``pack_depthwise_kernel`` (block-diagonal 16x16 tiles)."""
    reason = depthwise_conv2d_supported(wkl, env, 1 + int(channel_shift))
    if reason:
        raise VTACompileError(f"depthwise_conv2d {wkl}: {reason}")
    return group_conv2d_layer(wkl, env, shift, bias, clip, channel_shift)


def group_conv2d_tiling(wkl: GroupConv2DWorkload, env: Environment | None = None,
                        acc_operands: int = 1, tuned: bool = True) -> GroupConv2DTiling:
    """The tiling of a workload: the best measured one (``vta_compiler.autotune`` records: the active
    ``apply_history_best``, else the records shipped with the package) when ``tuned`` and there is one,
    else the cost model's choice among every tiling of the knobs that fits the on-chip buffers and the uop
    budget (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and a shift)."""
    return GROUP_CONV2D.tiling(wkl, env, acc_operands, tuned)


depthwise_conv2d_tiling = group_conv2d_tiling


def schedule_group_conv2d_packed(func, tiling: GroupConv2DTiling | None = None,
                                 wkl: GroupConv2DWorkload | None = None, env: Environment | None = None,
                                 mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a group_conv2d_packed function (with its element-wise epilogue and final int8 cast); without a
    ``tiling``, the workload's (read from a function made by ``group_conv2d_layer``).

    ``mock``: parts to skip ("dma", "alu", "gemm"), for GEMM-only or ALU-only measurements.
    """
    return GROUP_CONV2D.schedule(func, tiling, env, mock, wkl=wkl)


schedule_depthwise_conv2d_packed = schedule_group_conv2d_packed


def candidate_tilings(wkl: GroupConv2DWorkload, env: Environment | None = None, acc_operands: int = 1):
    """Every legal tiling that fits the buffers and the uop budget."""
    return GROUP_CONV2D.legal(wkl, env or get_env(), acc_operands)
