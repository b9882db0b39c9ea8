"""``conv2d``: 2-D convolution in VTA's packed layouts, its schedule and its tiling space.

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
``conv2d_tiling`` takes the best measured tiling, else the cost model's choice among every tiling of
the knobs (``vta_compiler.top.conv_family``).

In a network, a first layer with few input channels (ResNet's 7x7 conv on 3 channels uses 3 of 16
input lanes) is *folded*: the kernel's columns move into the channels (``C x KW`` channels, a ``KH x 1``
kernel with stride 1 along W), computed by one host transform of the input image.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from tvm import relax, s_tir, te, topi
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment, get_env
from ..reference import conv2d_accumulators
from ..tiling import Knob, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from ..transform.vthread import ALTERNATE, PIPELINE
from . import conv_family as F
from . import packing as P
from .common import RESIDUAL_PLACES, Requant, Residual, WindowOutput, divisors, epilogue, find_blocks, mock_names


@dataclass(frozen=True)
class Conv2DWorkload(WindowOutput):
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
    #: a residual add fused into the epilogue (an int8 shortcut of the output's shape, see ``common.Residual``)
    residual: bool = False

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
    acc_nbuf: int = 1       # accumulator copies: 2 alternates consecutive tiles between two, so that one tile's
    #                         epilogue and stores run beside the next tile's GEMMs (see vta.alternate)


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


class Conv2D(Operator):
    """2-D convolution with one group (``relax.nn.conv2d``, ``groups=1``)."""

    kind = "conv2d"
    takes_requant = True
    workload_type = Conv2DWorkload
    tiling_type = Conv2DTiling
    relax_ops = ("relax.nn.conv2d",)
    options = {"residual": RESIDUAL_PLACES}

    def describe(self, w) -> str:
        return (f"conv2d {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else "") +
                (" +residual" if w.residual else ""))

    def kernel_name(self, w) -> str:
        return f"{w.height}x{w.width}_{w.in_filter}to{w.out_filter}_k{w.hkernel}x{w.wkernel}_s{w.hstride}" + \
            ("_res" if w.residual else "")

    def workload_to_json(self, wkl) -> dict:
        d = super().workload_to_json(wkl)
        if not d["residual"]:           # a plain convolution is recorded as before the field existed
            del d["residual"]
        return d

    def residual_workload(self, wkl, env: Environment):
        return F.residual_refusal(env) or dataclasses.replace(wkl, residual=True)

    def blocks(self, wkl, env: Environment) -> tuple[int, int]:
        """(input, output) channel blocks; input channels are zero-padded to the block."""
        return padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN, wkl.out_filter // env.BLOCK_OUT

    def issued_macs(self, wkl, env: Environment) -> int:
        return wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * \
            padded_channels(wkl.in_filter, env.BLOCK_IN) * wkl.hkernel * wkl.wkernel

    def shape_refusal(self, wkl, env: Environment) -> str | None:
        if wkl.batch % env.BATCH or wkl.out_filter % env.BLOCK_OUT:
            return (f"batch {wkl.batch} and output channels {wkl.out_filter} must be multiples of BATCH={env.BATCH} "
                    f"and BLOCK_OUT={env.BLOCK_OUT}")
        if wkl.residual:
            return F.residual_refusal(env)
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=8, bias=True, clip=(0, 127), channel_shift=False, residual=None,
                requant=None):
        env = env or get_env()
        if residual is not None and not wkl.residual:
            wkl = dataclasses.replace(wkl, residual=True)
        if wkl.residual and residual is None:
            residual = Residual()
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"conv2d: {reason}")
        bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
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
        multiplier = None
        if requant is not None and requant.multiplier is None:
            multiplier = te.placeholder(per_channel, env.acc_dtype, name="multiplier")
            args.append(multiplier)
        shortcut = None
        if residual is not None:
            shortcut = te.placeholder(conv.shape, env.out_dtype, name="shortcut")
            args.append(shortcut)
        _, res = epilogue(env, conv, b, shift, clip, lambda i: (i[0], i[1], 0, 0, i[4], i[5]), residual=residual,
                          shortcut=shortcut, requant=requant, multiplier=multiplier)
        return with_workload(te.create_prim_func(args + [res]), self, wkl)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env):
        cib, cob = self.blocks(wkl, env)
        return [Knob("tile_co", tuple(divisors(cob))), Knob("tile_h", tuple(divisors(wkl.out_height))),
                Knob("tile_w", tuple(divisors(wkl.out_width))), Knob("tile_ci", tuple(divisors(cib))),
                Knob("oc_nthread", F.THREADS), Knob("h_nthread", F.THREADS), Knob("wgt_at", F.WGT_AT),
                Knob("ko_nthread", F.CHUNKS_IN_FLIGHT), Knob("acc_nbuf", F.ACC_COPIES)]

    def check(self, wkl, t, env):
        cib, cob = self.blocks(wkl, env)
        return check_tiling(t, cob, wkl.out_height, wkl.out_width, cib, wkl.batch // env.BATCH)

    def shape(self, wkl, t, env: Environment) -> F.TileShape:
        cib, cob = self.blocks(wkl, env)
        kh, kw = wkl.hkernel, wkl.wkernel
        th = t.tile_h // t.h_nthread
        th_in, tw_in = (th - 1) * wkl.hstride + kh, (t.tile_w - 1) * wkl.wstride + kw
        loops = (cob // t.tile_co, wkl.batch // env.BATCH, wkl.out_height // t.tile_h, wkl.out_width // t.tile_w)
        return F.TileShape(
            inp_chunk=t.tile_ci * th_in * tw_in * t.h_nthread, wgt_chunk=t.tile_co * t.tile_ci * kh * kw,
            wgt_tile=t.tile_co * cib * kh * kw, wgt_layer=cob * cib * kh * kw,
            gemm_chunk=t.tile_co * t.tile_h * t.tile_w * t.tile_ci * kh * kw,
            acc_elems=t.tile_co * t.tile_h * t.tile_w, acc_per_operand=t.tile_co, chunks=cib // t.tile_ci,
            out_tiles=loops[0], spatial_tiles=loops[1] * loops[2] * loops[3], oc_threads=t.oc_nthread,
            row_threads=t.h_nthread, chunks_in_flight=t.ko_nthread, wgt_at_co=t.wgt_at == "co",
            uops=F.kernel_uops([t.tile_co // t.oc_nthread, th, t.tile_w, t.tile_ci, kh, kw]),
            inp_loads=t.tile_ci, store_insns=t.tile_co // t.oc_nthread, run_tiles=F.innermost(loops),
            shortcut=wkl.residual, acc_copies=t.acc_nbuf,
            gemm_run=F.uop_run([t.tile_co // t.oc_nthread, th, t.tile_w, t.tile_ci, kh, kw], 3),
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
        if tiling is None:
            wkl = wkl or self.workload_of(func)
            if wkl is None:
                raise VTACompileError("schedule_conv2d_packed: give a tiling, or a function made by conv2d_layer (it "
                                      "records its workload)")
            tiling = self.tiling(wkl, env)
        t = tiling
        sch = s_tir.Schedule(func)
        conv, producers, ewise, out = find_blocks(sch, "conv2d")
        sch.set_scope(conv, 0, env.acc_scope)
        for b in ewise:
            sch.set_scope(b, 0, env.acc_scope)

        b, co, h, w, b_i, c_i, ko, dy, dx, k_i = sch.get_loops(conv)
        nb, cob, oh, ow, cib = (int(sch.get(lp).extent) for lp in (b, co, h, w, ko))
        reason = check_tiling(t, cob, oh, ow, cib, nb)
        if reason:
            raise VTACompileError(f"conv2d tiling {t}: {reason}")
        co_o, co_v, co_i = sch.split(co, [cob // t.tile_co, t.oc_nthread, t.tile_co // t.oc_nthread])
        h_o, h_v, h_i = sch.split(h, [oh // t.tile_h, t.h_nthread, t.tile_h // t.h_nthread])
        w_o, w_i = sch.split(w, [ow // t.tile_w, t.tile_w])
        ko_o, ko_v, ko_i = sch.split(ko, [cib // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
        tiles = [co_o, b, h_o, w_o]
        wgt_loop = co_o
        if t.acc_nbuf > 1:          # the innermost tile loop with more than one iteration, in pairs of tiles
            extents = (cob // t.tile_co, nb, oh // t.tile_h, ow // t.tile_w)
            at = F.alternated_loop(extents)
            outer, alt = sch.split(tiles[at], [extents[at] // t.acc_nbuf, t.acc_nbuf])
            tiles[at:at + 1] = [outer]
            tiles.append(alt)
            sch.annotate(alt, ALTERNATE, 1)
            if at == 0:             # consecutive tiles are output-channel tiles: each loads its own weights
                wgt_loop = alt
        sch.reorder(*tiles, co_v, h_v, ko_o, ko_v, co_i, h_i, w_i, ko_i, dy, dx, b_i, c_i, k_i)
        if t.ko_nthread > 1:
            sch.annotate(ko_v, PIPELINE, 1)
        attach = h_v
        if t.oc_nthread > 1:
            sch.bind(co_v, "vthread.x")
            attach = co_v
        if t.h_nthread > 1:
            sch.bind(h_v, "vthread.y")
            attach = h_v
        F.finish_schedule(sch, env, func, conv, producers, ewise, out, attach=attach, ko_o=ko_o, ko_v=ko_v,
                          wgt_at=wgt_loop if t.wgt_at == "co" else ko_v, lanes=(b_i, c_i), names=names)
        return sch

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        return P.pack_oihw(P.pad_channels(P.pad_channels(w, 0, env.BLOCK_OUT), 1, env.BLOCK_IN), env.BLOCK_OUT,
                           env.BLOCK_IN)

    def pack_channels(self, v, wkl, env):
        v = np.pad(np.asarray(v, np.int32), (0, wkl.out_filter - len(v)))
        return P.pack_bias_conv(v, wkl.batch, env.BATCH, env.BLOCK_OUT)

    def data(self, wkl, env, acc_operands, seed=0):
        rng = np.random.default_rng(seed)
        x, w, b = F.random_layer(rng, wkl, (wkl.out_filter, wkl.in_filter, wkl.hkernel, wkl.wkernel))
        acc = conv2d_accumulators(x, w, b, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad))
        return F.conv_layer_data(self, wkl, env, acc_operands, rng, x, w, b, acc, self.issued_macs(wkl, env))

    def unpack(self, out):
        return P.unpack_nchw(out)

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        return is_op("relax.nn.conv2d")(wildcard(), is_const()).has_attr({"groups": 1})

    def host_macs(self, out_shape, arg_shapes):
        return int(np.prod(out_shape) * np.prod(arg_shapes[1][1:]))

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        reason = F.layout_refusal(attrs, ("NCHW", "OIHW")) or F.window_refusal(attrs)
        if reason:
            return reason
        n, c, h, w = x_shape
        o, _, kh, kw = weight.shape
        (sh, sw), (pt, pl, _, _) = tuple(int(s) for s in attrs.strides), F.pads(attrs)
        o = F.ceil_to(o, env.BLOCK_OUT)
        bi = env.BLOCK_IN
        if c < bi and kw > 1 and c * kw / F.ceil_to(c * kw, bi) > c / F.ceil_to(c, bi):
            ow = (w + 2 * pl - kw) // sw + 1      # fold: kernel columns into channels
            folded = np.ascontiguousarray(weight.transpose(0, 1, 3, 2)).reshape(weight.shape[0], c * kw, kh, 1)
            return Offload(self, Conv2DWorkload(n, h, ow, c * kw, o, kh, 1, pt, 0, sh, 1), folded,
                           prepare=_folding(c, w, kw, sw, pl, ow), input_shape=(n, c * kw, h, ow),
                           note="kernel columns folded into channels")
        return Offload(self, Conv2DWorkload(n, h, w, c, o, kh, kw, pt, pl, sh, sw), weight)


def _folding(c: int, w: int, kw: int, sw: int, pl: int, ow: int):
    """The host transform of a folded layer's plain input: its kernel columns moved into the channels."""
    def prepare(x, emit, name: str, shape: tuple[int, ...]):
        n, _, h, _ = shape
        if pl:
            x = emit(relax.op.nn.pad(x, [0, 0, 0, 0, 0, 0, pl, pl]), f"{name}_padw")
        if sw > 1 and kw % sw == 0:     # a long kernel, strided by a divisor of it (an STFT: 256 by 128)
            return _folding_by_blocks(x, emit, name, (n, c, h), kw, sw, ow)
        cols = [emit(relax.op.expand_dims(relax.op.strided_slice(
            x, axes=[3], begin=[j], end=[j + sw * (ow - 1) + 1], strides=[sw]), 2)) for j in range(kw)]
        x = emit(relax.op.concat(cols, axis=2), f"{name}_cols")
        return emit(relax.op.reshape(x, (n, c * kw, h, ow)), name)
    return prepare


