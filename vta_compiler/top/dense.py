"""``dense``: matrix multiply in VTA's packed layouts, its schedule and its tiling space.

data ``(N/B, CI/BI, B, BI)`` int8, weight ``(CO/BO, CI/BI, BO, BI)`` int8, result
``(N/B, CO/BO, B, BO)`` int32. Tiles of ``tile_b`` batch blocks x ``tile_co`` output blocks,
input chunks of ``tile_ci`` blocks (``ko_nthread=2``: two chunks in flight), virtual threads over
the tile's output channels (``oc_nthread``) and/or batch (``b_nthread``). The blocked GEMM benchmark of the original
(``test_benchmark_gemm``) is this operator too. A workload is a :class:`DenseWorkload` (a
``(batch, in_features, out_features)`` tuple is accepted where a workload is asked for).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment, get_env
from ..reference import calibrated_shift, dense_accumulators, requantize
from ..tiling import Knob, LayerData, Offload, Operator, register, with_workload
from ..transform.common import VTACompileError
from ..transform.vthread import PIPELINE
from . import conv_family as F
from . import packing as P
from .common import divisors, epilogue, find_blocks, mock_names


@dataclass(frozen=True)
class DenseWorkload:
    batch: int
    in_features: int
    out_features: int

    @property
    def macs(self) -> int:
        return self.batch * self.in_features * self.out_features


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


class Dense(Operator):
    """Matrix multiply by a constant weight (``relax.matmul`` of 2-D data)."""

    kind = "dense"
    takes_requant = True
    workload_type = DenseWorkload
    tiling_type = DenseTiling
    relax_ops = ("relax.matmul",)

    def accepts(self, obj) -> bool:
        return isinstance(obj, tuple) and len(obj) == 3 and all(isinstance(v, (int, np.integer)) for v in obj)

    def workload(self, obj):
        if self.accepts(obj):
            return DenseWorkload(*(int(v) for v in obj))
        return super().workload(obj)

    def describe(self, wkl) -> str:
        w = self.workload(wkl)
        return f"dense {w.batch}x{w.in_features}->{w.out_features}"

    def kernel_name(self, wkl) -> str:
        w = self.workload(wkl)
        return f"{w.batch}x{w.in_features}to{w.out_features}"

    def blocks(self, wkl, env: Environment) -> tuple[int, int, int]:
        w = self.workload(wkl)
        return w.batch // env.BATCH, w.in_features // env.BLOCK_IN, w.out_features // env.BLOCK_OUT

    def issued_macs(self, wkl, env):
        return self.workload(wkl).macs

    def shape_refusal(self, wkl, env):
        w = self.workload(wkl)
        for n, k, what in ((w.batch, env.BATCH, "batch"), (w.in_features, env.BLOCK_IN, "input features"),
                           (w.out_features, env.BLOCK_OUT, "output features")):
            if n % k:
                return f"{what} {n} must be a multiple of {k}"
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env=None, *, shift=8, bias=True, clip=(0, 127), channel_shift=False, requant=None):
        env = env or get_env()
        wkl = self.workload(wkl)
        reason = self.shape_refusal(wkl, env)
        if reason:
            raise VTACompileError(f"dense: {reason}")
        bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
        batch, in_features, out_features = wkl.batch, wkl.in_features, wkl.out_features
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
        multiplier = None
        if requant is not None and requant.multiplier is None:
            multiplier = te.placeholder((batch // bb, out_features // bo, bb, bo), env.acc_dtype, name="multiplier")
            args.append(multiplier)
        _, res = epilogue(env, acc, b, shift, clip, lambda i: i, requant=requant, multiplier=multiplier)
        return with_workload(te.create_prim_func(args + [res]), self, wkl)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env):
        nb, cib, cob = self.blocks(wkl, env)
        return [Knob("tile_b", tuple(divisors(nb))), Knob("tile_co", tuple(divisors(cob))),
                Knob("tile_ci", tuple(divisors(cib))), Knob("oc_nthread", F.THREADS), Knob("b_nthread", F.THREADS),
                Knob("ko_nthread", F.CHUNKS_IN_FLIGHT)]

    def check(self, wkl, t, env):
        return check_tiling(t, *self.blocks(wkl, env))

    def shape(self, wkl, t, env) -> F.TileShape:
        nb, cib, cob = self.blocks(wkl, env)
        return F.TileShape(
            inp_chunk=t.tile_b * t.tile_ci, wgt_chunk=t.tile_co * t.tile_ci, wgt_tile=t.tile_co * cib,
            wgt_layer=cob * cib, gemm_chunk=t.tile_b * t.tile_co * t.tile_ci, acc_elems=t.tile_b * t.tile_co,
            acc_per_operand=t.tile_b * t.tile_co, chunks=cib // t.tile_ci, out_tiles=cob // t.tile_co,
            spatial_tiles=nb // t.tile_b, oc_threads=t.oc_nthread, row_threads=t.b_nthread,
            chunks_in_flight=t.ko_nthread, wgt_at_co=False,
            uops=F.kernel_uops([t.tile_b // t.b_nthread, t.tile_co // t.oc_nthread, t.tile_ci]),
            # one INP load per chunk (its blocks are contiguous), one store per thread; the channel tiles are the
            # inner tile loop
            run_tiles=F.innermost((nb // t.tile_b, cob // t.tile_co)))

    def needs(self, wkl, t, env, acc_operands=1):
        return self.shape(wkl, t, env).needs(acc_operands)

    def estimate(self, wkl, t, env):
        return F.estimate_cycles(self.shape(wkl, t, env), env)

    # ---------------------------------------------------------------------------------------- schedule
    def schedule(self, func, tiling=None, env=None, mock=(), wkl=None):
        env = env or get_env()
        names = mock_names(env, mock)
        sch = s_tir.Schedule(func)
        dense, _, ewise, out = find_blocks(sch, "dense")
        sch.set_scope(dense, 0, env.acc_scope)
        for b in ewise:
            sch.set_scope(b, 0, env.acc_scope)
        b, co, b_i, c_i, ko, k_i = sch.get_loops(dense)
        nb, cob, cib = (int(sch.get(lp).extent) for lp in (b, co, ko))
        t = tiling or self.tiling(wkl or self.workload_of(func) or
                                  DenseWorkload(nb * env.BATCH, cib * env.BLOCK_IN, cob * env.BLOCK_OUT), env)
        reason = check_tiling(t, nb, cib, cob)
        if reason:
            raise VTACompileError(f"dense tiling {t}: {reason}")
        b_o, b_v, b_ii = sch.split(b, [nb // t.tile_b, t.b_nthread, t.tile_b // t.b_nthread])
        co_o, co_v, co_i = sch.split(co, [cob // t.tile_co, t.oc_nthread, t.tile_co // t.oc_nthread])
        ko_o, ko_v, ko_i = sch.split(ko, [cib // (t.tile_ci * t.ko_nthread), t.ko_nthread, t.tile_ci])
        sch.reorder(b_o, co_o, b_v, co_v, ko_o, ko_v, b_ii, co_i, ko_i, b_i, c_i, k_i)
        if t.ko_nthread > 1:
            sch.annotate(ko_v, PIPELINE, 1)
        if t.b_nthread > 1:
            sch.bind(b_v, "vthread.y")
        if t.oc_nthread > 1:
            sch.bind(co_v, "vthread.x")
        F.finish_schedule(sch, env, func, dense, [], ewise, out, attach=co_v, ko_o=ko_o, ko_v=ko_v, wgt_at=ko_v,
                          lanes=(b_i, c_i), names=names)
        return sch

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w, wkl, env):
        return P.pack_oi(P.pad_channels(P.pad_channels(w, 0, env.BLOCK_OUT), 1, env.BLOCK_IN), env.BLOCK_OUT,
                         env.BLOCK_IN)

    def pack_channels(self, v, wkl, env):
        w = self.workload(wkl)
        v = np.pad(np.asarray(v, np.int32), (0, w.out_features - len(v)))
        return P.pack_bias_dense(v, w.batch, env.BATCH, env.BLOCK_OUT)

    def data(self, wkl, env, acc_operands, seed=0):
        w_ = self.workload(wkl)
        n, i, o = w_.batch, w_.in_features, w_.out_features
        rng = np.random.default_rng(seed)
        x = rng.integers(-128, 128, (n, i), dtype=np.int8)
        w = rng.integers(-128, 128, (o, i), dtype=np.int8)
        b = rng.integers(-(1 << 14), 1 << 14, (o,), dtype=np.int32)
        acc = dense_accumulators(x, w, b)
        shift = calibrated_shift(acc, (0, 127))
        args = [P.pack_nc(x, env.BATCH, env.BLOCK_IN), self.pack_weights(w, w_, env), self.pack_channels(b, w_, env)]
        if acc_operands >= 2:
            shifts = np.clip(shift + rng.integers(-1, 2, o), 0, 31).astype(np.int32)
            args.append(self.pack_channels(shifts, w_, env))
            expected = np.clip(acc >> shifts.reshape(1, -1), 0, 127).astype(np.int8)
            shift = None
        else:
            expected = requantize(acc, shift, (0, 127))
        return LayerData(args, (n // env.BATCH, o // env.BLOCK_OUT, env.BATCH, env.BLOCK_OUT), expected, shift,
                         n * i * o)

    def unpack(self, out):
        return P.unpack_nc(out)

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        return is_op("relax.matmul")(wildcard(), is_const())

    def host_macs(self, out_shape, arg_shapes):
        return int(np.prod(out_shape) * arg_shapes[0][-1]) if len(arg_shapes) == 2 else 0

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        if len(x_shape) != 2 or weight.ndim != 2:
            return None                 # a batched matmul: batch_matmul's (or nobody's) to take
        weight = np.ascontiguousarray(weight.T)
        return Offload(self, DenseWorkload(x_shape[0], F.ceil_to(weight.shape[1], env.BLOCK_IN),
                                           F.ceil_to(weight.shape[0], env.BLOCK_OUT)), weight)


def check_tiling(t, nb: int, cib: int, cob: int) -> str | None:
    """Why the dense schedule refuses tiling ``t`` of an (nb, cib, cob)-block layer, or None."""
    for name, n, tl in (("batch blocks", nb, t.tile_b), ("output blocks", cob, t.tile_co),
                        ("input blocks", cib, t.tile_ci)):
        if tl < 1 or n % tl:
            return f"{tl} does not divide the {n} {name}"
    if t.b_nthread < 1 or t.oc_nthread < 1 or t.ko_nthread < 1 or t.tile_b % t.b_nthread or \
            t.tile_co % t.oc_nthread or (cib // t.tile_ci) % t.ko_nthread:
        return "the virtual threads must divide the tile"
    return None


DENSE = register(Dense())


# ------------------------------------------------------------------------------------------------ public names
def dense_layer(wkl: DenseWorkload, env: Environment | None = None, shift: int = 8, bias: bool = True,
                clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False, requant=None):
    """``res = int8(clip((data @ weight.T + bias) >> shift))`` as a PrimFunc over packed tensors.

    With ``channel_shift`` the shift is a per-output-feature int32 tensor shaped like the bias. With a
    ``requant`` (:class:`~vta_compiler.top.common.Requant`, ISA extension ``alu_mul``) a fixed-point multiply
    follows the shift, by its immediate or (without one) by a per-feature ``multiplier`` tensor after the shift."""
    return DENSE.compute(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift, requant=requant)


def dense_tiling(wkl: DenseWorkload, env: Environment | None = None, acc_operands: int = 1,
                 tuned: bool = True) -> DenseTiling:
    """The best measured tiling (``vta_compiler.autotune`` records) when ``tuned`` and there is one, else the
    cost model's choice among every tiling of the knobs that fits."""
    return DENSE.tiling(wkl, env, acc_operands, tuned)


def schedule_dense_packed(func, tiling: DenseTiling | None = None, env: Environment | None = None,
                          mock: tuple[str, ...] = ()) -> s_tir.Schedule:
    """Schedule a dense_packed function (without a ``tiling``, the workload's); ``mock``: parts to skip
    ("dma", "alu", "gemm")."""
    return DENSE.schedule(func, tiling, env, mock)


def fits(wkl: DenseWorkload, t: DenseTiling, env: Environment | None = None, acc_operands: int = 1) -> bool:
    return DENSE.fits(wkl, t, env or get_env(), acc_operands)


def estimate_cycles(wkl: DenseWorkload, t: DenseTiling, env: Environment | None = None) -> float:
    return DENSE.estimate(wkl, t, env or get_env())
