"""``activation``: int8 elementwise multiply, the squeeze-excite channel multiply, hard-sigmoid and hard-swish on
VTA's ALU (ISA extensions ``alu_mul`` and ``acc_8bit``).

Layouts: every tensor is packed NCHW ``(N/B, C/BO, H, W, B, BO)`` int8; the squeeze-excite gate of
``channel_multiply`` is ``(N/B, C/BO, 1, 1, B, BO)``. The integer formulation (the quantizer's CPU int8 form is the
same, ``vta_compiler.graph.quantize``; int32 arithmetic, exact)::

    multiply           p = a * b                                  (|p| <= 2**14)
    channel_multiply   p = a * g[n, c]                            (g broadcast over H and W)
    hard_sigmoid       p = clip(x + T, 0, U)
    hard_swish         p = x * clip(x + T, 0, U)                  (|p| <= 128 * U <= 32640 for U <= 255)
    y = int8(clip((p * M + 2**(k-1)) >> k, lo, hi))              (k = 0: no rounding)

For inputs of exponent ``e_x`` (``real = q * 2**-e_x``), hard_sigmoid(x) = clip(alpha x + beta, 0, 1) = alpha
clip(x + beta/alpha, 0, 1/alpha) gives ``T = round(beta/alpha * 2**e_x)``, ``U = round(2**e_x / alpha)`` (ONNX
HardSigmoid alpha=1/6, beta=0.5 and PyTorch's relu6(x + 3) / 6 alike: T = 3 * 2**e_x, U = 6 * 2**e_x), and the
output scale ``alpha * 2**(e_out - e_x)`` (hard-swish: ``alpha * 2**(e_out - 2 e_x)``, a multiply: ``2**(e_out - e_a -
e_b)``) is the fixed-point ``M * 2**-k`` with ``M`` in [2**14, 2**15) (:func:`fixed_point15`).

On VTA each tile (``tile_c`` channel blocks x ``tile_h`` rows, whole rows) loads its operands into the accumulators
with ACC_8BIT loads (hard-swish loads its input twice: one copy becomes the gate in place), then runs the ALU in
place: the gate's ADD, MAX, MIN (immediates), MUL with a register operand (the product), MUL by the immediate M,
the rounding (``k > 15``: SHR k-15, ADD 2**14, SHR 15, equal to the single rounding shift for every integer, since
the ALU's immediates are 16-bit), MAX, MIN (each only where some int8 input reaches it, :func:`clip_needed`), and
stores the int8 tile. ALU MUL multiplies the low 16 bits of both operands (``dst <- sext(dst[15:0]) *
sext(src[15:0])``): every product above has int16 operands, and ``|p * M| < 2**30``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te

from ..environment import Environment, get_env
from ..tiling import BufferNeeds, Knob, LayerData, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from . import conv_family as F
from . import packing as P
from .common import divisors, mock_names, pragma

#: the modes of an activation workload
MODES = ("multiply", "channel_multiply", "hard_sigmoid", "hard_swish")
#: graph_pack(activation=...): "auto" (where the board host's estimate is slower), "vta" (every one, else a
#: GraphError) or "cpu"
ACTIVATION_PLACES = ("auto", "vta", "cpu")
#: the largest gate bound U of a hard-swish (its product x * clip(x + T, 0, U) stays int16, MUL's operand)
HARD_SWISH_MAX_UPPER = 255
#: bits of the fixed-point multiplier M (an int16 ALU immediate)
MULTIPLIER_BITS = 15
#: the largest rounding shift k (p * M < 2**30, plus the rounding constant, stays int32)
MAX_SHIFT = 30
#: a rounding shift by more than this runs in two steps (the rounding constant is a 16-bit immediate)
_ROUND_BITS = 15
_IMM_MIN, _IMM_MAX = -(1 << 15), (1 << 15) - 1


def fixed_point15(scale: float) -> tuple[int, int]:
    """``(M, k)`` with ``scale ~ M * 2**-k``, ``M`` in [2**14, 2**15) where ``k <= 30`` allows (a smaller M for a
    tiny scale) and ``k >= 0``; ValueError for a scale that is not positive and finite or is 2**15 or more."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"a fixed-point scale must be positive and finite, got {scale}")
    _, exp = math.frexp(scale)                   # scale = mant * 2**exp, mant in [0.5, 1)
    k = min(MAX_SHIFT, max(0, MULTIPLIER_BITS - exp))
    m = round(scale * 2.0 ** k)
    if m >= 1 << MULTIPLIER_BITS and k > 0:      # the mantissa rounded up to 1.0
        k -= 1
        m = round(scale * 2.0 ** k)
    if not 1 <= m < 1 << MULTIPLIER_BITS:
        raise ValueError(f"the scale {scale} has no fixed-point form M * 2**-k with M in 1..32767, k in 0..30")
    return m, k