def _folding_by_blocks(x, emit, name: str, nch: tuple[int, int, int], kw: int, sw: int, ow: int):
    """The folding of a kernel ``kw`` wide at a stride ``sw`` that divides it, with ``kw / sw`` slices instead of
    ``kw``: column ``o`` of tap ``j = a * sw + r`` is the row's element ``(o + a) * sw + r``, so the row cut in
    blocks of ``sw`` gives tap block ``a`` as blocks ``a .. a + ow - 1``."""
    n, c, h = nch
    q = kw // sw
    blocks = emit(relax.op.reshape(relax.op.strided_slice(x, axes=[3], begin=[0], end=[(ow + q - 1) * sw]),
                                   (n, c, h, ow + q - 1, sw)), f"{name}_blocks")
    taps = [emit(relax.op.expand_dims(relax.op.strided_slice(blocks, axes=[3], begin=[a], end=[a + ow]), 2))
            for a in range(q)]
    x = emit(relax.op.concat(taps, axis=2), f"{name}_taps")                # (n, c, q, h, ow, sw)
    x = emit(relax.op.permute_dims(x, [0, 1, 2, 5, 3, 4]), f"{name}_cols")    # (n, c, q, sw, h, ow)
    return emit(relax.op.reshape(x, (n, c * kw, h, ow)), name)


