"""Client helpers for a VTA RPC server (``python -m vta_compiler.exec.rpc_server``):
``vta.program_fpga`` and ``vta.reconfig_runtime``."""

from __future__ import annotations

import json
import os
from typing import Any

from vta_hw.spec import Config, load_config

from .bitstream import download_bitstream, get_bitstream_path
from .environment import SIMULATED_TARGETS


def _config(env: Any = None) -> Config:
    if env is None:
        from .environment import get_env
        env = get_env()
    return env.config if hasattr(env, "config") else load_config(env)


def reconfig_runtime(remote, env: Any = None) -> str:
    """Push the local configuration to the server, which rebuilds its runtime if it changed.

    An invalid configuration is refused by the server with the reason; the server keeps serving."""
    return remote.get_function("tvm.contrib.vta.reconfig_runtime")(json.dumps(_config(env).cfg_dict))


def program_fpga(remote, bitstream: str | None = None, env: Any = None) -> str:
    """Upload a bitstream and program the server's FPGA with it.

    Without ``bitstream``: the cached one for the configuration (``get_bitstream_path``), downloaded
    first if it is missing (``$VTA_BITSTREAM_URL``); with TARGET sim or tsim there is no FPGA and
    nothing to program, so this does nothing (as the original did), and a script written for a board
    runs unchanged on a simulator. Returns the server's description of what it did."""
    cfg = _config(env)
    if bitstream is None and cfg.TARGET in SIMULATED_TARGETS:
        return f"TARGET {cfg.TARGET} is a simulator: no FPGA to program"
    if bitstream is None:
        bitstream = get_bitstream_path(cfg)
        if not os.path.isfile(bitstream):
            bitstream = download_bitstream(cfg)
    remote.upload(bitstream)
    return remote.get_function("tvm.contrib.vta.init")(os.path.basename(bitstream))
