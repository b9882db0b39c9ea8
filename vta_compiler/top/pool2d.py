"""``pool2d``: int8 2-D max pooling on VTA's ALU (ISA extension ``acc_8bit``).

Layouts: data ``(N/B, C/BO, H, W, B, BO)`` int8 (the packed output of a convolution), result
``(N/B, C/BO, OH, OW, B, BO)`` int8. Each tile (``tile_c`` channel blocks x ``tile_h`` output rows) loads its
input window into the accumulators with an ACC_8BIT load (sign-extended; the load module pads the borders with
zeros), resets the output accumulators to 0 (a GEMM reset), runs one ALU MAX with a register operand for every
window position (``out = max(out, in[s*i + dy, s*j + dx])``: one instruction, the window's taps unrolled into
its uops) and stores the int8 result.

Both the padding and the reset are 0, so the kernel computes ``max(0, max_pool(x))``: exact for an input that
is known to be non-negative (a pooled ReLU output, ResNet's stem), which the workload states
(``nonnegative``); any other input is refused. The result of a max over int8 values is int8: no clip.

**Average pooling** (``mode="avg"``; global average pooling is the window of the whole map) has the quantizer's
integer semantics (``vta_compiler.graph.quantize``, ``global_pool``): ``s = sum(int32(x))`` over the window (zero
padding counts as values), ``int8(clip((s * multiplier + 2**(shift-1)) >> shift, -128, 127))``. The sum is one
ALU ADD with a register operand per window position; the multiply needs the ISA extension ``alu_mul``, whose MUL
multiplies int16 operands: the sum fits int16 when the window has at most 256 values; a multiplier is its odd
part times a power of two (a MUL and a left shift), and an odd part of 2**15 or more is split in two,
``s * m = ((s * (m >> 15)) << 15) + s * (m & 0x7fff)``, on two copies of the sum (the window summed twice). The
rounding constant exceeds the ALU's 16-bit immediate for ``shift > 15``, so the shift runs as ``>> (shift - 15)``,
``+ 2**14``, ``>> 15``: equal to the single rounding shift for every integer (``floor((T + 2**(k-1)) / 2**k) ==
floor((floor(T / 2**j) + 2**(k-j-1)) / 2**(k-j))``). A workload whose product could leave int32 is refused (the
host's product would wrap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx, topi

from ..environment import Environment, get_env
from ..tiling import BufferNeeds, Knob, LayerData, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from . import conv_family as F
from . import packing as P
from .common import WindowOutput, divisors, mock_names, pragma


@dataclass(frozen=True)
class Pool2DWorkload(WindowOutput):
    batch: int
    height: int
    width: int
    channels: int           # a multiple of BLOCK_OUT (the caller pads an odd count, as for a convolution)
    hkernel: int
    wkernel: int
    hpad: int
    wpad: int
    hstride: int
    wstride: int
    #: the input is known to be >= 0 (after a ReLU): the zero padding and the zero start of the max are exact
    nonnegative: bool = False
    #: "max", or "avg": the window's sum times ``multiplier``, rounded and shifted right by ``shift``, clipped
    mode: str = "max"
    multiplier: int = 0
    shift: int = 0

    @property
    def macs(self) -> int:
        return 0            # a pool issues no GEMM: its work is ALU instructions

    @property
    def twos(self) -> int:
        """The multiplier's factors of two (a left shift after the MUL)."""
        m = self.multiplier
        return (m & -m).bit_length() - 1 if m > 0 else 0

    @property
    def split(self) -> bool:
        """An average's multiplier does not fit int16 (its odd part): two MULs on two copies of the sum."""
        return self.mode == "avg" and self.multiplier >> self.twos >= 1 << 15

    @property
    def sums(self) -> int:
        """Copies of the window's sum (or max) the kernel computes."""
        return 2 if self.split else 1


#: ResNet-18's stem pool on its 112x112x64 map (3x3, stride 2, padding 1, after a ReLU)
RESNET18_POOL = Pool2DWorkload(1, 112, 112, 64, 3, 3, 1, 1, 2, 2, nonnegative=True)


@dataclass(frozen=True)
class Pool2DTiling:
    tile_c: int = 1         # channel blocks per tile
    tile_h: int = 1         # output rows per tile


#: graph_pack(pool=...): "auto" (where the board's host estimate is slower), "vta" (every pool VTA can run, else a
#: GraphError) or "cpu"
POOL_PLACES = ("auto", "vta", "cpu")


