"""Compiled TIR code drives the runtime through the registered global functions."""

import os
from pathlib import Path

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


def test_tensor_copy_between_cpu_and_device_memory():
    """TensorCopy (what a compiled network uses to pack and unpack) copies the bytes and refuses a size mismatch."""
    pytest.importorskip("vta_compiler")        # the ext_dev device
    tvm_bridge.register()
    vta_runtime.set_command_queue(CommandQueue(FsimDevice()))
    try:
        copy = tvm.get_global_func("vta.runtime.TensorCopy")
        x = np.random.default_rng(4).integers(-128, 128, (2, 3, 16), dtype=np.int8)
        on_dev = tvm.runtime.empty(x.shape, "int8", device=tvm.ext_dev(0))
        copy(tvm.runtime.tensor(x), on_dev)
        back = tvm.runtime.empty(x.shape, "int8")
        copy(on_dev, back)
        np.testing.assert_array_equal(back.numpy(), x)
        np.testing.assert_array_equal(on_dev.numpy(), x)
        with pytest.raises(vta_runtime.RuntimeUsageError, match="the source has 96 bytes, the destination 48"):
            copy(tvm.runtime.tensor(x), tvm.runtime.empty((3, 16), "int8"))
    finally:
        vta_runtime.set_command_queue(None)


def test_device_constants_are_copied_once_per_queue():
    pytest.importorskip("vta_compiler")
    tvm_bridge.register()
    vta_runtime.set_command_queue(CommandQueue(FsimDevice()))
    try:
        const = tvm.get_global_func("vta.runtime.DeviceConstant")
        w = np.arange(64, dtype=np.int32).reshape(4, 16)
        src = tvm.runtime.tensor(w)
        first = const(src)
        assert first.device.dlpack_device_type() == tvm.ext_dev(0).dlpack_device_type()
        np.testing.assert_array_equal(first.numpy(), w)
        again = const(src)
        assert again.data_ptr() == first.data_ptr()           # the same device copy
        other = const(tvm.runtime.tensor(w + 1))
        assert other.data_ptr() != first.data_ptr()
        np.testing.assert_array_equal(other.numpy(), w + 1)
        vta_runtime.set_command_queue(CommandQueue(FsimDevice()))   # another device: copies of its own
        fresh = const(src)
        np.testing.assert_array_equal(fresh.numpy(), w)
        assert vta_runtime.command_handle().device.dram.allocation_of(
            fresh.data_ptr() - vta_runtime.device.host_window(vta_runtime.command_handle().device)[0]) is not None
    finally:
        vta_runtime.set_command_queue(None)


def test_a_process_that_used_device_constants_exits_cleanly(tmp_path):
    """The runtime's cached handle on a Python function must not be released after Python is gone (that
    aborted the process at exit: "double free or corruption")."""
    pytest.importorskip("vta_compiler")
    import subprocess
    import sys
    script = tmp_path / "use_constants.py"
    script.write_text(
        "import numpy as np, tvm, vta_runtime, vta_compiler\n"
        "from vta_runtime import tvm_bridge, CommandQueue\n"
        "from sim.fsim import FsimDevice\n"
        "tvm_bridge.register()\n"
        "vta_runtime.set_command_queue(CommandQueue(FsimDevice()))\n"
        "const = tvm.get_global_func('vta.runtime.DeviceConstant')\n"
        "w = np.arange(64, dtype=np.int32).reshape(4, 16)\n"
        "assert (const(tvm.runtime.tensor(w)).numpy() == w).all()\n"
        "print('used')\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert "used" in run.stdout, run.stderr
    assert run.returncode == 0, f"exit status {run.returncode}: {run.stderr[-2000:]}"
