"""Figures of the group, depthwise and transposed convolutions (``vta.top``), compiled with vta.build and
checked exactly, in compiler_bench's style:

* GEMM uops issued / ideal (useful MACs / (BATCH*BLOCK_IN*BLOCK_OUT)); block-diagonal depthwise
  tiles issue 16 GEMM MACs per useful one, so 16.0 there; for conv2d_transpose also uops / those of
  the stride-dilated convolution (0.25 at stride 2: no GEMM meets a dilation zero),
* DRAM bytes moved / compulsory bytes (input, the real weights, bias and output, each once),
* on tsim: useful MACs per cycle / (BATCH*BLOCK_IN*BLOCK_OUT). Targets: >= 0.6 for group convolutions
  with >= 32 channels per group and for conv2d_transpose. With 16 channels per group (D1-D9) the
  ALU epilogue (bias ADD with a register operand: 2 cycles, SHR, MAX, MIN per output element) shares
  the compute module with 9 GEMM uops per element, which bounds them at 9/14 = 0.64; CT1 moves 8 MiB
  of weights for 0.5 M GEMM uops, so the 64-bit bus bounds it at 0.5.
* depthwise on VTA (tsim cycles at the configuration's clock) against the host CPU (TVM llvm, one
  thread, vectorised over the 16 channel lanes of the packed layout).

Default: every workload on fsim and the small ones on tsim; ``--tsim``: every workload on tsim;
``--quick``: a few workloads.
"""

from __future__ import annotations

import time

import numpy as np

TARGET_TSIM_EFFICIENCY = 0.6

QUICK = ["D9", "G4", "DW9", "CT3", "UP1"]
TSIM_SMALL = ["D8", "D9", "G4", "DW8", "DW9", "CT3"]


def _workloads():
    from vta_compiler.top import DCGAN, MOBILENET_DEPTHWISE, MOBILENET_GROUP, UNET_DECODER, WIDE_GROUP
    return {**MOBILENET_GROUP, **WIDE_GROUP, **MOBILENET_DEPTHWISE, **DCGAN, **UNET_DECODER}


def _run_one(name, wkl):
    from vta_compiler.testing.layers_extra import run_conv2d_transpose, run_group_conv2d
    from vta_compiler.top import Conv2DTransposeWorkload
    if isinstance(wkl, Conv2DTransposeWorkload):
        return run_conv2d_transpose(wkl, name=name)
    return run_group_conv2d(wkl, name=name)


def _target(wkl) -> float | None:
    from vta_compiler.top import Conv2DTransposeWorkload
    if isinstance(wkl, Conv2DTransposeWorkload):
        return TARGET_TSIM_EFFICIENCY
    return TARGET_TSIM_EFFICIENCY if wkl.in_per_group >= 32 else None


def _tiling_str(t) -> str:
    g = f"g{t.tile_g} " if hasattr(t, "tile_g") else ""
    return (f"{g}co{t.tile_co} h{t.tile_h} w{t.tile_w} ci{t.tile_ci} threads {t.oc_nthread}x{t.h_nthread}x"
            f"{t.ko_nthread} wgt@{t.wgt_at}")


