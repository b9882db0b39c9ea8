"""``vta``: the command line (in the conventions of TVM's ``tvmc``).

    vta compile model.onnx --calibration images.npz|DIR [--config F] [-o model.tar]
    vta run model.tar --input x.npy [--device fsim|tsim|rpc://HOST:PORT] [-o y.npy]
    vta profile model.tar --input x.npy [--device tsim|fsim] [-o trace.json] [--table F] [--roofline F.png]
    vta tune model.onnx --calibration images.npz [--trials N] [--servers N | --tracker HOST:PORT --key K] [-o log]
    vta tracker [--host 127.0.0.1] [--port 9190]
    vta server [--tracker HOST:PORT] [--key K] [--host H] [--port P] [--config F]

``compile`` writes one ``.tar``: the executable (``model.so``, the quantized weights bound inside it), the
model's description (``vta_model.json``: configuration, inputs and outputs, the placement rows) and the
placement report (``placement.txt``). Calibration data is an ``.npz`` whose arrays are batches for the model's
input (for a model of several inputs: one array per input name, batches along the first axis), or a folder of
``.npy`` files, one batch each. Errors name what is wrong and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

FORMAT = 1
META = "vta_model.json"
LIBRARY = "model.so"
DEVICES = ("fsim", "tsim")


class CliError(Exception):
    """A user error: the message says what is wrong (exit status 2)."""


# ------------------------------------------------------------------------------------------------ progress
class Steps:
    """``[k/n] what ... done in 1.2 s``; on a terminal the line shows the elapsed time while a step runs."""

    def __init__(self, total: int, stream=None):
        self.total, self.k = total, 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def run(self, what: str, fn, *args, **kwargs):
        self.k += 1
        head = f"[{self.k}/{self.total}] {what}"
        done = threading.Event()
        t0 = time.perf_counter()

        def tick():
            while not done.wait(0.5):
                self.stream.write(f"\r{head} ... {time.perf_counter() - t0:.0f} s")
                self.stream.flush()
        ticker = threading.Thread(target=tick, daemon=True) if self.tty else None
        if ticker:
            ticker.start()
        else:
            self.stream.write(f"{head} ...\n")
        try:
            return fn(*args, **kwargs)
        finally:
            done.set()
            if ticker:
                ticker.join()
            self.stream.write(f"\r{head} ... done in {time.perf_counter() - t0:.1f} s\n" if self.tty else
                              f"{head}: done in {time.perf_counter() - t0:.1f} s\n")
            self.stream.flush()


# ------------------------------------------------------------------------------------------------ inputs
def _input_specs(mod) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of the network's data inputs (not its weights)."""
    func = mod["main"]
    n = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs else len(func.params)
    return [(p.name, tuple(int(d) for d in p.ty.shape), str(p.ty.dtype)) for p in func.params[:n]]


def load_calibration(path: str, inputs: list[tuple[str, tuple[int, ...], str]]) -> list:
    """Calibration batches from an ``.npz`` or a folder of ``.npy`` files, checked against the inputs."""
    p = Path(path)
    if not p.exists():
        raise CliError(f"calibration data {path} does not exist (an .npz of batches or a folder of .npy files)")
    names = [n for n, _, _ in inputs]
    if p.is_dir():
        files = sorted(p.glob("*.npy"))
        if not files:
            raise CliError(f"calibration folder {path} has no .npy files")
        batches = [np.load(f) for f in files]
        where = [str(f) for f in files]
    else:
        try:
            loaded = np.load(p)
        except (OSError, ValueError) as exc:
            raise CliError(f"calibration data {path} is neither an .npz nor an .npy file: {exc}") from None
        if isinstance(loaded, np.ndarray):         # one .npy: one batch
            arrays = {"batch": loaded}
        else:
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
        if not arrays:
            raise CliError(f"calibration data {path} holds no arrays")
        if len(inputs) > 1:
            missing = [n for n in names if n not in arrays]
            if missing:
                raise CliError(f"calibration data {path}: the model has inputs {names}; the .npz needs one array per "
                               f"input name (batches along the first axis), missing {missing}")
            count = {len(arrays[n]) for n in names}
            if len(count) != 1:
                raise CliError(f"calibration data {path}: the inputs have different numbers of batches {sorted(count)}")
            batches = [{n: arrays[n][k] for n in names} for k in range(count.pop())]
            where = [f"{path}[{k}]" for k in range(len(batches))]
        else:
            batches, where = list(arrays.values()), [f"{path}:{k}" for k in arrays]
    out = []
    for b, w in zip(batches, where):
        items = b if isinstance(b, dict) else {names[0]: b}
        for name, shape, dtype in inputs:
            x = np.asarray(items[name])
            if tuple(x.shape) != shape:
                raise CliError(f"calibration batch {w}: input {name!r} has shape {tuple(x.shape)}, the model takes "
                               f"{shape}")
            items[name] = x.astype(dtype, copy=False)
        out.append(items if len(inputs) > 1 else items[names[0]])
    return out


