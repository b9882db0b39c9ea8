"""``conv2d_transpose_packed``: transposed 2-D convolution in VTA's packed layouts, without the zeros.

Semantics (as PyTorch / Relax ``conv2d_transpose``, kernel ``(CI, CO, KH, KW)``): input pixel ``iy``
scatters into output rows ``iy*s - p + ky``; ``OH = (H-1)*s - 2p + KH + output_padding``.

The usual lowering convolves the input dilated by the stride (``s-1`` zeros between pixels) with
the flipped kernel; at stride 2 three GEMMs in four multiply zeros. Here the output is split into
its ``s*s`` *phases*: output row ``y = s*q + r`` receives input rows ``q + o(r) + t`` through kernel
rows ``ky = r + p - s*(o(r) + t)``, a stride-1 convolution per phase with a few taps, where ``o(r)``
is an affine function of the phase. The compute writes the output in its natural layout and
reads a *phase kernel* ``(CO/BO, CI/BI, s, s, TH, TW, BO, BI)`` (``pack_conv2d_transpose_kernel``:
zero where a phase has fewer taps), so every GEMM it describes is valid arithmetic; the schedule
then guards each GEMM with its tap's validity (a block predicate) and ``FoldUopLoop`` records only
the uops for which it holds: no GEMM is issued for a zero of the dilation, and ``gemm_counter``
shows it (at stride 2: a quarter of the dilated convolution's uops).

Output padding is supported (extra rows at the bottom/right, fed by zero padding of the input).
The output height and width must be multiples of the stride, so that a tile holds whole phases.
The schedule and its knobs are conv2d's (``Conv2DTiling``); tile rows and columns hold whole phases.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx, topi
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment, get_env
from ..reference import conv2d_transpose_accumulate, plus_bias
from ..tiling import Knob, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from ..transform.vthread import PIPELINE
from . import conv_family as F
from . import packing as P
from .common import divisors, epilogue, find_blocks, mock_names
from .conv2d import Conv2DTiling
from .conv2d import check_tiling as check_conv_tiling

#: conv2d_transpose uses conv2d's knobs; tile_h and tile_w (per thread) must be multiples of the stride.
Conv2DTransposeTiling = Conv2DTiling


@dataclass(frozen=True)
class Conv2DTransposeWorkload:
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
    hout_pad: int = 0
    wout_pad: int = 0

    @property
    def out_height(self) -> int:
        return (self.height - 1) * self.hstride - 2 * self.hpad + self.hkernel + self.hout_pad

    @property
    def out_width(self) -> int:
        return (self.width - 1) * self.wstride - 2 * self.wpad + self.wkernel + self.wout_pad

    @property
    def macs(self) -> int:
        """Useful MACs: every output pixel with each kernel tap of its phase (padding taps included, as conv2d)."""
        taps_y = sum(_phase(self.hkernel, self.hpad, self.hstride).taps(r) for r in range(self.hstride))
        taps_x = sum(_phase(self.wkernel, self.wpad, self.wstride).taps(r) for r in range(self.wstride))
        return self.batch * self.in_filter * self.out_filter * (self.out_height // self.hstride) * taps_y * \
            (self.out_width // self.wstride) * taps_x

    @property
    def dilated_macs(self) -> int:
        """MACs of the equivalent convolution over the stride-dilated input (zeros included)."""
        return self.batch * self.in_filter * self.out_filter * self.out_height * self.out_width * self.hkernel * \
            self.wkernel


#: DCGAN generator layers (spec 5.9): (H, W, CI, CO, K, pad, stride, output padding), and a U-Net
#: decoder up-sampling layer (kernel 3, stride 2, output padding 1).
DCGAN = {
    "CT1": Conv2DTransposeWorkload(1, 4, 4, 1024, 512, 4, 4, 1, 1, 2, 2),
    "CT2": Conv2DTransposeWorkload(1, 8, 8, 512, 256, 4, 4, 1, 1, 2, 2),
    "CT3": Conv2DTransposeWorkload(1, 16, 16, 256, 128, 4, 4, 1, 1, 2, 2),
}
UNET_DECODER = {
    "UP1": Conv2DTransposeWorkload(1, 28, 28, 128, 64, 3, 3, 1, 1, 2, 2, 1, 1),
}


@dataclass(frozen=True)
class _Phase:
    """One dimension's phase split: input offset ``o(r) = first + slope*r``, ``window`` taps per phase."""
    kernel: int
    pad: int
    stride: int
    first: int
    slope: int
    window: int

    def offset(self, r):
        return self.first + self.slope * r

    def tap(self, r, t):
        """Kernel row of phase ``r``'s ``t``-th tap (valid when in [0, kernel))."""
        return r + self.pad - self.stride * (self.offset(r) + t)

    def taps(self, r: int) -> int:
        return sum(0 <= self.tap(r, t) < self.kernel for t in range(self.window))