@dataclass(frozen=True)
class ActivationWorkload:
    batch: int
    height: int
    width: int
    channels: int           # a multiple of BLOCK_OUT (the caller pads an odd count, as for a convolution)
    mode: str               # one of MODES
    multiplier: int         # M, 1..32767
    shift: int              # k, 0..30
    offset: int = 0         # T (hard_sigmoid, hard_swish)
    upper: int = 0          # U (hard_sigmoid, hard_swish)
    lo: int = -128          # the output's clip
    hi: int = 127

    @property
    def macs(self) -> int:
        return 0            # ALU work only

    @property
    def operands(self) -> int:
        """int8 tensors the kernel reads (the squeeze-excite gate counts)."""
        return 2 if self.mode in ("multiply", "channel_multiply") else 1

    @property
    def elements(self) -> int:
        return self.batch * self.channels * self.height * self.width


@dataclass(frozen=True)
class ActivationTiling:
    tile_c: int = 1         # channel blocks per tile
    tile_h: int = 1         # rows per tile


def activation_refusal(env: Environment) -> str | None:
    """Why VTA cannot run these activations on this configuration (both extensions are needed), or None."""
    missing = [e for e in ("alu_mul", "acc_8bit") if not env.config.isa.has(e)]
    if not missing:
        return None
    return ("an activation on VTA multiplies with ALU MUL (ISA extension alu_mul) on int8 operands loaded with "
            f"ACC_8BIT loads (ISA extension acc_8bit); this configuration lacks ISA extension {' and '.join(missing)} "
            "(config key ISA_EXTENSIONS)")


def _shifts(k: int) -> tuple[int, int]:
    """(first, rounding) shifts of a rounding shift by ``k``: ``>> first``, ``+ 2**(rounding-1)``, ``>> rounding``."""
    r = min(k, _ROUND_BITS)
    return k - r, r


def product_range(wkl: ActivationWorkload) -> tuple[int, int]:
    """The least and the largest product ``p`` over all int8 inputs (the gate of a multiply: int8 too)."""
    if wkl.mode in ("multiply", "channel_multiply"):
        return -128 * 127, 128 * 128
    xs = np.arange(-128, 128, dtype=np.int64)
    g = np.clip(xs + wkl.offset, 0, wkl.upper)
    p = xs * g if wkl.mode == "hard_swish" else g
    return int(p.min()), int(p.max())


def _rounded(p: int, wkl: ActivationWorkload) -> int:
    v = p * wkl.multiplier
    return (v + (1 << (wkl.shift - 1))) >> wkl.shift if wkl.shift else v


def clip_needed(wkl: ActivationWorkload) -> tuple[bool, bool]:
    """Whether the output's MAX lo and MIN hi can change a value (the rounded scaling is monotone in ``p``): VTA
    skips a clip no int8 input reaches, with the same result."""
    lo, hi = product_range(wkl)
    return _rounded(lo, wkl) < wkl.lo, _rounded(hi, wkl) > wkl.hi


def _alu_insns(wkl: ActivationWorkload) -> tuple[int, int]:
    """(ALU instructions with an immediate, with a register operand) per tile."""
    first, r = _shifts(wkl.shift)
    imm = 1 + (first > 0) + 2 * (r > 0) + sum(clip_needed(wkl))     # MUL M, [SHR], [ADD, SHR], [MAX], [MIN]
    if wkl.mode in ("hard_sigmoid", "hard_swish"):
        imm += 3                                           # the gate: ADD T, MAX 0, MIN U
    return imm, int(wkl.mode != "hard_sigmoid")