def _parse_shapes(items: list[str] | None) -> dict[str, list[int]] | None:
    if not items:
        return None
    out = {}
    for it in items:
        name, _, dims = it.partition("=")
        try:
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise CliError(f"--shape {it!r}: expected NAME=D0,D1,... (for example image=1,3,224,224)") from None
    return out


def _env(config: str | None):
    import vta_compiler as vta
    from vta_hw.spec import load_config
    return vta.Environment(load_config(config)) if config else vta.get_env()


def _quantized(args, steps: Steps, env):
    """(quantized module, its input specs) of the model the arguments name."""
    from . import graph
    model = Path(args.model)
    if not model.is_file():
        raise CliError(f"{args.model} does not exist")
    mod, params = steps.run(f"importing {model.name}", graph.from_onnx, str(model),
                            shape_dict=_parse_shapes(args.shape), outputs=args.outputs.split(",") if args.outputs
                            else None)
    inputs = _input_specs(mod)
    if args.global_scale is not None:
        return steps.run(f"quantizing (global scale {args.global_scale})", graph.quantize, mod, params,
                         global_scale=args.global_scale), inputs
    if not args.calibration:
        raise CliError("give --calibration (an .npz of batches or a folder of .npy files) or --global-scale")
    cal = load_calibration(args.calibration, inputs)
    with env:
        return steps.run(f"quantizing on {len(cal)} calibration batch(es)", graph.quantize, mod, params,
                         calibration=cal), inputs


# ------------------------------------------------------------------------------------------------ compile
def cmd_compile(args) -> int:
    from . import graph
    from .tiling import apply_history_best
    env = _env(args.config)
    steps = Steps(5)
    qmod, inputs = _quantized(args, steps, env)
    with env:
        if args.records:
            with apply_history_best(args.records, env):
                pmod = steps.run("packing for VTA", graph.graph_pack, qmod, env)
                ex = steps.run("building", graph.build, pmod, env)
        else:
            pmod = steps.run("packing for VTA", graph.graph_pack, qmod, env)
            ex = steps.run("building", graph.build, pmod, env)
    pl = graph.placement(pmod)
    out = Path(args.output or Path(args.model).with_suffix(".tar").name)
    outs = [(str(ty.dtype), tuple(int(d) for d in ty.shape)) for ty in _output_types(qmod)]
    meta = {"format": FORMAT, "model": Path(args.model).name, "config": env.config.cfg_dict, "vta_model": env.MODEL,
            "inputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in inputs],
            "outputs": [{"dtype": d, "shape": list(s)} for d, s in outs],
            "placement": {"rows": pl.rows, "layout_changes": pl.layout_changes, "summary": pl.summary()},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    steps.run(f"writing {out}", _write_tar, out, ex, meta, str(pl))
    print(pl.summary())
    return 0


def _output_types(qmod) -> list:
    ty = qmod["main"].ret_ty
    from tvm import relax
    return list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]


