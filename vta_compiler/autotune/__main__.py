"""python -m vta_compiler.autotune: tune ResNet-18's layers (or some of them) on tsim or on boards.

    python -m vta_compiler.autotune                         # C1-C11 and the network's own layers, 2 tsim servers
    python -m vta_compiler.autotune --layers C4,C7 --trials 16 --servers 1
    python -m vta_compiler.autotune --tracker 10.0.0.1:9190 --key pynq    # boards behind a tracker
    python -m vta_compiler.autotune --ship                  # ... and write the records builds use by default
    python -m vta_compiler.autotune --list                  # the tasks and their search spaces, no tuning

The log (default ``build/autotune/resnet18.jsonl``) is resumed: records already there for this hardware
configuration are not measured again. ``--ship`` rewrites ``vta_compiler/tiling/shipped/resnet18.jsonl``
with the log's records for this configuration (and keeps the file's records for other configurations).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LOG = REPO / "build" / "autotune" / "resnet18.jsonl"


def resnet18_tasks(env, layers: list[str] | None = None, network: bool = True):
    """ResNet-18's convolutions C1-C11 (``vta.top.RESNET18``, a bias in ACC) and, with ``network``, the layers
    of the whole network (``graph.models.resnet_onnx(18)``) whose workload is not among them (the folded
    first layer, the classifier). The network's C2-C11 use the C2-C11 records (a tiling measured with a bias
    alone serves a layer with a per-channel shift when it still fits)."""
    from ..top import RESNET18
    from .task import extract_tasks
    names = layers or list(RESNET18)
    unknown = [n for n in names if n not in RESNET18]
    if unknown:
        raise SystemExit(f"unknown layer(s) {', '.join(unknown)}; ResNet-18's are {', '.join(RESNET18)}")
    tasks = extract_tasks({n: RESNET18[n] for n in names}, env)
    if network and layers is None:
        from ..graph import from_onnx, quantize
        from ..graph.models import resnet_onnx
        mod, params = from_onnx(resnet_onnx(18))
        seen = {(t.kind, json.dumps(t.workload_json(), sort_keys=True)) for t in tasks}
        for t in extract_tasks(quantize(mod, params, global_scale=8.0), env):
            if (t.kind, json.dumps(t.workload_json(), sort_keys=True)) not in seen:
                tasks.append(t)
    return tasks


def ship(log: Path, config, dest: Path) -> int:
    """Write ``dest`` with the log's records for ``config`` and ``dest``'s own records for other configurations."""
    from vta_hw.files import locked, write_atomic

    from ..tiling.records import config_hash, read_records
    want = config_hash(config)
    mine = [line for line in log.read_text().splitlines() if line.strip() and _config_of(line) == want]
    with locked(dest):            # a read-modify-write: two shippers must not drop each other's records
        old = dest.read_text().splitlines() if dest.exists() else []
        keep = [line for line in old if line.strip() and _config_of(line) not in (want, None)]
        write_atomic(dest, "\n".join(keep + mine) + "\n")
    read_records(dest)            # readable
    return len(mine)


def _config_of(line: str):
    try:
        return json.loads(line).get("config")
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    from ..environment import get_env
    from ..tiling.dispatch import DEFAULT_RECORDS_DIR
    from .measure import RPCMeasure, TsimMeasure
    from .tuner import tune
    p = argparse.ArgumentParser(prog="python -m vta_compiler.autotune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", help="comma-separated ResNet-18 layers (C1..C11); default: C1-C11 and the network's "
                   "other layers")
    p.add_argument("--trials", type=int, default=32, help="candidates measured per task (default 32)")
    p.add_argument("--early-stopping", type=int, help="end a task after this many trials without a better one")
    p.add_argument("--servers", type=int, default=2, help="tsim servers started on this machine (default 2)")
    p.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker to measure on instead (tsim servers or boards)")
    p.add_argument("--key", default="tsim", help="the servers' key at the tracker (default tsim)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    p.add_argument("--log", default=str(DEFAULT_LOG), help=f"records log, resumed (default {DEFAULT_LOG})")
    p.add_argument("--ship", action="store_true", help="write the log's records for this configuration to "
                   f"{DEFAULT_RECORDS_DIR / 'resnet18.jsonl'} (the records builds use by default)")
    p.add_argument("--list", action="store_true", help="print the tasks and their search spaces, then stop")
    p.add_argument("--no-network", action="store_true", help="only C1-C11, not the network's other layers")
    args = p.parse_args(argv)

    env = get_env()
    layers = args.layers.split(",") if args.layers else None
    tasks = resnet18_tasks(env, layers, not args.no_network)
    if args.list:
        for t in tasks:
            sp = t.op
            n = len(sp.candidates(t.workload, env, t.acc_operands))
            print(f"{t.label:<12} {t.describe():<40} knob combinations {sp.size(t.workload, env):>6}, "
                  f"fit {n:>5}")
        return 0
    if args.tracker:
        host, port = args.tracker.rsplit(":", 1)
        measure = RPCMeasure(tracker=(host, int(port)), key=args.key, timeout=args.timeout)
    else:
        measure = TsimMeasure(n_parallel=args.servers, timeout=args.timeout)
    t0 = time.perf_counter()
    res = tune(tasks, args.log, measure, trials=args.trials, early_stopping=args.early_stopping, env=env)
    load = os.getloadavg()
    summary = {"tasks": len(tasks), "trials": args.trials, "servers": measure.n_parallel, "device": res.device,
               "new_measurements": res.measured, "seconds": round(time.perf_counter() - t0, 1),
               "load_average": [round(x, 2) for x in load], "cpus": os.cpu_count(),
               "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    Path(args.log).with_suffix(".run.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{res.measured} measurements on {measure.n_parallel} {res.device} server(s) in {summary['seconds']:.0f} s "
          f"(load average {load[0]:.1f} on {os.cpu_count()} CPUs)")
    if args.ship:
        dest = DEFAULT_RECORDS_DIR / "resnet18.jsonl"
        n = ship(Path(args.log), env.config, dest)
        print(f"wrote {n} records to {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
