"""``run(fn)``: call ``fn(env, remote)`` with a session on the device that env.TARGET names."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import vta_runtime

from ..environment import SIMULATED_TARGETS, get_env


def run(fn: Callable[[Any, Any], Any]) -> Any:
    """Run ``fn(env, remote)``.

    sim / tsim: ``remote`` is a local RPC session (``remote.ext_dev(0)`` is the simulated device:
    fsim or the Verilated core, opened by the runtime from env.TARGET). Boards: an RPC session to
    ``$VTA_RPC_HOST:$VTA_RPC_PORT`` (the board's server runs the same runtime on its driver).
    """
    from tvm import rpc
    env = get_env()
    if env.TARGET in SIMULATED_TARGETS:
        cq = vta_runtime.command_handle()
        if cq.config.TARGET != env.TARGET or cq.config != env.config:
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(vta_runtime.open_device(env.config)))
        return fn(env, rpc.LocalSession())
    host, port = os.environ.get("VTA_RPC_HOST"), os.environ.get("VTA_RPC_PORT")
    if not host or not port:
        raise RuntimeError(f"TARGET={env.TARGET}: set VTA_RPC_HOST and VTA_RPC_PORT to the board's RPC server")
    return fn(env, rpc.connect(host, int(port)))
