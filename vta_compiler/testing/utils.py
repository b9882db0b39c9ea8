"""``run(fn)``: call ``fn(env, remote)`` with a session on the device that env.TARGET names."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import vta_runtime

from ..environment import SIMULATED_TARGETS, get_env

#: How long a tracker request may wait for a free board.
TRACKER_TIMEOUT_S = 600


def remote_session(env: Any = None):
    """A session on the device env.TARGET names.

    * sim / tsim: a local RPC session (the simulated device opened by the runtime from env.TARGET),
      or ``127.0.0.1:$VTA_LOCAL_SIM_RPC`` if that is set (a local server, e.g. for isolation);
    * boards: a board from the TVM RPC tracker at ``$TVM_TRACKER_HOST:$TVM_TRACKER_PORT`` (key =
      TARGET, so a farm of boards is served by TVM's own tracker), else the server at
      ``$VTA_RPC_HOST:$VTA_RPC_PORT``.
    """
    from tvm import rpc
    env = env or get_env()
    if env.TARGET in SIMULATED_TARGETS:
        port = os.environ.get("VTA_LOCAL_SIM_RPC")
        if port:
            return rpc.connect("127.0.0.1", int(port))
        cq = vta_runtime.command_handle()
        if cq.config != env.config:
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(vta_runtime.open_device(env.config)))
        return rpc.LocalSession()
    thost, tport = os.environ.get("TVM_TRACKER_HOST"), os.environ.get("TVM_TRACKER_PORT")
    if thost and tport:
        tracker = rpc.connect_tracker(thost, int(tport))
        return tracker.request(env.TARGET, priority=0, session_timeout=TRACKER_TIMEOUT_S)
    host, port = os.environ.get("VTA_RPC_HOST"), os.environ.get("VTA_RPC_PORT")
    if not host or not port:
        raise RuntimeError(f"TARGET={env.TARGET}: set TVM_TRACKER_HOST/TVM_TRACKER_PORT (a tracker with "
                           f"{env.TARGET!r} boards) or VTA_RPC_HOST/VTA_RPC_PORT (one board's RPC server)")
    return rpc.connect(host, int(port))


def run(fn: Callable[[Any, Any], Any]) -> Any:
    """Run ``fn(env, remote)`` with :func:`remote_session`."""
    env = get_env()
    return fn(env, remote_session(env))