def check_tiling(t, cob: int, oh: int, ow: int, cib: int, nb: int = 1) -> str | None:
    """Why the conv2d schedule refuses tiling ``t`` of a (cob, oh, ow, cib)-block output (``nb`` batch blocks),
    or None."""
    for name, n, tl in (("output channel blocks", cob, t.tile_co), ("output rows", oh, t.tile_h),
                        ("output columns", ow, t.tile_w), ("input channel blocks", cib, t.tile_ci)):
        if tl < 1 or n % tl:
            return f"{tl} does not divide the {n} {name}"
    if t.oc_nthread < 1 or t.h_nthread < 1 or t.ko_nthread < 1 or t.tile_co % t.oc_nthread or \
            t.tile_h % t.h_nthread or (cib // t.tile_ci) % t.ko_nthread:
        return "the virtual threads must divide the tile"
    if t.wgt_at not in F.WGT_AT:
        return f"wgt_at must be 'ko' or 'co', not {t.wgt_at!r}"
    return F.alternation_refusal((cob // t.tile_co, nb, oh // t.tile_h, ow // t.tile_w), t.acc_nbuf)


CONV2D = register(Conv2D())


# ------------------------------------------------------------------------------------------------ public names
def conv2d_layer(wkl: Conv2DWorkload, env: Environment | None = None, shift: int = 8, bias: bool = True,
                 clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False,
                 residual: Residual | None = None, requant: Requant | None = None):
    """A whole layer as a PrimFunc: ``res = int8(clip((conv2d(data, kernel) + bias) >> shift))``.

    Parameters of the function: data, kernel, [bias], [shift], [multiplier], [shortcut], res in packed layouts;
    input channels are rounded up to the block (C1's 3 channels become BLOCK_IN, zero-padded by the caller). With
    ``channel_shift`` the shift is a per-output-channel int32 tensor shaped like the bias. With a ``residual``
    (:class:`~vta_compiler.top.common.Residual`; the layer's workload gets ``residual=True``) an int8 ``shortcut``
    shaped like ``res`` is added in the epilogue; it needs the ISA extension ``acc_8bit``. With a ``requant``
    (:class:`~vta_compiler.top.common.Requant`) a fixed-point multiply follows the shift (ALU MUL, the ISA
    extension ``alu_mul``): by its immediate multiplier, or without one by a per-channel ``multiplier`` tensor
    shaped like the bias.
    """
    return CONV2D.compute(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift,
                          residual=residual, requant=requant)


def conv2d_tiling(wkl: Conv2DWorkload, env: Environment | None = None, acc_operands: int = 1,
                  tuned: bool = True) -> Conv2DTiling:
    """The tiling of a workload: the best measured one (``vta_compiler.autotune`` records: the active
    ``apply_history_best``, else the records shipped with the package) when ``tuned`` and there is one,
    else the cheapest (by ``estimate_cycles``) of every tiling of the knobs that fits the on-chip buffers
    and the uop budget (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and
    a shift)."""
    return CONV2D.tiling(wkl, env, acc_operands, tuned)


def schedule_conv2d_packed(func, tiling: Conv2DTiling | None = None, wkl: Conv2DWorkload | None = None,
                           env: Environment | None = None, mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a conv2d_packed function (with any element-wise epilogue and a final int8 cast); without a
    ``tiling``, the workload's (read from a function made by ``conv2d_layer``; ``wkl`` is not needed).

    ``mock``: parts to skip ("dma", "alu", "gemm"), for GEMM-only or ALU-only measurements.
    """
    return CONV2D.schedule(func, tiling, env, mock, wkl=wkl)


def fits(wkl: Conv2DWorkload, t: Conv2DTiling, env: Environment | None = None, acc_operands: int = 1) -> bool:
    """Whether tiling ``t`` fits the on-chip buffers and the uop budget."""
    return CONV2D.fits(wkl, t, env or get_env(), acc_operands)


def estimate_cycles(wkl: Conv2DWorkload, t: Conv2DTiling, env: Environment | None = None) -> float:
    """The cost model's cycles of tiling ``t``."""
    return CONV2D.estimate(wkl, t, env or get_env())
