"""``vta.autotvm.module_loader``, the original's name for what runs before each tuning measurement: with a
bitstream it pushes the configuration and programs the FPGA with that file; without one it is
``autotune.default_module_loader``."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("tvm")
from rpc_helpers import Server  # noqa: E402

import vta_compiler as vta  # noqa: E402
from vta_compiler import autotune  # noqa: E402
from vta_compiler.bitstream import file_digest  # noqa: E402


def test_module_loader_programs_the_given_bitstream(tmp_path):
    assert vta.autotvm.module_loader() is autotune.default_module_loader
    bit = tmp_path / "mine.bit"
    bit.write_bytes(os.urandom(2048))
    server = Server(tmp_path)
    try:
        env = vta.Environment(vta.get_env().config.replace(LOG_ACC_BUFF_SIZE=16))     # not the server's default
        server.call(vta.autotvm.module_loader(str(bit)), env)

        def status(remote):
            return json.loads(remote.get_function("tvm.contrib.vta.status")())
        st = server.call(status)
        assert st["bitstream"] == {"name": "mine.bit", "sha256": file_digest(bit)}
        assert st["model"] == env.MODEL != vta.get_env().MODEL, "the configuration was pushed too"
    finally:
        server.stop()
