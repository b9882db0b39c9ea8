"""Whole-network figures for ResNet-18 (224x224, batch 1), side by side in one run:

* the CPU engines a user would otherwise pick: ONNX Runtime (float32), TVM's llvm build of the float
  graph and of the quantized graph;
* VTA on fsim: wall time of one inference (runtime and host operators included), the share of the
  network's MACs on VTA, the full build time (graph_pack + build + linking the executable, until it
  is ready to run), the peak memory of a process that
  builds and runs the network on fsim;
* with ``--tsim``: tsim cycles of every VTA layer beside its ideal (MACs / 256), the VTA part in ms at
  100 MHz (Pynq) and 333 MHz (Ultra96) beside the original VTA's 621.8 ms for tuned ResNet-18 on Pynq;
* a picture (``build/bench/resnet18_layers.png``): tsim cycles per VTA layer beside its ideal (fsim
  wall time without ``--tsim``), and each host operator's share of the host time.

Then ResNet-50 (v1, bottleneck blocks, 224x224; 64x64 with ``--quick``): its share of MACs on VTA, fsim
exact against the CPU int8 run, and with ``--tsim`` the tsim cycles of its VTA part, the fraction of peak
and the VTA part in ms at the same clocks.

Targets: >= 99% of MACs on VTA; build <= 20 s; VTA part <= 100 ms at 100 MHz (>= 71% of peak over the
network); fsim peak memory <= 2 GiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np

from .breakdown import breakdown, format_breakdown
from .common import RESULTS_DIR, TimedDevice, best_of, interleaved_best

ORIGINAL_PYNQ_MS = 621.8        # tuned ResNet-18 on Pynq, the original VTA's AutoTVM tutorial
TARGET_BUILD_S = 20.0
TARGET_VTA_MS_100MHZ = 100.0
TARGET_PEAK_BYTES = 2 << 30


class CallTimer:
    """A VM instrument: wall time of every call, and the device's cycle counter around VTA kernels."""

    def __init__(self, device=None):
        self.device = device
        self.calls: list[tuple[str, float, int]] = []
        self._start: dict[str, tuple[float, int]] = {}

    def cycles(self) -> int:
        return int(self.device.stats().get("cycle_count", 0)) if self.device is not None else 0

    def __call__(self, func, name, before, ret, *args):
        name = str(name)
        if name.startswith("vm.builtin") or name.startswith("vta.runtime"):
            return 0
        if before:
            self._start[name] = (time.perf_counter(), self.cycles() if name.startswith("vta_") else 0)
        else:
            t0, c0 = self._start.pop(name)
            c = self.cycles() - c0 if name.startswith("vta_") else 0
            self.calls.append((name, time.perf_counter() - t0, c))
        return 0


def _resnet(image: int, depth: int = 18):
    from vta_compiler import graph
    from vta_compiler.graph.models import imagenet_like, resnet_onnx
    model = resnet_onnx(depth, image=image)
    x = imagenet_like(1, image, seed=13)
    return graph, model, x, [imagenet_like(1, image, seed=s) for s in (11, 12)]


