"""Search spaces: every knob of a schedule, the candidates that fit, ranked by the schedule's cost model.

A schedule joins the tuner by registering a :class:`Space` under its operator kind
(``register_space("conv2d", Conv2DSpace())``). A space says

* which knobs the schedule has and the values each may take for a workload (``knobs``); the
  candidates are their product, filtered by the schedule's own rules (``valid``: the tiles divide
  the loops, the threads divide the tiles) and by what fits the on-chip buffers and the uop budget
  (``fits``), before anything is built;
* how the schedule's cost model ranks them (``estimate``) and which one the model alone picks
  (``model_choice``, what builds use without records);
* how to make the layer, its data and its numpy reference for a measurement (``layer``, ``data``).

The tiling is a frozen dataclass whose fields are the knobs, so records store it as a dict.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..environment import Environment
from ..transform.common import VTACompileError

#: virtual-thread counts the tuner tries (the cost model's own search stops at 2)
THREADS = (1, 2, 4)
#: input chunks in flight (``vta.pipeline``: double-buffered input and weight tiles)
CHUNKS_IN_FLIGHT = (1, 2)


@dataclass(frozen=True)
class Knob:
    """One knob of a schedule and the values it may take."""
    name: str
    values: tuple


@dataclass
class LayerData:
    """Inputs of one measurement (packed, as the kernel takes them) and the expected output (unpacked)."""
    args: list[np.ndarray]
    out_shape: tuple[int, ...]
    expected: np.ndarray
    shift: int | None              # the immediate shift the kernel is built with (None: per-channel tensor)
    macs: int                      # multiply-accumulates the GEMMs issue (channels padded to the block)


class Space:
    """The tuning space of one operator kind (subclass it and ``register_space`` it)."""

    kind: str = ""
    tiling_type: type = object

    # -- workload identity
    def workload_to_json(self, wkl) -> dict:
        raise NotImplementedError

    def workload_from_json(self, obj: dict):
        raise NotImplementedError

    def describe(self, wkl) -> str:
        return str(wkl)

    # -- the space
    def knobs(self, wkl, env: Environment) -> list[Knob]:
        raise NotImplementedError

    def valid(self, wkl, t, env: Environment) -> bool:
        return True

    def fits(self, wkl, t, env: Environment, acc_operands: int) -> bool:
        raise NotImplementedError

    def estimate(self, wkl, t, env: Environment) -> float:
        raise NotImplementedError

    def model_choice(self, wkl, env: Environment, acc_operands: int):
        """The tiling the cost model picks (what a build uses without records)."""
        raise NotImplementedError

    # -- measurement
    def data(self, wkl, env: Environment, acc_operands: int, seed: int = 0) -> LayerData:
        raise NotImplementedError

    def layer(self, wkl, t, env: Environment, acc_operands: int, shift: int | None):
        """The scheduled layer (an ``s_tir.Schedule``) that a measurement builds."""
        raise NotImplementedError

    def unpack(self, out: np.ndarray) -> np.ndarray:
        """The layer's packed output as the reference's layout: NCHW for the convolutions."""
        from ..top import packing as P
        return P.unpack_nchw(out)

    # -- generic parts
    def tiling(self, knobs: dict):
        return self.tiling_type(**knobs)

    def knob_values(self, t) -> dict:
        return dataclasses.asdict(t)

    def candidates(self, wkl, env: Environment, acc_operands: int) -> list:
        """Every tiling that the schedule accepts and that fits, best first by the cost model; the model's
        own choice comes first."""
        knobs = self.knobs(wkl, env)
        names = [k.name for k in knobs]
        ranked = []
        for values in itertools.product(*(k.values for k in knobs)):
            t = self.tiling_type(**dict(zip(names, values)))
            if self.valid(wkl, t, env) and self.fits(wkl, t, env, acc_operands):
                ranked.append((self.estimate(wkl, t, env), len(ranked), t))
        ranked.sort(key=lambda c: (c[0], c[1]))
        out = [t for _, _, t in ranked]
        try:
            first = self.model_choice(wkl, env, acc_operands)
        except VTACompileError:
            return out
        if first in out:
            out.remove(first)
        return [first] + out

    def size(self, wkl, env: Environment) -> int:
        """Knob combinations before any filtering."""
        return math.prod(len(k.values) for k in self.knobs(wkl, env))

    def features(self, wkl, t, env: Environment, knobs: list[Knob]) -> list[float]:
        """Numbers describing a candidate for the tuner's learned model: log2 of every numeric knob, one-hot
        of every other, and the log of the cost model's estimate."""
        f = [math.log(max(self.estimate(wkl, t, env), 1.0))]
        for k in knobs:
            v = getattr(t, k.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                f.append(math.log2(max(v, 1)))
            else:
                f.extend(1.0 if v == x else 0.0 for x in k.values)
        return f


_SPACES: dict[str, Space] = {}


def register_space(kind: str, space: Space) -> None:
    """Make operator ``kind`` tunable (and its records usable by builds)."""
    space.kind = kind
    _SPACES[kind] = space


def get_space(kind: str) -> Space:
    if kind not in _SPACES:
        raise KeyError(f"no tuning space for operator kind {kind!r}; known kinds: {', '.join(sorted(_SPACES))}")
    return _SPACES[kind]


def kinds() -> list[str]:
    return sorted(_SPACES)


def _conv_requantize(acc, shift, args, wkl, env, acc_operands, rng):
    """The epilogue of the convolution spaces' layers: the calibrated ``shift``, or with two ACC operands a
    per-channel shift tensor appended to ``args``. Returns (expected int8 output, the scalar shift or None,
    the packed output shape)."""
    from ..testing.reference import requantize
    from ..top import packing as P
    if acc_operands >= 2:          # a per-channel shift (an ALU SHR with a register operand)
        shifts = np.clip(shift + rng.integers(-1, 2, wkl.out_filter), 0, 31).astype(np.int32)
        args.append(P.pack_bias_conv(shifts, wkl.batch, env.BATCH, env.BLOCK_OUT))
        expected = np.clip(acc >> shifts.reshape(1, -1, 1, 1), 0, 127).astype(np.int8)
        shift = None
    else:
        expected = requantize(acc, shift, (0, 127))
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width,
                 env.BATCH, env.BLOCK_OUT)
    return expected, shift, out_shape


