"""Design-space exploration per board: ``nox -s dse [-- --board B] [--sweep default|full] [--ship]``.

For one board (the names of ``nox -s bitstream -- --board``) it sweeps configurations (batch, block 16/32,
SRAM sizes, the number of AXI ports where the board has two coherent ones, the clock) and measures each:

* **utilization** against the part: the board top (core + PS as a black box) through yosys
  ``synth_xilinx``, as ``nox -s bitstream`` does (``boards.flow``), SRAMs in block RAM or UltraRAM
  (``vta_hw.synth.sram_styles``; the xczu7ev has UltraRAM). A point whose multipliers alone exceed the
  part's DSPs (``BATCH x BLOCK^2 / 2`` packed products) is not synthesised: its row says so;
* **the clock it supports**: the timing estimate of the same netlist (``vta_hw.timing``), with the routing
  allowance of the timing guide (logic at most 70% of the period), rounded down to a clock the PS makes
  (``CLOCKS``); a block RAM or DSP output used before a register disqualifies the point;
* **tsim cycles** of ResNet-18, ResNet-50 (v1) and MobileNet v1 (224x224, batch = the configuration's BATCH): the
  distinct layers of each network (``autotune.extract_tasks``) measured on tsim with the board's own memory
  system (servers with ``--tsim-system``), each with the cost model's tiling (``--trials 1``, the default)
  or tuned (``--trials N``), summed with their multiplicities (the VTA part of the network);
* **ms** per batch and per image at that clock.

It writes ``build/dse/<board>/dse.md`` (the table), ``dse.json`` and ``dse.png`` (latency against DSPs and
against block RAM, the Pareto front marked). Every result is cached by the point's configuration hash (and
the hashes of the hardware sources and the timing model) in ``build/dse/points/<key>/``: a sweep that stops
resumes where it was; the tuning logs there (``<network>.jsonl``) resume too.

The synthesis runs are spread over ``--jobs`` processes (default: every core); the tsim measurements go
through TVM's RPC tracker as tuning does (``vta_compiler.autotune``): by default ``--servers`` tsim servers
on this machine (``TsimMeasure``), or every server registered with ``--tracker HOST:PORT --key KEY``
(start them with ``python -m vta_compiler.exec.rpc_server --tracker HOST:PORT --key KEY --config
any_tsim.json --tsim-system <the board's TARGET>``), so more machines make a sweep faster.

``--ship`` writes the best point (the least ResNet-18 ms per image among those that fit and meet their
clock) to ``configs/<board>.json`` with the clock it ships with (``FPGA_FREQ``): the fastest PS clock that holds
the worst path with estimated routing (``routed_clock``; the 70% rule's clock above is optimistic, the timing
guide says); ``nox -s bitstream -- --board B`` then builds it by default.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from vta_hw import timing
from vta_hw.spec import Config, ConfigError, load_config

from .platforms import BOARDS, Board

REPO = Path(__file__).resolve().parent.parent
OUT_ROOT = REPO / "build" / "dse"
CONFIGS_DIR = REPO / "configs"
#: clocks (MHz) the sweep considers per PS family: what its PLLs make with integer dividers
CLOCKS = {"zynq7": (100, 125, 142, 166, 200, 250), "zynqmp": (150, 200, 250, 300, 333, 375)}
#: the networks a point is measured on: name -> (builder in vta_compiler.graph.models, its arguments)
NETWORKS = {"resnet18": ("resnet_onnx", {"depth": 18}), "resnet50": ("resnet_onnx", {"depth": 50}),
            "mobilenet_v1": ("mobilenet_v1_onnx", {})}
NETWORK_TITLES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "mobilenet_v1": "MobileNet v1"}
#: SRAM depths (log2 of elements: INP, WGT, ACC) a sweep tries; a uop holds an ACC index, an INP-or-ACC index
#: and a WGT index in 32 bits (vta_hw.spec.isa)
DEPTHS = {"std": (11, 10, 11), "wgt": (11, 11, 10), "half": (10, 9, 10)}
#: version of the results' layout (bumped when what a point measures changes)
VERSION = 1


def _sizes(batch: int, block: int, depths: str) -> dict:
    """The LOG_*_BUFF_SIZE keys of a depth choice for LOG_BATCH ``batch`` and LOG_BLOCK ``block``."""
    lid, lwd, lad = DEPTHS[depths]
    inp_b, wgt_b, acc_b = batch + block, 2 * block, batch + block + 2   # log2 bytes of an element (int8, int32)
    return {"LOG_INP_BUFF_SIZE": lid + inp_b, "LOG_WGT_BUFF_SIZE": lwd + wgt_b, "LOG_ACC_BUFF_SIZE": lad + acc_b,
            "LOG_UOP_BUFF_SIZE": 15}


def point(batch: int, block: int, depths: str = "std", ports: int = 1) -> dict:
    """A point of a sweep as configuration keys (on top of the repository's configuration)."""
    p = {"LOG_BATCH": batch, "LOG_BLOCK": block, **_sizes(batch, block, depths)}
    if ports > 1:
        p["AXI_PORTS"] = ports
    return p


#: the default sweep of each board: small (each point is a synthesis of tens of minutes and a tsim build)
DEFAULT_SWEEP = {
    "pynq-z1": [point(0, 4), point(0, 4, "half"), point(1, 4)],
    "pynq-z2": [point(0, 4), point(0, 4, "half"), point(1, 4)],
    "ultra96": [point(0, 4), point(1, 4), point(1, 4, ports=2), point(0, 5)],
    "zcu104": [point(0, 5), point(0, 5, ports=2), point(1, 5, ports=2), point(1, 4, ports=2)],
}


def full_sweep(board: Board) -> list[dict]:
    """Every batch (1, 2), block (16, 32), SRAM depth choice and port count the board takes."""
    ports = (1, 2) if board.family == "zynqmp" else (1,)
    return [point(b, k, d, p) for b in (0, 1) for k in (4, 5) for d in DEPTHS for p in ports]


@dataclass
class Result:
    """One point of a sweep: its configuration (with the clock chosen), utilization, timing, cycles."""
    config: dict
    status: str = "pending"          # ok | does not fit | misses timing | invalid | no cycles
    note: str = ""
    summary: dict = field(default_factory=dict)      # LUT/FF/BRAM36/DSP/URAM used
    capacity: dict = field(default_factory=dict)
    worst_logic_ns: float | None = None
    worst_routed_ns: float | None = None
    fmax_mhz: float | None = None
    clock_mhz: int | None = None
    cycles: dict = field(default_factory=dict)       # network -> VTA cycles of one batch
    layers: dict = field(default_factory=dict)       # network -> [(task, uses, cycles, ideal)]
    counters: dict = field(default_factory=dict)     # network -> summed tsim counters of its layers
    sram_styles: dict | None = None

    @property
    def cfg(self) -> Config:
        return load_config(self.config)

    def ms(self, network: str, per_image: bool = True) -> float | None:
        c = self.cycles.get(network)
        if c is None or not self.clock_mhz:
            return None
        return c / (self.clock_mhz * 1e3) / (self.cfg.BATCH if per_image else 1)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def base_config(board: Board) -> dict:
    return {**load_config().cfg_dict, "TARGET": board.target}


def point_key(board: Board, cfg: Config, image: int = 224) -> str:
    """The cache key of a point: its hardware, the board's part and system, the hardware sources, where its
    SRAMs go (block RAM or UltraRAM), the timing model and the networks' image size (boards with the same
    part and system, Pynq-Z1 and -Z2, share it)."""
    from vta_hw.synth import sram_styles
    from vta_hw.verilog import source_hash
    styles = sram_styles(cfg, board.capacity) if board.capacity is not None else None
    blob = json.dumps([VERSION, board.part, board.target, cfg.hash(hardware_only=True), source_hash(), styles,
                       timing.model_hash(), image])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dsp_estimate(cfg: Config) -> int:
    """Multipliers of the GEMM array: two int8 products per DSP (``vta_hw.gemm``)."""
    return cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT // 2


# ------------------------------------------------------------------------------------------------ synthesis
def synthesise(board_name: str, config: dict, out: str) -> dict:
    """Runs in a worker process: the board top through yosys, as ``nox -s bitstream`` does; utilization and
    the timing report (``utilization.json``)."""
    from . import flow
    board = BOARDS[board_name]
    cfg = load_config(config)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    log = open(d / "synth.log", "a")

    def progress(msg):
        print(msg, file=log, flush=True)
    t0 = time.perf_counter()
    desc = flow.make_plan(board, cfg, d, progress=progress)
    try:
        flow.utilization(board, d, progress=progress)
    except flow.FlowError as exc:
        progress(str(exc))
    data = json.loads((d / "utilization.json").read_text())
    data["sram_styles"] = desc.get("sram_styles")
    data["seconds"] = time.perf_counter() - t0
    return data


def apply_synthesis(res: Result, board: Board, data: dict) -> None:
    """Utilization, fit, timing and the clock of a point from its synthesis."""
    dev = board.capacity
    s = data["summary"]
    res.summary = {k: s.get(k, 0) for k in ("luts", "ffs", "bram36", "dsps", "uram")}
    res.capacity = {"luts": dev.luts, "ffs": dev.ffs, "bram36": dev.bram36, "dsps": dev.dsps, "uram": dev.uram}
    res.sram_styles = data.get("sram_styles")
    over = [k for k in res.summary if res.summary[k] > res.capacity[k]]
    t = data["timing"]
    paths = t["paths"]
    res.worst_logic_ns = paths[0]["ns"] if paths else 0.0
    res.worst_routed_ns = max(p["routed_ns"] for p in paths) if paths else 0.0
    res.fmax_mhz = 1000 * (1 - timing.ROUTING_SHARE) / res.worst_logic_ns if res.worst_logic_ns else None
    fits_clock = [c for c in CLOCKS[board.family] if res.fmax_mhz and c <= res.fmax_mhz]
    res.clock_mhz = max(fits_clock) if fits_clock else None
    if over:
        res.status, res.note = "does not fit", ", ".join(f"{k} {res.summary[k]:,.0f} > {res.capacity[k]:,}"
                                                          for k in over)
    elif t["unregistered"]:
        res.status, res.note = "misses timing", f"unregistered RAM/DSP outputs: {t['unregistered'][0]}"
    elif res.clock_mhz is None:
        res.status, res.note = "misses timing", f"{res.fmax_mhz:.0f} MHz is below every clock of {board.name}"
    else:
        res.status = "synthesised"
        res.config = {**res.config, "FPGA_FREQ": res.clock_mhz}


# ------------------------------------------------------------------------------------------------ tsim cycles
def network_tasks(network: str, env, image: int = 224):
    """The distinct VTA layers of ``network`` at the environment's batch (quantized without calibration)."""
    from vta_compiler import graph
    from vta_compiler.autotune import extract_tasks
    from vta_compiler.graph import models
    builder, kwargs = NETWORKS[network]
    mod, params = graph.from_onnx(getattr(models, builder)(batch=env.BATCH, image=image, **kwargs))
    return extract_tasks(graph.quantize(mod, params, global_scale=8.0), env)


def _best_from_log(log: Path, tasks, cfg_hash: str) -> dict:
    """Per task key the best correct record of ``log`` (None for a task without one)."""
    from vta_compiler.tiling.records import read_records
    records, _ = read_records(log) if log.exists() else ([], 0)
    best: dict = {t.key: None for t in tasks}
    for r in records:
        if r.config == cfg_hash and r.ok and r.task.key in best:
            if best[r.task.key] is None or r.cycles < best[r.task.key].cycles:
                best[r.task.key] = r
    return best


def measure_cycles(res: Result, board: Board, out: Path, args) -> None:
    """tsim cycles of each network's VTA part for ``res`` (cost model tilings or tuned), from its logs: a
    network whose log was tuned with at least ``args.trials`` trials (``<network>.done``) is not measured
    again."""
    from vta_compiler.autotune import RPCMeasure, TsimMeasure, tune
    from vta_compiler.environment import Environment
    from vta_compiler.tiling.records import config_hash
    cfg = res.cfg.replace(TARGET="tsim")
    env = Environment(cfg)
    want = config_hash(cfg)
    for network in args.networks:
        with env:
            tasks = network_tasks(network, env, args.image)
        log, done = out / f"{network}.jsonl", out / f"{network}.done"
        if not done.exists() or int(done.read_text()) < args.trials:
            if args.tracker:
                host, port = args.tracker.rsplit(":", 1)
                measure = RPCMeasure(tracker=(host, int(port)), key=args.key, timeout=args.timeout,
                                     system=board.target)
            else:
                measure = TsimMeasure(n_parallel=args.servers, timeout=args.timeout, system=board.target)
            tune(tasks, log, measure, trials=args.trials, env=env, progress=not args.quiet)
            done.write_text(str(args.trials))
        best = _best_from_log(log, tasks, want)
        failed = [t.label for t in tasks if best[t.key] is None]
        if failed:
            res.status, res.note = "no cycles", f"{network}: no correct run of {', '.join(failed)} (see {log})"
            return
        peak = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
        rows, total, counters = [], 0, {}
        for t in tasks:
            r = best[t.key]
            total += r.cycles * t.uses
            rows.append([t.label, t.uses, r.cycles, t.workload.macs / peak])
            for k, v in r.stats.items():
                counters[k] = counters.get(k, 0) + v * t.uses
        res.cycles[network], res.layers[network], res.counters[network] = total, rows, counters
    res.status, res.note = "ok", ""


# ------------------------------------------------------------------------------------------------ report
def pareto(points: list[tuple[float, float]]) -> list[bool]:
    """Which (cost, latency) points no other point beats in both (less or equal in both, less in one)."""
    out = []
    for i, (c, v) in enumerate(points):
        out.append(not any((c2 <= c and v2 <= v) and (c2 < c or v2 < v) for j, (c2, v2) in enumerate(points)
                           if j != i))
    return out


def describe(cfg: Config) -> str:
    ports = f", {cfg.AXI_PORTS} ports" if cfg.AXI_PORTS > 1 else ""
    return (f"{cfg.BATCH}x{cfg.BLOCK_IN}x{cfg.BLOCK_OUT}, SRAM {cfg.INP_BUFF_SIZE >> 10}/{cfg.WGT_BUFF_SIZE >> 10}/"
            f"{cfg.ACC_BUFF_SIZE >> 10} KiB{ports}")


def table(board: Board, results: list[Result]) -> str:
    def pct(r, k):
        return f"{r.summary[k]:,.0f} ({100 * r.summary[k] / r.capacity[k]:.0f}%)" if k in r.summary and \
            r.capacity.get(k) else "-"
    has_uram = bool(board.capacity.uram)
    head = ["configuration", "status", "LUT", "BRAM36"] + (["URAM"] if has_uram else []) + \
        ["DSP", "logic ns", "est. fmax", "clock (with est. routing)"] + \
        [f"{NETWORK_TITLES[n]} ms" for n in NETWORKS] + \
        ["per image (" + " / ".join(NETWORK_TITLES[n] for n in NETWORKS) + ")"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cfg = r.cfg
        routed = routed_clock(board, r)
        scale = r.clock_mhz / routed if routed else None

        def f(x, scale=scale):
            return f"{x:.2f} ({x * scale:.2f})" if x is not None and scale else f"{x:.2f}" if x is not None else "-"
        ms = {n: r.ms(n, per_image=False) for n in NETWORKS}
        per = {n: r.ms(n) for n in NETWORKS}
        clock = f"{r.clock_mhz} MHz" + (f" ({routed})" if routed else "") if r.clock_mhz else "-"
        cells = [describe(cfg), r.status + (f" ({r.note})" if r.note else ""), pct(r, "luts"), pct(r, "bram36")] + \
            ([pct(r, "uram")] if has_uram else []) + \
            [pct(r, "dsps"), f"{r.worst_logic_ns:.2f}" if r.worst_logic_ns else "-",
             f"{r.fmax_mhz:.0f} MHz" if r.fmax_mhz else "-", clock,
             *[f(ms[n]) for n in NETWORKS], " / ".join(f(per[n]) for n in NETWORKS) if cfg.BATCH > 1 else "same"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(board: Board, results: list[Result], path: Path, network: str = "resnet18") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    done = [r for r in results if r.status == "ok" and r.ms(network) is not None]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in ((axes[0], "dsps", "DSPs"), (axes[1], "bram36", "block RAM (RAMB36 equivalents)")):
        xs = [r.summary[key] for r in done]
        ys = [r.ms(network) for r in done]
        front = pareto(list(zip(xs, ys)))
        ax.scatter(xs, ys, c=["tab:red" if f else "tab:blue" for f in front], zorder=3)
        for r, x, y in zip(done, xs, ys):
            ax.annotate(f"{describe(r.cfg)} @{r.clock_mhz}", (x, y), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
        pts = sorted((x, y) for (x, y), f in zip(zip(xs, ys), front) if f)
        if pts:
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="tab:red", alpha=0.5,
                    label="Pareto front")
            ax.legend()
        ax.axvline(board.capacity.dsps if key == "dsps" else board.capacity.bram36, color="gray", ls="--", lw=1)
        ax.set_xlabel(f"{label} (dashed: the part's)")
        ax.set_ylabel(f"{network} VTA part, ms per image")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{board.name}: design-space exploration (tsim cycles at the estimated clock)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def routed_clock(board: Board, r: Result) -> int | None:
    """The clock a point ships with: the fastest clock the PS makes whose period holds the worst path "with
    estimated routing" (``vta_hw.timing``), the figure the timing guide calls the better guide to what a
    Vivado build reaches (the 70% rule of ``clock_mhz`` is optimistic); never above ``clock_mhz``."""
    if not r.worst_routed_ns or not r.clock_mhz:
        return None
    ok = [c for c in CLOCKS[board.family] if c <= min(1000 / r.worst_routed_ns, r.clock_mhz)]
    return max(ok) if ok else None


def shipped_ms(board: Board, r: Result, network: str) -> float | None:
    """ms per image of ``network`` at the clock the point ships with."""
    c, clock = r.cycles.get(network), routed_clock(board, r)
    return c / (clock * 1e3) / r.cfg.BATCH if c is not None and clock else None


def best(results: list[Result], board: Board | None = None) -> Result | None:
    """The point with the least ResNet-18 ms per image (at its shipped clock, given the board), then ResNet-50,
    then the fewest DSPs."""
    def ms(r, n):
        return shipped_ms(board, r, n) if board is not None else r.ms(n)
    ok = [r for r in results if r.status == "ok" and ms(r, "resnet18") is not None]
    return min(ok, key=lambda r: (ms(r, "resnet18"), ms(r, "resnet50") or 0, r.summary.get("dsps", 0))) if ok else None


def ship(board: Board, r: Result, configs_dir: Path = CONFIGS_DIR) -> Path:
    """Write ``configs/<board>.json``: the point's configuration with the clock it ships with (``FPGA_FREQ``,
    see ``routed_clock``)."""
    clock = routed_clock(board, r)
    if clock is None:
        raise ValueError(f"dse: {describe(r.cfg)} on {board.name} has no clock with estimated routing to ship with")
    configs_dir.mkdir(parents=True, exist_ok=True)
    path = configs_dir / f"{board.name}.json"
    d = {**r.cfg.cfg_dict, "FPGA_FREQ": clock}
    path.write_text(json.dumps(d, indent=2) + "\n")
    return path


# ------------------------------------------------------------------------------------------------ main
def run(board_name: str, points: list[dict], args) -> list[Result]:
    board = BOARDS[board_name]
    if board.capacity is None:
        raise SystemExit(f"dse: {board.name} has no timing model here (Quartus boards); the DSE covers "
                         f"{', '.join(n for n, b in BOARDS.items() if b.capacity is not None)}")
    out = Path(args.out) / board.name
    out.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    for p in points:
        try:
            cfg = load_config({**base_config(board), **p})
            from vta_hw.core import check_buildable
            check_buildable(cfg)
        except (ConfigError, ValueError) as exc:
            r = Result(config={**base_config(board), **p}, status="invalid", note=str(exc).split(": ", 1)[-1])
            results.append(r)
            continue
        results.append(Result(config=cfg.cfg_dict))
    cached: dict[int, Path] = {}
    todo = []
    for i, r in enumerate(results):
        if r.status == "invalid":
            continue
        cfg = r.cfg
        key = point_key(board, cfg, args.image)
        cache = Path(args.out) / "points" / key / "result.json"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cached[i] = cache
        if cache.exists():                 # synthesised before (and perhaps measured): resume from there
            results[i] = Result(**json.loads(cache.read_text()))
            continue
        if dsp_estimate(cfg) > board.capacity.dsps:
            r.status = "does not fit"
            r.note = f"its GEMM array alone needs {dsp_estimate(cfg):,} DSPs > {board.capacity.dsps:,} " \
                "(not synthesised)"
            r.summary, r.capacity = {"dsps": dsp_estimate(cfg)}, {"dsps": board.capacity.dsps}
            continue
        todo.append(i)
    if todo:
        print(f"[dse] {board.name}: synthesising {len(todo)} point(s) on {args.jobs} process(es)", flush=True)
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
            futs = {i: pool.submit(synthesise, board.name, results[i].config, str(cached[i].parent / "synth"))
                    for i in todo}
            for i, fut in futs.items():
                data = fut.result()
                apply_synthesis(results[i], board, data)
                print(f"[dse] {board.name}: {describe(results[i].cfg)}: {results[i].status} "
                      f"({data['seconds']:.0f} s)", flush=True)
                cached[i].write_text(json.dumps(results[i].to_json(), indent=1))
    for i, r in enumerate(results):
        unmeasured = r.status == "ok" and any(n not in r.cycles for n in args.networks)
        if r.status in ("synthesised", "no cycles") or (r.status == "ok" and args.trials > 1) or unmeasured:
            print(f"[dse] {board.name}: tsim cycles of {describe(r.cfg)} at {r.clock_mhz} MHz", flush=True)
            measure_cycles(r, board, cached[i].parent, args)
            cached[i].write_text(json.dumps(r.to_json(), indent=1))
    text = table(board, results)
    (out / "dse.md").write_text(f"# {board.name}\n\n{text}\n")
    (out / "dse.json").write_text(json.dumps([r.to_json() for r in results], indent=1) + "\n")
    try:
        plot(board, results, out / "dse.png")
    except ImportError:
        print("[dse] matplotlib is not installed: no picture (pip install matplotlib)", flush=True)
    print(text)
    b = best(results, board)
    if b is not None:
        clock = routed_clock(board, b)
        print(f"[dse] {board.name}: best {describe(b.cfg)} at {clock} MHz (estimated routing; {b.clock_mhz} MHz by "
              "the 70% rule): " + ", ".join(f"{NETWORK_TITLES[n]} {shipped_ms(board, b, n):.2f} ms" for n in NETWORKS
                                           if shipped_ms(board, b, n)) + " per image")
        if args.ship:
            print(f"[dse] wrote {ship(board, b)}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nox -s dse --", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", action="append", choices=[n for n, b in BOARDS.items() if b.capacity is not None],
                   help="board(s) to explore (default: every Xilinx board)")
    p.add_argument("--sweep", choices=["default", "full"], default="default",
                   help="the small default sweep of each board, or every batch/block/SRAM/port combination")
    p.add_argument("--point", action="append", type=json.loads, metavar="JSON",
                   help='only these points, as configuration keys, e.g. \'{"LOG_BLOCK": 5, "AXI_PORTS": 2}\'')
    p.add_argument("--networks", default=",".join(NETWORKS), help=f"networks measured (default {','.join(NETWORKS)})")
    p.add_argument("--trials", type=int, default=1, help="tuning trials per layer (1: the cost model's tiling)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="synthesis processes (default: every core)")
    p.add_argument("--servers", type=int, default=os.cpu_count() or 1, help="tsim servers started here (default: "
                   "every core)")
    p.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker whose tsim servers measure instead")
    p.add_argument("--key", default="tsim", help="the servers' key at the tracker")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds one layer's run may take (a server "
                   "reconfigured to a new point builds its tsim first)")
    p.add_argument("--out", default=str(OUT_ROOT), help=f"results (default {OUT_ROOT})")
    p.add_argument("--image", type=int, default=224, help="the networks' image size (224; smaller for quick checks)")
    p.add_argument("--ship", action="store_true", help="write the best point to configs/<board>.json")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    args.networks = [n for n in args.networks.split(",") if n]
    unknown = [n for n in args.networks if n not in NETWORKS]
    if unknown:
        p.error(f"unknown network(s) {', '.join(unknown)}; the networks are {', '.join(NETWORKS)}")
    boards = args.board or [n for n in DEFAULT_SWEEP]
    for name in boards:
        points = args.point or (DEFAULT_SWEEP[name] if args.sweep == "default" else full_sweep(BOARDS[name]))
        run(name, points, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
