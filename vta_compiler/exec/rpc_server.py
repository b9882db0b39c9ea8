"""The VTA RPC server, run on a board (or beside a simulator):

    python -m vta_compiler.exec.rpc_server [--host 127.0.0.1] [--port 9091] [--port-end 9199]
                                          [--tracker HOST:PORT [--key KEY]] [--config PATH]

It is TVM's ``rpc.Server`` plus the VTA pieces: the runtime's global functions, the ``ext_dev``
device API, and

* ``tvm.contrib.vta.init(bitstream)``: program the FPGA with an uploaded bitstream (boards);
  on sim/tsim targets there is no FPGA and the bitstream is only recorded;
* ``tvm.contrib.vta.reconfig_runtime(cfg_json)``: compare the pushed configuration with the
  server's, refuse an invalid one with the reason, and rebuild the runtime state for a new one;
* ``tvm.contrib.vta.status()``: JSON with the server's configuration and programmed bitstream;
* ``tvm.contrib.vta.stats()`` / ``tvm.contrib.vta.clear_stats()``: the device's counters as JSON
  (tsim and boards: ``cycle_count`` and the performance counters), and their reset (the tuner's
  measurements, ``vta_compiler.autotune``).

Sessions are forked from the server's worker process, so state that must outlive a session (the
current configuration, the programmed bitstream) is kept in a state directory on disk. A path a
client passes (the bitstream of ``init``) must name a file in the session's work folder, where
``remote.upload`` puts files; any other path is refused.

TVM's RPC has no authentication: whoever reaches the port can upload files and load native
modules, that is, run code on this machine as the server's user. By default the server binds to
localhost; ``--host 0.0.0.0`` serves every network the machine is on, and the server warns. Serve
a board on a private link (a cable to the host), behind the tracker on such a network, or keep
it on localhost and reach it through an SSH tunnel (``ssh -L 9091:localhost:9091 board``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

from vta_hw.spec import BOARD_TARGETS, Config, ConfigError, load_config

from ..bitstream import file_digest


class ServerState:
    """The server's persistent state: ``config.json`` and ``bitstream.json`` in ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str]):
        self.dir = Path(state_dir)
        self.config_path = self.dir / "config.json"
        self.bitstream_path = self.dir / "bitstream.json"

    def config(self) -> Config:
        return load_config(self.config_path)

    def activate(self) -> None:
        """Point the process's runtime at the state's configuration."""
        import vta_runtime
        os.environ["VTA_CONFIG"] = str(self.config_path)
        vta_runtime.shutdown()

    # -- tvm.contrib.vta.reconfig_runtime
    def reconfig(self, cfg_json: str) -> str:
        try:
            pushed = json.loads(cfg_json)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"reconfig_runtime: the pushed configuration is not JSON: {exc}") from None
        new = Config(pushed, source="the configuration pushed over RPC")   # raises ConfigError with the reason
        old = self.config()
        if new == old:
            return f"unchanged: {old.MODEL}"
        if new.TARGET != old.TARGET:
            raise ConfigError(f"reconfig_runtime: this server runs TARGET {old.TARGET!r}; a client built for "
                              f"{new.TARGET!r} cannot use it")
        if new.TARGET in BOARD_TARGETS:
            from boards.driver import check_core_matches
            check_core_matches(new)   # the programmed bitstream must implement the new parameters
        self.config_path.write_text(new.to_json())
        self.activate()
        return f"reconfigured: {old.MODEL} -> {new.MODEL}"

    # -- the paths clients pass
    def work_folder(self) -> Path:
        """The session's work folder (where remote.upload puts files); outside a session, the state directory."""
        import tvm
        workpath = tvm.get_global_func("tvm.rpc.server.workpath", allow_missing=True)
        return Path(workpath("") if workpath else self.dir).resolve()

    def confined(self, file_name: str, what: str) -> Path:
        """``file_name`` resolved in the work folder (links followed); a path that leads out of it is refused."""
        folder = self.work_folder()
        path = (folder / file_name).resolve()
        if folder not in path.parents:
            raise PermissionError(f"{what}: {file_name!r} is not a file in this server's work folder {folder}: the "
                                  "server only takes files that were uploaded to it (remote.upload, then pass the "
                                  "name)")
        return path

    # -- tvm.contrib.vta.init
    def program(self, file_name: str) -> str:
        path = self.confined(file_name, "tvm.contrib.vta.init")
        if not path.is_file():
            raise FileNotFoundError(f"tvm.contrib.vta.init: no bitstream {file_name!r} on the server (upload it "
                                    "first)")
        digest = file_digest(path)
        cfg = self.config()
        if cfg.TARGET in BOARD_TARGETS:
            from boards.driver import program_bitstream
            program_bitstream(path, cfg)
            what = f"programmed {path.name} on the {cfg.TARGET} FPGA"
        else:
            what = f"TARGET {cfg.TARGET} has no FPGA: recorded {path.name}"
        self.bitstream_path.write_text(json.dumps({"name": path.name, "sha256": digest}))
        self.activate()
        return f"{what} (sha256 {digest[:16]})"

    # -- tvm.contrib.vta.stats / clear_stats
    @staticmethod
    def stats() -> str:
        import vta_runtime
        return json.dumps({k: int(v) for k, v in vta_runtime.command_handle().device.stats().items()})

    @staticmethod
    def clear_stats() -> None:
        import vta_runtime
        vta_runtime.command_handle().device.clear_stats()

    # -- tvm.contrib.vta.status
    def status(self) -> str:
        bit = json.loads(self.bitstream_path.read_text()) if self.bitstream_path.exists() else None
        return json.dumps({"config": self.config().cfg_dict, "model": self.config().MODEL, "bitstream": bit,
                           "server": str(self.dir), "pid": os.getpid()})


