"""How well the cost model ranks tilings (``vta_compiler.top.conv_family.estimate_cycles``), against tsim.

For every layer with measured candidates (the records shipped with the package, ``vta_compiler/tiling/shipped/``,
and the calibration logs in ``bench/costmodel_logs/``: random legal tilings of more layers), the Spearman rank
correlation between the model's estimate and the measured cycles, per layer kind: the mean and the minimum over
layers, and pooled over every candidate (ranks taken within each layer). Beside it the same for the model before
calibration (``legacy_estimate``, the formula the operator registry started with). Then, per layer, how far the
untuned default (the model's choice, what a build uses without records) is from the best measured candidate:
measured cycles of the model's choice / best. With ``--tsim`` the choices that no log holds are measured here
(tsim, in this process; kept in ``build/bench/costmodel_choices.jsonl``), otherwise they are reported as not
measured.

The layers whose busy counters the model's constants were fitted to (ResNet-18's, the ``resnet18`` records) are
marked "fit"; every other layer is held out.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .common import RESULTS_DIR

LOG_DIR = Path(__file__).resolve().parent / "costmodel_logs"
CHOICES_LOG = RESULTS_DIR / "costmodel_choices.jsonl"
#: records the model's constants were fitted to (their busy counters); the others are held out
FIT_SOURCES = ("resnet18",)
#: layers with fewer measured candidates are not ranked
MIN_CANDIDATES = 8


def legacy_estimate(s, env) -> float:
    """The cost model before calibration (the registry refactor's single formula), for comparison: per tile its
    chunks' loads and GEMMs, overlapped by a rule of thumb for threads and chunks in flight, 5 cycles of ALU
    per accumulator, the store, and half the DRAM traffic again."""
    bus = env.AXI_DATA_BYTES
    inp_c = s.inp_chunk * env.INP_ELEM_BYTES / bus
    chunk_wgt_c = s.wgt_chunk * env.WGT_ELEM_BYTES / bus
    wgt_c = 0.0 if s.wgt_at_co else chunk_wgt_c
    loads, gemms = inp_c + wgt_c, s.gemm_chunk
    if s.chunks_in_flight > 1:
        chunk = max(loads, gemms) + (min(loads, gemms) / 2 if s.row_threads > 1 else 0)
    elif s.threads > 1:
        chunk = max(loads, gemms) + min(loads, gemms)
    else:
        chunk = loads + gemms
    tile = s.chunks * chunk + (loads if s.chunks_in_flight > 1 else 0)
    tile += 5 * s.acc_elems + s.acc_elems * env.OUT_ELEM_BYTES / bus / s.threads + 40
    tiles = s.out_tiles * s.spatial_tiles
    total = tiles * tile + (inp_c + chunk_wgt_c + s.gemm_chunk) / s.threads
    wgt_bytes = s.wgt_layer * env.WGT_ELEM_BYTES
    if s.wgt_at_co:
        total += wgt_bytes / bus
    else:
        wgt_bytes *= s.spatial_tiles
    inp_bytes = tiles * s.chunks * s.inp_chunk * env.INP_ELEM_BYTES
    return total + 0.5 * (inp_bytes + wgt_bytes) / bus


def ranks(x) -> np.ndarray:
    """Ranks from 0, ties sharing their mean rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):
        tie = x == v
        if tie.sum() > 1:
            r[tie] = r[tie].mean()
    return r


def spearman(a, b) -> float:
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def log_files() -> list[Path]:
    from vta_compiler.tiling.dispatch import default_record_files
    files = default_record_files() + sorted(LOG_DIR.glob("*.jsonl"))
    return files + ([CHOICES_LOG] if CHOICES_LOG.exists() else [])


def layers(env) -> dict:
    """Per task key: its task, the source file names, and its correct measurements (one per tiling, the latest)
    on this hardware configuration (tsim's)."""
    from vta_compiler.tiling.records import config_hash, read_records
    want = config_hash(env.config)
    out: dict = {}
    for f in log_files():
        records, _ = read_records(f)
        for r in records:
            if r.config != want or not r.ok:
                continue
            d = out.setdefault(r.task.key, {"task": r.task, "sources": set(), "by_knobs": {}})
            d["sources"].add(f.stem)
            d["by_knobs"][r.knobs_key] = r
    return out


