"""ACC_8BIT loads from the compiler (ISA extension ``acc_8bit``): an int8 tensor copied into the accumulator
scope, sign-extended and zero-padded, on fsim against numpy; and the refusal without the extension."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import s_tir, te, topi

import vta_compiler as vta
from vta_compiler import VTACompileError

from .programs import build, run

SHAPE = (5, 6)


@pytest.fixture
def ext_env(ext_fsim):
    """The default config with the acc_8bit extension: the compile environment and an fsim behind the runtime."""
    return ext_fsim("acc_8bit")


def _program(env, shape, *, pad=None, widen_in_copy=False, with_acc=False, shift=0):
    """int8 ``a`` (ACC_8BIT, optionally padded) [+ int32 ``b`` (ACC)] >> shift, stored int8.

    ``widen_in_copy``: the on-chip copy is int32 (the cast is in the DMA copy), else it is int8 and the ALU
    stage reads it with a cast."""
    full = shape + (env.BATCH, env.BLOCK_OUT)
    a = te.placeholder(full, "int8", name="a")
    src = topi.nn.pad(a, pad[0], pad[1], name="a_pad") if pad is not None else a
    a_buf = te.compute(src.shape, lambda *i: src(*i).astype("int32") if widen_in_copy else src(*i), name="a_buf")
    args = [a]
    b_buf = None
    if with_acc:
        b = te.placeholder(a_buf.shape, env.acc_dtype, name="b")
        b_buf = te.compute(b.shape, lambda *i: b(*i), name="b_buf")
        args.append(b)

    def stage(*i):
        x = a_buf(*i).astype("int32")
        if b_buf is not None:
            x = x + b_buf(*i)
        return x >> shift
    s0 = te.compute(a_buf.shape, stage, name="s0")
    res = te.compute(s0.shape, lambda *i: s0(*i).astype(env.out_dtype), name="res")
    sch = s_tir.Schedule(te.create_prim_func(args + [res]))
    if pad is not None:
        sch.compute_inline(sch.get_sblock("a_pad"))
    copies = ["a_buf"] + (["b_buf"] if with_acc else [])
    for name in copies:
        sch.set_scope(sch.get_sblock(name), 0, env.acc_scope)
        sch.annotate(sch.get_loops(sch.get_sblock(name))[0], "pragma_" + env.dma_copy, 1)
    sch.set_scope(sch.get_sblock("s0"), 0, env.acc_scope)
    sch.annotate(sch.get_loops(sch.get_sblock("s0"))[0], "pragma_" + env.alu, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    return sch, tuple(int(x) for x in res.shape)


def _int8(env, rng, shape=SHAPE):
    """Full-range int8 (negative values check the sign extension)."""
    return rng.integers(-128, 128, shape + (env.BATCH, env.BLOCK_OUT), dtype=np.int8)


@pytest.mark.parametrize("widen_in_copy", [False, True], ids=["int8-buffer", "int32-buffer"])
@pytest.mark.parametrize("pad", [None, ((1, 0, 0, 0), (0, 2, 0, 0)), ((0, 2, 0, 0), (1, 1, 0, 0))],
                         ids=["no-pad", "pad-rows-cols", "pad-all"])
def test_acc_8bit_load(ext_env, pad, widen_in_copy):
    env, dev = ext_env
    a = _int8(env, np.random.default_rng(5))
    sch, shape = _program(env, SHAPE, pad=pad, widen_in_copy=widen_in_copy, shift=1)
    out = run(build(sch), [a], shape)
    ref = a.astype(np.int32)
    if pad is not None:
        ref = np.pad(ref, [(b, e) for b, e in zip(pad[0], pad[1])])
    ref = (ref >> 1).astype(np.int8)        # an arithmetic shift: negative values stay negative
    assert (ref < 0).any() and (ref > 0).any() and (ref == 0).any()
    np.testing.assert_array_equal(out, ref)
    assert dev.stats()["acc_load_nbytes"] == a.size      # one DRAM byte per int8 value (pads not counted)


def test_acc_8bit_added_to_int32(ext_env):
    """The residual pattern: int32 accumulators plus a sign-extended int8 tensor, with a register-operand ADD."""
    env, dev = ext_env
    rng = np.random.default_rng(6)
    a = _int8(env, rng)
    b = rng.integers(-300, 300, a.shape, dtype=np.int32)
    sch, shape = _program(env, SHAPE, with_acc=True, shift=2)
    out = run(build(sch), [a, b], shape)
    ref = ((a.astype(np.int32) + b) >> 2).astype(np.int8)
    assert len(np.unique(ref)) > 100
    np.testing.assert_array_equal(out, ref)
    assert dev.stats()["acc_load_nbytes"] == a.size + 4 * b.size


@pytest.mark.parametrize("widen_in_copy", [False, True], ids=["int8-buffer", "int32-buffer"])
def test_acc_8bit_refused_without_the_extension(widen_in_copy):
    env = vta.get_env()
    assert not env.config.isa.has("acc_8bit")
    sch, _ = _program(env, SHAPE, widen_in_copy=widen_in_copy)
    with pytest.raises(VTACompileError, match=r"ACC_8BIT load.*ISA_EXTENSIONS.*'acc_8bit'"):
        build(sch)


def test_acc_8bit_refuses_other_dtypes(ext_env):
    env, _ = ext_env
    a = te.placeholder(SHAPE + (env.BATCH, env.BLOCK_OUT), "int16", name="a")
    a_buf = te.compute(a.shape, lambda *i: a(*i).astype("int32"), name="a_buf")
    res = te.compute(a.shape, lambda *i: (a_buf(*i) >> 0).astype("int8"), name="res")
    sch = s_tir.Schedule(te.create_prim_func([a, res]))
    sch.set_scope(sch.get_sblock("a_buf"), 0, env.acc_scope)
    sch.annotate(sch.get_loops(sch.get_sblock("a_buf"))[0], "pragma_" + env.dma_copy, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    with pytest.raises(VTACompileError, match=r"loads int32 data, or int8 data with an ACC_8BIT load; a is int16"):
        build(sch)
