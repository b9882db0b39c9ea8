"""Autotuning figures (``vta_compiler.autotune``), from the records builds use (the shipped ones):

* per ResNet-18 layer C1-C11: the cost model's tiling and the tuned one, their tsim cycles and fraction of
  peak (MACs / cycles / (BATCH x BLOCK_IN x BLOCK_OUT)), side by side; the targets: tuned >= model on every
  layer, the 1x1 stride-2 layers C4, C7, C10 >= 0.6 of peak, every 3x3 layer >= 0.85;
* for a target the tuned layer misses, its cycle breakdown (busy and stall cycles per module, GEMM and ALU
  busy cycles) and the ceiling the hardware sets: GEMM and ALU share one in-order compute module, so a layer
  cannot take fewer cycles than their busy cycles together; what a hardware change would give, estimated
  from the same counters;
* a picture (``build/bench/tune_curves.png``): best cycles against trials, per task;
* unless ``--quick``: the tuned tilings of C4, C7, C10 (every layer with ``--tsim``) run again here on tsim,
  cycles compared with the records (they reproduce, or the records are stale: ``nox -s tune -- --ship``), and
  a small tuning job timed with one and with two tsim servers, side by side.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .common import RESULTS_DIR, TimedDevice

TARGET_1X1 = 0.6
TARGET_3X3 = 0.85
ONE_BY_ONE = ("C4", "C7", "C10")


def _targets(name: str, wkl) -> list[tuple[str, float]]:
    if name in ONE_BY_ONE:
        return [("1x1 stride 2 >= 0.6", TARGET_1X1)]
    if wkl.hkernel == 3:
        return [("3x3 >= 0.85", TARGET_3X3)]
    return []


def breakdown(stats: dict, macs: int, peak: int, alu_ops_per_element: int = 4, reg_ops_per_element: int = 1) -> dict:
    """Where the cycles go, and the ceilings of the hardware as it is and with three changes (estimates from
    the counters: the compute module runs GEMM and ALU one after the other, so GEMM + ALU busy cycles are a
    floor; the change lowers that floor and the rest of the run (stalls, fill) is assumed to stay)."""
    cyc = stats["cycle_count"]
    gemm, alu = stats.get("gemm_busy_cycles", 0), stats.get("alu_busy_cycles", 0)
    ideal = macs / peak
    elements = stats.get("alu_counter", 0) / alu_ops_per_element
    floors = {
        "as is (GEMM + ALU on one compute module)": gemm + alu,
        "ALU register operand in 1 cycle (a second ACC read port)": gemm + alu - reg_ops_per_element * elements,
        "fused requantize ALU op (+bias, >>, clip in one 1-cycle uop)": gemm + alu - (alu - elements),
        "ALU beside GEMM (own uop pipeline, double-buffered ACC)": max(gemm, alu),
    }
    out = {"cycles": cyc, "ideal_cycles": ideal,
           "compute_busy": stats.get("compute_busy_cycles", 0), "compute_stall": stats.get("compute_stall_cycles", 0),
           "gemm_busy": gemm, "alu_busy": alu,
           "load_busy": stats.get("load_busy_cycles", 0), "load_stall": stats.get("load_stall_cycles", 0),
           "store_busy": stats.get("store_busy_cycles", 0), "store_stall": stats.get("store_stall_cycles", 0),
           "axi_read_beats": stats.get("axi_read_beats", 0), "axi_write_beats": stats.get("axi_write_beats", 0),
           "changes": {}}
    base = floors["as is (GEMM + ALU on one compute module)"]
    for what, floor in floors.items():
        est = cyc - (base - floor)
        out["changes"][what] = {"floor_cycles": floor, "ceiling": ideal / floor if floor else None,
                                "estimated_cycles": est, "estimated_efficiency": ideal / est}
    return out


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _plot(curves: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.get_cmap("tab20").colors
    for k, (name, (best, eff)) in enumerate(curves.items()):
        xs = range(1, len(best) + 1)
        first = next((b for b in best if b != float("inf")), None)
        c = colors[(2 * k) % 20 if k < 10 else (2 * k + 1) % 20]
        if first:
            ax1.plot(xs, [b / first for b in best], marker=".", color=c, label=f"{name} ({first:,.0f})")
        ax2.plot(xs, eff, marker=".", color=c, label=name)
    ax1.set_xlabel("trial")
    ax1.set_ylabel("best tsim cycles so far / trial 1's")
    ax1.set_title("best cycles against trials (trial 1: the cost model's choice, cycles in brackets)")
    ax1.legend(fontsize=7, ncol=2)
    ax2.set_xlabel("trial")
    ax2.set_ylabel("best fraction of peak so far")
    ax2.set_title("fraction of peak (MACs / cycle / 256)")
    ax2.axhline(TARGET_3X3, ls="--", c="grey", lw=0.8)
    ax2.axhline(TARGET_1X1, ls=":", c="grey", lw=0.8)
    ax2.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def _remeasure(rows: dict, names: list[str], env) -> None:
    import vta_runtime
    from sim.tsim import TsimDevice
    from vta_compiler.testing.layers import run_conv2d
    for name in names:
        row = rows[name]
        if row.get("tuned_knobs") is None:
            continue
        dev = TimedDevice(TsimDevice(env.config))
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            r = run_conv2d(row["workload"], row["tuned_tiling"], seed=0, name=name)
        finally:
            vta_runtime.set_command_queue(None)
            dev.close()
        row["remeasured_cycles"] = r.stats["cycle_count"]
        row["remeasured_correct"] = r.correct
        row["reproduced"] = r.correct and r.stats["cycle_count"] == row["tuned_cycles"]
        row["tsim_cycles_per_s"] = dev.cycles_per_second
        print(f"  {name}: tuned tiling again on tsim: {r.stats['cycle_count']:,} cycles, correct={r.correct} -> "
              f"{'reproduces the record' if row['reproduced'] else 'DIFFERS from the record (stale records?)'}; "
              f"tsim speed {dev.cycles_per_second / 1e3:,.0f} k cycles/s", flush=True)


def _time_servers(env) -> dict:
    """The same small tuning job (fresh logs) with one and with two tsim servers."""
    from vta_compiler import autotune
    from vta_compiler.top import RESNET18
    tasks = autotune.extract_tasks({n: RESNET18[n] for n in ONE_BY_ONE}, env)
    out = {"job": f"{', '.join(ONE_BY_ONE)}, 6 trials each"}
    for n in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            res = autotune.tune(tasks, Path(d) / "log.jsonl", autotune.TsimMeasure(n_parallel=n), trials=6, env=env,
                                progress=False)
        out[f"{n}_server_s"] = res.seconds
        out[f"{n}_server_measuring_s"] = res.measure_seconds
        print(f"  {out['job']}: {n} tsim server(s): {res.measure_seconds:.0f} s measuring "
              f"({res.seconds:.0f} s with server start-up)", flush=True)
    out["speedup_with_second_server"] = out["1_server_measuring_s"] / out["2_server_measuring_s"]
    print(f"  the second server makes the job {out['speedup_with_second_server']:.2f}x faster", flush=True)
    return out


def run(quick: bool = False, tsim: bool = False) -> dict:
    import vta_compiler as vta
    from vta_compiler import autotune
    from vta_compiler.tiling.records import curve
    from vta_compiler.top import RESNET18

    env = vta.get_env()
    peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
    hist = autotune.default_history(env.config)
    files = ", ".join(str(f.name) for f in autotune.default_record_files())
    print(f"records builds use by default: {files or 'none'}; {len(hist)} for this configuration "
          f"({env.MODEL}, hardware {autotune.config_hash(env.config)})")
    if not len(hist):
        msg = "no shipped records for this configuration: run nox -s tune -- --ship"
        print(msg)
        return {"skipped": msg}
    rows, curves = {}, {}
    print(f"{'layer':5} {'model cycles':>12} {'eff':>5} {'tuned cycles':>12} {'eff':>5} {'speed-up':>8} {'trials':>6}"
          "  targets")
    for name, wkl in RESNET18.items():
        task = autotune.Task("conv2d", wkl, 1, name)
        recs = hist.records(task)
        data = task.space
        macs = wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * \
            (-(-wkl.in_filter // env.BLOCK_IN) * env.BLOCK_IN) * wkl.hkernel * wkl.wkernel
        model_t = data.model_choice(wkl, env, 1)
        model_r = next((r for r in recs if r.ok and r.tiling() == model_t), None)
        best = hist.best(task)
        row = {"workload": wkl, "macs": macs, "trials": len(recs), "errors": sum(1 for r in recs if not r.ok),
               "model_tiling": str(model_t), "model_cycles": model_r.cycles if model_r else None,
               "tuned_knobs": best.knobs if best else None, "tuned_tiling": best.tiling() if best else None,
               "tuned_cycles": best.cycles if best else None}
        row["model_efficiency"] = macs / row["model_cycles"] / peak if model_r else None
        row["tuned_efficiency"] = macs / best.cycles / peak if best else None
        met = {}
        if best and model_r:
            met["tuned >= model"] = best.cycles <= model_r.cycles
        for label, goal in _targets(name, wkl):
            met[label] = bool(best) and row["tuned_efficiency"] >= goal
        row["targets"] = met
        if best and not all(met.values()):
            row["breakdown"] = breakdown(best.stats, macs, peak)
        rows[name] = row
        if recs:
            c = curve(recs)
            curves[name] = (c, [macs / x / peak if x != float("inf") else 0 for x in c])
        print(f"{name:5} {fmt(row['model_cycles'], ',d'):>12} {fmt(row['model_efficiency'], '.3f'):>5} "
              f"{fmt(row['tuned_cycles'], ',d'):>12} {fmt(row['tuned_efficiency'], '.3f'):>5} "
              f"{(row['model_cycles'] / row['tuned_cycles']) if model_r and best else float('nan'):>7.2f}x "
              f"{len(recs):>6}  " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in met.items()),
              flush=True)
    for name, row in rows.items():
        b = row.get("breakdown")
        if not b:
            continue
        missed = [k for k, v in row["targets"].items() if not v]
        print(f"{name} misses {', '.join(missed)}: {b['cycles']:,} cycles, ideal {b['ideal_cycles']:,.0f}; "
              f"compute busy {b['compute_busy']:,} (GEMM {b['gemm_busy']:,}, ALU {b['alu_busy']:,}), compute stalled "
              f"{b['compute_stall']:,}; load busy {b['load_busy']:,} stalled {b['load_stall']:,}; store busy "
              f"{b['store_busy']:,} stalled {b['store_stall']:,}; AXI beats read {b['axi_read_beats']:,} write "
              f"{b['axi_write_beats']:,}")
        for what, c in b["changes"].items():
            print(f"    {what:<62} ceiling {c['ceiling']:.2f} of peak; this tiling ~{c['estimated_cycles']:,.0f} "
                  f"cycles = {c['estimated_efficiency']:.2f}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = RESULTS_DIR / "tune_curves.png"
    try:
        _plot(curves, png)
        print(f"picture: {png}")
    except ImportError as exc:
        print(f"no picture ({exc}; the bench extra installs matplotlib)")
        png = None
    out = {"records": files, "layers": {n: {k: (str(v) if k in ("workload", "tuned_tiling") else v)
                                             for k, v in r.items()} for n, r in rows.items()},
           "picture": str(png) if png else None,
           "all_tuned_at_least_model": all(r["targets"].get("tuned >= model", False) for r in rows.values())}
    if not quick:
        from sim.tsim import verilator_available
        if verilator_available():
            _remeasure(rows, list(RESNET18) if tsim else list(ONE_BY_ONE), env)
            out["reproduced"] = {n: r.get("reproduced") for n, r in rows.items() if "reproduced" in r}
            t0 = time.perf_counter()
            out["servers"] = _time_servers(env)
            out["servers"]["bench_s"] = time.perf_counter() - t0
        else:
            print("Verilator is not installed: no re-measurement, no server timing")
    return out