def cpu_depthwise_seconds(wkl, repeat: int = 5) -> float:
    """Best wall time of the depthwise layer (int8 in, +bias, >>shift, clip, int8 out) on the host CPU: TVM
    llvm, one thread, the packed layout with the 16 channel lanes vectorised."""
    import tvm
    from tvm import s_tir, te, topi
    bl = 16
    cb, h, w, k, s, p = wkl.in_filter // bl, wkl.height, wkl.width, wkl.hkernel, wkl.hstride, wkl.hpad
    oh, ow = wkl.out_height, wkl.out_width
    data = te.placeholder((1, cb, h, w, bl), "int8", name="data")
    kern = te.placeholder((cb, k, k, bl), "int8", name="kernel")
    bias = te.placeholder((cb, bl), "int32", name="bias")
    dpad = topi.nn.pad(data, [0, 0, p, p, 0], name="pad")
    dy, dx = te.reduce_axis((0, k), "dy"), te.reduce_axis((0, k), "dx")
    acc = te.compute((1, cb, oh, ow, bl), lambda n, c, i, j, l: te.sum(
        dpad[n, c, i * s + dy, j * s + dx, l].astype("int32") * kern[c, dy, dx, l].astype("int32"), axis=[dy, dx]),
        name="acc")
    res = te.compute(acc.shape, lambda n, c, i, j, l: te.min(te.max((acc[n, c, i, j, l] + bias[c, l]) >> 9, 0),
                                                                127).astype("int8"), name="res")
    sch = s_tir.Schedule(te.create_prim_func([data, kern, bias, res]))
    blk = sch.get_sblock("acc")
    n_, c_, i_, j_, l_, dy_, dx_ = sch.get_loops(blk)
    sch.reorder(n_, c_, i_, j_, dy_, dx_, l_)
    sch.compute_inline(sch.get_sblock("pad"))
    sch.reverse_compute_at(sch.get_sblock("res"), j_)
    init = sch.decompose_reduction(blk, dy_)
    sch.vectorize(sch.get_loops(init)[-1])          # the update's lane loop is innermost: LLVM vectorises it
    sch.vectorize(sch.get_loops(sch.get_sblock("res"))[-1])
    f = tvm.tirx.build(sch.mod, target="llvm")
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.integers(-128, 128, sh).astype(dt)) for sh, dt in
            (((1, cb, h, w, bl), "int8"), ((cb, k, k, bl), "int8"), ((cb, bl), "int32"))]
    out = tvm.runtime.empty((1, cb, oh, ow, bl), "int8")
    f(*args, out)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args, out)
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool = False, tsim: bool = False) -> dict:
    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice

    env = vta.get_env()
    peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
    every = _workloads()
    names = QUICK if quick else list(every)
    rows: dict = {}
    print(f"{'layer':5} {'ok':>3} {'build s':>7} {'uops/ideal':>10} {'uops/dil':>8} {'DRAM/comp':>9} {'inside':>6}  "
          "tiling")
    try:
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(env.config)))
        for name in names:
            r = _run_one(name, every[name])
            row = {"correct": r.correct, "build_s": r.build_s, "gemm_uops": r.stats["gemm_counter"],
                   "ideal_uops": r.ideal_uops, "uops_over_ideal": r.uop_ratio, "dram_bytes": r.moved_bytes,
                   "compulsory_bytes": r.compulsory_bytes, "dram_over_compulsory": r.dram_ratio,
                   "inside_clip_fraction": r.inside_fraction, "shift": r.shift, "tiling": vars(r.tiling)}
            dil = ""
            if r.dilated_uops:
                row["uops_over_dilated"] = r.stats["gemm_counter"] / r.dilated_uops
                dil = f"{row['uops_over_dilated']:.3f}"
            rows[name] = row
            print(f"{name:5} {'yes' if r.correct else 'NO':>3} {r.build_s:7.2f} {r.uop_ratio:10.3f} {dil:>8} "
                  f"{r.dram_ratio:9.2f} {r.inside_fraction:6.2f}  {_tiling_str(r.tiling)}", flush=True)
    finally:
        vta_runtime.set_command_queue(None)
    summary = {"layers": rows, "all_correct": all(v["correct"] for v in rows.values())}
    print(f"all results exact: {summary['all_correct']}")
    tsim_names = list(every) if tsim else [n for n in TSIM_SMALL if not quick or n in QUICK]
    summary["tsim"] = _run_tsim({n: every[n] for n in tsim_names}, env, peak)
    summary["depthwise_vs_cpu"] = _depthwise_vs_cpu(summary["tsim"], every, env, quick)
    return summary


def _run_tsim(workloads: dict, env, peak: int) -> dict:
    from .compiler_bench import _tsim_available
    if not _tsim_available():
        msg = "sim.tsim is not available; tsim figures skipped"
        print(msg)
        return {"skipped": msg}
    import vta_runtime
    from sim.tsim import TsimDevice, verilator_available

    from .common import TimedDevice
    if not verilator_available():
        print("Verilator is not installed: tsim figures skipped")
        return {"skipped": "no verilator"}
    out = {}
    dev = TimedDevice(TsimDevice(env.config))
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        for name, wkl in workloads.items():
            c0, t0 = dev.run_cycles, dev.run_seconds
            r = _run_one(name, wkl)
            speed = (dev.run_cycles - c0) / (dev.run_seconds - t0)
            cycles = r.stats["cycle_count"]
            eff = r.macs / cycles / peak
            target = _target(wkl)
            out[name] = {"correct": r.correct, "cycles": cycles, "macs": r.macs, "macs_per_cycle_over_peak": eff,
                         "gemm_busy_cycles": r.stats.get("gemm_busy_cycles"),
                         "alu_busy_cycles": r.stats.get("alu_busy_cycles"), "target": target,
                         "target_met": None if target is None else eff >= target, "tsim_cycles_per_s": speed}
            flag = "" if target is None else f" (target >= {target}: {'met' if eff >= target else 'NOT met'})"
            print(f"tsim {name}: correct={r.correct} cycles={cycles} useful MACs/cycle/peak={eff:.3f}{flag}; "
                  f"tsim speed {speed / 1e3:,.0f} k cycles/s", flush=True)
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    return out


def _depthwise_vs_cpu(tsim_rows: dict, every: dict, env, quick: bool) -> dict:
    freq_hz = env.config.fpga_freq * 1e6
    out = {}
    for name, row in tsim_rows.items():
        if not name.startswith("DW") or not isinstance(row, dict):
            continue
        cpu_s = cpu_depthwise_seconds(every[name], 3 if quick else 10)
        vta_s = row["cycles"] / freq_hz
        out[name] = {"vta_cycles": row["cycles"], "vta_s_at_clock": vta_s, "clock_mhz": env.config.fpga_freq,
                     "cpu_s": cpu_s, "vta_over_cpu": vta_s / cpu_s}
        print(f"depthwise {name}: VTA {row['cycles']} cycles = {vta_s * 1e3:.3f} ms at {env.config.fpga_freq} MHz; "
              f"host CPU (TVM llvm, 1 thread) {cpu_s * 1e3:.3f} ms; VTA/CPU time {vta_s / cpu_s:.2f}", flush=True)
    return out
