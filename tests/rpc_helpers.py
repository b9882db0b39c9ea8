"""A VTA RPC server in a subprocess, for tests on loopback."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tvm import rpc

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m vta_compiler.exec.rpc_server`` in a subprocess."""

    def __init__(self, tmp: Path, *extra: str):
        self.port = free_port()
        self.state = tmp / f"state-{self.port}"
        self.log = open(tmp / f"server-{self.port}.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vta_compiler.exec.rpc_server", "--port", str(self.port), "--port-end",
             str(self.port + 1), "--state-dir", str(self.state), *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 120
        while "listening" not in Path(self.log.name).read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("RPC server did not start:\n" + Path(self.log.name).read_text())
            time.sleep(0.2)

    def call(self, fn, *args):
        """``fn(remote, *args)`` in a new session, closed before returning.

        TVM's server serves one session at a time: it accepts the next connection only when the
        current session's client has gone (or its session timeout has passed), so a test must
        drop every object of a session before opening the next one."""
        remote = rpc.connect("127.0.0.1", self.port, session_timeout=120)
        try:
            return fn(remote, *args)
        finally:
            del remote
            gc.collect()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
