"""RPC deployment on loopback: VTA RPC servers (simulated device) serving clients that compile with
vta.build, upload and run remotely; reconfig_runtime and program_fpga round trips; a tracker with
two servers; a bad configuration pushed over RPC is refused and the server keeps serving."""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from rpc_helpers import Server, free_port  # noqa: E402
from tvm import rpc  # noqa: E402

import vta_compiler as vta  # noqa: E402
from vta_compiler.bitstream import file_digest, install_bitstream  # noqa: E402
from vta_compiler.testing.reference import conv2d_reference  # noqa: E402
from vta_compiler.top import Conv2DTiling, Conv2DWorkload, conv2d_layer, schedule_conv2d_packed  # noqa: E402
from vta_compiler.top import packing as P  # noqa: E402
from vta_hw.spec import load_config  # noqa: E402

WKL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)
TILING = Conv2DTiling(2, 4, 8, 1, 2, 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("rpc"))
    yield s
    s.stop()


def compile_conv(tmp: Path, env) -> Path:
    with env:
        sch = schedule_conv2d_packed(conv2d_layer(WKL, env), TILING, env=env)
        path = tmp / f"conv_{env.config.hash()}.so"
        vta.build(sch).export_library(str(path))
    return path


def run_conv_remote(remote, lib: Path, env, seed: int = 0) -> bool:
    remote.upload(str(lib))
    f = remote.load_module(lib.name)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, WKL.in_filter, WKL.height, WKL.width), dtype=np.int8)
    w = rng.integers(-128, 128, (WKL.out_filter, WKL.in_filter, 3, 3), dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, (WKL.out_filter,), dtype=np.int32)
    dev = remote.ext_dev(0)
    args = [P.pack_nchw(x, env.BATCH, env.BLOCK_IN), P.pack_oihw(w, env.BLOCK_OUT, env.BLOCK_IN),
            P.pack_bias_conv(b, 1, env.BATCH, env.BLOCK_OUT)]
    out = tvm.runtime.empty((1, WKL.out_filter // env.BLOCK_OUT, 8, 8, env.BATCH, env.BLOCK_OUT), "int8",
                            device=dev)
    f(*[tvm.runtime.tensor(a, device=dev) for a in args], out)
    got = P.unpack_nchw(out.numpy())[:1]
    return bool(np.array_equal(got, conv2d_reference(x, w, b, (1, 1), (1, 1), 8)))


def status(remote) -> dict:
    return json.loads(remote.get_function("tvm.contrib.vta.status")())


def test_compile_upload_run_remotely(server, tmp_path):
    env = vta.get_env()
    lib = compile_conv(tmp_path, env)
    assert server.call(run_conv_remote, lib, env)
    assert server.call(status)["model"] == env.MODEL


def test_program_fpga_round_trip(server, tmp_path, monkeypatch):
    bit = tmp_path / "vta.bit"
    bit.write_bytes(os.urandom(4096))
    assert "TARGET sim has no FPGA: recorded vta.bit" in server.call(vta.program_fpga, str(bit))
    assert server.call(status)["bitstream"] == {"name": "vta.bit", "sha256": file_digest(bit)}
    # a board configuration without a bitstream argument: the cached bitstream for it
    monkeypatch.setenv("VTA_CACHE_PATH", str(tmp_path / "cache"))
    monkeypatch.delenv("VTA_BITSTREAM_URL", raising=False)
    board = vta.Environment(load_config().replace(TARGET="pynq"))
    with pytest.raises(vta.bitstream.BitstreamError, match="no bitstream download location is configured"):
        server.call(vta.program_fpga, None, board)
    cached = install_bitstream(bit, board.config)
    assert f"recorded {Path(cached).name}" in server.call(vta.program_fpga, None, board)
    assert server.call(status)["bitstream"]["name"] == Path(cached).name
    # the DE10-Nano's is the raw binary its FPGA manager loads
    de10 = vta.Environment(load_config().replace(TARGET="de10nano"))
    rbf = tmp_path / f"{de10.config.BITSTREAM}.rbf"
    rbf.write_bytes(os.urandom(1024))
    cached = install_bitstream(rbf, de10.config)
    assert cached.endswith(f"/de10nano/0_0_2/{de10.config.BITSTREAM}.rbf")
    assert f"recorded {rbf.name}" in server.call(vta.program_fpga, None, de10)
    assert server.call(status)["bitstream"] == {"name": rbf.name, "sha256": file_digest(rbf)}


@pytest.mark.parametrize("target", ["sim", "tsim"])
def test_program_fpga_is_a_no_op_on_a_simulator(server, tmp_path, monkeypatch, target):
    """As in the original, a simulator needs no bitstream: nothing is looked up, uploaded or programmed."""
    monkeypatch.setenv("VTA_CACHE_PATH", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("VTA_BITSTREAM_URL", raising=False)
    before = server.call(status)["bitstream"]
    env = vta.Environment(load_config().replace(TARGET=target))
    assert server.call(vta.program_fpga, None, env) == f"TARGET {target} is a simulator: no FPGA to program"
    if target == vta.get_env().TARGET:
        assert server.call(vta.program_fpga) == f"TARGET {target} is a simulator: no FPGA to program"
    assert server.call(status)["bitstream"] == before
    assert not (tmp_path / "empty-cache").exists()


def _init(remote, name):
    return remote.get_function("tvm.contrib.vta.init")(name)


def test_init_takes_only_files_of_the_work_folder(server, tmp_path):
    """init (and so status) reaches no file the client did not upload: an absolute path, a path out
    of the work folder, even to the server's own state, is refused and nothing is recorded."""
    before = server.call(status)["bitstream"]
    for name in ("/etc/hostname", "../x.bit", f"{server.state}/config.json", "sub/../../config.json"):
        with pytest.raises(Exception, match=rf"tvm.contrib.vta.init: '{name}' is not a file in this server's work "
                                            "folder .*: the server only takes files that were uploaded to it"):
            server.call(_init, name)
    assert server.call(status)["bitstream"] == before
    with pytest.raises(Exception, match=r"no bitstream 'missing.bit' on the server \(upload it first\)"):
        server.call(_init, "missing.bit")
    bit = tmp_path / "up.bit"
    bit.write_bytes(os.urandom(512))

    def upload_and_init(remote):
        remote.upload(str(bit))
        return _init(remote, "up.bit")
    assert "recorded up.bit" in server.call(upload_and_init)
    assert server.call(status)["bitstream"] == {"name": "up.bit", "sha256": file_digest(bit)}


def test_a_server_beyond_loopback_warns(monkeypatch, tmp_path, capsys):
    from vta_compiler.exec import rpc_server
    for host in ("127.0.0.1", "localhost", "::1"):
        assert rpc_server.exposure_warning(host, 9091) is None
    for host in ("0.0.0.0", "::", "192.168.2.99"):
        msg = rpc_server.exposure_warning(host, 9091)
        assert msg.startswith(f"WARNING: the VTA RPC server listens on {host}:9091, beyond this machine. TVM's RPC "
                              "has no authentication: anyone who can reach this port can upload files and load "
                              "native modules")
        assert "SSH tunnel" in msg and "tracker" in msg
    # start_server says it before it binds (tvm's Server stands aside: this test binds nothing beyond loopback)
    bound = []
    monkeypatch.setattr(rpc, "Server", lambda host, port, *a, **k: bound.append((host, port)))
    rpc_server.start_server("0.0.0.0", 9093, state_dir=str(tmp_path / "s"))
    rpc_server.start_server("127.0.0.1", 9094, state_dir=str(tmp_path / "t"))
    err = capsys.readouterr().err
    assert bound == [("0.0.0.0", 9093), ("127.0.0.1", 9094)]
    assert err.count("WARNING: the VTA RPC server listens on") == 1 and "0.0.0.0:9093" in err


@pytest.mark.parametrize("target", ["de10nano", "zcu104"])
def test_testing_run_reaches_a_board_target_over_rpc(server, monkeypatch, target):
    """vta.testing.run with a board TARGET: the server named by VTA_RPC_HOST/PORT (here the loopback
    one), and without a tracker or a server, advice naming the TARGET."""
    monkeypatch.delenv("TVM_TRACKER_HOST", raising=False)
    monkeypatch.delenv("TVM_TRACKER_PORT", raising=False)
    monkeypatch.delenv("VTA_RPC_HOST", raising=False)
    with vta.Environment(load_config().replace(TARGET=target)):
        with pytest.raises(RuntimeError, match=rf"TARGET={target}: set TVM_TRACKER_HOST/TVM_TRACKER_PORT \(a "
                                               rf"tracker with '{target}' boards\) or VTA_RPC_HOST/VTA_RPC_PORT"):
            vta.testing.run(lambda env, remote: None)
        monkeypatch.setenv("VTA_RPC_HOST", "127.0.0.1")
        monkeypatch.setenv("VTA_RPC_PORT", str(server.port))
        got = vta.testing.run(lambda env, remote: (env.TARGET, status(remote)["model"]))
        gc.collect()
    assert got == (target, load_config().MODEL)       # the client's TARGET, the (simulated) server's model


def push(remote, cfg_dict):
    return remote.get_function("tvm.contrib.vta.reconfig_runtime")(json.dumps(cfg_dict))


def test_reconfig_runtime_round_trip_and_refusal(server, tmp_path):
    env = vta.get_env()
    assert server.call(vta.reconfig_runtime) == f"unchanged: {env.MODEL}"
    new = vta.Environment(env.config.replace(LOG_ACC_BUFF_SIZE=16, LOG_UOP_BUFF_SIZE=13))
    assert server.call(vta.reconfig_runtime, new) == f"reconfigured: {env.MODEL} -> {new.MODEL}"
    assert server.call(status)["model"] == new.MODEL            # a new session sees the new configuration ...
    assert server.call(run_conv_remote, compile_conv(tmp_path, new), new, 3)   # ... and runs code built for it
    bad = dict(new.config.cfg_dict, LOG_BLOCK=9)
    with pytest.raises(Exception, match=r"LOG_BLOCK=9 is out of range: it must be between 1 and 6"):
        server.call(push, bad)
    with pytest.raises(Exception, match="TARGET 'sim'; a client built for 'ultra96' cannot use it"):
        server.call(push, env.config.replace(TARGET="ultra96").cfg_dict)
    assert server.call(status)["model"] == new.MODEL            # the server keeps serving, last good config
    assert server.call(vta.reconfig_runtime, env).startswith("reconfigured")
    assert server.call(run_conv_remote, compile_conv(tmp_path, env), env, 4)


def test_tracker_with_two_servers(tmp_path):
    from tvm.rpc.tracker import Tracker

    port = free_port()
    tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 20, silent=True)
    servers = []
    try:
        servers = [Server(tmp_path, "--tracker", f"127.0.0.1:{tracker.port}", "--key", "sim") for _ in range(2)]
        client = rpc.connect_tracker("127.0.0.1", tracker.port)
        deadline = time.monotonic() + 60
        while "sim" not in client.summary()["queue_info"] or \
                client.summary()["queue_info"]["sim"]["free"] < 2:
            assert time.monotonic() < deadline, client.summary()
            time.sleep(0.5)
        env = vta.get_env()
        lib = compile_conv(tmp_path, env)
        a = client.request("sim", session_timeout=120)    # two sessions at once: one on each server
        b = client.request("sim", session_timeout=120)
        assert status(a)["server"] != status(b)["server"], "both sessions landed on the same server"
        assert run_conv_remote(a, lib, env, seed=1) and run_conv_remote(b, lib, env, seed=2)
        del a, b
        gc.collect()
    finally:
        for s in servers:
            s.stop()
        tracker.terminate()