def kind_of(task) -> str:
    return task.op.label(task.workload)


def evaluate(env, measure_missing=None) -> dict:
    """The rows of the table: per layer the correlations and the default's ratio; ``measure_missing(task,
    tiling)`` measures a model's choice no log holds (a Record), or None."""
    rows = {}
    for key, d in layers(env).items():
        task, recs = d["task"], list(d["by_knobs"].values())
        if len(recs) < MIN_CANDIDATES:
            continue
        op, wkl = task.op, task.workload
        cycles = np.array([r.cycles for r in recs], dtype=np.float64)
        shapes = [op.shape(wkl, r.tiling(), env) for r in recs]
        from vta_compiler.top.conv_family import estimate_cycles
        new = [estimate_cycles(s, env) for s in shapes]
        old = [legacy_estimate(s, env) for s in shapes]
        ranked = [op.knob_values(t) for t in op.candidates(wkl, env, task.acc_operands)]
        choice = op.tiling_from_knobs(ranked[0])
        knobs = ranked[0]
        chosen = next((r for r in recs if r.knobs == knobs), None)
        if chosen is None and measure_missing is not None:
            chosen = measure_missing(task, choice)
        best = float(cycles.min())
        best_knobs = recs[int(np.argmin(cycles))].knobs
        name = task.name or task.describe()
        rows[key] = {
            "layer": name, "kind": kind_of(task), "workload": task.describe(), "candidates": len(recs),
            "held_out": not (d["sources"] & set(FIT_SOURCES)),
            "spearman": spearman(new, cycles), "spearman_before": spearman(old, cycles),
            "ranks": (ranks(new) / max(len(recs) - 1, 1), ranks(cycles) / max(len(recs) - 1, 1),
                      ranks(old) / max(len(recs) - 1, 1)),
            "median_estimate_over_measured": float(np.median(np.array(new) / cycles)),
            "best_cycles": best, "default_tiling": str(choice),
            "default_cycles": chosen.cycles if chosen is not None else None,
            "default_over_best": chosen.cycles / best if chosen is not None else None,
            # where the best measured tiling is in the model's ranking of every legal one (1: its first choice)
            "best_at_rank": ranked.index(best_knobs) + 1 if best_knobs in ranked else None,
            "legal": len(ranked)}
    return rows


def summarize(rows: dict) -> dict:
    """Per (kind, fit/held-out): mean and minimum over layers and the pooled correlation, before and after."""
    groups: dict = {}
    for r in rows.values():
        for g in ((r["kind"], "all"), (r["kind"], "held out" if r["held_out"] else "fit")):
            groups.setdefault(g, []).append(r)
    out = {}
    for (kind, part), rs in sorted(groups.items()):
        if part != "all" and all(x["held_out"] == rs[0]["held_out"] for x in rows.values() if x["kind"] == kind):
            continue                      # only one part: "all" says it
        new = [r["spearman"] for r in rs]
        old = [r["spearman_before"] for r in rs]
        pooled = np.concatenate([r["ranks"][0] for r in rs]), np.concatenate([r["ranks"][1] for r in rs])
        pooled_old = np.concatenate([r["ranks"][2] for r in rs])
        ratios = [r["default_over_best"] for r in rs if r["default_over_best"] is not None]
        at = [r["best_at_rank"] for r in rs if r["best_at_rank"] is not None]
        out[f"{kind} ({part})"] = {
            "layers": len(rs), "candidates": int(sum(r["candidates"] for r in rs)),
            "spearman_mean": float(np.mean(new)), "spearman_min": float(np.min(new)),
            "spearman_pooled": float(np.corrcoef(*pooled)[0, 1]),
            "before_mean": float(np.mean(old)), "before_min": float(np.min(old)),
            "before_pooled": float(np.corrcoef(pooled_old, pooled[1])[0, 1]),
            "default_over_best_mean": float(np.mean(ratios)) if ratios else None,
            "default_over_best_max": float(np.max(ratios)) if ratios else None,
            "defaults_measured": f"{len(ratios)}/{len(rs)}",
            "best_in_model_top": {k: sum(1 for a in at if a <= k) for k in (1, 4, 16)}}
    return out