def pool_refusal(env: Environment) -> str | None:
    """Why VTA cannot pool on this configuration (the input tile is an ACC_8BIT load), or None."""
    if env.config.isa.has("acc_8bit"):
        return None
    return ("pooling on VTA loads its int8 input into the accumulators with an ACC_8BIT load, which needs ISA "
            "extension acc_8bit (config key ISA_EXTENSIONS)")


class Pool2D(Operator):
    """int8 2-D max pooling (``relax.nn.max_pool2d``, NCHW, dilation 1) of a non-negative input, and average
    pooling with the quantizer's fixed-point scale."""

    kind = "pool2d"
    workload_type = Pool2DWorkload
    tiling_type = Pool2DTiling
    relax_ops = ()                  # no MACs: graph_pack finds pools with host_chain
    options = {"pool": POOL_PLACES}
    host_option, host_what = "pool", "pools"

    def describe(self, w) -> str:
        return (f"{self.label(w)} {w.height}x{w.width}x{w.channels} {w.hkernel}x{w.wkernel} s{w.hstride}"
                + (f"x{w.wstride}" if w.wstride != w.hstride else "") + f" p{w.hpad}"
                + (f" *{w.multiplier}>>{w.shift}" if w.mode == "avg" else ""))

    def label(self, wkl) -> str:
        return "max_pool2d" if wkl.mode == "max" else "avg_pool2d"

    def kernel_name(self, w) -> str:
        return f"{w.mode}_{w.height}x{w.width}_{w.channels}_k{w.hkernel}x{w.wkernel}_s{w.hstride}x{w.wstride}_" \
            f"p{w.hpad}x{w.wpad}" + (f"_m{w.multiplier}_s{w.shift}" if w.mode == "avg" else "")

    def issued_macs(self, wkl, env: Environment) -> int:
        return 0

    def shape_refusal(self, wkl, env: Environment) -> str | None:
        reason = pool_refusal(env)
        if reason:
            return reason
        if wkl.batch % env.BATCH or wkl.channels % env.BLOCK_OUT:
            return (f"batch {wkl.batch} and channels {wkl.channels} must be multiples of BATCH={env.BATCH} and "
                    f"BLOCK_OUT={env.BLOCK_OUT}")
        if wkl.mode not in ("max", "avg"):
            return f"pool mode {wkl.mode!r}: VTA pools with 'max' or 'avg'"
        if wkl.mode == "avg":
            return avg_refusal(wkl, env)
        if not wkl.nonnegative:
            return ("VTA's max pooling pads with 0 (the load's padding) and starts the max at 0 (an accumulator "
                    "reset), which is exact only for an input known to be >= 0 (after a ReLU); this input may be "
                    "negative")
        if min(wkl.hkernel, wkl.wkernel, wkl.hstride, wkl.wstride) < 1 or min(wkl.hpad, wkl.wpad) < 0 or \
                wkl.out_height < 1 or wkl.out_width < 1:
            return f"window {wkl.hkernel}x{wkl.wkernel}, stride {wkl.hstride}x{wkl.wstride}, padding " \
                f"{wkl.hpad}x{wkl.wpad} of a {wkl.height}x{wkl.width} map has no output"
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=0, bias=False, clip=None, channel_shift=False):
        """``res = int8(max(0, max_pool(data)))`` or the scaled average over packed tensors (a pool has no bias,
        shift tensor or clip: the flow's epilogue arguments are ignored). Parameters: data, res."""
        env = env or get_env()
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"pool2d {self.describe(wkl)}: {reason}")
        bb, bo = env.BATCH, env.BLOCK_OUT
        hs, ws = wkl.hstride, wkl.wstride
        data = te.placeholder((wkl.batch // bb, wkl.channels // bo, wkl.height, wkl.width, bb, bo), env.out_dtype,
                              name="data")
        dpad = topi.nn.pad(data, [0, 0, wkl.hpad, wkl.wpad, 0, 0], name="data_pad") if wkl.hpad or wkl.wpad \
            else data
        window = te.compute(dpad.shape, lambda *i: dpad(*i).astype(env.acc_dtype), name="window")
        dy = te.reduce_axis((0, wkl.hkernel), "dy")
        dx = te.reduce_axis((0, wkl.wkernel), "dx")
        # a max that starts at 0 (the accumulator reset): max_pool of a non-negative input; or a sum
        reducer = te.comm_reducer(lambda a, b: te.max(a, b), lambda t: tirx.const(0, t), name="relu_max") \
            if wkl.mode == "max" else te.sum
        oshape = (data.shape[0], data.shape[1], wkl.out_height, wkl.out_width, bb, bo)

        def reduced(name):
            return te.compute(oshape, lambda n, c, i, j, b, k: reducer(window[n, c, i * hs + dy, j * ws + dx, b, k],
                                                                       axis=[dy, dx]), name=name)
        pool = reduced("pool")
        if wkl.mode == "avg":
            pool = _scale(wkl, pool, reduced("pool_low") if wkl.split else None)
        res = te.compute(oshape, lambda *i: pool(*i).astype(env.out_dtype), name="res")
        return with_workload(te.create_prim_func([data, res]), self, wkl)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env):
        return [Knob("tile_c", tuple(divisors(wkl.channels // env.BLOCK_OUT))),
                Knob("tile_h", tuple(divisors(wkl.out_height)))]

    def check(self, wkl, t, env):
        for name, n, tl in (("channel blocks", wkl.channels // env.BLOCK_OUT, t.tile_c),
                            ("output rows", wkl.out_height, t.tile_h)):
            if tl < 1 or n % tl:
                return f"{tl} does not divide the {n} {name}"
        return None

    def _tile(self, wkl, t):
        """(input rows, input columns, output elements) of one tile's channel block."""
        rows = (t.tile_h - 1) * wkl.hstride + wkl.hkernel
        cols = (wkl.out_width - 1) * wkl.wstride + wkl.wkernel
        return rows, cols, t.tile_h * wkl.out_width

    def needs(self, wkl, t, env, acc_operands=1):
        rows, cols, out = self._tile(wkl, t)
        alu_uops = F.kernel_uops([wkl.hkernel, wkl.wkernel, t.tile_c, t.tile_h, wkl.out_width])
        reset_uops = F.kernel_uops([t.tile_c, t.tile_h, wkl.out_width])
        return BufferNeeds(0, 0, t.tile_c * (rows * cols + wkl.sums * out), max(alu_uops, reset_uops))

    def estimate(self, wkl, t, env):
        """Cycles of the modules' work, in sequence per tile (the ACC_8BIT load, the reset, the MAXes at two
        cycles per element with a register operand, the store); the constants are the GEMM operators'."""
        rows, cols, out = self._tile(wkl, t)
        tiles = (wkl.batch // env.BATCH) * (wkl.channels // env.BLOCK_OUT // t.tile_c) * \
            (wkl.out_height // t.tile_h)
        load = t.tile_c * (F.LOAD_INSN_CYCLES + rows * cols * env.OUT_ELEM_BYTES / env.AXI_DATA_BYTES)
        reset = wkl.sums * (F.GEMM_INSN_CYCLES + t.tile_c * out)
        alu = wkl.sums * (F.ALU_INSN_CYCLES + 2 * wkl.hkernel * wkl.wkernel * t.tile_c * out)
        if wkl.mode == "avg":       # the scale: MUL (and SHL, ADD), >>, +, >>, MAX, MIN (immediates but the ADD)
            insns = _scale_insns(wkl)
            alu += insns * F.ALU_INSN_CYCLES + (insns + 1) * t.tile_c * out
        store = t.tile_c * F.STORE_INSN_CYCLES + t.tile_c * out * env.OUT_ELEM_BYTES / env.AXI_DATA_BYTES
        return tiles * (load + reset + alu + store)

    # ---------------------------------------------------------------------------------------- schedule
    def schedule(self, func, tiling=None, env=None, mock=()):
        env = env or get_env()
        dma_copy, alu, _, gemm_reset = mock_names(env, mock)
        wkl = self.workload_of(func)
        if wkl is None:
            raise VTACompileError("pool2d: schedule a function made by Pool2D.compute (it records its workload)")
        t = tiling or self.tiling(wkl, env)
        reason = self.check(wkl, t, env)
        if reason:
            raise VTACompileError(f"pool2d tiling {t}: {reason}")
        sch = s_tir.Schedule(func)
        if wkl.hpad or wkl.wpad:
            sch.compute_inline(sch.get_sblock("data_pad"))     # the load module pads
        res = sch.get_sblock("res")
        window = sch.get_sblock("window")
        reductions = [sch.get_sblock("pool")] + ([sch.get_sblock("pool_low")] if wkl.split else [])
        stages = [sch.get_sblock(n) for n in _stage_names(wkl)]         # the scale's element-wise stages
        for blk in [window] + reductions + stages:
            sch.set_scope(blk, 0, env.acc_scope)
        n, c, h, w, b, k = sch.get_loops(res)
        c_o, c_i = sch.split(c, [wkl.channels // env.BLOCK_OUT // t.tile_c, t.tile_c])
        h_o, h_i = sch.split(h, [wkl.out_height // t.tile_h, t.tile_h])
        sch.reorder(n, c_o, h_o, c_i, h_i, w, b, k)
        for blk in list(reversed(stages)) + reductions + [window]:     # consumers first
            sch.compute_at(blk, h_o, preserve_unit_loops=True)
        for blk in reductions:
            # the loops below the tile: n c h w b k dy dx -> dy dx first (one ALU instruction per window position)
            pn, pc, ph, pw, pb, pk, pdy, pdx = sch.get_loops(blk)[3:]
            sch.reorder(pdy, pdx, pn, pc, ph, pw, pb, pk)
            init = sch.decompose_reduction(blk, pdy)
            sch.tensorize(sch.get_loops(init)[-1 if env.BATCH == 1 else -2], gemm_reset)
            pragma(sch, sch.get_loops(blk)[3], alu)
        for blk in stages:
            pragma(sch, sch.get_loops(blk)[3], alu)
        pragma(sch, sch.get_loops(window)[-4], dma_copy)        # per channel block: rows x columns, padded
        pragma(sch, sch.get_loops(res)[-4], dma_copy)
        return sch

    def scheduled(self, wkl, t, env, acc_operands, shift):
        return self.schedule(self.compute(wkl, env), t, env=env)

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        raise VTACompileError("pool2d has no weights")

    def pack_channels(self, v, wkl, env):
        raise VTACompileError("pool2d has no per-channel constants")

    def data(self, wkl, env, acc_operands, seed=0):
        lo = 0 if wkl.mode == "max" else -128
        x = np.random.default_rng(seed).integers(lo, 128, (wkl.batch, wkl.channels, wkl.height, wkl.width),
                                                 dtype=np.int8)
        out = (wkl.batch // env.BATCH, wkl.channels // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH,
               env.BLOCK_OUT)
        ref = max_pool_reference(x, wkl) if wkl.mode == "max" else avg_pool_reference(x, wkl)
        return LayerData([P.pack_nchw(x, env.BATCH, env.BLOCK_OUT)], out, ref, None, 0)

    def unpack(self, out):
        return P.unpack_nchw(out)

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        return None         # not a GEMM followed by VTA's epilogue: graph_pack asks host_chain

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        return None

    def placement_refusal(self, off, env, acc_operands):
        return self.refusal(off.workload, env)

    def host_chain(self, node, users, env, options):
        if pool_refusal(env) and options.get("pool", "auto") != "vta":
            return None         # without acc_8bit the placement (and its notes) is as before pools ran on VTA
        if node.op == "relax.nn.max_pool2d":
            return _max_pool_chain(self, node, env)
        if node.op == "relax.sum":
            return _global_pool_chain(self, node, users, env)
        return None

    def host_work(self, wkl):
        """Max pooling: one max per window value of each output, reading its share of the input; the average:
        one widening add per input value, then (per output, negligible) the scale."""
        outputs = wkl.batch * wkl.channels * wkl.out_height * wkl.out_width
        inputs = wkl.batch * wkl.channels * wkl.height * wkl.width
        if wkl.mode == "max":
            return outputs, wkl.hkernel * wkl.wkernel, inputs / outputs + 1
        return inputs, 2, 1.0

    def tiling(self, wkl, env=None, acc_operands=1, tuned=True):
        return super().tiling(wkl, env, acc_operands, tuned=False)     # no records: the model's choice


def _int_attr(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _nonnegative(x) -> bool:
    """Whether graph node ``x`` is an int8 value known to be >= 0: a cast of a clip with a lower bound >= 0 (the
    quantizer's ReLU, in a VTA layer's epilogue or on the host), or a ReLU."""
    if x.op == "relax.nn.relu":
        return True
    if x.op == "relax.astype" and x.args and getattr(x.args[0], "op", "") == "relax.clip":
        lo = x.args[0].args[1]
        return hasattr(lo, "value") and int(np.asarray(lo.value).reshape(-1)[0]) >= 0
    return False


def _max_pool_chain(op, n, env):
    x = n.args[0]
    a = n.call.attrs
    if n.dtype != "int8" or len(n.shape) != 4:
        return None
    if str(a.layout) != "NCHW" or bool(a.ceil_mode) or _int_attr(a.dilation) != (1, 1):
        return f"max_pool2d with layout {a.layout}, ceil_mode {bool(a.ceil_mode)}, dilation {_int_attr(a.dilation)}"
    top, left, bottom, right = (_int_attr(a.padding) * 2)[:4] if len(a.padding) == 2 else _int_attr(a.padding)
    if top != bottom or left != right:
        return f"asymmetric padding {_int_attr(a.padding)} (VTA's pool pads both sides alike)"
    (kh, kw), (sh, sw) = _int_attr(a.pool_size), _int_attr(a.strides)
    nb, c, h, w = x.shape
    wkl = Pool2DWorkload(nb, h, w, F.ceil_to(c, env.BLOCK_OUT), kh, kw, top, left, sh, sw, _nonnegative(x))
    if (wkl.out_height, wkl.out_width) != tuple(n.shape[2:]):
        return f"max_pool2d output {tuple(n.shape)} is not the window's {wkl.out_height}x{wkl.out_width}"
    return Offload(op, wkl, None), [n], x, n


def _global_pool_chain(op, n, users, env):
    """The quantizer's global average pool: ``astype int32`` of int8 ``x``, ``sum`` over H and W, ``* mult``,
    ``[+ 2**(k-1) >> k]``, ``clip(-128, 127)``, ``astype int8``; each node with one user."""
    def only_user(v):
        u = users[id(v)]
        return u[0] if len(u) == 1 else None

    def scalar(v):
        c = v.args[1] if len(v.args) > 1 else None
        if c is None or not hasattr(c, "value") or np.asarray(c.value).size != 1:
            return None
        return int(np.asarray(c.value).reshape(-1)[0])
    cast = n.args[0]
    if getattr(cast, "op", "") != "relax.astype" or cast.dtype != "int32" or only_user(cast) is not n:
        return None
    x = cast.args[0]
    if getattr(x, "dtype", "") != "int8" or len(x.shape) != 4 or n.call.attrs.axis is None or \
            sorted(int(v) % 4 for v in n.call.attrs.axis) != [2, 3]:
        return None
    nodes = [cast, n]
    mul = only_user(n)
    if mul is None or mul.op != "relax.multiply" or scalar(mul) is None:
        return None
    nodes.append(mul)
    cur, shift = only_user(mul), 0
    if cur is not None and cur.op == "relax.add":
        shr = only_user(cur)
        if shr is None or shr.op != "relax.right_shift" or scalar(shr) is None or scalar(cur) is None:
            return None
        shift = scalar(shr)
        if shift < 1 or scalar(cur) != 1 << (shift - 1):
            return "the global pool's sum is not rounded by 2**(k-1) before >> k"
        nodes += [cur, shr]
        cur = only_user(shr)
    if cur is None or cur.op != "relax.clip":
        return None
    lo, hi = (int(np.asarray(v.value).reshape(-1)[0]) for v in cur.args[1:3])
    out = only_user(cur)
    if out is None or out.op != "relax.astype" or out.dtype != "int8":
        return None
    if (lo, hi) != (-128, 127):
        return f"the global pool's result is clipped to {(lo, hi)}; VTA's average pool clips to int8"
    nodes += [cur, out]
    nb, c, h, w = x.shape
    wkl = Pool2DWorkload(nb, h, w, F.ceil_to(c, env.BLOCK_OUT), h, w, 0, 0, 1, 1, mode="avg",
                         multiplier=scalar(mul), shift=shift)
    off = Offload(op, wkl, None, output_shape=(nb, c, 1, 1), note="global average pool")
    return off, nodes, x, out


#: the ALU's immediates are 16-bit signed; a rounding shift by more than this runs in two steps
_ROUND_BITS = 15


def avg_refusal(wkl: Pool2DWorkload, env: Environment) -> str | None:
    """Why VTA cannot run an average pool's sum and fixed-point scale exactly, or None."""
    if not env.config.isa.has("alu_mul"):
        return ("average pooling's fixed-point scale is an ALU MUL, which needs ISA extension alu_mul (config key "
                "ISA_EXTENSIONS)")
    count = wkl.hkernel * wkl.wkernel
    if count * 128 > 1 << 15:
        return (f"the sum of a {wkl.hkernel}x{wkl.wkernel} window may exceed int16, the operand of the ALU's MUL "
                "(at most 256 values)")
    if not 0 < wkl.multiplier < 1 << 30 or not 0 <= wkl.shift <= 30:
        return f"multiplier {wkl.multiplier} and shift {wkl.shift} must be in 1..2**30-1 and 0..30"
    if count * 128 * wkl.multiplier + (1 << wkl.shift >> 1) >= 1 << 31:
        return (f"the scaled sum ({count} values times {wkl.multiplier}) may leave int32, where the host's product "
                "wraps")
    return None


def _shifts(wkl: Pool2DWorkload) -> tuple[int, int]:
    """(first, rounding) shifts: ``>> first``, ``+ 2**(rounding-1)``, ``>> rounding``."""
    r = min(wkl.shift, _ROUND_BITS)
    return wkl.shift - r, r


def _stage_names(wkl: Pool2DWorkload) -> list[str]:
    if wkl.mode != "avg":
        return []
    return (["low"] if wkl.split else []) + ["scaled"]


def _scale_insns(wkl: Pool2DWorkload) -> int:
    first, r = _shifts(wkl)
    return (4 if wkl.split else 1 + (wkl.twos > 0)) + (first > 0) + 2 * (r > 0) + 2


def _scale(wkl: Pool2DWorkload, total: te.Tensor, copy: te.Tensor | None) -> te.Tensor:
    """The average's scale in ALU stages: ``clip(round(total * multiplier >> shift))`` (see the module)."""
    first, r = _shifts(wkl)
    if copy is not None:
        low = te.compute(copy.shape, lambda *i: copy(*i) * (wkl.multiplier & 0x7FFF), name="low")

        def product(i):
            return ((total(*i) * (wkl.multiplier >> 15)) << 15) + low(*i)
    else:
        def product(i):
            v = total(*i) * (wkl.multiplier >> wkl.twos)
            return v << wkl.twos if wkl.twos else v

    def scaled(*i):
        v = product(i)
        if first:
            v = v >> first
        if r:
            v = (v + (1 << (r - 1))) >> r
        return te.min(te.max(v, -128), 127)
    return te.compute(total.shape, scaled, name="scaled")


def avg_pool_reference(x: np.ndarray, wkl: Pool2DWorkload) -> np.ndarray:
    """numpy average pooling of NCHW int8 ``x`` with the quantizer's integer scale (zero padding counted),
    int32 arithmetic as on the host."""
    xp = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (wkl.hpad, wkl.hpad), (wkl.wpad, wkl.wpad)])
    s = np.zeros(x.shape[:2] + (wkl.out_height, wkl.out_width), np.int64)
    for i in range(wkl.out_height):
        for j in range(wkl.out_width):
            s[:, :, i, j] = xp[:, :, i * wkl.hstride:i * wkl.hstride + wkl.hkernel,
                               j * wkl.wstride:j * wkl.wstride + wkl.wkernel].sum(axis=(2, 3))
    v = s * wkl.multiplier
    if wkl.shift:
        v = (v + (1 << (wkl.shift - 1))) >> wkl.shift
    return np.clip(v, -128, 127).astype(np.int8)


def max_pool_reference(x: np.ndarray, wkl: Pool2DWorkload) -> np.ndarray:
    """numpy max pooling of NCHW int8 ``x`` with -128 padding (the true max pool)."""
    xp = np.pad(x, [(0, 0), (0, 0), (wkl.hpad, wkl.hpad), (wkl.wpad, wkl.wpad)], constant_values=-128)
    out = np.full(x.shape[:2] + (wkl.out_height, wkl.out_width), -128, np.int8)
    for dy in range(wkl.hkernel):
        for dx in range(wkl.wkernel):
            tap = xp[:, :, dy:dy + wkl.hstride * (wkl.out_height - 1) + 1:wkl.hstride,
                     dx:dx + wkl.wstride * (wkl.out_width - 1) + 1:wkl.wstride]
            out = np.maximum(out, tap)
    return out


POOL2D = register(Pool2D())


def pool2d_layer(wkl: Pool2DWorkload, env: Environment | None = None):
    """``res = int8(max_pool(data))`` as a PrimFunc over packed tensors (data, res); needs ``acc_8bit``."""
    return POOL2D.compute(wkl, env)


def schedule_pool2d_packed(func, tiling: Pool2DTiling | None = None, env: Environment | None = None,
                           mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a function made by :func:`pool2d_layer` (without a ``tiling``, the cost model's choice)."""
    return POOL2D.schedule(func, tiling, env, mock)


__all__ = ["POOL2D", "RESNET18_POOL", "Pool2D", "Pool2DTiling", "Pool2DWorkload", "max_pool_reference",
           "pool2d_layer", "schedule_pool2d_packed"]
