"""Every schedule, expression or shape VTA cannot run is refused at compile time with a clear message."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm import s_tir, te, topi

import vta_compiler as vta
from vta_compiler import VTACompileError
from vta_compiler.top import Conv2DTiling, Conv2DWorkload, conv2d_layer, schedule_conv2d_packed

from .programs import build, elementwise

SHAPE = (4, 4)


def _shape(env, dims=SHAPE):
    return tuple(dims) + (env.BATCH, env.BLOCK_OUT)


def refuses(sch, pattern, **kwargs):
    with pytest.raises(VTACompileError, match=pattern):
        build(sch, **kwargs)


@pytest.mark.parametrize("stage,n_in,pattern", [
    (lambda x, b: (lambda *i: x(*i) * b[1](*i)), 2, r"MUL operation, which VTA does not support"),
    (lambda x, b: (lambda *i: x(*i) - b[1](*i)), 2, r"no SUB operation"),
    (lambda x, b: (lambda *i: x(*i) << b[1](*i)), 2, r"left shift by a tensor is not supported"),
    (lambda x, b: (lambda *i: x(*i) + 70000), 1, r"immediate 70000 does not fit the ALU's 16-bit signed field"),
    (lambda x, b: (lambda *i: te.truncdiv(x(*i), 3)), 1, r"has no VTA ALU operation"),
    (lambda x, b: (lambda *i: 5 - x(*i)), 1, r"must have the in-place operand on the left"),
    (lambda x, b: (lambda i, j, c, k: x(j, i, c, k) + 1), 1, r"ALU ops work in place"),
], ids=["mul", "sub-tensor", "shl-tensor", "imm-range", "div", "imm-minus-x", "not-in-place"])
def test_alu_expressions(stage, n_in, pattern):
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env), [stage], n_inputs=n_in)
    refuses(sch, pattern)


def test_acc_8bit_load_is_refused():
    env = vta.get_env()
    a = te.placeholder(_shape(env), "int8", name="a")
    a_buf = te.compute(a.shape, lambda *i: a(*i).astype("int32"), name="a_buf")
    s0 = te.compute(a.shape, lambda *i: a_buf(*i) >> 0, name="s0")
    res = te.compute(a.shape, lambda *i: s0(*i).astype("int8"), name="res")
    sch = s_tir.Schedule(te.create_prim_func([a, res]))
    for name, scope, pr in (("a_buf", env.acc_scope, env.dma_copy), ("s0", env.acc_scope, env.alu)):
        b = sch.get_sblock(name)
        sch.set_scope(b, 0, scope)
        sch.annotate(sch.get_loops(b)[0], "pragma_" + pr, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    refuses(sch, r"ACC_8BIT load, which VTA does not support")


def _store_program(env, out_dtype, src_scope):
    a = te.placeholder(_shape(env), env.acc_dtype if src_scope == env.acc_scope else env.inp_dtype, name="a")
    a_buf = te.compute(a.shape, lambda *i: a(*i), name="a_buf")
    res = te.compute(a.shape, lambda *i: a_buf(*i).astype(out_dtype), name="res")
    sch = s_tir.Schedule(te.create_prim_func([a, res]))
    b = sch.get_sblock("a_buf")
    sch.set_scope(b, 0, src_scope)
    sch.annotate(sch.get_loops(b)[0], "pragma_" + env.dma_copy, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    return sch


def test_store_needs_an_alu_write_first():
    """Gotcha G4: OUT is written only by GEMM/ALU, so load -> store without an ALU op is refused."""
    env = vta.get_env()
    refuses(_store_program(env, env.out_dtype, env.acc_scope), r"would store stale data.*copy idiom")


def test_store_of_int32_is_refused():
    env = vta.get_env()
    refuses(_store_program(env, "int32", env.acc_scope), r"VTA stores the OUT buffer, whose elements are int8")


def test_store_from_input_buffer_is_refused():
    env = vta.get_env()
    refuses(_store_program(env, env.out_dtype, env.inp_scope), r"only accumulator .* data can be stored")


def test_dma_pattern_that_is_not_2d():
    """Padding on two dims plus an outer dim gives a 3-D copy: refused, with advice."""
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env, (2, 3, 5)), [lambda x, _: (lambda *i: x(*i) >> 0)],
                         pad=((0, 1, 1, 0, 0), (0, 1, 1, 0, 0)))
    refuses(sch, r"still has 3 dimensions .* Put the dma_copy pragma on an inner loop")


def test_dma_of_partial_elements():
    env = vta.get_env()
    a = te.placeholder(_shape(env), env.acc_dtype, name="a")
    lanes = env.BLOCK_OUT
    a_buf = te.compute(a.shape, lambda i, j, b, k: a(i, j, b, lanes - 1 - k), name="a_buf")
    s0 = te.compute(a.shape, lambda *i: a_buf(*i) >> 0, name="s0")
    res = te.compute(a.shape, lambda *i: s0(*i).astype("int8"), name="res")
    sch = s_tir.Schedule(te.create_prim_func([a, res]))
    for name, pr in (("a_buf", env.dma_copy), ("s0", env.alu)):
        b = sch.get_sblock(name)
        sch.set_scope(b, 0, env.acc_scope)
        sch.annotate(sch.get_loops(b)[0], "pragma_" + pr, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    refuses(sch, r"innermost loops must copy whole ACC elements")


def test_nonzero_padding_is_refused():
    env = vta.get_env()
    a = te.placeholder(_shape(env), env.acc_dtype, name="a")
    a_buf = topi.nn.pad(a, (1, 0, 0, 0), (0, 0, 0, 0), pad_value=7, name="a_buf")
    s0 = te.compute(a_buf.shape, lambda *i: a_buf(*i) >> 0, name="s0")
    res = te.compute(a_buf.shape, lambda *i: s0(*i).astype("int8"), name="res")
    sch = s_tir.Schedule(te.create_prim_func([a, res]))
    for name, pr in (("a_buf", env.dma_copy), ("s0", env.alu)):
        b = sch.get_sblock(name)
        sch.set_scope(b, 0, env.acc_scope)
        sch.annotate(sch.get_loops(b)[0], "pragma_" + pr, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    refuses(sch, r"padding must be zero")


def test_on_chip_buffer_touched_by_host_code():
    """An accumulator stage without the alu pragma would run on the CPU: refused."""
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env), [lambda x, _: (lambda *i: x(*i) >> 1)])
    sch.unannotate(sch.get_loops(sch.get_sblock("s0"))[0], "pragma_" + env.alu)
    refuses(sch, r"host code (reads|writes) the on-chip buffer .* which the CPU cannot access")


def test_dma_pragma_on_compute_is_refused():
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env), [lambda x, _: (lambda *i: x(*i) >> 1)])
    loop = sch.get_loops(sch.get_sblock("s0"))[0]
    sch.unannotate(loop, "pragma_" + env.alu)
    sch.annotate(loop, "pragma_" + env.dma_copy, 1)
    refuses(sch, r"both buffers are on-chip|needs a plain copy")


def test_in_place_base_used_again():
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env), [lambda x, b: (lambda *i: x(*i) + 1),
                                            lambda x, b: (lambda *i: x(*i) + b[0](*i))])
    refuses(sch, r"works in place on a0_buf_local.acc_buffer .* is used again afterwards by an ALU op")


def test_disabled_vta_pass_is_reported():
    env = vta.get_env()
    sch, _ = elementwise(env, _shape(env), [lambda x, _: (lambda *i: x(*i) >> 1)])
    refuses(sch, r"was not lowered to VTA instructions \(is one of the VTA passes disabled\?\)",
            disabled_pass=["vta.InjectDMA"])


WKL = Conv2DWorkload(1, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1)


def test_tiles_that_do_not_fit_on_chip():
    wkl = Conv2DWorkload(1, 28, 28, 64, 64, 3, 3, 1, 1, 1, 1)
    with pytest.raises(VTACompileError) as info:
        build(schedule_conv2d_packed(conv2d_layer(wkl), Conv2DTiling(4, 28, 28, 4, 2, 1)))
    msg = str(info.value)
    assert "the schedule's tiles do not fit VTA's on-chip memory" in msg
    assert re.search(r"the INP buffer \(local.inp_buffer\) holds 2048 elements of 16 bytes \(LOG_INP_BUFF_SIZE=15\) "
                     r"but the schedule needs 3600: data_pad_local.inp_buffer: 3600", msg), msg
    assert re.search(r"the ACC buffer \(local.acc_buffer\) holds 2048 elements of 64 bytes \(LOG_ACC_BUFF_SIZE=17\) "
                     r"but the schedule needs 3140: conv2d_local.acc_buffer_vt0\+epilogue_local.acc_buffer_vt0: 1568",
                     msg), msg


def test_no_tiling_fits_a_small_weight_buffer():
    """A 7x7 kernel needs 49 weight blocks in the smallest tile; a 4 KiB WGT buffer holds 16."""
    env = vta.get_env()
    with vta.Environment(env.config.replace(LOG_WGT_BUFF_SIZE=12)) as small:
        wkl = Conv2DWorkload(1, 14, 14, 16, 16, 7, 7, 3, 3, 1, 1)
        with pytest.raises(VTACompileError, match=r"no tiling fits the on-chip buffers of "
                           + re.escape(small.MODEL) + r": the smallest tile \(one block of every loop\) "
                           r"needs WGT buffer elements 49 > 16$"):
            vta.top.conv2d_tiling(wkl)


def test_tiling_must_divide_the_shape():
    with pytest.raises(VTACompileError, match=r"5 does not divide the 14 output rows"):
        schedule_conv2d_packed(conv2d_layer(WKL), Conv2DTiling(1, 5, 14, 1))


def test_shapes_that_do_not_divide_into_blocks():
    with pytest.raises(VTACompileError, match=r"output channels 20 must be multiples of BATCH=1 and BLOCK_OUT=16"):
        conv2d_layer(Conv2DWorkload(1, 8, 8, 16, 20, 3, 3, 1, 1, 1, 1))
    with pytest.raises(VTACompileError, match=r"input features 40 must be a multiple of 16"):
        vta.top.dense_layer(vta.top.DenseWorkload(1, 40, 16))


def test_packing_refuses_ragged_channels():
    with pytest.raises(ValueError, match=r"channel count 20 is not a multiple of 16 \(pad it first"):
        vta.top.pack_nchw(np.zeros((1, 20, 2, 2), np.int8), 1, 16)


def test_uop_kernel_with_two_free_variables():
    """Gotcha G15: a cached uop kernel may depend on at most one variable from outside it."""
    env = vta.get_env()
    func = vta.top.dense_layer(vta.top.DenseWorkload(4 * env.BATCH, 2 * env.BLOCK_IN, 2 * env.BLOCK_OUT), bias=False,
                               clip=None, shift=0)
    sch = s_tir.Schedule(func)
    dense = sch.get_sblock("dense")
    sch.set_scope(dense, 0, env.acc_scope)
    sch.set_scope(sch.get_sblock("epilogue"), 0, env.acc_scope)
    b, co, b_i, c_i, ko, k_i = sch.get_loops(dense)
    sch.reorder(ko, b_i, c_i, k_i)
    inp = sch.cache_read(dense, 0, env.inp_scope)
    sch.compute_at(inp, co, preserve_unit_loops=True)
    wgt = sch.cache_read(dense, 1, env.wgt_scope)
    sch.compute_at(wgt, co, preserve_unit_loops=True)
    init = sch.decompose_reduction(dense, ko)
    sch.tensorize(sch.get_loops(init)[-1], env.gemm_reset)
    sch.tensorize(c_i, env.gemm)
    for blk, pr in ((inp, env.dma_copy), (wgt, env.dma_copy)):
        sch.annotate(sch.get_loops(blk)[-4], "pragma_" + pr, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("epilogue"))[0], "pragma_" + env.alu, 1)
    sch.annotate(sch.get_loops(sch.get_sblock("res"))[0], "pragma_" + env.dma_copy, 1)
    refuses(sch, r"the uop kernel depends on 2 variables from outside it \(b, co\); a cached kernel may depend on "
                 r"at most one \(its signature, gotcha G15\)")