def peak_memory_probe(image: int) -> int:
    """Build and run ResNet-18 on fsim in this process; return its peak resident memory in bytes."""
    import resource

    import tvm
    from tvm import relax

    import vta_runtime
    from sim.fsim import FsimDevice
    graph, model, x, cal = _resnet(image)
    mod, params = graph.from_onnx(model)
    ex = graph.build(graph.graph_pack(graph.quantize(mod, params, calibration=cal)))
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice()))
    vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
    vm["main"](tvm.runtime.tensor(x))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _plot(rows: list[dict], host: dict[str, float], path, unit: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 8.5), gridspec_kw={"height_ratios": [3, 2]})
    names = [r["name"] for r in rows]
    pos = np.arange(len(rows))
    if unit == "tsim cycles":
        ax1.bar(pos - 0.2, [r["measured"] for r in rows], 0.4, label="tsim cycles")
        ax1.bar(pos + 0.2, [r["ideal"] for r in rows], 0.4, label="ideal (MACs / 256 per cycle)")
        ax1.set_ylabel("cycles")
        ax1.set_title("ResNet-18 on VTA: cycles of each layer (tsim) beside the ideal")
        ax1.legend()
    else:
        ax1.bar(pos, [r["measured"] for r in rows], 0.6)
        ax1.set_ylabel("seconds")
        ax1.set_title("ResNet-18 on VTA: fsim wall time of each layer (run with --tsim for cycles beside the ideal)")
    ax1.set_xticks(pos, names, rotation=60, ha="right", fontsize=8)
    items = sorted(host.items(), key=lambda kv: -kv[1])
    top = items[:12]
    rest = sum(v for _, v in items[12:])
    labels = [k for k, _ in top] + (["other host ops"] if rest else [])
    vals = [v for _, v in top] + ([rest] if rest else [])
    total = sum(host.values()) or 1.0
    ax2.barh(np.arange(len(vals)), [100 * v / total for v in vals])
    ax2.set_yticks(np.arange(len(vals)), labels, fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel("% of the host operators' time (this machine's CPU)")
    ax2.set_title(f"host operators: {1e3 * total:.1f} ms in all")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(quick: bool = False, tsim: bool = False) -> dict:
    import tvm
    from tvm import relax

    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler.graph.frontend import bind_params

    image = 64 if quick else 224
    graph, model, x, cal = _resnet(image)
    out: dict = {"network": f"ResNet-18, {image}x{image}, batch 1"}

    from .ort import OrtRunner
    onnxruntime = OrtRunner(model, {"data": x})
    onnxruntime()   # timed below, beside fsim

    mod, params = graph.from_onnx(model)
    t0 = time.perf_counter()
    qmod = graph.quantize(mod, params, calibration=cal)
    out["quantize_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pmod = graph.graph_pack(qmod)
    ex = graph.build(pmod)
    ex.jit()                       # linked into a loadable library, as relax.VirtualMachine(ex, ...) does first
    out["build_s"] = time.perf_counter() - t0
    pl = graph.placement(pmod)
    out["vta_mac_share"] = pl.vta_share
    out["macs"] = pl.total_macs

    def cpu_vm(m):
        t = time.perf_counter()
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        return vm, time.perf_counter() - t
    fvm, out["tvm_llvm_float_compile_s"] = cpu_vm(tvm.IRModule({"main": bind_params(mod, params)}))
    xt = tvm.runtime.tensor(x)
    out["tvm_llvm_float_s"], _ = best_of(lambda: fvm["main"](xt), 2)
    qvm, out["tvm_llvm_int8_compile_s"] = cpu_vm(qmod)
    out["tvm_llvm_int8_s"], want = best_of(lambda: qvm["main"](xt).numpy(), 2)

    dev = FsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
        got = vm["main"](xt).numpy()                   # first run: uop kernels made, weights copied
        out["exact"] = bool(np.array_equal(got, want))
        # side by side: rounds that run each once, so that both see the same machine load
        best = interleaved_best({"onnxruntime": onnxruntime, "fsim": lambda: vm["main"](xt)}, 3 if quick else 5,
                                0.0 if quick else 3.0)
        out["onnxruntime_s"], out["fsim_s"] = best["onnxruntime"][0], best["fsim"][0]
        out["fsim_parts"] = breakdown(vm, [xt], vta_runtime.command_handle(), rounds=2 if quick else 3)
        timer = CallTimer()
        vm.set_instrument(timer)
        vm["main"](xt)
    finally:
        vta_runtime.set_command_queue(None)
    out["fsim_over_onnxruntime"] = out["fsim_s"] / out["onnxruntime_s"]

    host = defaultdict(float)
    kernel_s = []
    for name, dt, _ in timer.calls:
        if name.startswith("vta_"):
            kernel_s.append(dt)
        else:
            host[name] += dt
    out["fsim_vta_kernels_s"] = sum(kernel_s)
    out["host_ops_s"] = sum(host.values())
    ideal = [r["macs"] / 256 for r in pl.vta_rows]
    rows = [{"name": r["name"], "ideal": c, "measured": s} for r, c, s in zip(pl.vta_rows, ideal, kernel_s)]
    unit = "fsim seconds"

    if tsim:
        from sim.tsim import TsimDevice, verilator_available
        if verilator_available():
            tdev = TimedDevice(TsimDevice())
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(tdev))
            try:
                vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
                ttimer = CallTimer(tdev)
                vm.set_instrument(ttimer)
                t0 = time.perf_counter()
                got = vm["main"](xt).numpy()
                out["tsim_wall_s"] = time.perf_counter() - t0
            finally:
                vta_runtime.set_command_queue(None)
                tdev.close()
            cyc = [c for name, _, c in ttimer.calls if name.startswith("vta_")]
            total = sum(cyc)
            out["tsim_exact"] = bool(np.array_equal(got, want))
            out["tsim_vta_cycles"] = total
            out["tsim_cycles_per_s"] = tdev.cycles_per_second     # the simulator alone (host operators excluded)
            out["vta_ms_100mhz"] = total / 100e3
            out["vta_ms_333mhz"] = total / 333e3
            out["original_vta_pynq_ms"] = ORIGINAL_PYNQ_MS
            out["vta_efficiency"] = sum(ideal) / total if total else 0.0
            out["tsim_layers"] = [{"name": r["name"], "cycles": c, "ideal": i, "efficiency": i / c if c else 0}
                                  for r, c, i in zip(pl.vta_rows, cyc, ideal)]
            rows = [{"name": r["name"], "ideal": i, "measured": c} for r, c, i in zip(pl.vta_rows, cyc, ideal)]
            unit = "tsim cycles"
        else:
            out["tsim"] = "skipped: Verilator is not installed"
    probe = subprocess.run([sys.executable, "-m", "bench.network_bench", "--peak-memory", str(image)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out["fsim_peak_memory_bytes"] = int(probe.stdout.split()[-1]) if probe.returncode == 0 else None

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = RESULTS_DIR / "resnet18_layers.png"
    _plot(rows, dict(host), png, unit)
    out["picture"] = str(png)

    print(f"{out['network']}: {pl.summary()}")
    print(f"  build (graph_pack + build) {out['build_s']:.1f} s (target <= {TARGET_BUILD_S:.0f} s); "
          f"quantize {out['quantize_s']:.1f} s")
    print(f"  ONNX Runtime float32     {1e3 * out['onnxruntime_s']:9.1f} ms")
    print(f"  TVM llvm float32         {1e3 * out['tvm_llvm_float_s']:9.1f} ms")
    print(f"  TVM llvm int8 (qmod)     {1e3 * out['tvm_llvm_int8_s']:9.1f} ms")
    print(f"  fsim (VTA + host ops)    {1e3 * out['fsim_s']:9.1f} ms  = {out['fsim_over_onnxruntime']:.1f} x ONNX "
          f"Runtime (kernels {1e3 * out['fsim_vta_kernels_s']:.0f} ms, host ops {1e3 * out['host_ops_s']:.0f} ms); "
          f"exact against the CPU: {out['exact']}")
    print(f"  fsim CPU time by part: {format_breakdown(out['fsim_parts'])}")
    if out["fsim_peak_memory_bytes"]:
        print(f"  fsim process peak memory {out['fsim_peak_memory_bytes'] / 2**30:.2f} GiB (target <= 2 GiB)")
    if "tsim_vta_cycles" in out:
        print(f"  tsim: VTA part {out['tsim_vta_cycles']:,} cycles = {out['vta_ms_100mhz']:.1f} ms at 100 MHz "
              f"(target <= {TARGET_VTA_MS_100MHZ:.0f}), {out['vta_ms_333mhz']:.1f} ms at 333 MHz; original VTA on "
              f"Pynq: {ORIGINAL_PYNQ_MS} ms; {100 * out['vta_efficiency']:.1f}% of peak; exact: {out['tsim_exact']}")
        print(f"  tsim speed: {out['tsim_cycles_per_s'] / 1e3:,.0f} k simulated cycles/s (device runs only)")
    print(f"  picture: {png}")
    out["resnet50"] = run_resnet50(image, tsim)
    return out


def vta_part_on_tsim(ex, x, config=None) -> dict:
    """Run ``ex`` on a tsim of ``config`` (default: the environment's); the VTA part's cycles per kernel call."""
    import tvm
    from tvm import relax

    import vta_runtime
    from sim.tsim import TsimDevice
    tdev = TsimDevice(config)
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(tdev))
    try:
        vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
        timer = CallTimer(tdev)
        vm.set_instrument(timer)
        t0 = time.perf_counter()
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        wall = time.perf_counter() - t0
        stats = tdev.stats()
    finally:
        vta_runtime.set_command_queue(None)
        tdev.close()
    cycles = [c for name, _, c in timer.calls if name.startswith("vta_")]
    return {"output": got, "cycles": cycles, "wall_s": wall, "stats": stats}


def run_resnet50(image: int, tsim: bool) -> dict:
    """ResNet-50's row: VTA share, fsim exact against the CPU int8 run, tsim cycles of the VTA part."""
    import tvm
    from tvm import relax

    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler.environment import get_env
    graph, model, x, cal = _resnet(image, depth=50)
    out: dict = {"network": f"ResNet-50 v1, {image}x{image}, batch 1"}
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=cal)
    t0 = time.perf_counter()
    pmod = graph.graph_pack(qmod)
    ex = graph.build(pmod)
    out["build_s"] = time.perf_counter() - t0
    pl = graph.placement(pmod)
    out["vta_mac_share"], out["macs"], out["vta_layers"] = pl.vta_share, pl.total_macs, len(pl.vta_rows)
    want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice()))
    try:
        got = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])["main"](tvm.runtime.tensor(x)).numpy()
    finally:
        vta_runtime.set_command_queue(None)
    out["exact"] = bool(np.array_equal(got, want))
    print(f"{out['network']}: {pl.summary()}; build {out['build_s']:.1f} s; fsim exact against the CPU: "
          f"{out['exact']}")
    if tsim:
        from sim.tsim import verilator_available
        if not verilator_available():
            out["tsim"] = "skipped: Verilator is not installed"
            return out
        run = vta_part_on_tsim(ex, x)
        env = get_env()
        peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT
        vta_macs = sum(r["macs"] for r in pl.vta_rows)
        total = sum(run["cycles"])
        out.update(tsim_exact=bool(np.array_equal(run["output"], want)), tsim_vta_cycles=total,
                   tsim_wall_s=run["wall_s"], vta_efficiency=vta_macs / peak / total if total else 0.0,
                   vta_ms_100mhz=total / 100e3, vta_ms_333mhz=total / 333e3,
                   tsim_layers=[{"name": r["name"], "cycles": c, "ideal": r["macs"] / peak}
                                for r, c in zip(pl.vta_rows, run["cycles"])])
        print(f"  tsim: VTA part {total:,} cycles = {out['vta_ms_100mhz']:.1f} ms at 100 MHz, "
              f"{out['vta_ms_333mhz']:.1f} ms at 333 MHz; {100 * out['vta_efficiency']:.1f}% of peak; "
              f"exact: {out['tsim_exact']} ({run['wall_s']:.0f} s of tsim)")
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--peak-memory":
        print(peak_memory_probe(int(sys.argv[2])))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv, tsim="--tsim" in sys.argv), indent=2, default=str))