def _write_tar(out: Path, ex, meta: dict, placement: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / LIBRARY
        ex.export_library(str(lib))
        (Path(tmp) / META).write_text(json.dumps(meta, indent=1) + "\n")
        (Path(tmp) / "placement.txt").write_text(placement + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(f".{out.name}.{os.getpid()}.part")
        with tarfile.open(part, "w") as tar:
            for name in (LIBRARY, META, "placement.txt"):
                tar.add(Path(tmp) / name, arcname=name)
        os.replace(part, out)


def read_tar(path: str, dest: Path) -> dict:
    """Unpack a compiled model into ``dest``; its description."""
    p = Path(path)
    if not p.is_file():
        raise CliError(f"{path} does not exist (make it with: vta compile model.onnx --calibration ... -o {p.name})")
    try:
        with tarfile.open(p) as tar:
            names = set(tar.getnames())
            if not {LIBRARY, META} <= names:
                raise CliError(f"{path} is not a model compiled by `vta compile` (it has {sorted(names)})")
            tar.extractall(dest, filter="data")
    except tarfile.TarError as exc:
        raise CliError(f"{path} is not a tar file: {exc}") from None
    meta = json.loads((dest / META).read_text())
    if meta.get("format") != FORMAT:
        raise CliError(f"{path} has format {meta.get('format')}; this vta reads format {FORMAT}")
    return meta


# ------------------------------------------------------------------------------------------------ run
def _load_inputs(items: list[str], meta: dict) -> list[np.ndarray]:
    specs = meta["inputs"]
    given: dict[str, str] = {}
    for it in items:
        name, sep, path = it.partition("=")
        if not sep:
            if len(specs) != 1:
                raise CliError(f"the model has inputs {[s['name'] for s in specs]}: give --input NAME=FILE.npy for "
                               "each")
            name, path = specs[0]["name"], it
        given[name] = path
    out = []
    for s in specs:
        if s["name"] not in given:
            raise CliError(f"no --input for the model's input {s['name']!r} {tuple(s['shape'])} {s['dtype']}")
        path = given[s["name"]]
        try:
            x = np.load(path)
        except (OSError, ValueError) as exc:
            raise CliError(f"--input {path}: not a .npy file ({exc})") from None
        if tuple(x.shape) != tuple(s["shape"]):
            raise CliError(f"--input {path}: shape {tuple(x.shape)}, but the model's input {s['name']!r} is "
                           f"{tuple(s['shape'])}")
        out.append(np.ascontiguousarray(x.astype(s["dtype"], copy=False)))
    return out


def _local_device(name: str, meta: dict):
    import vta_runtime
    from vta_hw.spec import load_config
    target = {"fsim": "sim", "tsim": "tsim"}[name]
    cfg = load_config(dict(meta["config"], TARGET=target))
    dev = vta_runtime.open_device(cfg)
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    return dev


def execute(meta: dict, lib: Path, inputs: list[np.ndarray], device: str):
    """Run a compiled model on ``device``; (outputs, device counters)."""
    import tvm
    from tvm import relax
    if device.startswith("rpc://"):
        from tvm import rpc
        host, _, port = device[len("rpc://"):].rpartition(":")
        try:
            remote = rpc.connect(host, int(port), session_timeout=600)
        except (ValueError, RuntimeError, OSError) as exc:
            raise CliError(f"--device {device}: cannot reach a VTA RPC server there ({exc}); start one with "
                           "`vta server`") from None
        remote.upload(str(lib))
        vm = relax.VirtualMachine(remote.load_module(lib.name), [remote.cpu(), remote.ext_dev(0)])
        remote.get_function("tvm.contrib.vta.clear_stats")()
        res = vm["main"](*[tvm.runtime.tensor(x, device=remote.cpu()) for x in inputs])
        outs = _numpy(res)
        stats = json.loads(remote.get_function("tvm.contrib.vta.stats")())
        return outs, stats
    if device not in DEVICES:
        raise CliError(f"--device {device!r}: choose fsim, tsim or rpc://HOST:PORT")
    import vta_runtime
    dev = _local_device(device, meta)
    try:
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), [tvm.cpu(), tvm.ext_dev(0)])
        res = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
        return _numpy(res), dev.stats()
    finally:
        vta_runtime.set_command_queue(None)
        if hasattr(dev, "close"):
            dev.close()


def _numpy(res) -> list[np.ndarray]:
    if hasattr(res, "numpy"):
        return [res.numpy()]
    return [r.numpy() for r in res]