class Activation(Operator):
    """int8 elementwise multiply (two tensors, or a tensor and a per-channel gate) and hard-sigmoid and hard-swish
    with the quantizer's fixed-point output scale, on the ALU."""

    kind = "activation"
    workload_type = ActivationWorkload
    tiling_type = ActivationTiling
    relax_ops = ()                  # no MACs: graph_pack finds them with host_chain
    options = {"activation": ACTIVATION_PLACES}
    host_option, host_what = "activation", "activations"

    def describe(self, w) -> str:
        gate = f" clip(x+{w.offset}, 0, {w.upper})" if w.mode in ("hard_sigmoid", "hard_swish") else ""
        return f"{w.mode} {w.height}x{w.width}x{w.channels}{gate} *{w.multiplier}>>{w.shift} clip({w.lo}, {w.hi})"

    def label(self, wkl) -> str:
        return wkl.mode

    def kernel_name(self, w) -> str:
        return f"{w.height}x{w.width}_{w.channels}_m{w.multiplier}_s{w.shift}_t{w.offset}_u{w.upper}_c{w.lo}_{w.hi}"

    def issued_macs(self, wkl, env: Environment) -> int:
        return 0

    def shape_refusal(self, wkl, env: Environment) -> str | None:
        reason = activation_refusal(env)
        if reason:
            return reason
        if wkl.mode not in MODES:
            return f"activation mode {wkl.mode!r}: VTA runs {', '.join(MODES)}"
        if wkl.batch % env.BATCH or wkl.channels % env.BLOCK_OUT or min(wkl.height, wkl.width) < 1:
            return (f"batch {wkl.batch} and channels {wkl.channels} must be multiples of BATCH={env.BATCH} and "
                    f"BLOCK_OUT={env.BLOCK_OUT}, and the map not empty")
        if not 1 <= wkl.multiplier <= _IMM_MAX or not 0 <= wkl.shift <= MAX_SHIFT:
            return f"multiplier {wkl.multiplier} and shift {wkl.shift} must be in 1..32767 and 0..{MAX_SHIFT}"
        if not -128 <= wkl.lo <= wkl.hi <= 127:
            return f"the output clip ({wkl.lo}, {wkl.hi}) is not within int8"
        if wkl.mode in ("hard_sigmoid", "hard_swish"):
            limit = HARD_SWISH_MAX_UPPER if wkl.mode == "hard_swish" else _IMM_MAX
            if not _IMM_MIN <= wkl.offset <= _IMM_MAX or not 1 <= wkl.upper <= limit:
                return (f"the gate clip(x + {wkl.offset}, 0, {wkl.upper}) needs T in int16 and U in 1..{limit} "
                        + ("(x * U must stay int16, the operand of ALU MUL)" if wkl.mode == "hard_swish" else
                           "(16-bit ALU immediates)"))
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=0, bias=False, clip=None, channel_shift=False):
        """The activation over packed tensors (the flow's epilogue arguments are ignored: the workload has its own
        constants). Parameters: data, [gate or second operand], res."""
        env = env or get_env()
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"activation {self.describe(wkl)}: {reason}")
        bb, bo = env.BATCH, env.BLOCK_OUT
        shape = (wkl.batch // bb, wkl.channels // bo, wkl.height, wkl.width, bb, bo)
        data = te.placeholder(shape, env.out_dtype, name="data")
        args = [data]
        x = te.compute(shape, lambda *i: data(*i).astype(env.acc_dtype), name="x")
        if wkl.mode == "multiply":
            other = te.placeholder(shape, env.out_dtype, name="other")
            args.append(other)
            y = te.compute(shape, lambda *i: other(*i).astype(env.acc_dtype), name="y")

            def product(i):
                return x(*i) * y(*i)
        elif wkl.mode == "channel_multiply":
            other = te.placeholder(shape[:2] + (1, 1) + shape[4:], env.out_dtype, name="gate")
            args.append(other)
            y = te.compute(other.shape, lambda *i: other(*i).astype(env.acc_dtype), name="y")

            def product(i):
                return x(*i) * y(i[0], i[1], 0, 0, i[4], i[5])
        else:
            src = x
            if wkl.mode == "hard_swish":   # a second copy of the input becomes the gate in place
                src = te.compute(shape, lambda *i: data(*i).astype(env.acc_dtype), name="y")
            gate = te.compute(shape, lambda *i: te.min(te.max(src(*i) + wkl.offset, 0), wkl.upper), name="gate_y")
            if wkl.mode == "hard_swish":
                def product(i):
                    return x(*i) * gate(*i)
            else:
                def product(i):
                    return gate(*i)
        first, r = _shifts(wkl.shift)

        def scaled(*i):
            v = product(i) * wkl.multiplier
            if first:
                v = v >> first
            if r:
                v = (v + (1 << (r - 1))) >> r
            if low:
                v = te.max(v, wkl.lo)
            return te.min(v, wkl.hi) if high else v
        low, high = clip_needed(wkl)
        out = te.compute(shape, scaled, name="scaled")
        res = te.compute(shape, lambda *i: out(*i).astype(env.out_dtype), name="res")
        return with_workload(te.create_prim_func(args + [res]), self, wkl)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env):
        return [Knob("tile_c", tuple(divisors(wkl.channels // env.BLOCK_OUT))),
                Knob("tile_h", tuple(divisors(wkl.height)))]

    def check(self, wkl, t, env):
        for name, n, tl in (("channel blocks", wkl.channels // env.BLOCK_OUT, t.tile_c),
                            ("rows", wkl.height, t.tile_h)):
            if tl < 1 or n % tl:
                return f"{tl} does not divide the {n} {name}"
        return None

    def _loads(self, wkl, t):
        """ACC elements per channel block of a tile: its tensors (the gate's one row per channel block)."""
        out = t.tile_h * wkl.width
        return out * (2 if wkl.mode in ("multiply", "hard_swish") else 1) + \
            (1 if wkl.mode == "channel_multiply" else 0)

    def needs(self, wkl, t, env, acc_operands=1):
        return BufferNeeds(0, 0, t.tile_c * self._loads(wkl, t), F.kernel_uops([t.tile_c, t.tile_h, wkl.width]))

    def estimate(self, wkl, t, env):
        """Cycles per tile in sequence: the ACC_8BIT loads, the ALU instructions (one cycle per element with an
        immediate, two with a register operand), the store; the constants are the GEMM operators'. (Virtual threads
        would not help: the compute module runs the ACC loads as well as the ALU, so only the store could overlap;
        measured on tsim, two threads took the same cycles for a hard-swish, 10% fewer for a channel
        multiply.)"""
        out = t.tile_c * t.tile_h * wkl.width
        tiles = (wkl.batch // env.BATCH) * (wkl.channels // env.BLOCK_OUT // t.tile_c) * (wkl.height // t.tile_h)
        per_byte = env.OUT_ELEM_BYTES / env.AXI_DATA_BYTES
        load = t.tile_c * (F.LOAD_INSN_CYCLES * (2 if wkl.mode != "hard_sigmoid" else 1)
                           + self._loads(wkl, t) * per_byte)
        imm, reg = _alu_insns(wkl)
        alu = (imm + reg) * F.ALU_INSN_CYCLES + (imm + 2 * reg) * out
        store = t.tile_c * F.STORE_INSN_CYCLES + out * per_byte
        return tiles * (load + alu + store)

    # ---------------------------------------------------------------------------------------- schedule
    def schedule(self, func, tiling=None, env=None, mock=()):
        env = env or get_env()
        dma_copy, alu, _, _ = mock_names(env, mock)
        wkl = self.workload_of(func)
        if wkl is None:
            raise VTACompileError("activation: schedule a function made by Activation.compute (it records its "
                                  "workload)")
        t = tiling or self.tiling(wkl, env)
        reason = self.check(wkl, t, env)
        if reason:
            raise VTACompileError(f"activation tiling {t}: {reason}")
        sch = s_tir.Schedule(func)
        loads = [sch.get_sblock("x")] + ([sch.get_sblock("y")] if wkl.mode != "hard_sigmoid" else [])
        stages = ([sch.get_sblock("gate_y")] if wkl.mode in ("hard_sigmoid", "hard_swish") else []) + \
            [sch.get_sblock("scaled")]
        for blk in loads + stages:
            sch.set_scope(blk, 0, env.acc_scope)
        res = sch.get_sblock("res")
        n, c, h, w, b, k = sch.get_loops(res)
        c_o, c_i = sch.split(c, [wkl.channels // env.BLOCK_OUT // t.tile_c, t.tile_c])
        h_o, h_i = sch.split(h, [wkl.height // t.tile_h, t.tile_h])
        sch.reorder(n, c_o, h_o, c_i, h_i, w, b, k)
        for blk in list(reversed(stages)) + loads[::-1]:      # consumers first
            sch.compute_at(blk, h_o, preserve_unit_loops=True)
        for blk in stages:
            pragma(sch, sch.get_loops(blk)[3], alu)
        for blk in loads:
            pragma(sch, sch.get_loops(blk)[-4], dma_copy)      # per channel block: rows x columns
        pragma(sch, sch.get_loops(res)[-4], dma_copy)
        return sch

    def scheduled(self, wkl, t, env, acc_operands, shift):
        return self.schedule(self.compute(wkl, env), t, env=env)

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        raise VTACompileError("activation has no weights")

    def pack_channels(self, v, wkl, env):
        raise VTACompileError("activation has no per-channel constants")

    def data(self, wkl, env, acc_operands, seed=0):
        rng = np.random.default_rng(seed)
        shape = (wkl.batch, wkl.channels, wkl.height, wkl.width)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        args = [x]
        if wkl.mode == "multiply":
            args.append(rng.integers(-128, 128, shape, dtype=np.int8))
        elif wkl.mode == "channel_multiply":
            args.append(rng.integers(-128, 128, shape[:2] + (1, 1), dtype=np.int8))
        out = (wkl.batch // env.BATCH, wkl.channels // env.BLOCK_OUT, wkl.height, wkl.width, env.BATCH,
               env.BLOCK_OUT)
        return LayerData([P.pack_nchw(a, env.BATCH, env.BLOCK_OUT) for a in args], out,
                         activation_reference(wkl, *args), None, 0)

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
        if activation_refusal(env) and options.get("activation", "auto") != "vta":
            return None         # without the extensions the placement (and its notes) is as before
        return _activation_chain(self, node, users, env)

    def host_work(self, wkl):
        return wkl.elements, ACTIVATION_OPS[wkl.mode], 2.0 + (wkl.mode == "multiply") + \
            (wkl.mode == "channel_multiply") / (wkl.height * wkl.width)

    def tiling(self, wkl, env=None, acc_operands=1, tuned=True):
        return super().tiling(wkl, env, acc_operands, tuned=False)     # no records: the model's choice


def activation_reference(wkl: ActivationWorkload, x: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """numpy of the integer formulation on NCHW int8 (int64 arithmetic; the gate of channel_multiply [N, C, 1, 1])."""
    v = x.astype(np.int64)
    if wkl.mode in ("multiply", "channel_multiply"):
        p = v * other.astype(np.int64)
    else:
        g = np.clip(v + wkl.offset, 0, wkl.upper)
        p = v * g if wkl.mode == "hard_swish" else g
    p = p * wkl.multiplier
    if wkl.shift:
        p = (p + (1 << (wkl.shift - 1))) >> wkl.shift
    return np.clip(p, wkl.lo, wkl.hi).astype(np.int8)


#: the host's int8 activations (``graph.quantize``'s int8 forms), operations per element (for
#: ``graph.host_cost``'s estimate): the widening(s), the gate's add, max and min (hard-sigmoid, hard-swish), the
#: product, the multiply by M, the rounding add and shift, min, max and the narrowing
ACTIVATION_OPS = {"multiply": 10, "channel_multiply": 9, "hard_sigmoid": 10, "hard_swish": 12}


def is_node(v) -> bool:
    """Whether ``v`` is a graph node (``graph.ir.Node``: it has an op; constants and clip bounds have none)."""
    return isinstance(getattr(v, "op", None), str)


def _activation_chain(op, n, users, env):
    """The quantizer's int8 activation ending at ``n`` (its ``astype int8``), see ``graph.quantize``
    (``int8_activation``): ``[astype int32 of int8 a]``, the product or gate, ``* M``, ``[+ 2**(k-1) >> k]``,
    ``clip``, ``astype int8``."""
    def only_user(v, k=1):
        return len(users[id(v)]) == k

    def scalar(v, i=1):
        """The integer constant argument ``i`` of node ``v`` (a graph constant or a clip bound), or None."""
        c = getattr(v.args[i], "value", None) if len(v.args) > i and not is_node(v.args[i]) else None
        if c is None or np.asarray(c).size != 1:
            return None
        c = float(np.asarray(c).reshape(-1)[0])
        return int(c) if c == round(c) else None

    def int8_cast(v):
        return is_node(v) and v.op == "relax.astype" and v.dtype == "int32" and \
            is_node(v.args[0]) and v.args[0].dtype == "int8"

    def gate_of(v):      # clip(astype(x) + T, 0, U) -> (cast, add, clip, T, U) or None
        if not is_node(v) or v.op != "relax.clip" or not only_user(v):
            return None
        add = v.args[0]
        if not is_node(add) or add.op != "relax.add" or scalar(add) is None or not only_user(add) or \
                not int8_cast(add.args[0]):
            return None
        lo, hi = (scalar(v, i) for i in (1, 2))
        if lo != 0 or hi is None:
            return None
        return add.args[0], add, v, scalar(add), hi

    if n.op != "relax.astype" or n.dtype != "int8" or not is_node(n.args[0]):
        return None
    clip = n.args[0]
    if clip.op != "relax.clip" or not only_user(clip) or scalar(clip, 1) is None or scalar(clip, 2) is None:
        return None
    cur, k = clip.args[0], 0
    nodes = [n, clip]
    if is_node(cur) and cur.op == "relax.right_shift" and scalar(cur) is not None and only_user(cur):
        rnd = cur.args[0]
        k = scalar(cur)
        if not is_node(rnd) or rnd.op != "relax.add" or scalar(rnd) != 1 << (k - 1) or k < 1 or \
                not only_user(rnd):
            return None
        nodes += [cur, rnd]
        cur = rnd.args[0]
    if not is_node(cur) or cur.op != "relax.multiply" or scalar(cur) is None or not only_user(cur):
        return None
    nodes.append(cur)
    mult = scalar(cur)
    p = cur.args[0]
    g = gate_of(p)
    offset = upper = 0
    if g is not None:                                    # hard_sigmoid: the gate is the product
        cast, add, gclip, offset, upper = g
        mode, x, other = "hard_sigmoid", cast.args[0], None
        if not only_user(cast):
            return None
        nodes += [gclip, add, cast]
    elif is_node(p) and p.op == "relax.multiply" and only_user(p) and all(is_node(a) for a in p.args[:2]):
        a, b = p.args[:2]
        ga, gb = gate_of(a), gate_of(b)
        g, plain = (gb, a) if gb is not None else (ga, b)
        if g is not None:                                # hard_swish: x * clip(x + T, 0, U) on one cast of x
            cast, add, gclip, offset, upper = g
            if plain is not cast or not only_user(cast, 2):
                return None
            mode, x, other = "hard_swish", cast.args[0], None
            nodes += [p, gclip, add, cast]
        elif int8_cast(a) and int8_cast(b) and only_user(a) and only_user(b):
            x, other = a.args[0], b.args[0]
            if tuple(x.shape) != tuple(n.shape):
                x, other = other, x
            if tuple(x.shape) != tuple(n.shape) or len(x.shape) != 4:
                return None
            if tuple(other.shape) == tuple(x.shape):
                mode = "multiply"
            elif tuple(other.shape) == tuple(x.shape[:2]) + (1, 1):
                mode = "channel_multiply"
            else:
                return f"a multiply of {tuple(x.shape)} by {tuple(other.shape)} (VTA broadcasts only [N, C, 1, 1])"
            nodes += [p, a, b]
        else:
            return None
    else:
        return None
    if len(x.shape) != 4 or tuple(x.shape) != tuple(n.shape):
        return None
    nb, c, h, w = x.shape
    wkl = ActivationWorkload(nb, h, w, F.ceil_to(c, env.BLOCK_OUT), mode, mult, k, offset, upper,
                             scalar(clip, 1), scalar(clip, 2))
    off = Offload(op, wkl, None, note=mode.replace("_", "-"))
    if other is not None:
        off.operands = (other,)
    return off, nodes[::-1], x, n


ACTIVATION = register(Activation())


def activation_layer(wkl: ActivationWorkload, env: Environment | None = None):
    """The activation as a PrimFunc over packed tensors (data, [other or gate], res); needs alu_mul and acc_8bit."""
    return ACTIVATION.compute(wkl, env)


def schedule_activation_packed(func, tiling: ActivationTiling | None = None, env: Environment | None = None,
                               mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a function made by :func:`activation_layer` (without a ``tiling``, the cost model's choice)."""
    return ACTIVATION.schedule(func, tiling, env, mock)


__all__ = ["ACTIVATION", "ACTIVATION_PLACES", "MODES", "Activation", "ActivationTiling", "ActivationWorkload",
           "activation_layer", "activation_reference", "clip_needed", "fixed_point15", "product_range",
           "schedule_activation_packed"]