def _phase(k: int, p: int, s: int) -> _Phase:
    lo = [math.ceil((r + p - k + 1) / s) for r in range(s)]      # first input offset of each phase
    hi = [(r + p) // s for r in range(s)]                        # last
    slope = 0 if s == 1 else (lo[-1] - lo[0]) // (s - 1)
    if any(lo[r] != lo[0] + slope * r for r in range(s)):        # not affine: one window for every phase
        slope, first = 0, min(lo)
    else:
        first = lo[0]
    window = max(max(hi[r] - (first + slope * r) + 1 for r in range(s)), 1)
    return _Phase(k, p, s, first, slope, window)


def _input_pads(n_in: int, n_out: int, ph: _Phase) -> tuple[int, int]:
    q = n_out // ph.stride
    lo = min(ph.offset(r) for r in range(ph.stride))
    hi = (q - 1) + max(ph.offset(r) for r in range(ph.stride)) + ph.window - 1
    return max(0, -lo), max(0, hi - (n_in - 1))


def conv2d_transpose_packed(data: te.Tensor, kernel: te.Tensor, kernel_size: tuple[int, int],
                            out_size: tuple[int, int], padding: tuple[int, int], strides: tuple[int, int],
                            out_dtype: str = "int32", name: str = "conv2d_transpose") -> te.Tensor:
    """The packed transposed convolution over a phase kernel (``pack_conv2d_transpose_kernel``).

    data ``(N/B, CI/BI, H, W, B, BI)``, kernel ``(CO/BO, CI/BI, SH, SW, TH, TW, BO, BI)``, result
    ``(N/B, CO/BO, OH, OW, B, BO)``; ``kernel_size`` is the original kernel's (KH, KW) and
    ``out_size = (OH, OW)`` (this is where output padding enters).
    """
    nb, cib, h, w, bb, bi = (int(x) for x in data.shape)
    cob, cib2, hs, ws, th, tw, bo, bi2 = (int(x) for x in kernel.shape)
    (kh, kw), (oh, ow), (hp, wp) = kernel_size, out_size, padding
    if cib != cib2 or bi != bi2 or (hs, ws) != tuple(strides):
        raise VTACompileError(f"conv2d_transpose_packed: data has {cib}x{bi} input channels and stride {strides}; the "
                              f"phase kernel {cib2}x{bi2} channels and {hs}x{ws} phases")
    if oh % hs or ow % ws:
        raise VTACompileError(f"conv2d_transpose_packed: the output {oh}x{ow} is not a multiple of the stride "
                              f"{hs}x{ws}")
    py, px = _phase(kh, hp, hs), _phase(kw, wp, ws)
    if (py.window, px.window) != (th, tw):
        raise VTACompileError(f"conv2d_transpose_packed: the phase kernel has {th}x{tw} taps per phase; kernel "
                              f"{kh}x{kw}, padding {padding} and stride {strides} need {py.window}x{px.window}")
    (yb, ya), (xb, xa) = _input_pads(h, oh, py), _input_pads(w, ow, px)
    dpad = topi.nn.pad(data, [0, 0, yb, xb, 0, 0], [0, 0, ya, xa, 0, 0], name="data_pad") if yb or ya or xb or xa \
        else data
    ko = te.reduce_axis((0, cib), "ko")
    ki = te.reduce_axis((0, bi), "ki")
    ty = te.reduce_axis((0, th), "ty")
    tx = te.reduce_axis((0, tw), "tx")
    return te.compute(
        (nb, cob, oh, ow, bb, bo),
        lambda b, co, y, x, b_i, c_i: te.sum(
            dpad[b, ko, y // hs + py.offset(y % hs) + ty + yb, x // ws + px.offset(x % ws) + tx + xb, b_i, ki]
            .astype(out_dtype) * kernel[co, ko, y % hs, x % ws, ty, tx, c_i, ki].astype(out_dtype),
            axis=[ko, ty, tx, ki]),
        name=name, tag="packed_conv2d_transpose", attrs={"vta.phase": [kh, hp, hs, kw, wp, ws]})


def pack_conv2d_transpose_kernel(w: np.ndarray, wkl: Conv2DTransposeWorkload,
                                 env: Environment | None = None) -> np.ndarray:
    """A transposed-convolution kernel ``(CI, CO, KH, KW)`` -> the phase kernel
    ``(CO/BO, CI/BI, SH, SW, TH, TW, BO, BI)``: entry ``[.., ry, rx, ty, tx, ..]`` holds kernel tap
    ``(ky, kx)`` that phase ``(ry, rx)`` applies to its ``(ty, tx)``-th input offset, zero where the
    phase has no such tap."""
    env = env or get_env()
    block_out, block_in = env.BLOCK_OUT, env.BLOCK_IN
    ci, co, kh, kw = w.shape
    if (ci, co, kh, kw) != (wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel):
        raise ValueError(f"kernel shape {w.shape} does not match the workload's (CI, CO, KH, KW) = "
                         f"{(wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel)}")
    if ci % block_in or co % block_out:
        raise ValueError(f"{ci} input and {co} output channels are not multiples of {block_in} and {block_out}")
    py, px = _phase(kh, wkl.hpad, wkl.hstride), _phase(kw, wkl.wpad, wkl.wstride)
    blocks = w.reshape(ci // block_in, block_in, co // block_out, block_out, kh, kw).transpose(2, 0, 4, 5, 3, 1)
    out = np.zeros((co // block_out, ci // block_in, wkl.hstride, wkl.wstride, py.window, px.window, block_out,
                    block_in), w.dtype)
    for ry, rx, ty, tx in itertools.product(range(wkl.hstride), range(wkl.wstride), range(py.window),
                                            range(px.window)):
        ky, kx = py.tap(ry, ty), px.tap(rx, tx)
        if 0 <= ky < kh and 0 <= kx < kw:
            out[:, :, ry, rx, ty, tx] = blocks[:, :, ky, kx]
    return out


def _guarded(wkl: Conv2DTransposeWorkload) -> bool:
    """Whether some phase has fewer taps than its window (then the GEMMs are guarded)."""
    for k, p, s in ((wkl.hkernel, wkl.hpad, wkl.hstride), (wkl.wkernel, wkl.wpad, wkl.wstride)):
        ph = _phase(k, p, s)
        if any(ph.taps(r) != ph.window for r in range(s)):
            return True
    return False


class Conv2DTranspose(Operator):
    """Transposed 2-D convolution (``relax.nn.conv2d_transpose``, one group), split into stride phases."""

    kind = "conv2d_transpose"
    workload_type = Conv2DTransposeWorkload
    tiling_type = Conv2DTiling
    relax_ops = ("relax.nn.conv2d_transpose",)

    def describe(self, w) -> str:
        return (f"conv2d_transpose {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else "") +
                (f" op{w.hout_pad}" if w.hout_pad or w.wout_pad else ""))

    def kernel_name(self, w) -> str:
        return f"{w.height}x{w.width}_{w.in_filter}to{w.out_filter}_k{w.hkernel}x{w.wkernel}_s{w.hstride}"

    def issued_macs(self, wkl, env):
        """The taps of each phase, no zeros of the dilation."""
        return wkl.macs

    def shape_refusal(self, wkl, env):
        if wkl.batch % env.BATCH:
            return f"batch {wkl.batch} is not a multiple of BATCH={env.BATCH}"
        if wkl.in_filter % env.BLOCK_IN or wkl.out_filter % env.BLOCK_OUT:
            return (f"{wkl.in_filter} input and {wkl.out_filter} output channels must be multiples of BLOCK_IN="
                    f"{env.BLOCK_IN} and BLOCK_OUT={env.BLOCK_OUT}")
        for what, s, k, p, op, n in (("height", wkl.hstride, wkl.hkernel, wkl.hpad, wkl.hout_pad, wkl.out_height),
                                     ("width", wkl.wstride, wkl.wkernel, wkl.wpad, wkl.wout_pad, wkl.out_width)):
            if s < 1 or k < 1 or p < 0 or op < 0:
                return f"stride {s}, kernel {k}, padding {p} and output padding {op} along the {what} are not valid"
            if op >= s:
                return f"output padding {op} must be smaller than the stride {s} (along the {what})"
            if p >= k:
                return f"padding {p} must be smaller than the kernel {k} (along the {what})"
            if n < s or n % s:
                return (f"the output {what} {n} is not a multiple of the stride {s}: VTA computes whole stride phases "
                        "(an output padding that rounds it up makes it one)")
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=8, bias=True, clip=(0, 127), channel_shift=False):
        env = env or get_env()
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"conv2d_transpose {wkl}: {reason}")
        bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
        py, px = _phase(wkl.hkernel, wkl.hpad, wkl.hstride), _phase(wkl.wkernel, wkl.wpad, wkl.wstride)
        data = te.placeholder((wkl.batch // bb, wkl.in_filter // bi, wkl.height, wkl.width, bb, bi), env.inp_dtype,
                              name="data")
        kernel = te.placeholder((wkl.out_filter // bo, wkl.in_filter // bi, wkl.hstride, wkl.wstride, py.window,
                                 px.window, bo, bi), env.wgt_dtype, name="kernel")
        conv = conv2d_transpose_packed(data, kernel, (wkl.hkernel, wkl.wkernel), (wkl.out_height, wkl.out_width),
                                       (wkl.hpad, wkl.wpad), (wkl.hstride, wkl.wstride), env.acc_dtype)
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
        cib, cob = wkl.in_filter // env.BLOCK_IN, wkl.out_filter // env.BLOCK_OUT
        return [Knob("tile_co", tuple(divisors(cob))), Knob("tile_h", tuple(divisors(wkl.out_height))),
                Knob("tile_w", tuple(divisors(wkl.out_width))), Knob("tile_ci", tuple(divisors(cib))),
                Knob("oc_nthread", F.THREADS), Knob("h_nthread", F.THREADS), Knob("wgt_at", F.WGT_AT),
                Knob("ko_nthread", F.CHUNKS_IN_FLIGHT)]

    def check(self, wkl, t, env):
        return check_tiling(t, wkl.out_filter // env.BLOCK_OUT, wkl.in_filter // env.BLOCK_IN, wkl.out_height,
                            wkl.out_width, wkl.hstride, wkl.wstride)

    def smallest(self, wkl, env):
        return Conv2DTiling(1, wkl.hstride, wkl.wstride, 1)

    def shape(self, wkl, t, env) -> F.TileShape:
        py, px = _phase(wkl.hkernel, wkl.hpad, wkl.hstride), _phase(wkl.wkernel, wkl.wpad, wkl.wstride)
        hs, ws = wkl.hstride, wkl.wstride
        cib, cob, nb = wkl.in_filter // env.BLOCK_IN, wkl.out_filter // env.BLOCK_OUT, wkl.batch // env.BATCH
        qh, qw = t.tile_h // t.h_nthread // hs, t.tile_w // ws
        th_in, tw_in = qh + py.slope * (hs - 1) + py.window - 1, qw + px.slope * (ws - 1) + px.window - 1
        taps = hs * ws * py.window * px.window
        valid = sum(py.taps(r) for r in range(hs)) * sum(px.taps(r) for r in range(ws))
        plain = [t.tile_co // t.oc_nthread, qh, qw, t.tile_ci]
        uops = F.kernel_uops(plain, taps) if _guarded(wkl) else F.kernel_uops(plain + [hs, ws, py.window, px.window])
        loops = (cob // t.tile_co, nb, wkl.out_height // t.tile_h, wkl.out_width // t.tile_w)
        return F.TileShape(
            inp_chunk=t.tile_ci * th_in * tw_in * t.h_nthread, wgt_chunk=t.tile_co * t.tile_ci * taps,
            wgt_tile=t.tile_co * cib * taps, wgt_layer=cob * cib * taps,
            gemm_chunk=t.tile_co * (t.tile_h // hs) * (t.tile_w // ws) * t.tile_ci * valid,
            acc_elems=t.tile_co * t.tile_h * t.tile_w, acc_per_operand=t.tile_co, chunks=cib // t.tile_ci,
            out_tiles=loops[0], spatial_tiles=loops[1] * loops[2] * loops[3],
            oc_threads=t.oc_nthread, row_threads=t.h_nthread, chunks_in_flight=t.ko_nthread,
            wgt_at_co=t.wgt_at == "co", uops=uops,
            inp_loads=t.tile_ci, store_insns=t.tile_co // t.oc_nthread, run_tiles=F.innermost(loops),
            # a thread's qh x qw phase rows/columns read input rows from q0 + first on (q0 = its first phase row)
            inp_padding=F.padding_fraction((wkl.out_height // (t.tile_h // t.h_nthread), py.first, qh, th_in,
                                            wkl.height), (wkl.out_width // t.tile_w, px.first, qw, tw_in, wkl.width)))

    def needs(self, wkl, t, env, acc_operands=1):
        return self.shape(wkl, t, env).needs(acc_operands)

    def estimate(self, wkl, t, env):
        return F.estimate_cycles(self.shape(wkl, t, env), env)

    # ---------------------------------------------------------------------------------------- schedule
    def schedule(self, func, tiling=None, env=None, mock=(), wkl=None):
        env = env or get_env()
        names = mock_names(env, mock)
        sch = s_tir.Schedule(func)
        conv, producers, ewise, out = find_blocks(sch, "conv2d_transpose")
        attrs = sch.get(conv).annotations
        if "vta.phase" not in attrs:
            raise VTACompileError("schedule_conv2d_transpose_packed: the function is not a conv2d_transpose_layer (its "
                                  "reduction has no vta.phase attribute)")
        kh, ph_, hs, kw, pw, ws = (int(v) for v in attrs["vta.phase"])
        py, px = _phase(kh, ph_, hs), _phase(kw, pw, ws)
        b, co, y, x, b_i, c_i, ko, ty, tx, k_i = sch.get_loops(conv)
        nb, cob, oh, ow, cib = (int(sch.get(lp).extent) for lp in (b, co, y, x, ko))
        if tiling is None:
            wkl = wkl or self.workload_of(func)
            if wkl is None:
                raise VTACompileError("schedule_conv2d_transpose_packed: give a tiling, or a function made by "
                                      "conv2d_transpose_layer (it records its workload)")
            tiling = self.tiling(wkl, env)
        t = tiling
        reason = check_tiling(t, cob, cib, oh, ow, hs, ws)
        if reason:
            raise VTACompileError(f"conv2d_transpose tiling {t}: {reason}")
        sch.set_scope(conv, 0, env.acc_scope)
        for blk in ewise:
            sch.set_scope(blk, 0, env.acc_scope)

        co_o, co_v, co_i = sch.split(co, [cob // t.tile_co, t.oc_nthread, t.tile_co // t.oc_nthread])
        y_o, y_v, y_q, y_r = sch.split(y, [oh // t.tile_h, t.h_nthread, t.tile_h // t.h_nthread // hs, hs])
        x_o, x_q, x_r = sch.split(x, [ow // t.tile_w, t.tile_w // ws, ws])
        ko_o, ko_v, ko_i = sch.split(ko, [cib // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
        sch.reorder(co_o, b, y_o, x_o, co_v, y_v, ko_o, ko_v, y_r, x_r, co_i, y_q, x_q, ko_i, ty, tx, b_i, c_i, k_i)
        if t.ko_nthread > 1:
            sch.annotate(ko_v, PIPELINE, 1)
        if t.oc_nthread > 1:
            sch.bind(co_v, "vthread.x")
        if t.h_nthread > 1:
            sch.bind(y_v, "vthread.y")
        F.finish_schedule(sch, env, func, conv, producers, ewise, out, attach=y_v, ko_o=ko_o, ko_v=ko_v,
                          wgt_at=co_o if t.wgt_at == "co" else ko_v, lanes=(b_i, c_i), names=names)
        gemm_parent = b_i if env.BATCH == 1 else tx

        # guard each GEMM with its tap's validity: phase (y_r, x_r), tap (ty, tx)
        lv = {n: sch.get(lp).loop_var for n, lp in (("yr", y_r), ("xr", x_r), ("ty", ty), ("tx", tx))}
        conds = []
        for ph, r, tap in ((py, lv["yr"], lv["ty"]), (px, lv["xr"], lv["tx"])):
            if any(ph.taps(rr) != ph.window for rr in range(ph.stride)):
                k_row = ph.tap(r, tap)
                conds += [k_row >= 0, k_row < ph.kernel]
        if not conds:
            return sch
        gemm_block = sch.get(sch.get_child_blocks(gemm_parent)[0])
        return s_tir.Schedule(_with_predicate(sch.mod, gemm_block, tirx.all(*conds)))

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        ci, co = w.shape[:2]
        w = np.pad(w, ((0, wkl.in_filter - ci), (0, wkl.out_filter - co), (0, 0), (0, 0)))
        return pack_conv2d_transpose_kernel(w, wkl, env)

    def pack_channels(self, v, wkl, env):
        v = np.pad(np.asarray(v, np.int32), (0, wkl.out_filter - len(v)))
        return P.pack_bias_conv(v, wkl.batch, env.BATCH, env.BLOCK_OUT)

    def data(self, wkl, env, acc_operands, seed=0):
        rng = np.random.default_rng(seed)
        x, w, b = F.random_layer(rng, wkl, (wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel))
        # the reference scatters each input pixel through the unpacked kernel (no phases, no phase kernel)
        acc = plus_bias(conv2d_transpose_accumulate(x, w, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad),
                                                    (wkl.hout_pad, wkl.wout_pad)), b)
        return F.conv_layer_data(self, wkl, env, acc_operands, rng, x, w, b, acc, wkl.macs)

    def unpack(self, out):
        return P.unpack_nchw(out)

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        return is_op("relax.nn.conv2d_transpose")(wildcard(), is_const())

    def host_macs(self, out_shape, arg_shapes):
        """Every input pixel times every tap."""
        return int(np.prod(arg_shapes[0]) * np.prod(arg_shapes[1][1:]))

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        reason = F.layout_refusal(attrs, ("NCHW", "IOHW"))
        if reason:
            return reason
        groups = int(attrs.groups)
        if groups != 1:
            return f"grouped transposed convolution (groups={groups}); VTA's conv2d_transpose_packed has one group"
        reason = F.window_refusal(attrs)
        if reason:
            return reason
        n, c, h, w = x_shape
        kh, kw = weight.shape[2:]
        (sh, sw), (pt, pl, _, _) = tuple(int(s) for s in attrs.strides), F.pads(attrs)
        oph, opw = (int(p) for p in attrs.output_padding)
        return Offload(self, Conv2DTransposeWorkload(n, h, w, F.ceil_to(c, env.BLOCK_IN),
                                                     F.ceil_to(weight.shape[1], env.BLOCK_OUT), kh, kw, pt, pl, sh,
                                                     sw, oph, opw), weight)

    def placement_refusal(self, off, env, acc_operands):
        reason = self.refusal(off.workload, env, acc_operands)
        return f"VTA cannot run this transposed convolution: {reason}" if reason else None


def check_tiling(t, cob, cib, oh, ow, hs, ws) -> str | None:
    """Why the conv2d_transpose schedule refuses tiling ``t``: conv2d's rules, and whole stride phases."""
    reason = check_conv_tiling(t, cob, oh, ow, cib)
    if reason:
        return reason
    if (t.tile_h // t.h_nthread) % hs or t.tile_w % ws:
        return f"each thread's tile ({t.tile_h // t.h_nthread}x{t.tile_w}) must hold whole {hs}x{ws} stride phases"
    return None


def _with_predicate(mod: tvm.IRModule, block, cond) -> tvm.IRModule:
    """``mod`` with ``cond`` added to the predicate of ``block``'s realize (after every schedule primitive:
    s_tir's primitives need affine predicates, this one is not)."""
    found = []

    def on_realize(rz):
        if rz.block.same_as(block):
            found.append(rz)
            return s_tir.SBlockRealize(rz.iter_values, tirx.all(rz.predicate, cond), rz.block)
        return rz
    (gv, func), = mod.functions.items()
    body = tvm_ffi.structural_map(func.body, (s_tir.SBlockRealize, on_realize), order="post")
    if len(found) != 1:
        raise VTACompileError(f"conv2d_transpose schedule: expected one GEMM block to guard, found {len(found)}")
    return tvm.IRModule({gv: func.with_body(body)})


CONV2D_TRANSPOSE = register(Conv2DTranspose())


# ------------------------------------------------------------------------------------------------ public names
def conv2d_transpose_supported(wkl: Conv2DTransposeWorkload, env: Environment | None = None,
                               acc_operands: int = 1) -> str | None:
    """None if VTA can run this transposed convolution, else the reason in one sentence (``acc_operands``
    as for ``conv2d_transpose_tiling``)."""
    return CONV2D_TRANSPOSE.refusal(wkl, env, acc_operands)


def conv2d_transpose_layer(wkl: Conv2DTransposeWorkload, env: Environment | None = None, shift: int = 8,
                           bias: bool = True, clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
    """A whole layer as a PrimFunc: ``res = int8(clip((conv2d_transpose(data, kernel) + bias) >> shift))``.

    Parameters: data ``(N/B, CI/BI, H, W, B, BI)``, the phase kernel from ``pack_conv2d_transpose_kernel``,
    [bias ``(N/B, CO/BO, 1, 1, B, BO)``], [shift], res ``(N/B, CO/BO, OH, OW, B, BO)``. With
    ``channel_shift`` the shift is a per-output-channel int32 tensor shaped like the bias.
    """
    return CONV2D_TRANSPOSE.compute(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift)


def conv2d_transpose_tiling(wkl: Conv2DTransposeWorkload, env: Environment | None = None,
                            acc_operands: int = 1, tuned: bool = True) -> Conv2DTiling:
    """The tiling of a workload: the best measured one (``vta_compiler.autotune`` records: the active
    ``apply_history_best``, else the records shipped with the package) when ``tuned`` and there is one,
    else the cost model's choice among every tiling of the knobs that fits the on-chip buffers and the uop
    budget (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and a shift)."""
    return CONV2D_TRANSPOSE.tiling(wkl, env, acc_operands, tuned)


def schedule_conv2d_transpose_packed(func, tiling: Conv2DTiling | None = None,
                                     wkl: Conv2DTransposeWorkload | None = None, env: Environment | None = None,
                                     mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a conv2d_transpose_packed function (with its element-wise epilogue and final int8 cast); without
    a ``tiling``, the workload's (read from a function made by ``conv2d_transpose_layer``).

    conv2d's schedule with the output rows and columns split into (tile, phase quotient, phase); the
    GEMMs of taps a phase does not have are guarded off (see the module docstring).
    ``mock``: parts to skip ("dma", "alu", "gemm").
    """
    return CONV2D_TRANSPOSE.schedule(func, tiling, env, mock, wkl=wkl)


def candidate_tilings(wkl: Conv2DTransposeWorkload, env: Environment | None = None, acc_operands: int = 1):
    """Every legal tiling that fits the buffers and the uop budget."""
    return CONV2D_TRANSPOSE.legal(wkl, env or get_env(), acc_operands)
