"""Build, run and check group, depthwise and transposed convolution layers on the current device.

Like ``layers.run_conv2d``: random int8 data, the layer compiled with ``vta.build``, the result
checked exactly against ``reference_extra`` (numpy, from the definitions). The shift is calibrated
from the data unless given (so that most results fall inside the clip range and saturation cannot
hide an error), and each run reports the fraction of outputs strictly inside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..build_module import build, build_config
from ..environment import Environment, get_env
from ..top import conv2d_transpose as CT
from ..top import group_conv2d as G
from ..top import packing as P
from . import simulator
from .layers import LayerRun
from .reference_extra import conv2d_transpose_accumulate, group_conv2d_accumulate, requantize

#: calibrated shifts put one standard deviation of the accumulators at this many output steps
TARGET_SPREAD = 40


@dataclass
class OperatorRun(LayerRun):
    shift: int | np.ndarray = 0      # one amount, or one per output channel (channel_shift)
    inside_fraction: float = 0.0     # outputs strictly inside the clip range
    dilated_uops: float = 0.0        # conv2d_transpose: GEMM uops of the stride-dilated convolution


def calibrated_shift(acc: np.ndarray, spread: int = TARGET_SPREAD) -> int:
    """The right shift that maps one standard deviation of ``acc`` to about ``spread`` output steps."""
    sd = float(np.std(acc.astype(np.float64)))
    return max(0, round(math.log2(sd / spread))) if sd > 0 else 0


def _bias(rng, n: int, shift, spread: int = TARGET_SPREAD) -> np.ndarray:
    """Per-channel biases around ``spread`` output steps (so that the results centre inside (0, 127))."""
    return rng.integers(0, np.left_shift(2 * spread, shift), (n,), dtype=np.int64).astype(np.int32)


def _channel_shifts(rng, n: int, shift: int) -> np.ndarray:
    """One shift per output channel around ``shift`` (-1, 0 or +1), for ``channel_shift`` layers."""
    return np.maximum(shift + rng.integers(-1, 2, n), 0).astype(np.int32)


def _per_channel_args(b, shifts, batch: int, env) -> list:
    return [P.pack_bias_conv(v, batch, env.BATCH, env.BLOCK_OUT) for v in (b, shifts) if v is not None]


def inside_fraction(out: np.ndarray, clip) -> float:
    if clip is None:
        return 1.0
    return float(np.mean((out > clip[0]) & (out < clip[1])))


def _execute(mod, args, out_shape, out_dtype, repeat: int):
    import tvm
    dev = tvm.ext_dev(0)
    dev_args = [tvm.runtime.tensor(a, device=dev) for a in args]
    out = tvm.runtime.empty(out_shape, out_dtype, device=dev)
    simulator.clear_stats()
    t0 = time.perf_counter()
    mod(*dev_args, out)
    stats = simulator.stats()
    for _ in range(repeat - 1):
        mod(*dev_args, out)
    return out.numpy(), stats, (time.perf_counter() - t0) / repeat


def _build(sch, debug_flag, build_kwargs):
    with build_config(debug_flag=debug_flag, **(build_kwargs or {})):
        return build(sch)


def run_group_conv2d(wkl: G.GroupConv2DWorkload, tiling: G.GroupConv2DTiling | None = None, seed: int = 0,
                     name: str = "group_conv2d", env: Environment | None = None, shift: int | None = None,
                     bias: bool = True, clip: tuple[int, int] | None = (0, 127), debug_flag: int = 0,
                     repeat: int = 1, build_kwargs: dict | None = None, mock: tuple[str, ...] = (),
                     channel_shift: bool = False) -> OperatorRun:
    """Group (or depthwise) convolution: ``int8(clip((group_conv2d(x, w) + bias) >> shift))``; with
    ``channel_shift`` one shift per output channel (a tensor operand)."""
    env = env or get_env()
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_per_group, wkl.hkernel, wkl.wkernel), dtype=np.int8)
    acc = group_conv2d_accumulate(x, w, wkl.groups, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad))
    shift = calibrated_shift(acc) if shift is None else shift
    shifts = _channel_shifts(rng, wkl.out_filter, shift) if channel_shift else None
    b = _bias(rng, wkl.out_filter, shift if shifts is None else shifts) if bias else None
    ref = requantize(acc, b, shift if shifts is None else shifts, clip)

    tiling = tiling or G.group_conv2d_tiling(wkl, env, 1 + int(channel_shift))
    t0 = time.perf_counter()
    func = G.group_conv2d_layer(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift)
    mod = _build(G.schedule_group_conv2d_packed(func, tiling, env=env, mock=mock), debug_flag, build_kwargs)
    build_s = time.perf_counter() - t0

    xpk = P.pack_nchw(x, env.BATCH, env.BLOCK_IN)
    wpk = G.pack_group_conv2d_kernel(w, wkl, env)
    args = [xpk, wpk] + _per_channel_args(b, shifts, wkl.batch, env)
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH,
                 env.BLOCK_OUT)
    out, stats, run_s = _execute(mod, args, out_shape, env.out_dtype, repeat)
    got = P.unpack_nchw(out)
    compulsory = x.nbytes + w.nbytes + got.nbytes + wkl.batch // env.BATCH * wkl.out_filter * 4 * (bias + channel_shift)
    return OperatorRun(name, bool(np.array_equal(got, ref)), build_s, run_s, stats, wkl.macs, compulsory, tiling, got,
                       ref, shift=shift if shifts is None else shifts, inside_fraction=inside_fraction(ref, clip))


def run_depthwise_conv2d(wkl: G.GroupConv2DWorkload, tiling: G.GroupConv2DTiling | None = None, seed: int = 0,
                         name: str = "depthwise_conv2d", **kwargs) -> OperatorRun:
    """Depthwise convolution (block-diagonal weight tiles on VTA); ``kwargs`` as ``run_group_conv2d``."""
    if not wkl.is_depthwise:
        raise ValueError(f"{wkl} is not depthwise (groups == channels)")
    return run_group_conv2d(wkl, tiling, seed, name, **kwargs)


def run_conv2d_transpose(wkl: CT.Conv2DTransposeWorkload, tiling: CT.Conv2DTiling | None = None, seed: int = 0,
                         name: str = "conv2d_transpose", env: Environment | None = None, shift: int | None = None,
                         bias: bool = True, clip: tuple[int, int] | None = (0, 127), debug_flag: int = 0,
                         repeat: int = 1, build_kwargs: dict | None = None,
                         mock: tuple[str, ...] = (), channel_shift: bool = False) -> OperatorRun:
    """Transposed convolution: ``int8(clip((conv2d_transpose(x, w) + bias) >> shift))``, w in (CI, CO, KH, KW);
    with ``channel_shift`` one shift per output channel (a tensor operand)."""
    env = env or get_env()
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.in_filter, wkl.out_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
    acc = conv2d_transpose_accumulate(x, w, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad),
                                      (wkl.hout_pad, wkl.wout_pad))
    shift = calibrated_shift(acc) if shift is None else shift
    shifts = _channel_shifts(rng, wkl.out_filter, shift) if channel_shift else None
    b = _bias(rng, wkl.out_filter, shift if shifts is None else shifts) if bias else None
    ref = requantize(acc, b, shift if shifts is None else shifts, clip)

    tiling = tiling or CT.conv2d_transpose_tiling(wkl, env, 1 + int(channel_shift))
    t0 = time.perf_counter()
    func = CT.conv2d_transpose_layer(wkl, env, shift=shift, bias=bias, clip=clip, channel_shift=channel_shift)
    mod = _build(CT.schedule_conv2d_transpose_packed(func, tiling, env=env, mock=mock), debug_flag, build_kwargs)
    build_s = time.perf_counter() - t0

    xpk = P.pack_nchw(x, env.BATCH, env.BLOCK_IN)
    wpk = CT.pack_conv2d_transpose_kernel(w, wkl, env)
    args = [xpk, wpk] + _per_channel_args(b, shifts, wkl.batch, env)
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH,
                 env.BLOCK_OUT)
    out, stats, run_s = _execute(mod, args, out_shape, env.out_dtype, repeat)
    got = P.unpack_nchw(out)
    compulsory = x.nbytes + w.nbytes + got.nbytes + wkl.batch // env.BATCH * wkl.out_filter * 4 * (bias + channel_shift)
    lanes = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
    return OperatorRun(name, bool(np.array_equal(got, ref)), build_s, run_s, stats, wkl.macs, compulsory, tiling, got,
                       ref, shift=shift if shifts is None else shifts, inside_fraction=inside_fraction(ref, clip),
                       dilated_uops=wkl.dilated_macs / lanes)
