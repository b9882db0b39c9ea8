"""Environment: every number from vta_hw.spec, targets, mock, dev constants, the context-manager stack."""

from __future__ import annotations

import re

import pytest

import vta_compiler as vta
import vta_runtime
from sim.fsim import FsimDevice
from vta_compiler.testing.layers import run_conv2d, run_dense
from vta_compiler.top import Conv2DTiling, Conv2DWorkload, DenseTiling, DenseWorkload
from vta_hw.spec import AluOp, MemType, load_config

from .checks import assert_exact

NUMBERS = ["BATCH", "BLOCK_IN", "BLOCK_OUT", "INP_WIDTH", "WGT_WIDTH", "ACC_WIDTH", "OUT_WIDTH", "INP_ELEM_BITS",
           "WGT_ELEM_BITS", "ACC_ELEM_BITS", "OUT_ELEM_BITS", "INP_ELEM_BYTES", "WGT_ELEM_BYTES", "ACC_ELEM_BYTES",
           "OUT_ELEM_BYTES", "UOP_BUFF_SIZE", "INP_BUFF_SIZE", "WGT_BUFF_SIZE", "ACC_BUFF_SIZE", "OUT_BUFF_SIZE",
           "INP_BUFF_DEPTH", "WGT_BUFF_DEPTH", "ACC_BUFF_DEPTH", "UOP_BUFF_DEPTH", "LOG_BATCH", "LOG_BLOCK",
           "LOG_BLOCK_IN", "LOG_BLOCK_OUT", "LOG_OUT_WIDTH", "LOG_OUT_BUFF_SIZE", "TARGET", "HW_VER", "MODEL",
           "BITSTREAM"]


def test_numbers_come_from_the_config():
    cfg = load_config()
    env = vta.get_env()
    for name in NUMBERS:
        assert getattr(env, name) == getattr(cfg, name), name
    assert (env.inp_dtype, env.wgt_dtype, env.acc_dtype, env.out_dtype) == ("int8", "int8", "int32", "int8")
    assert (env.inp_scope, env.wgt_scope, env.acc_scope) == ("local.inp_buffer", "local.wgt_buffer",
                                                             "local.acc_buffer")
    assert env.MODEL == "sim_1x16_i8w8a32_15_15_18_17"
    assert env.DEBUG_DUMP_INSN == vta_runtime.DEBUG_DUMP_INSN and env.DEBUG_FORCE_SERIAL == 1 << 5


def test_context_manager_stack():
    base = vta.get_env()
    with vta.Environment(base.config.replace(TARGET="tsim")) as e1:
        assert vta.get_env() is e1 and e1.TARGET == "tsim"
        with vta.Environment(base.config.replace(TARGET="pynq", LOG_BATCH=1)) as e2:
            assert vta.get_env() is e2 and e2.BATCH == 2
        assert vta.get_env() is e1
    assert vta.get_env() is base


def test_targets():
    env = vta.get_env()
    t = env.target
    assert t.kind.name == "ext_dev" and list(t.keys) == ["vta", "cpu"] and str(t.attrs["model"]) == env.MODEL
    assert t.host.kind.name == "llvm"
    for target, triple in (("pynq", "armv7-none-linux-gnueabihf"), ("ultra96", "aarch64-linux-gnu"),
                           ("de10nano", "armv7-none-linux-gnueabihf"), ("zcu104", "aarch64-linux-gnu")):
        with vta.Environment(env.config.replace(TARGET=target)) as e:
            assert str(e.target_host.attrs["mtriple"]) == triple
            assert str(e.target.host.attrs["mtriple"]) == triple


def test_mock_and_dev_constants():
    env = vta.get_env()
    m = env.mock
    assert (m.dma_copy, m.alu, m.mock_mode) == ("skip_dma_copy", "skip_alu", True)
    assert (env.dma_copy, env.alu, env.mock_mode) == ("dma_copy", "alu", False)
    assert m.gemm != env.gemm and m.BATCH == env.BATCH
    d = env.dev
    assert (d.MEM_ID_UOP, d.MEM_ID_WGT, d.MEM_ID_INP, d.MEM_ID_ACC, d.MEM_ID_OUT) == tuple(
        int(x) for x in (MemType.UOP, MemType.WGT, MemType.INP, MemType.ACC, MemType.OUT))
    assert (d.ALU_OPCODE_MIN, d.ALU_OPCODE_MAX, d.ALU_OPCODE_ADD, d.ALU_OPCODE_SHR) == tuple(
        int(x) for x in (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR))
    assert (d.QID_LOAD_INP, d.QID_LOAD_WGT, d.QID_LOAD_OUT, d.QID_COMPUTE, d.QID_STORE_OUT) == (1, 1, 2, 2, 3)


BLOCK8 = {"LOG_BLOCK": 3, "LOG_INP_BUFF_SIZE": 14, "LOG_WGT_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 16}


@pytest.mark.parametrize("changes", [{"LOG_BATCH": 1}, BLOCK8, {**BLOCK8, "LOG_BATCH": 1, "LOG_ACC_BUFF_SIZE": 15}],
                         ids=["batch2", "block8", "batch2-block8-smallacc"])
def test_other_configurations(changes):
    """The compiler follows the config: other BATCH / BLOCK sizes compile and run exactly on fsim."""
    cfg = vta.get_env().config.replace(**changes)
    with vta.Environment(cfg) as env:
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
        try:
            b, blk = env.BATCH, env.BLOCK_IN
            assert_exact(run_dense(DenseWorkload(4 * b, 4 * blk, 4 * blk), DenseTiling(2, 2, 2, 2, 1)))
            assert_exact(run_conv2d(Conv2DWorkload(2 * b, 6, 6, 2 * blk, 4 * blk, 3, 3, 1, 1, 1, 1),
                                    Conv2DTiling(4, 6, 3, 1, 2, 1)))
        finally:
            vta_runtime.set_command_queue(None)


def test_small_uop_buffer_moves_loops_to_the_host():
    """A GEMM nest whose unrolled uops exceed the kernel budget leaves its outer loop to the host; that loop's
    variable becomes the kernel's signature (G15: one variable)."""
    import vta_compiler.top as top
    cfg = vta.get_env().config.replace(LOG_UOP_BUFF_SIZE=9)          # 128 uops
    with vta.Environment(cfg) as env:
        wkl = Conv2DWorkload(1, 8, 8, 2 * env.BLOCK_IN, 2 * env.BLOCK_OUT, 3, 3, 1, 1, 1, 1)
        t = Conv2DTiling(2, 4, 4, 2, 1, 1)
        text = vta.lower(top.schedule_conv2d_packed(top.conv2d_layer(wkl), t))["main"].script()
        assert re.search(r"for (co_\d+) in range\(2\):\s+vta_kernel_\d+: .*\s+if T.call_packed\("
                         r"\"vta.runtime.UopKernelBegin\", vta_kernel_\d+, \1\)", text), text
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
        try:
            assert_exact(run_conv2d(wkl, t))
        finally:
            vta_runtime.set_command_queue(None)
