"""Client helpers for a VTA RPC server: ``vta.program_fpga`` and ``vta.reconfig_runtime``."""

from __future__ import annotations

import json
import os
from typing import Any

from .bitstream import download_bitstream, get_bitstream_path


def _env(env: Any = None):
    if env is not None:
        return env
    from .environment import get_env
    return get_env()


def reconfig_runtime(remote, env: Any = None) -> str:
    """Push the local configuration to the server; it rebuilds its runtime if the configuration changed."""
    cfg = _env(env)
    fn = remote.get_function("tvm.contrib.vta.reconfig_runtime")
    return fn(json.dumps(cfg.cfg_dict))


def program_fpga(remote, bitstream: str | None = None, env: Any = None) -> str:
    """Program the server's FPGA with ``bitstream`` (default: the cached, or downloaded, one for the config)."""
    cfg = _env(env)
    if bitstream is None:
        bitstream = get_bitstream_path(getattr(cfg, "config", cfg))
        if not os.path.isfile(bitstream):
            bitstream = download_bitstream(getattr(cfg, "config", cfg))
    remote.upload(bitstream)
    return remote.get_function("tvm.contrib.vta.init")(os.path.basename(bitstream))