# ------------------------------------------------------------------------------------------------ conv2d
class Conv2DSpace(Space):
    """``schedule_conv2d_packed``: tiles over output channels, rows, columns and input channels, virtual threads
    over channels and rows, where the weights load, input chunks in flight."""

    def __init__(self):
        from ..top import conv2d as C
        self.C = C
        self.tiling_type = C.Conv2DTiling

    def workload_to_json(self, wkl) -> dict:
        return dataclasses.asdict(wkl)

    def workload_from_json(self, obj: dict):
        return self.C.Conv2DWorkload(**obj)

    def describe(self, w) -> str:
        return (f"conv2d {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else ""))

    def _blocks(self, wkl, env):
        cib = self.C.padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN
        return cib, wkl.out_filter // env.BLOCK_OUT

    def knobs(self, wkl, env):
        from ..top.common import divisors
        cib, cob = self._blocks(wkl, env)
        return [Knob("tile_co", tuple(divisors(cob))), Knob("tile_h", tuple(divisors(wkl.out_height))),
                Knob("tile_w", tuple(divisors(wkl.out_width))), Knob("tile_ci", tuple(divisors(cib))),
                Knob("oc_nthread", THREADS), Knob("h_nthread", THREADS), Knob("wgt_at", ("ko", "co")),
                Knob("ko_nthread", CHUNKS_IN_FLIGHT)]

    def valid(self, wkl, t, env):
        cib, _ = self._blocks(wkl, env)
        return t.tile_co % t.oc_nthread == 0 and t.tile_h % t.h_nthread == 0 and \
            (cib // t.tile_ci) % t.ko_nthread == 0

    def fits(self, wkl, t, env, acc_operands):
        return self.C.fits(env, wkl, t, acc_operands)

    def estimate(self, wkl, t, env):
        return self.C.estimate_cycles(env, wkl, t)

    def model_choice(self, wkl, env, acc_operands):
        return self.C.conv2d_tiling(wkl, env, acc_operands=acc_operands, tuned=False)

    def data(self, wkl, env, acc_operands, seed=0):
        from ..testing.reference import calibrated_shift, conv2d_accumulators
        from ..top import packing as P
        rng = np.random.default_rng(seed)
        x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
        w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
        b = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,), dtype=np.int32)
        acc = conv2d_accumulators(x, w, b, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad))
        shift = calibrated_shift(acc, (0, 127))
        args = [P.pack_nchw(P.pad_channels(x, 1, env.BLOCK_IN), env.BATCH, env.BLOCK_IN),
                P.pack_oihw(P.pad_channels(w, 1, env.BLOCK_IN), env.BLOCK_OUT, env.BLOCK_IN),
                P.pack_bias_conv(b, wkl.batch, env.BATCH, env.BLOCK_OUT)]
        expected, shift, out_shape = _conv_requantize(acc, shift, args, wkl, env, acc_operands, rng)
        macs = wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * args[0].shape[1] * env.BLOCK_IN * \
            wkl.hkernel * wkl.wkernel
        return LayerData(args, out_shape, expected, shift, macs)

    def layer(self, wkl, t, env, acc_operands, shift):
        func = self.C.conv2d_layer(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.C.schedule_conv2d_packed(func, t, env=env)


# ------------------------------------------------------------------------------------------------ dense
@dataclass(frozen=True)
class DenseWorkload:
    batch: int
    in_features: int
    out_features: int


def dense_workload(wkl) -> DenseWorkload:
    return wkl if isinstance(wkl, DenseWorkload) else DenseWorkload(*(int(x) for x in wkl))


class DenseSpace(Space):
    """``schedule_dense_packed``: tiles over batch, output and input blocks, virtual threads over output blocks
    and batch, input chunks in flight. A dense workload is ``(batch, in_features, out_features)``."""

    def __init__(self):
        from ..top import dense as D
        self.D = D
        self.tiling_type = D.DenseTiling

    def workload_to_json(self, wkl) -> dict:
        return dataclasses.asdict(dense_workload(wkl))

    def workload_from_json(self, obj: dict):
        w = DenseWorkload(**obj)
        return (w.batch, w.in_features, w.out_features)

    def describe(self, wkl) -> str:
        w = dense_workload(wkl)
        return f"dense {w.batch}x{w.in_features}->{w.out_features}"

    def _blocks(self, wkl, env):
        w = dense_workload(wkl)
        return w.batch // env.BATCH, w.in_features // env.BLOCK_IN, w.out_features // env.BLOCK_OUT

    def knobs(self, wkl, env):
        from ..top.common import divisors
        nb, cib, cob = self._blocks(wkl, env)
        return [Knob("tile_b", tuple(divisors(nb))), Knob("tile_co", tuple(divisors(cob))),
                Knob("tile_ci", tuple(divisors(cib))), Knob("oc_nthread", THREADS), Knob("b_nthread", THREADS),
                Knob("ko_nthread", CHUNKS_IN_FLIGHT)]

    def valid(self, wkl, t, env):
        _, cib, _ = self._blocks(wkl, env)
        return t.tile_b % t.b_nthread == 0 and t.tile_co % t.oc_nthread == 0 and (cib // t.tile_ci) % t.ko_nthread == 0

    def fits(self, wkl, t, env, acc_operands):
        return self.D.fits(env, t, acc_operands)

    def estimate(self, wkl, t, env):
        w = dense_workload(wkl)
        return self.D.estimate_cycles(env, w.batch, w.in_features, w.out_features, t)

    def model_choice(self, wkl, env, acc_operands):
        w = dense_workload(wkl)
        return self.D.dense_tiling(w.batch, w.in_features, w.out_features, env, acc_operands=acc_operands,
                                   tuned=False)

    def data(self, wkl, env, acc_operands, seed=0):
        from ..testing.reference import calibrated_shift, dense_accumulators, requantize
        from ..top import packing as P
        w_ = dense_workload(wkl)
        n, i, o = w_.batch, w_.in_features, w_.out_features
        rng = np.random.default_rng(seed)
        x = rng.integers(-128, 128, (n, i), dtype=np.int8)
        w = rng.integers(-128, 128, (o, i), dtype=np.int8)
        b = rng.integers(-(1 << 14), 1 << 14, (o,), dtype=np.int32)
        acc = dense_accumulators(x, w, b)
        shift = calibrated_shift(acc, (0, 127))
        args = [P.pack_nc(x, env.BATCH, env.BLOCK_IN), P.pack_oi(w, env.BLOCK_OUT, env.BLOCK_IN),
                P.pack_bias_dense(b, n, env.BATCH, env.BLOCK_OUT)]
        if acc_operands >= 2:
            shifts = np.clip(shift + rng.integers(-1, 2, o), 0, 31).astype(np.int32)
            args.append(P.pack_bias_dense(shifts, n, env.BATCH, env.BLOCK_OUT))
            expected = np.clip(acc >> shifts.reshape(1, -1), 0, 127).astype(np.int8)
            shift = None
        else:
            expected = requantize(acc, shift, (0, 127))
        return LayerData(args, (n // env.BATCH, o // env.BLOCK_OUT, env.BATCH, env.BLOCK_OUT), expected, shift,
                         n * i * o)

    def layer(self, wkl, t, env, acc_operands, shift):
        w = dense_workload(wkl)
        func = self.D.dense_layer(w.batch, w.in_features, w.out_features, env, shift=shift or 0, bias=True,
                                  channel_shift=acc_operands >= 2)
        return self.D.schedule_dense_packed(func, t, env=env)

    def unpack(self, out):
        from ..top import packing as P
        return P.unpack_nc(out)


# ------------------------------------------------------------------------------------------------ group_conv2d
def _plus_bias(acc: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """int64 sums -> the int32 accumulators with the bias added (32-bit wrap-around, as VTA's ACC)."""
    return (acc.astype(np.int64).astype(np.int32).astype(np.int64) + bias.reshape(1, -1, 1, 1)).astype(np.int32)


class GroupConv2DSpace(Space):
    """``schedule_group_conv2d_packed`` (group and depthwise convolutions): tiles over hardware groups, their
    output channel blocks, rows, columns and input channel blocks, virtual threads over the tile's groups
    (or channel blocks) and rows, where the weights load, input chunks in flight."""

    def __init__(self):
        from ..top import group_conv2d as G
        self.G = G
        self.tiling_type = G.GroupConv2DTiling

    def workload_to_json(self, wkl) -> dict:
        return dataclasses.asdict(wkl)

    def workload_from_json(self, obj: dict):
        return self.G.GroupConv2DWorkload(**obj)

    def describe(self, w) -> str:
        what = "depthwise" if w.is_depthwise else f"group_conv2d g{w.groups}"
        return (f"{what} {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else ""))

    def knobs(self, wkl, env):
        from ..top.common import divisors
        hw = self.G._hw_groups(wkl, env)
        return [Knob("tile_g", tuple(divisors(hw.groups))), Knob("tile_co", tuple(divisors(hw.cob_g))),
                Knob("tile_h", tuple(divisors(wkl.out_height))), Knob("tile_w", tuple(divisors(wkl.out_width))),
                Knob("tile_ci", tuple(divisors(hw.cib_g))), Knob("oc_nthread", THREADS),
                Knob("h_nthread", THREADS), Knob("wgt_at", ("ko", "co")), Knob("ko_nthread", CHUNKS_IN_FLIGHT)]

    def valid(self, wkl, t, env):
        hw = self.G._hw_groups(wkl, env)
        return self.G._check_tiling(hw, t) is None and wkl.out_height % t.tile_h == 0 and \
            wkl.out_width % t.tile_w == 0

    def fits(self, wkl, t, env, acc_operands):
        hw = self.G._hw_groups(wkl, env)
        return self.G._fits(env, self.G._sizes(env, wkl, hw, t, acc_operands))

    def estimate(self, wkl, t, env):
        return self.G.estimate_cycles(env, wkl, self.G._hw_groups(wkl, env), t)

    def model_choice(self, wkl, env, acc_operands):
        return self.G.group_conv2d_tiling(wkl, env, acc_operands=acc_operands, tuned=False)

    def data(self, wkl, env, acc_operands, seed=0):
        from ..testing.reference import calibrated_shift
        from ..testing.reference_extra import group_conv2d_accumulate
        from ..top import packing as P
        rng = np.random.default_rng(seed)
        x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
        w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_per_group, wkl.hkernel, wkl.wkernel), dtype=np.int8)
        b = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,), dtype=np.int32)
        # the reference is a direct grouped convolution of the unpacked tensors (no blocks, no diagonal tiles)
        acc = _plus_bias(group_conv2d_accumulate(x, w, wkl.groups, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad)),
                         b)
        shift = calibrated_shift(acc, (0, 127))
        args = [P.pack_nchw(x, env.BATCH, env.BLOCK_IN),
                self.G.pack_group_conv2d_kernel(w, wkl.groups, env.BLOCK_OUT, env.BLOCK_IN),
                P.pack_bias_conv(b, wkl.batch, env.BATCH, env.BLOCK_OUT)]
        expected, shift, out_shape = _conv_requantize(acc, shift, args, wkl, env, acc_operands, rng)
        # issued, not useful: a block-diagonal tile runs a whole block of input channels per output channel
        macs = wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * args[1].shape[1] * env.BLOCK_IN * \
            wkl.hkernel * wkl.wkernel
        return LayerData(args, out_shape, expected, shift, macs)

    def layer(self, wkl, t, env, acc_operands, shift):
        func = self.G.group_conv2d_layer(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.G.schedule_group_conv2d_packed(func, t, env=env)


# ------------------------------------------------------------------------------------------------ conv2d_transpose
class Conv2DTransposeSpace(Space):
    """``schedule_conv2d_transpose_packed``: conv2d's knobs (``Conv2DTiling``) on the phase-split transposed
    convolution; each thread's tile holds whole stride phases."""

    def __init__(self):
        from ..top import conv2d_transpose as CT
        self.CT = CT
        self.tiling_type = CT.Conv2DTiling

    def workload_to_json(self, wkl) -> dict:
        return dataclasses.asdict(wkl)

    def workload_from_json(self, obj: dict):
        return self.CT.Conv2DTransposeWorkload(**obj)

    def describe(self, w) -> str:
        return (f"conv2d_transpose {w.height}x{w.width} {w.in_filter}->{w.out_filter} {w.hkernel}x{w.wkernel} "
                f"s{w.hstride}" + (f"x{w.wstride}" if w.wstride != w.hstride else "") +
                (f" op{w.hout_pad}" if w.hout_pad or w.wout_pad else ""))

    def knobs(self, wkl, env):
        from ..top.common import divisors
        cib, cob = wkl.in_filter // env.BLOCK_IN, wkl.out_filter // env.BLOCK_OUT
        return [Knob("tile_co", tuple(divisors(cob))), Knob("tile_h", tuple(divisors(wkl.out_height))),
                Knob("tile_w", tuple(divisors(wkl.out_width))), Knob("tile_ci", tuple(divisors(cib))),
                Knob("oc_nthread", THREADS), Knob("h_nthread", THREADS), Knob("wgt_at", ("ko", "co")),
                Knob("ko_nthread", CHUNKS_IN_FLIGHT)]

    def valid(self, wkl, t, env):
        return self.CT._check_tiling(wkl, env, t) is None

    def fits(self, wkl, t, env, acc_operands):
        return self.CT._fits(env, self.CT._tile_sizes(env, wkl, t, acc_operands))

    def estimate(self, wkl, t, env):
        return self.CT.estimate_cycles(env, wkl, t)

    def model_choice(self, wkl, env, acc_operands):
        return self.CT.conv2d_transpose_tiling(wkl, env, acc_operands=acc_operands, tuned=False)

    def data(self, wkl, env, acc_operands, seed=0):
        from ..testing.reference import calibrated_shift
        from ..testing.reference_extra import conv2d_transpose_accumulate
        from ..top import packing as P
        rng = np.random.default_rng(seed)
        x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
        w = rng.integers(-128, 128, (wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
        b = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,), dtype=np.int32)
        # the reference scatters each input pixel through the unpacked kernel (no phases, no phase kernel)
        acc = _plus_bias(conv2d_transpose_accumulate(x, w, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad),
                                                     (wkl.hout_pad, wkl.wout_pad)), b)
        shift = calibrated_shift(acc, (0, 127))
        args = [P.pack_nchw(x, env.BATCH, env.BLOCK_IN),
                self.CT.pack_conv2d_transpose_kernel(w, wkl, env.BLOCK_OUT, env.BLOCK_IN),
                P.pack_bias_conv(b, wkl.batch, env.BATCH, env.BLOCK_OUT)]
        expected, shift, out_shape = _conv_requantize(acc, shift, args, wkl, env, acc_operands, rng)
        return LayerData(args, out_shape, expected, shift, wkl.macs)   # only valid taps issue GEMMs

    def layer(self, wkl, t, env, acc_operands, shift):
        func = self.CT.conv2d_transpose_layer(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.CT.schedule_conv2d_transpose_packed(func, t, env=env)


register_space("conv2d", Conv2DSpace())
register_space("dense", DenseSpace())
register_space("group_conv2d", GroupConv2DSpace())
register_space("conv2d_transpose", Conv2DTransposeSpace())