def model_speed(env, rounds: int = 3) -> dict:
    """Seconds to rank every legal tiling of a few layers (``candidates``: enumeration, buffer check, estimates,
    sort), with this cost model and with ``legacy_estimate`` in its place, side by side (best of ``rounds``
    interleaved rounds)."""
    from vta_compiler.tiling import registry
    from vta_compiler.top import DCGAN, MOBILENET_DEPTHWISE, RESNET18
    from vta_compiler.top import conv_family as F
    model = F.estimate_cycles
    out = {}
    for name, wkl in (("C5", RESNET18["C5"]), ("DW3", MOBILENET_DEPTHWISE["DW3"]), ("CT2", DCGAN["CT2"])):
        op = registry.of(wkl)
        best = {"model": float("inf"), "legacy": float("inf")}
        try:
            for _ in range(rounds):
                for which, fn in (("model", model), ("legacy", legacy_estimate)):
                    F.estimate_cycles = fn
                    t0 = time.perf_counter()
                    n = len(op.candidates(wkl, env, 1))
                    best[which] = min(best[which], time.perf_counter() - t0)
        finally:
            F.estimate_cycles = model
        out[name] = {"candidates": n, "seconds": best["model"], "legacy_seconds": best["legacy"]}
    return out


def _fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec)


def run(quick: bool = False, tsim: bool = False) -> dict:
    import vta_compiler as vta
    env = vta.get_env()
    measure = None
    runner = None
    if tsim:
        from sim.tsim import verilator_available
        if verilator_available():
            from vta_compiler.tiling.records import append_record

            from .costmodel_measure import TsimRunner

            def measure(task, tiling):
                nonlocal runner
                runner = runner or TsimRunner(env)
                rec = runner.measure(task, tiling)
                append_record(CHOICES_LOG, rec)
                print(f"  measured the model's choice for {task.name}: {rec.cycles} cycles {rec.error or ''}",
                      flush=True)
                return rec if rec.ok else None
    try:
        rows = evaluate(env, measure)
    finally:
        if runner is not None:
            runner.close()
    print(f"logs: {', '.join(f.name for f in log_files())}")
    print(f"{'layer':24} {'kind':17} {'set':8} {'n':>3} {'Spearman':>8} {'before':>7} {'est/meas':>8} "
          f"{'default/best':>12} {'best at':>10}  workload")
    for r in sorted(rows.values(), key=lambda r: (r["kind"], r["held_out"], r["layer"])):
        print(f"{r['layer']:24} {r['kind']:17} {'held out' if r['held_out'] else 'fit':8} {r['candidates']:>3} "
              f"{r['spearman']:>8.3f} {r['spearman_before']:>7.3f} {r['median_estimate_over_measured']:>8.3f} "
              f"{_fmt(r['default_over_best']):>12} {_fmt(r['best_at_rank'], 'd'):>4}/{r['legal']:<5}  {r['workload']}")
    summary = summarize(rows)
    print(f"\n{'kind':30} {'layers':>6} {'cands':>5} {'mean':>6} {'min':>6} {'pooled':>6} | {'before: mean':>12} "
          f"{'min':>6} {'pooled':>6} | {'default/best mean':>17} {'max':>6} {'measured':>8} | best in top 1/4/16")
    for kind, s in summary.items():
        print(f"{kind:30} {s['layers']:>6} {s['candidates']:>5} {s['spearman_mean']:>6.3f} {s['spearman_min']:>6.3f} "
              f"{s['spearman_pooled']:>6.3f} | {s['before_mean']:>12.3f} {s['before_min']:>6.3f} "
              f"{s['before_pooled']:>6.3f} | {_fmt(s['default_over_best_mean']):>17} "
              f"{_fmt(s['default_over_best_max']):>6} {s['defaults_measured']:>8} | "
              f"{'/'.join(str(v) for v in s['best_in_model_top'].values())}")
    speed = {} if quick else model_speed(env)
    for name, sp in speed.items():
        print(f"ranking every legal tiling of {name} ({sp['candidates']} candidates): {sp['seconds']:.2f} s, with the "
              f"model before calibration {sp['legacy_seconds']:.2f} s ({sp['seconds'] / sp['legacy_seconds']:.2f}x)")
    return {"logs": [f.name for f in log_files()], "summary": summary,
            "layers": {r["layer"] + f" [{r['kind']}]": {k: v for k, v in r.items() if k != "ranks"}
                       for r in rows.values()},
            "ranking_speed": speed}