def server_init(state_dir: str) -> None:
    """Runs in TVM's server worker process before any session: register the VTA functions."""
    import tvm

    from vta_compiler import ext_dev

    state = ServerState(state_dir)
    state.activate()
    ext_dev.load()                     # device_api.ext_dev + the runtime's vta.runtime.* functions
    tvm.register_global_func("tvm.contrib.vta.init", state.program, override=True)
    tvm.register_global_func("tvm.contrib.vta.reconfig_runtime", state.reconfig, override=True)
    tvm.register_global_func("tvm.contrib.vta.status", state.status, override=True)
    tvm.register_global_func("tvm.contrib.vta.stats", state.stats, override=True)
    tvm.register_global_func("tvm.contrib.vta.clear_stats", state.clear_stats, override=True)
    cfg = state.config()
    if cfg.TARGET == "tsim":           # find (or build) the Verilated core once, not in every session
        from sim.tsim import build
        build(cfg)


def make_state_dir(config: str | None, state_dir: str | None = None) -> str:
    cfg = load_config(config)
    d = Path(state_dir or tempfile.mkdtemp(prefix="vta_rpc_"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(cfg.to_json())
    return str(d)


def is_loopback(host: str) -> bool:
    """True if every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def exposure_warning(host: str, port: int) -> str | None:
    """The warning for a server bound to ``host``, or None on loopback."""
    if is_loopback(host):
        return None
    return (f"WARNING: the VTA RPC server listens on {host}:{port}, beyond this machine. TVM's RPC has no "
            "authentication: anyone who can reach this port can upload files and load native modules, that is, "
            "run any code here as this user. Serve only a private link (the board cabled to its host), a private "
            "network behind the tracker, or bind to 127.0.0.1 and reach the server through an SSH tunnel "
            "(ssh -L PORT:localhost:PORT this-machine).")


def start_server(host: str = "127.0.0.1", port: int = 9091, port_end: int = 9199, key: str | None = None,
                 tracker: str | None = None, config: str | None = None, state_dir: str | None = None):
    """Start a TVM RPC server with the VTA functions; returns the ``tvm.rpc.Server``.

    ``key``: what the server announces to the tracker; default: the configuration's TARGET (the key
    ``vta.testing.run`` requests). Without a tracker the default is no key, so ``rpc.connect(host,
    port)`` reaches the server directly."""
    import functools

    from tvm import rpc

    tracker_addr = None
    if tracker:
        h, p = tracker.rsplit(":", 1)
        tracker_addr = (h, int(p))
    sdir = make_state_dir(config, state_dir)
    if key is None:
        key = load_config(config).TARGET if tracker_addr else ""
    warning = exposure_warning(host, port)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return rpc.Server(host, port, port_end, key=key, tracker_addr=tracker_addr,
                      server_init_callback=functools.partial(server_init, sdir))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vta_compiler.exec.rpc_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only; TVM's RPC has no "
                   "authentication, see above)")
    p.add_argument("--port", type=int, default=9091)
    p.add_argument("--port-end", type=int, default=9199)
    p.add_argument("--key", help="key announced to the tracker (default: the configuration's TARGET)")
    p.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker to register with")
    p.add_argument("--config", help="configuration file (default: $VTA_CONFIG or the repository's)")
    p.add_argument("--state-dir", help="where the server keeps its configuration (default: a new temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        server = start_server(args.host, args.port, args.port_end, args.key, args.tracker, args.config,
                              args.state_dir)
    except ConfigError as exc:
        print(f"rpc_server: error: {exc}", file=sys.stderr)
        return 2
    print(f"VTA RPC server listening on {args.host}:{server.port}", flush=True)

    def stop(*_):
        server.terminate()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.proc.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
