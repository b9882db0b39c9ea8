"""Measure chosen tilings of layers on tsim, for calibrating and checking the cost model.

    python -m bench.costmodel_measure --layers DW5,DW7 --top 8 --random 24 --log build/costmodel/dw.jsonl
    python -m bench.costmodel_measure --layers C4 --model-choice --log vta_compiler/tiling/shipped/resnet18.jsonl

For each layer it measures the cost model's ``--top`` best candidates and a seeded random sample of
``--random`` other legal ones (so a fit is not biased towards near-optimal tilings), each built here and run
once on tsim (the Verilated core, in this process), its output checked against numpy. One record per
measurement is appended to ``--log`` in the tuner's format (``vta_compiler.tiling.records``), with the device's
counters; candidates the log already holds for this hardware configuration are skipped, so a run is resumed.
Unlike ``vta_compiler.autotune.tune`` no RPC servers are started: the runs are sequential, one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path


def extra_conv2d() -> dict:
    """conv2d layers beyond ResNet-18's, to check the cost model on shapes it was not fitted to: MobileNet v1's
    pointwise layers (PW*) and two other kernels."""
    from vta_compiler.top import Conv2DWorkload
    pw = {f"PW{n}": Conv2DWorkload(1, hw, hw, c, c, 1, 1, 0, 0, 1, 1)
          for n, hw, c in ((2, 56, 128), (4, 28, 256), (6, 14, 512), (8, 7, 1024))}
    return {**pw, "X3": Conv2DWorkload(1, 28, 28, 64, 96, 3, 3, 1, 1, 1, 1),
            "X5": Conv2DWorkload(1, 14, 14, 32, 64, 5, 5, 2, 2, 1, 1)}


def layer_tasks(names: list[str], acc_operands: int = 1):
    """Tasks of named layers: ResNet-18's C1-C11, MobileNet's depthwise DW1-DW9 and group D1-D9, the wide group
    G1-G4, DCGAN's CT1-CT3, the U-Net decoder's UP1 (``vta_compiler.top``) and ``extra_conv2d``."""
    from vta_compiler import top
    from vta_compiler.tiling import Task
    tables = [top.RESNET18, top.MOBILENET_DEPTHWISE, top.MOBILENET_GROUP, top.WIDE_GROUP, top.DCGAN, top.UNET_DECODER,
              extra_conv2d()]
    known = {n: w for t in tables for n, w in t.items()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown layer(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [Task.of(known[n], acc_operands, n) for n in names]


def network_tasks(network: str, env):
    """The VTA layers of one of the repository's networks (``vta_compiler.graph.models``: "mobilenet", "dcgan",
    "resnet18"), as ``extract_tasks`` finds them in the quantized network (with their ACC operands)."""
    from vta_compiler import autotune, graph
    from vta_compiler.graph import models
    from vta_compiler.tiling import Task
    make = {"mobilenet": models.mobilenet_v1_onnx, "dcgan": models.dcgan_generator_onnx,
            "resnet18": lambda: models.resnet_onnx(18)}
    if network not in make:
        raise SystemExit(f"unknown network {network!r}; known: {', '.join(make)}")
    mod, params = graph.from_onnx(make[network]())
    tasks = autotune.extract_tasks(graph.quantize(mod, params, global_scale=8.0), env)
    return [Task(t.kind, t.workload, t.acc_operands, f"{network}/{t.name}") for t in tasks]


def choose(task, env, top: int, n_random: int, seed: int, max_ratio: float | None = None) -> list:
    """The cost model's ``top`` best legal tilings, then ``n_random`` others drawn at random (seeded per layer),
    among those the model puts within ``max_ratio`` of its best (tilings of 1x1 tiles can take 100x longer to
    simulate and tell little)."""
    ranked = task.op.candidates(task.workload, env, task.acc_operands)
    rest = ranked[top:]
    if max_ratio is not None:
        limit = max_ratio * task.op.estimate(task.workload, ranked[0], env)
        rest = [t for t in rest if task.op.estimate(task.workload, t, env) <= limit]
    rng = random.Random(f"{seed}:{task.name}")
    return ranked[:top] + rng.sample(rest, min(n_random, len(rest)))


class TsimRunner:
    """Builds a tiling of a task and runs it once on an in-process tsim device."""

    def __init__(self, env):
        import vta_runtime
        from sim.tsim import TsimDevice
        self.env = env
        self.tsim_config = env.config.replace(TARGET="tsim")
        self.dev = TsimDevice(self.tsim_config)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(self.dev))
        self._data = {}

    def close(self) -> None:
        import vta_runtime
        vta_runtime.set_command_queue(None)
        self.dev.close()

    def measure(self, task, tiling):
        """A :class:`Record` of one run (cycles and counters, or the error)."""
        import tvm

        from vta_compiler.autotune.measure import BREAKDOWN_COUNTERS, check_output
        from vta_compiler.build_module import build
        from vta_compiler.tiling.records import Record, config_hash
        op, env = task.op, self.env
        if task.key not in self._data:
            self._data[task.key] = op.data(task.workload, env, task.acc_operands)
        data = self._data[task.key]
        knobs = op.knob_values(tiling)
        t0 = time.perf_counter()
        err, cycles, stats = None, None, {}
        try:
            mod = build(op.scheduled(task.workload, tiling, env, task.acc_operands, data.shift))
        except Exception as exc:      # noqa: BLE001 (a build error is a result)
            err = f"build failed: {str(exc).strip().splitlines()[-1][:300]}"
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if err is None:
            dev = tvm.ext_dev(0)
            args = [tvm.runtime.tensor(a, device=dev) for a in data.args]
            out = tvm.runtime.empty(data.out_shape, "int8", device=dev)
            self.dev.clear_stats()
            mod(*args, out)
            raw = self.dev.stats()
            stats = {k: int(raw[k]) for k in BREAKDOWN_COUNTERS if raw.get(k)}
            cycles = int(raw["cycle_count"])
            err = check_output(op.unpack(out.numpy()), data.expected)
        return Record(task, knobs, cycles if err is None else None, err, config_hash(self.tsim_config),
                      f"tsim_{env.MODEL.split('_', 1)[1]}", "tsim", op.estimate(task.workload, tiling, env), stats,
                      build_s, time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    import vta_compiler as vta
    from vta_compiler.tiling.records import append_record, config_hash, read_records
    p = argparse.ArgumentParser(prog="python -m bench.costmodel_measure", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", help="comma-separated layer names (C4, DW7, G2, CT3, UP1, ...)")
    p.add_argument("--network", help="every VTA layer of a network instead (mobilenet, dcgan, resnet18)")
    p.add_argument("--skip-known", nargs="*", default=[], metavar="LOG",
                   help="skip the layers whose workload these logs already have records of (any ACC operands)")
    p.add_argument("--top", type=int, default=8, help="the cost model's best candidates to measure (default 8)")
    p.add_argument("--random", type=int, default=24, help="random other legal candidates to measure (default 24)")
    p.add_argument("--max-ratio", type=float, help="draw the random ones among the tilings the model puts within this "
                   "factor of its best")
    p.add_argument("--model-choice", action="store_true", help="measure only the cost model's choice")
    p.add_argument("--acc-operands", type=int, default=1, help="per-channel ACC operands (1: a bias; 2: and a shift)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", required=True, help="records log to append to (resumed)")
    args = p.parse_args(argv)
    env = vta.get_env()
    if bool(args.layers) == bool(args.network):
        raise SystemExit("give --layers or --network")
    tasks = layer_tasks(args.layers.split(","), args.acc_operands) if args.layers else network_tasks(args.network, env)
    known = {(r.task.kind, str(r.task.workload)) for f in args.skip_known for r in read_records(f)[0]}
    tasks = [t for t in tasks if (t.kind, str(t.workload)) not in known]
    runner = TsimRunner(env)
    want_config = config_hash(runner.tsim_config)
    old, _ = read_records(args.log) if Path(args.log).exists() else ([], None)
    done = {(r.task.key, r.knobs_key) for r in old if r.config == want_config}
    try:
        for task in tasks:
            picks = [task.op.model_choice(task.workload, env, task.acc_operands)] if args.model_choice else \
                choose(task, env, args.top, args.random, args.seed, args.max_ratio)
            for i, t in enumerate(picks):
                rec_key = (task.key, __import__("json").dumps(task.op.knob_values(t), sort_keys=True))
                if rec_key in done:
                    continue
                rec = runner.measure(task, t)
                append_record(args.log, rec)
                done.add(rec_key)
                print(f"{task.name} {i + 1}/{len(picks)} {rec.cycles} {rec.error or ''} build {rec.build_s:.1f} s "
                      f"run {rec.run_s:.1f} s {task.op.knob_values(t)}", flush=True)
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
