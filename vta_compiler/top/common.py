"""Shared pieces of the operator schedules: block discovery, the ALU epilogue, pragmas."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, te, tirx

from ..environment import Environment
from ..transform.common import VTACompileError


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class WindowOutput:
    """The output size of a sliding window (a convolution's or a pool's) for a workload with fields ``height``,
    ``width``, ``hkernel``, ``wkernel``, ``hpad``, ``wpad``, ``hstride`` and ``wstride`` (a mixin of the frozen
    workload dataclasses: no fields of its own)."""

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.hpad - self.hkernel) // self.hstride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.wpad - self.wkernel) // self.wstride + 1


#: graph_pack's option ``residual`` (read by the operators that fuse a residual add): where the quantizer's residual
#: adds after a VTA layer run: "auto" fused into the layer where VTA can, "vta" fused or an error, "cpu" on the host
RESIDUAL_PLACES = ("auto", "vta", "cpu")
#: the largest rounding shift of a fused residual add: its rounding constant 2**(k-1) is an ALU immediate (16 bits)
RESIDUAL_MAX_OUT_SHIFT = 15


@dataclass(frozen=True)
class Residual:
    """A residual add fused into a layer's epilogue (needs the ISA extension ``acc_8bit``): the layer's result
    ``y = clip((acc + bias) >> shift)`` and an int8 ``shortcut`` of the output's shape, both as int32, are
    aligned to a common scale by left shifts, added, rescaled and clipped::

        s = (y << layer_shift) + (int32(shortcut) << shortcut_shift)
        s = (s + 2**(k-1)) >> k   if k = out_shift > 0   (round half up, as the quantizer's rescale)
            s << -k               if k < 0
        res = int8(clip(s))

    The shortcut is loaded into the accumulators with one ACC_8BIT load per tile (one byte per value,
    sign-extended); the whole add is ALU work in place on it (SHR -shortcut_shift, ADD y, ADD 2**(k-1), SHR k,
    MAX, MIN), then the tile is stored once."""
    layer_shift: int = 0
    shortcut_shift: int = 0
    out_shift: int = 0
    clip: tuple[int, int] | None = (-128, 127)

    def refusal(self) -> str | None:
        """Why VTA's ALU cannot run these constants, or None."""
        for name in ("layer_shift", "shortcut_shift"):
            v = getattr(self, name)
            if not 0 <= v <= 31:
                return f"the residual add's {name} {v} is outside 0..31 (an ALU shift)"
        if not -31 <= self.out_shift <= RESIDUAL_MAX_OUT_SHIFT:
            return (f"the residual add's out_shift {self.out_shift} is outside -31..{RESIDUAL_MAX_OUT_SHIFT} (its "
                    "rounding constant is a 16-bit ALU immediate)")
        return None


#: the operand range of ALU MUL (``alu_mul``): it multiplies the low 16 bits of both operands, sign-extended
MUL_MIN, MUL_MAX = -(1 << 15), (1 << 15) - 1
#: the largest post-shift of a fixed-point requantization: its rounding constant 2**(post-1) is a 16-bit immediate
REQUANT_MAX_POST_SHIFT = 15


@dataclass(frozen=True)
class Requant:
    """A fixed-point multiply in a layer's epilogue (needs the ISA extension ``alu_mul``), after the shift (the
    *pre* shift) and before the clip::

        x = (acc + bias) >> pre                       (pre: an immediate or per channel, as without it)
        x = clip(x, -32768, 32767)                    (MUL multiplies the low 16 bits: clip so that it is exact)
        x = (x * M + 2**(post-1)) >> post             (round half up; x * M fits int32 exactly)
        y = int8(clip(x))

    ``multiplier`` M is an int16 immediate (one per layer), or None for a per-channel int32 tensor (values in
    int16) given to :func:`epilogue` like the bias (MUL with a register operand). ALU work: MAX, MIN, MUL, ADD,
    SHR after the usual ADD and SHR. The int16 clip changes no result as long as 32767 * M >> post reaches the
    output clip (then a clipped x saturates the output anyway); :func:`vta_compiler.reference.fixed_point`
    picks such constants."""
    multiplier: int | None = None
    post_shift: int = REQUANT_MAX_POST_SHIFT

    def refusal(self, env: Environment) -> str | None:
        """Why VTA cannot run this multiply on ``env``'s configuration, or None."""
        if not env.config.isa.has("alu_mul"):
            return ("a fixed-point requantization multiplies with ALU MUL, which needs ISA extension alu_mul "
                    "(config key ISA_EXTENSIONS)")
        if self.multiplier is not None and not MUL_MIN <= self.multiplier <= MUL_MAX:
            return f"the requantization multiplier {self.multiplier} is outside int16 (MUL's operand)"
        if not 1 <= self.post_shift <= REQUANT_MAX_POST_SHIFT:
            return (f"the requantization post_shift {self.post_shift} is outside 1..{REQUANT_MAX_POST_SHIFT} (its "
                    "rounding constant is a 16-bit ALU immediate)")
        return None


def epilogue(env: Environment, acc: te.Tensor, bias: te.Tensor | None, shift: int | te.Tensor,
             clip: tuple[int, int] | None, bias_index, name: str = "epilogue",
             residual: Residual | None = None, shortcut: te.Tensor | None = None,
             requant: Requant | None = None, multiplier: te.Tensor | None = None) -> tuple[te.Tensor, te.Tensor]:
    """The usual int8 requantisation after a GEMM: ``clip((acc + bias) >> shift)`` then cast to int8; with a
    ``requant`` (:class:`Requant`; its per-channel ``multiplier`` tensor indexed like the bias), the fixed-point
    multiply between the shift and the clip; with a ``residual`` (and its int8 ``shortcut`` tensor, indexed like
    the output), the fused residual add after it.

    ``shift`` is an immediate or a per-channel tensor indexed like the bias (ALU SHR with a register
    operand). Returns (last epilogue tensor in int32, output tensor in int8). One element-wise stage (two with a
    residual: the second works in place on the shortcut): the ALU pass turns each into a chain of in-place ALU
    instructions (ADD, SHR, MAX, MIN, MUL).
    """
    if requant is not None:
        reason = requant.refusal(env)
        if reason:
            raise VTACompileError(reason)
        if (requant.multiplier is None) != (multiplier is not None):
            raise VTACompileError("a fixed-point requantization needs either an immediate multiplier or a "
                                  "per-channel multiplier tensor, not both or neither")

    def f(*i):
        x = acc(*i)
        if bias is not None:
            x = x + bias(*bias_index(i))
        if isinstance(shift, te.Tensor):
            x = x >> shift(*bias_index(i))
        elif shift:
            x = x >> shift
        if requant is not None:
            x = te.min(te.max(x, MUL_MIN), MUL_MAX)
            x = x * (multiplier(*bias_index(i)) if multiplier is not None else requant.multiplier)
            x = (x + (1 << (requant.post_shift - 1))) >> requant.post_shift
        if clip is not None:
            x = te.min(te.max(x, clip[0]), clip[1])
        if residual is not None and residual.layer_shift:
            x = x << residual.layer_shift
        return x
    epi = te.compute(acc.shape, f, name=name)
    if residual is not None:
        epi = residual_stage(env, epi, shortcut, residual)
    res = te.compute(acc.shape, lambda *i: epi(*i).astype(env.out_dtype), name="res")
    return epi, res


def residual_stage(env: Environment, y: te.Tensor, shortcut: te.Tensor, r: Residual) -> te.Tensor:
    """The fused residual add on the shortcut's accumulators (see :class:`Residual`); ``y`` is already shifted
    by ``layer_shift``. The shortcut is the in-place operand, so it comes first in every operation."""
    reason = r.refusal()
    if reason:
        raise VTACompileError(reason)

    def g(*i):
        s = shortcut(*i).astype(env.acc_dtype)
        if r.shortcut_shift:
            s = s << r.shortcut_shift
        s = s + y(*i)
        k = r.out_shift
        if k > 0:
            s = (s + (1 << (k - 1))) >> k
        elif k < 0:
            s = s << -k
        if r.clip is not None:
            s = te.min(te.max(s, r.clip[0]), r.clip[1])
        return s
    return te.compute(y.shape, g, name="residual")


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
