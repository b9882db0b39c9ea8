"""The original unit programs (test_vta_insn) compiled with vta.build and checked exactly against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import te

import vta_compiler as vta

from .programs import build, elementwise, run

SHAPE = (6, 6)


def _acc(env, rng, lo, hi, shape=SHAPE):
    return rng.integers(lo, hi, shape + (env.BATCH, env.BLOCK_OUT), dtype=np.int32)


def test_save_load_out(fsim):
    """acc load -> ALU >>0 -> int8 store; the copy idiom as a plain copy stage as well."""
    env = vta.get_env()
    rng = np.random.default_rng(0)
    a = _acc(env, rng, 1, 10)
    for stage in (lambda x, _: (lambda *i: x(*i) >> 0), lambda x, _: (lambda *i: x(*i))):
        sch, shape = elementwise(env, a.shape, [stage])
        np.testing.assert_array_equal(run(build(sch), [a], shape), a.astype(np.int8))
    s = fsim.stats()
    assert s["acc_load_nbytes"] == 2 * a.size * 4
    assert s["out_store_nbytes"] == 2 * a.size
    assert s["alu_counter"] == 2 * a.size // (env.BATCH * env.BLOCK_OUT)


@pytest.mark.parametrize("pad", [((2, 0, 0, 0), (0, 0, 0, 0)), ((0, 2, 0, 0), (0, 0, 0, 0)),
                                 ((0, 0, 0, 0), (2, 0, 0, 0)), ((0, 0, 0, 0), (0, 2, 0, 0)),
                                 ((1, 1, 0, 0), (1, 1, 0, 0))],
                         ids=["rows-before", "cols-before", "rows-after", "cols-after", "all-sides"])
def test_padded_load(fsim, pad):
    """A zero-padded load into the accumulator scope (pad folded into the DMA)."""
    env = vta.get_env()
    a = _acc(env, np.random.default_rng(1), -50, 50, (3, 5))
    sch, shape = elementwise(env, a.shape, [lambda x, _: (lambda *i: x(*i) >> 0)], pad=pad)
    out = run(build(sch), [a], shape)
    ref = np.pad(a, [(b, e) for b, e in zip(pad[0], pad[1])]).astype(np.int8)
    np.testing.assert_array_equal(out, ref)


IMM = 3
ALU_CASES = {
    "shl_imm": (lambda x, b: (lambda *i: x(*i) << IMM), lambda a, b: a << IMM, 1),
    "max_imm": (lambda x, b: (lambda *i: te.max(x(*i), IMM)), lambda a, b: np.maximum(a, IMM), 1),
    "max_tensor": (lambda x, b: (lambda *i: te.max(x(*i), b[1](*i))), lambda a, b: np.maximum(a, b), 2),
    "add_imm": (lambda x, b: (lambda *i: x(*i) + IMM), lambda a, b: a + IMM, 1),
    "add_tensor": (lambda x, b: (lambda *i: x(*i) + b[1](*i)), lambda a, b: a + b, 2),
    "shr_imm": (lambda x, b: (lambda *i: x(*i) >> IMM), lambda a, b: a >> IMM, 1),
    "sub_imm": (lambda x, b: (lambda *i: x(*i) - IMM), lambda a, b: a - IMM, 1),
    "min_imm_left": (lambda x, b: (lambda *i: te.min(IMM, x(*i))), lambda a, b: np.minimum(a, IMM), 1),
    "shr_tensor": (lambda x, b: (lambda *i: x(*i) >> b[1](*i)), lambda a, b: a >> b, 2),
}


@pytest.mark.parametrize("case", sorted(ALU_CASES))
def test_alu(fsim, case):
    env = vta.get_env()
    stage, ref_fn, n_in = ALU_CASES[case]
    rng = np.random.default_rng(2)
    a = _acc(env, rng, -16, 16, (8, 8))
    b = _acc(env, rng, 0, 5, (8, 8)) if case == "shr_tensor" else _acc(env, rng, -16, 16, (8, 8))
    sch, shape = elementwise(env, a.shape, [stage], n_inputs=n_in)
    out = run(build(sch), [a, b][:n_in], shape)
    np.testing.assert_array_equal(out, ref_fn(a, b).astype(np.int32).astype(np.int8))


def test_relu(fsim):
    env = vta.get_env()
    a = _acc(env, np.random.default_rng(3), -256, 256, (8, 10))
    sch, shape = elementwise(env, a.shape, [lambda x, _: (lambda *i: te.max(x(*i), 0)),
                                            lambda x, _: (lambda *i: te.min(x(*i), 127))])
    np.testing.assert_array_equal(run(build(sch), [a], shape), np.clip(a, 0, 127).astype(np.int8))


def test_shift_and_scale(fsim):
    env = vta.get_env()
    a = _acc(env, np.random.default_rng(4), -10, 10, (2, 8))
    sch, shape = elementwise(env, a.shape, [lambda x, _: (lambda *i: x(*i) + 5),
                                            lambda x, _: (lambda *i: x(*i) >> 2)])
    np.testing.assert_array_equal(run(build(sch), [a], shape), ((a + 5) >> 2).astype(np.int8))


def test_fused_epilogue_is_one_chain(fsim):
    """One element-wise stage with several ops becomes a chain of in-place ALU instructions."""
    env = vta.get_env()
    rng = np.random.default_rng(5)
    a, b = _acc(env, rng, -5000, 5000, (4, 4)), _acc(env, rng, -300, 300, (4, 4))
    sch, shape = elementwise(env, a.shape, [lambda x, bs: (lambda *i: te.min(te.max((x(*i) + bs[1](*i)) >> 4, 0),
                                                                               100))], n_inputs=2)
    out = run(build(sch), [a, b], shape)
    np.testing.assert_array_equal(out, np.clip((a + b) >> 4, 0, 100).astype(np.int8))
    assert fsim.stats()["alu_counter"] == 4 * a.size // (env.BATCH * env.BLOCK_OUT)


def test_lower_shows_runtime_calls():
    env = vta.get_env()
    sch, _ = elementwise(env, (2, 2, env.BATCH, env.BLOCK_OUT), [lambda x, _: (lambda *i: x(*i) >> 1)])
    text = vta.lower(sch)["main"].script()
    for call in ("LoadBuffer2D", "UopKernelBegin", "PushALUOp", "StoreBuffer2D", "DepPush", "DepPop", "Synchronize"):
        assert f"vta.runtime.{call}" in text
