"""build_config / lower / build, the registered "vta" pipeline, debug dumps, and cross-compiling for boards."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import tirx

import vta_compiler as vta
import vta_runtime
from vta_compiler.testing.layers import run_dense
from vta_compiler.top import DenseTiling, DenseWorkload, dense_layer, schedule_dense_packed

from .checks import assert_exact
from .programs import elementwise, on_device, run


def _small(env):
    return elementwise(env, (2, 3, env.BATCH, env.BLOCK_OUT), [lambda x, _: (lambda *i: x(*i) >> 1)])


def test_pipeline_is_registered_by_name(fsim):
    """tvm.tirx.build(..., pipeline="vta") and tvm.compile(..., tir_pipeline="vta") use the VTA passes."""
    env = vta.get_env()
    sch, shape = _small(env)
    a = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    with vta.build_config():
        m1 = tvm.tirx.build(sch.mod, target=env.target, pipeline="vta")
        m2 = tvm.compile(sch.mod, target=env.target, tir_pipeline="vta")
    for m in (m1, m2):
        np.testing.assert_array_equal(run(m, [a], shape), (a >> 1).astype(np.int8))


def test_build_config_passes_kwargs_through(fsim):
    """disabled_pass reaches the PassContext: without dependency tokens, FORCE_SERIAL still gives right results."""
    env = vta.get_env()
    seen = []

    @tirx.transform.prim_func_pass(opt_level=0, name="probe")
    def probe(func, mod, ctx):
        seen.append(func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else "?")
        return func

    ctx = vta.build_config(debug_flag=env.DEBUG_FORCE_SERIAL, opt_level=3, disabled_pass=["vta.InjectDepTokens"],
                           config={"tirx.add_lower_pass": [(1, probe)], "tirx.disable_vectorize": True})
    assert ctx.opt_level == 3
    assert "vta.InjectDepTokens" in list(ctx.disabled_pass)
    assert len(ctx.config["tirx.add_lower_pass"]) == 2       # the user's pass and the debug prologue
    tiling = DenseTiling(16 // env.BATCH, 2, 1, 2, 1)
    sch = schedule_dense_packed(dense_layer(DenseWorkload(16, 32, 32), bias=False), tiling)
    assert "vta.runtime.DepPush" in vta.lower(sch)["main"].script()
    with vta.build_config(disabled_pass=["vta.InjectDepTokens"]):
        assert "vta.runtime.DepPush" not in vta.lower(sch)["main"].script()
    r = run_dense(DenseWorkload(16, 32, 32), tiling, bias=False, debug_flag=env.DEBUG_FORCE_SERIAL,
                  build_kwargs={"disabled_pass": ["vta.InjectDepTokens"],
                                "config": {"tirx.add_lower_pass": [(1, probe)]}})
    assert_exact(r)
    assert seen == ["main"]


def test_lower_and_build_respect_an_active_config():
    """G11: an active build_config is kept (the original looked for the wrong key and replaced it)."""
    env = vta.get_env()
    sch, _ = _small(env)
    with vta.build_config(debug_flag=env.DEBUG_DUMP_INSN):
        text = vta.lower(sch)["main"].script()
    assert "vta.runtime.SetDebugMode" in text
    assert "vta.runtime.SetDebugMode" not in vta.lower(sch)["main"].script()


def test_debug_dump_insn_and_uop(fsim, capsys):
    env = vta.get_env()
    sch, shape = _small(env)
    a = np.ones(shape, np.int32) * 6
    with vta.build_config(debug_flag=env.DEBUG_DUMP_INSN | env.DEBUG_DUMP_UOP):
        m = vta.build(sch)
    run(m, [a], shape)
    out = capsys.readouterr().out
    assert "VTA instruction stream:" in out
    assert "FINISH" in out and "ALU" in out
    assert "uop kernel" in out and "SHR" not in out.split("uop kernel")[0]
    # the flags are cleared after the kernel: a second module without the flag prints nothing
    run(vta.build(sch), [a], shape)
    assert "VTA instruction stream" not in capsys.readouterr().out


def test_kernels_are_recorded_once_and_reused(fsim):
    from vta_compiler.testing.reference import calibrated_shift, dense_accumulators, inside_fraction, requantize
    from vta_compiler.top import packing as P
    env = vta.get_env()
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, (64,), dtype=np.int32)
    acc = dense_accumulators(x, w, b)
    shift = calibrated_shift(acc, (0, 127))
    want = requantize(acc, shift, (0, 127))
    assert inside_fraction(want, (0, 127)) >= 0.3
    m = vta.build(schedule_dense_packed(dense_layer(DenseWorkload(16, 64, 64), shift=shift),
                                        DenseTiling(16 // env.BATCH, 4, 2, 2, 1)))
    args = on_device(P.pack_nc(x, env.BATCH, env.BLOCK_IN), P.pack_oi(w, env.BLOCK_OUT, env.BLOCK_IN),
                     P.pack_bias_dense(b, 16, env.BATCH, env.BLOCK_OUT))
    out = tvm.runtime.empty((16 // env.BATCH, 4, env.BATCH, 16), "int8", device=tvm.ext_dev(0))
    m(*args, out)
    cq = vta_runtime.command_handle()
    n = len(cq.kernels)
    np.testing.assert_array_equal(P.unpack_nc(out.numpy()), want)
    out.copyfrom(np.zeros(out.shape, np.int8))
    m(*args, out)
    assert len(cq.kernels) == n                        # the second call records no kernel ...
    np.testing.assert_array_equal(P.unpack_nc(out.numpy()), want)   # ... and the cached ones compute the same


def test_same_module_on_another_device():
    """The compiled module calls the runtime, so it runs on whichever device the command queue holds."""
    from sim.fsim import FsimDevice
    env = vta.get_env()
    sch, shape = _small(env)
    m = vta.build(sch)
    a = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) - 20
    try:
        for _ in range(2):
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice()))
            np.testing.assert_array_equal(run(m, [a], shape), (a >> 1).astype(np.int8))
    finally:
        vta_runtime.set_command_queue(None)


def test_tensor_of_another_device_is_refused(fsim):
    from sim.fsim import FsimDevice
    env = vta.get_env()
    sch, shape = _small(env)
    m = vta.build(sch)
    a = on_device(np.zeros(shape, np.int32))[0]
    out = tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice()))
    with pytest.raises(Exception, match=r"is not device memory of the current VTA device"):
        m(a, out)


@pytest.mark.parametrize("target,machine", [("pynq", "ARM"), ("ultra96", "AArch64"), ("de10nano", "ARM"),
                                            ("zcu104", "AArch64")])
def test_cross_compile_for_boards(tmp_path, target, machine):
    """Pynq and DE10-Nano: ARMv7 hard-float (Cortex-A9); Ultra96 and ZCU104: AArch64; dict-form host
    targets."""
    env0 = vta.get_env()
    with vta.Environment(env0.config.replace(TARGET=target)) as env:
        sch, _ = _small(env)
        m = vta.build(sch)
    obj = tmp_path / "k.o"
    m.write_to_file(str(obj))
    head = obj.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    e_machine = int.from_bytes(head[18:20], "little")
    assert e_machine == {"ARM": 40, "AArch64": 183}[machine]
    if machine == "ARM":                            # the hard-float calling convention, in the build attributes
        if shutil.which("readelf") is None:
            pytest.skip("readelf (binutils) is needed to check the ARM float ABI")
        readelf = subprocess.run(["readelf", "-A", str(obj)], capture_output=True, text=True, check=True)
        assert "Tag_ABI_VFP_args: VFP registers" in readelf.stdout, readelf.stdout


@pytest.mark.skipif(platform.machine() in ("armv7l", "aarch64"), reason="this machine may run board code itself")
def test_a_board_module_called_here_says_what_to_do(fsim):
    """A module built for a board's CPU, called on this machine: advice (RPC, or TARGET sim/tsim), not TVM's
    "architecture mismatch"."""
    env0 = vta.get_env()
    with vta.Environment(env0.config.replace(TARGET="pynq")) as env:
        sch, shape = _small(env)
        m = vta.build(sch)
    advice = (r"compiled for TARGET 'pynq', whose host CPU is armv7-none-linux-gnueabihf, so it cannot run on this "
              r"machine\. Run it on the board over RPC: vta\.testing\.run\(fn\).*Or set TARGET to \"sim\" \(fsim\) or "
              r"\"tsim\"")
    with pytest.raises(vta.HostMismatchError, match=advice):
        run(m, [np.zeros(shape, np.int32)], shape)
    with pytest.raises(vta.HostMismatchError, match=advice):
        m["main"]


def test_demo_with_a_board_config_says_what_to_do(tmp_path):
    """``nox -s demo`` (python -m demo) with TARGET "pynq" on a machine without a board."""
    cfg = tmp_path / "pynq.json"
    cfg.write_text(vta.get_env().config.replace(TARGET="pynq").to_json())
    r = subprocess.run([sys.executable, "-m", "demo", "--layer", "C11"], capture_output=True, text=True, timeout=600,
                       cwd=Path(__file__).resolve().parents[2], env={**os.environ, "VTA_CONFIG": str(cfg)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "[compiler] this module was compiled for TARGET 'pynq'" in r.stdout
    assert "Run it on the board over RPC: vta.testing.run(fn)" in r.stdout
    assert f'set TARGET to "sim" (fsim) or "tsim" (the Verilated core) in the configuration ({cfg} (from ' \
           "$VTA_CONFIG))" in r.stdout
    assert "DEMO FAILED" in r.stdout


def test_testing_run_and_simulator_stats(tmp_path):
    """vta.testing.run picks the device from env.TARGET and hands fn a (local) RPC session, used as for a board:
    export the module, upload, load it remotely, run on the remote ext_dev; then stats/clear_stats."""
    from vta_compiler.testing import simulator

    def check(env, remote):
        sch, shape = _small(env)
        vta.build(sch).export_library(str(tmp_path / "kernel.so"))
        remote.upload(str(tmp_path / "kernel.so"))
        m = remote.load_module("kernel.so")
        dev = remote.ext_dev(0)
        a = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
        x = tvm.runtime.tensor(a, device=dev)
        out = tvm.runtime.empty(shape, "int8", device=dev)
        simulator.clear_stats()
        m(x, out)
        np.testing.assert_array_equal(out.numpy(), (a >> 1).astype(np.int8))
        return simulator.stats()

    try:
        stats = vta.testing.run(check)
    finally:
        vta_runtime.set_command_queue(None)
    assert stats["alu_counter"] == 6 and stats["out_store_nbytes"] == 6 * 16 * vta.get_env().BATCH
    assert vta.testing.simulator.enabled()


def test_runtime_array_round_trip(fsim):
    """The original test_runtime_array: an int8 tensor to ext_dev and back."""
    env = vta.get_env()
    x = np.random.default_rng(9).integers(-128, 128, (100, 100, env.BATCH, env.BLOCK_OUT), dtype=np.int8)
    t = tvm.runtime.tensor(x, device=tvm.ext_dev(0))
    assert t.device.dlpack_device_type() == 12
    np.testing.assert_array_equal(t.numpy(), x)
    # the data live in fsim's simulated DRAM, at the physical address the host pointer maps to
    phys = t.data_ptr() - fsim.dram.data.ctypes.data
    assert 0 < phys < fsim.dram.nbytes
    assert fsim.read(phys, x.nbytes) == x.tobytes()


def test_kernel_signature_for_a_loop_variable(fsim):
    """With the weights of a channel tile resident (wgt_at="co"), the GEMM kernel's weight indices depend on
    the input-chunk loop: that variable becomes the kernel's cache signature (one kernel per value)."""
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top import Conv2DTiling, Conv2DWorkload, conv2d_layer, schedule_conv2d_packed
    wkl = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)
    t = Conv2DTiling(2, 4, 4, 1, 2, 1, "co")
    text = vta.lower(schedule_conv2d_packed(conv2d_layer(wkl), t))["main"].script()
    assert re.search(r'UopKernelBegin", vta_kernel_\d+, ko_\d+\)', text), text
    assert_exact(run_conv2d(wkl, t))
    keys = [k for k in vta_runtime.command_handle().kernels]
    assert len({sig for _, sig in keys}) == 2        # signatures 0 and 1 (two input chunks)


def test_import_builds_no_plugin_and_a_failed_build_is_a_clear_error(tmp_path):
    """The ext_dev plugin is compiled when TVM first needs the device, not by ``import vta_compiler``; a
    compiler that fails gives ExtDevBuildError there, naming the compiler (not a warning at import)."""
    code = "\n".join([
        "import os, numpy as np, tvm, vta_compiler",
        "from vta_compiler import ext_dev",
        "assert ext_dev._lib is None and not os.path.exists(os.path.join(os.environ['VTA_CACHE_DIR'], 'ext_dev'))",
        "try:",
        "    tvm.runtime.tensor(np.zeros(4, np.int8), device=tvm.ext_dev(0))",
        "except ext_dev.ExtDevBuildError as exc:",
        "    print('REFUSED:', exc)",
    ])
    env = {**os.environ, "VTA_CACHE_DIR": str(tmp_path), "CXX": "/bin/false"}
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], env=env, capture_output=True,
                       text=True, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert r.returncode == 0, r.stderr
    assert "REFUSED: building the VTA ext_dev plugin (needed for ext_dev tensors) failed: /bin/false exited with 1" \
        in r.stdout, r.stdout