def cmd_run(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = read_tar(args.model, Path(tmp))
        inputs = _load_inputs(args.input, meta)
        t0 = time.perf_counter()
        outs, stats = execute(meta, Path(tmp) / LIBRARY, inputs, args.device)
        secs = time.perf_counter() - t0
    if args.output:
        if len(outs) == 1:
            np.save(args.output, outs[0])
        else:
            np.savez(args.output, *outs)
    for k, y in enumerate(outs):
        print(f"output {k}: {y.dtype} {tuple(y.shape)}" + (f", argmax {int(np.argmax(y))}" if y.size <= 1000 else ""))
    cyc = stats.get("cycle_count")
    print(f"ran on {args.device} in {secs:.3f} s" + (f", {cyc:,} VTA cycles" if cyc else "")
          + (f"; wrote {args.output}" if args.output else ""))
    return 0


# ------------------------------------------------------------------------------------------------ profile
def cmd_profile(args) -> int:
    import tvm

    from vta_hw.spec import load_config

    from . import graph
    from .environment import Environment
    if args.device not in DEVICES:
        raise CliError(f"--device {args.device!r}: profile on tsim (the timeline and cycles) or fsim (counters only)")
    if args.device == "fsim" and (args.output or args.timeline):
        raise CliError("fsim has no cycles, so no timeline: give --device tsim for a trace (-o) or --timeline "
                       "(fsim prints the table from the counters)")
    steps = Steps(2 + bool(args.output or args.table or args.roofline or args.timeline))
    with tempfile.TemporaryDirectory() as tmp:
        meta = read_tar(args.model, Path(tmp))
        inputs = _load_inputs(args.input, meta)
        env = Environment(load_config(meta["config"]))
        layers = [r["name"] for r in meta["placement"]["rows"] if r["device"] == "VTA"]
        if args.timeline_layer and args.timeline_layer not in layers:
            raise CliError(f"--timeline-layer {args.timeline_layer!r}: the model's VTA layers are {layers}")
        lib = steps.run(f"loading {Path(args.model).name}", tvm.runtime.load_module, str(Path(tmp) / LIBRARY))
        what = "tsim with the profiler (every module's timeline)" if args.device == "tsim" else "fsim (counters)"
        prof = steps.run(f"running on {what}", graph.profile, lib, inputs, args.device, env=env,
                         placement=meta["placement"]["rows"], clock_mhz=args.clock_mhz, warmup=args.warmup,
                         repeat=args.repeat)
    wrote = []
    if steps.total > 2:
        def write():
            if args.output:
                wrote.append(prof.write_trace(args.output))
            if args.table:
                wrote.append(prof.write_table(args.table))
            if args.roofline:
                wrote.append(prof.plot_roofline(args.roofline, title=f"{meta['model']} on {args.device}: the layers "
                                                "under the roofline"))
            if args.timeline:
                wrote.append(prof.plot_timeline(args.timeline, title=f"{meta['model']} on tsim",
                                                layer=args.timeline_layer))
        steps.run("writing " + ", ".join(str(f) for f in (args.output, args.table, args.roofline, args.timeline)
                                         if f), write)
    print(prof.table())
    if wrote:
        print("wrote " + ", ".join(str(p) for p in wrote)
              + ("; open the trace in https://ui.perfetto.dev or chrome://tracing" if args.output else ""))
    return 0


# ------------------------------------------------------------------------------------------------ tune
def cmd_tune(args) -> int:
    from .autotune import RPCMeasure, TsimMeasure, extract_tasks, tune
    env = _env(args.config)
    steps = Steps(3)
    qmod, _ = _quantized(args, steps, env)
    tasks = steps.run("finding the tasks", extract_tasks, qmod, env)
    if not tasks:
        raise CliError(f"{args.model} has no layer VTA runs: nothing to tune")
    log = args.output or str(Path(args.model).with_suffix(".jsonl").name)
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        measure = RPCMeasure(tracker=(host, int(port)), key=args.key, timeout=args.timeout)
    else:
        measure = TsimMeasure(n_parallel=args.servers, timeout=args.timeout)
    print(f"[3/3] tuning {len(tasks)} task(s), {args.trials} trials each; records appended to {log}", file=sys.stderr)
    res = tune(tasks, log, measure, trials=args.trials, early_stopping=args.early_stopping, env=env)
    print(f"{res.measured} measurements on {res.device} in {res.seconds:.0f} s; build with the records: "
          f"vta compile {args.model} --records {log} ...")
    return 0


# ------------------------------------------------------------------------------------------------ tracker, server
def cmd_tracker(args) -> int:
    from tvm.rpc.tracker import Tracker
    tracker = Tracker(host=args.host, port=args.port, port_end=args.port + 100, silent=True)
    print(f"TVM RPC tracker on {args.host}:{tracker.port}; register servers with: vta server --tracker "
          f"{args.host}:{tracker.port} --key KEY", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("warning: the tracker listens beyond this machine; TVM's RPC has no authentication", file=sys.stderr)
    try:
        tracker.proc.join()
    except KeyboardInterrupt:
        tracker.terminate()
    return 0


def cmd_server(args) -> int:
    from .exec import rpc_server
    port_end = args.port_end or args.port + 100
    if port_end <= args.port:
        raise CliError(f"--port-end {port_end} must be above --port {args.port}")
    argv = ["--host", args.host, "--port", str(args.port), "--port-end", str(port_end)]
    for opt in ("key", "tracker", "config", "state_dir"):
        v = getattr(args, opt)
        if v:
            argv += ["--" + opt.replace("_", "-"), v]
    return rpc_server.main(argv)


# ------------------------------------------------------------------------------------------------ main
def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an ONNX model file")
    p.add_argument("--calibration", help="calibration batches: an .npz or a folder of .npy files")
    p.add_argument("--global-scale", type=float, help="quantize with one fixed scale instead of calibration data")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                   help="fix an input's shape (for inputs with dynamic dimensions); repeat for several")
    p.add_argument("--outputs", metavar="NAME,NAME", help="compile the part of the model that computes these tensors "
                   "(to leave label or post-processing outputs out)")
    p.add_argument("--config", help="VTA configuration file (default: $VTA_CONFIG or the repository's)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vta", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="{compile,run,profile,tune,tracker,server}")
    c = sub.add_parser("compile", help="quantize, pack and build an ONNX model into a .tar")
    _model_args(c)
    c.add_argument("--records", help="tuning records (vta tune's log) to take tilings from")
    c.add_argument("-o", "--output", help="the .tar to write (default: MODEL.tar here)")
    c.set_defaults(fn=cmd_compile)
    r = sub.add_parser("run", help="run a compiled model on fsim, tsim or an RPC server")
    r.add_argument("model", help="a .tar from vta compile")
    r.add_argument("--input", action="append", required=True, metavar="[NAME=]FILE.npy", help="the model's input")
    r.add_argument("--device", default="fsim", help="fsim (default), tsim or rpc://HOST:PORT")
    r.add_argument("-o", "--output", help="write the output here (.npy; .npz for several outputs)")
    r.set_defaults(fn=cmd_run)
    f = sub.add_parser("profile", help="where the time goes: a per-layer table, a timeline trace (tsim), a roofline")
    f.add_argument("model", help="a .tar from vta compile")
    f.add_argument("--input", action="append", required=True, metavar="[NAME=]FILE.npy", help="the model's input")
    f.add_argument("--device", default="tsim", help="tsim (default: cycles and the timeline) or fsim (counters only)")
    f.add_argument("-o", "--output", help="write the trace here (Chrome/Perfetto JSON; tsim only)")
    f.add_argument("--table", help="write the per-layer table here (.json: every figure; else the text)")
    f.add_argument("--roofline", help="draw the layers under the roofline into this PNG")
    f.add_argument("--timeline", help="draw the trace into this PNG (tsim only)")
    f.add_argument("--timeline-layer", metavar="LAYER", help="draw only this layer's span (a name from the table)")
    f.add_argument("--clock-mhz", type=float, help="the board's clock (default: the configuration's)")
    f.add_argument("--warmup", type=int, default=0, help="inferences run before the profiled one (default 0: the "
                   "first inference, one-time costs included)")
    f.add_argument("--repeat", type=int, default=1, help="inferences measured; the one with the least host time is "
                   "shown (default 1)")
    f.set_defaults(fn=cmd_profile)
    t = sub.add_parser("tune", help="tune the VTA layers of an ONNX model on tsim or boards")
    _model_args(t)
    t.add_argument("--trials", type=int, default=16, help="candidates measured per task (default 16)")
    t.add_argument("--early-stopping", type=int, help="end a task after this many trials without a better one")
    t.add_argument("--servers", type=int, default=1, help="tsim servers started here (default 1)")
    t.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker to measure on instead")
    t.add_argument("--key", default="tsim", help="the servers' key at the tracker (default tsim)")
    t.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    t.add_argument("-o", "--output", help="records log, appended to and resumed (default MODEL.jsonl here)")
    t.set_defaults(fn=cmd_tune)
    k = sub.add_parser("tracker", help="start a TVM RPC tracker (servers register with it; tuning asks it)")
    k.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    k.add_argument("--port", type=int, default=9190)
    k.set_defaults(fn=cmd_tracker)
    s = sub.add_parser("server", help="start a VTA RPC server (on a board, or tsim/fsim here)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    s.add_argument("--port", type=int, default=9091)
    s.add_argument("--port-end", type=int, help="the last port to try (default: --port + 100)")
    s.add_argument("--key", help="key announced to the tracker (default: the configuration's TARGET)")
    s.add_argument("--tracker", help="HOST:PORT of a tracker to register with")
    s.add_argument("--config", help="configuration file (default: $VTA_CONFIG or the repository's)")
    s.add_argument("--state-dir", help="where the server keeps its state (default: a new temp dir)")
    s.set_defaults(fn=cmd_server)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from vta_hw.spec import ConfigError

    from .autotune import MeasureError
    from .graph import GraphError, QuantizationError
    from .tiling import RecordsError
    from .transform import VTACompileError
    try:
        return args.fn(args)
    except (CliError, ConfigError, GraphError, MeasureError, QuantizationError, RecordsError,
            VTACompileError) as exc:
        print(f"vta {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vta {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
