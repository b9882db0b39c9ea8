"""Build, run and check whole layers (conv2d, dense) on the current device; used by tests, demo and bench.

The data are full-range random int8 (int32 bias); unless a ``shift`` is given, it is calibrated on
the numpy reference's accumulators so that as many outputs as possible lie strictly inside the clip
range (``LayerRun.inside_fraction``), and an exact comparison checks values, not only signs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..build_module import build, build_config
from ..environment import Environment, get_env
from ..reference import calibrated_shift, conv2d_accumulators, dense_accumulators, inside_fraction, requantize
from ..top import conv2d as C
from ..top import dense as D
from ..top import packing as P
from . import simulator


@dataclass
class LayerRun:
    name: str
    correct: bool
    build_s: float
    run_s: float                # wall time of one run (runtime + device): the best of the repeats after the first
    stats: dict
    macs: int                   # useful multiply-accumulates (padded channels included)
    compulsory_bytes: int       # inputs + weights + bias + outputs, each moved once
    tiling: Any = None
    output: np.ndarray | None = field(default=None, repr=False)
    expected: np.ndarray | None = field(default=None, repr=False)
    shift: int = 0
    clip: tuple[int, int] | None = (0, 127)
    first_s: float = 0.0        # wall time of the first run, which also compiles the host code (LLVM JIT)
    call: Callable[[], None] | None = field(default=None, repr=False)   # runs the module once more

    @property
    def inside_fraction(self) -> float:
        """Fraction of the expected outputs strictly inside the clip range (not saturated)."""
        return inside_fraction(self.expected, self.clip)

    @property
    def ideal_uops(self) -> float:
        env = get_env()
        return self.macs / (env.BATCH * env.BLOCK_IN * env.BLOCK_OUT)

    @property
    def uop_ratio(self) -> float:
        """GEMM uops issued / ideal (1.0: no wasted work)."""
        return self.stats.get("gemm_counter", 0) / self.ideal_uops

    @property
    def moved_bytes(self) -> int:
        s = self.stats
        return sum(s.get(k, 0) for k in ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "out_store_nbytes"))

    @property
    def dram_ratio(self) -> float:
        """DRAM bytes moved (data, weights, bias, outputs) / compulsory bytes."""
        return self.moved_bytes / self.compulsory_bytes


def _tensor(x: np.ndarray):
    import tvm
    return tvm.runtime.tensor(x, device=tvm.ext_dev(0))


def _run(mod, args, out_shape, out_dtype, repeat: int):
    """Run once (stats come from this run), then ``repeat`` more timed runs.

    Returns (output, stats, best of the timed runs or the first if none, first run, a function that runs again)."""
    import tvm
    dev_args = [_tensor(a) for a in args]
    out = tvm.runtime.empty(out_shape, out_dtype, device=tvm.ext_dev(0))

    def call():
        mod(*dev_args, out)

    simulator.clear_stats()
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    stats = simulator.stats()
    best = first if repeat < 1 else float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return out.numpy(), stats, best, first, call


def run_conv2d(wkl: C.Conv2DWorkload, tiling: C.Conv2DTiling | None = None, seed: int = 0, name: str = "conv2d",
               env: Environment | None = None, shift: int | None = None, bias: bool = True,
               clip: tuple[int, int] | None = (0, 127), debug_flag: int = 0, repeat: int = 0,
               build_kwargs: dict | None = None, mock: tuple[str, ...] = ()) -> LayerRun:
    """``int8(clip((conv2d(x, w) + bias) >> shift))`` built, run and compared with numpy. ``shift=None``:
    calibrated on the data (see the module doc); ``clip=None``: no clipping (the low 8 bits).
    ``repeat``: timed runs after the first (see ``LayerRun.run_s``)."""
    env = env or get_env()
    tiling = tiling or C.conv2d_tiling(wkl, env)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, wkl.hkernel, wkl.wkernel), dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,), dtype=np.int32) if bias else None
    acc = conv2d_accumulators(x, w, b, (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad))
    shift = calibrated_shift(acc, clip) if shift is None else shift
    t0 = time.perf_counter()
    func = C.conv2d_layer(wkl, env, shift=shift, bias=bias, clip=clip)
    sch = C.schedule_conv2d_packed(func, tiling, env=env, mock=mock)
    with build_config(debug_flag=debug_flag, **(build_kwargs or {})):
        mod = build(sch)
    build_s = time.perf_counter() - t0
    xpk = P.pack_nchw(P.pad_channels(x, 1, env.BLOCK_IN), env.BATCH, env.BLOCK_IN)
    wpk = P.pack_oihw(P.pad_channels(w, 1, env.BLOCK_IN), env.BLOCK_OUT, env.BLOCK_IN)
    args = [xpk, wpk] + ([P.pack_bias_conv(b, wkl.batch, env.BATCH, env.BLOCK_OUT)] if bias else [])
    oh, ow = wkl.out_height, wkl.out_width
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, oh, ow, env.BATCH, env.BLOCK_OUT)
    out, stats, run_s, first_s, call = _run(mod, args, out_shape, env.out_dtype, repeat)
    got = P.unpack_nchw(out)
    ref = requantize(acc, shift, clip)
    ci = xpk.shape[1] * env.BLOCK_IN
    macs = wkl.batch * wkl.out_filter * oh * ow * ci * wkl.hkernel * wkl.wkernel
    compulsory = xpk.nbytes + wpk.nbytes + got.nbytes + (wkl.batch // env.BATCH * wkl.out_filter * 4 if bias else 0)
    return LayerRun(name, bool(np.array_equal(got, ref)), build_s, run_s, stats, macs, compulsory, tiling, got, ref,
                    shift, clip, first_s, call)


def run_dense(wkl: D.DenseWorkload, tiling: D.DenseTiling | None = None, seed: int = 0, name: str = "dense",
              env: Environment | None = None, shift: int | None = None, bias: bool = True,
              clip: tuple[int, int] | None = (0, 127), debug_flag: int = 0, repeat: int = 0,
              build_kwargs: dict | None = None, mock: tuple[str, ...] = ()) -> LayerRun:
    """``int8(clip((x @ w.T + bias) >> shift))`` built, run and compared with numpy; ``wkl`` a ``DenseWorkload``
    (or a ``(batch, in_features, out_features)`` tuple); ``shift``/``clip``/``repeat`` as in :func:`run_conv2d`."""
    env = env or get_env()
    wkl = D.DENSE.workload(wkl)
    batch, in_features, out_features = wkl.batch, wkl.in_features, wkl.out_features
    tiling = tiling or D.dense_tiling(wkl, env)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (batch, in_features), dtype=np.int8)
    w = rng.integers(-128, 128, (out_features, in_features), dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, (out_features,), dtype=np.int32) if bias else None
    acc = dense_accumulators(x, w, b)
    shift = calibrated_shift(acc, clip) if shift is None else shift
    t0 = time.perf_counter()
    func = D.dense_layer(wkl, env, shift=shift, bias=bias, clip=clip)
    sch = D.schedule_dense_packed(func, tiling, env=env, mock=mock)
    with build_config(debug_flag=debug_flag, **(build_kwargs or {})):
        mod = build(sch)
    build_s = time.perf_counter() - t0
    args = [P.pack_nc(x, env.BATCH, env.BLOCK_IN), P.pack_oi(w, env.BLOCK_OUT, env.BLOCK_IN)]
    if bias:
        args.append(P.pack_bias_dense(b, batch, env.BATCH, env.BLOCK_OUT))
    out_shape = (batch // env.BATCH, out_features // env.BLOCK_OUT, env.BATCH, env.BLOCK_OUT)
    out, stats, run_s, first_s, call = _run(mod, args, out_shape, env.out_dtype, repeat)
    got = P.unpack_nc(out)
    ref = requantize(acc, shift, clip)
    compulsory = x.nbytes + w.nbytes + got.nbytes + (b.nbytes * batch // env.BATCH if bias else 0)
    return LayerRun(name, bool(np.array_equal(got, ref)), build_s, run_s, stats, batch * in_features * out_features,
                    compulsory, tiling, got, ref, shift, clip, first_s, call)
