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

    Args:
        remote: an RPC session on a VTA server (``python -m vta_compiler.exec.rpc_server``).
        env: the configuration to push: an Environment, a Config, a dict or a path; default
            ``vta.get_env()``.

    Returns:
        The server's description of what it did.

    Raises:
        tvm.error.RPCError: the server refused the configuration (the message gives the reason; the
            server keeps serving its last good configuration) or is not a VTA server.

    Example:
        >>> from tvm import rpc
        >>> remote = rpc.connect("pynq-board", 9091)
        >>> vta.reconfig_runtime(remote)
    """
    return remote.get_function("tvm.contrib.vta.reconfig_runtime")(json.dumps(_config(env).cfg_dict))


def program_fpga(remote, bitstream: str | None = None, env: Any = None) -> str:
    """Upload a bitstream and program the server's FPGA with it.

    Without ``bitstream``: the cached one for the configuration (``get_bitstream_path``), downloaded
    first if it is missing (``$VTA_BITSTREAM_URL``); with TARGET sim or tsim there is no FPGA and
    nothing to program, so this does nothing (as the original did), and a script written for a board
    runs unchanged on a simulator. Returns the server's description of what it did.

    Raises:
        vta_compiler.bitstream.BitstreamError: no bitstream in the cache and none can be downloaded
            (the message says how to build and install one).
        tvm.error.RPCError: the server could not program the FPGA (the message gives its reason).

    Example:
        >>> remote = rpc.connect("pynq-board", 9091)
        >>> vta.reconfig_runtime(remote)
        >>> vta.program_fpga(remote)                       # the cached bitstream of the configuration
        >>> vta.program_fpga(remote, bitstream="my.bit")   # or a given file
    """
    cfg = _config(env)
    if bitstream is None and cfg.TARGET in SIMULATED_TARGETS:
        return f"TARGET {cfg.TARGET} is a simulator: no FPGA to program"
    if bitstream is None:
        bitstream = get_bitstream_path(cfg)
        if not os.path.isfile(bitstream):
            bitstream = download_bitstream(cfg)
    remote.upload(bitstream)
    return remote.get_function("tvm.contrib.vta.init")(os.path.basename(bitstream))
