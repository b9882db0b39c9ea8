"""Compiled TIR code drives the runtime through the registered global functions."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import tirx  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

import vta_runtime  # noqa: E402
from sim.fsim import FsimDevice  # noqa: E402
from vta_hw.spec import AluOp, MemType  # noqa: E402
from vta_runtime import CommandQueue, tvm_bridge  # noqa: E402

NAMES = ["BufferAlloc", "BufferFree", "BufferCopy", "LoadBuffer2D", "StoreBuffer2D", "UopKernelBegin", "UopLoopBegin",
         "UopLoopEnd", "UopPush", "PushGEMMOp", "PushALUOp", "DepPush", "DepPop", "Synchronize", "SetDebugMode",
         "RuntimeShutdown", "HostAlloc", "HostFree", "DeviceConstant"]


@T.prim_func
def relu_add(acc: T.int64, out: T.int64, n: T.int32, imm: T.int32):
    h = T.Bind(tirx.call_intrin("handle", "tirx.tvm_static_handle"))
    T.evaluate(T.call_packed("vta.runtime.LoadBuffer2D", acc, 0, n, 1, n, 0, 0, 0, 0, 0, 3))
    # the kernel depends on imm, so imm is its cache signature (at most one free int, gotcha G15)
    if T.call_packed("vta.runtime.UopKernelBegin", h, imm) != 0:
        T.evaluate(T.call_packed("vta.runtime.UopLoopBegin", n, 1, 1, 0))
        T.evaluate(T.call_packed("vta.runtime.UopPush", 1, 0, 0, 0, 0, 2, 1, imm))
        T.evaluate(T.call_packed("vta.runtime.UopLoopEnd"))
    T.evaluate(T.call_packed("vta.runtime.PushALUOp", h, imm))
    T.evaluate(T.call_packed("vta.runtime.DepPush", 2, 3))
    T.evaluate(T.call_packed("vta.runtime.DepPop", 2, 3))
    T.evaluate(T.call_packed("vta.runtime.StoreBuffer2D", 0, 4, out, 0, n, 1, n))
    T.evaluate(T.call_packed("vta.runtime.DepPush", 3, 2))
    T.evaluate(T.call_packed("vta.runtime.DepPop", 3, 2))
    T.evaluate(T.call_packed("vta.runtime.Synchronize", 0))


def test_entry_points_registered():
    names = tvm_bridge.register()
    assert names == ["vta.runtime." + n for n in NAMES]
    for n in names:
        assert tvm.get_global_func(n, allow_missing=True) is not None


def test_compiled_code_runs_on_fsim():
    tvm_bridge.register()
    dev = FsimDevice()
    vta_runtime.set_command_queue(CommandQueue(dev))
    try:
        mod = tvm.tirx.build(relu_add, target="llvm")
        n = 12
        lanes = dev.config.BATCH * dev.config.BLOCK_OUT
        a = np.random.default_rng(3).integers(-100, 100, (n, lanes), dtype=np.int32)
        acc, out = dev.alloc(a.nbytes), dev.alloc(n * lanes)
        dev.write(acc, a)
        for imm in (5, -7, 5):
            mod(acc, out, n, imm)
            got = np.frombuffer(dev.read(out, n * lanes), np.int8).reshape(n, lanes)
            np.testing.assert_array_equal(got, (a + imm).astype(np.int8))
        cq = vta_runtime.command_handle()
        assert len(cq.kernels) == 2          # one per (call site, signature), reused by the third call ...
        assert dev.stats()["alu_counter"] == 3 * n
        assert dev.stats()["uop_load_nbytes"] == 3 * 4  # ... but reloaded into the UOP SRAM in every stream
        assert AluOp.ADD == 2 and MemType.ACC == 3
    finally:
        vta_runtime.set_command_queue(None)
