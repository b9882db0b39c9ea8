"""Where a network's depthwise layers should run: MobileNet v1 packed with ``graph_pack(depthwise="vta")``
and with ``depthwise="cpu"``, side by side in one run (224x224, width 1.0; ``--quick``: 64x64, width 0.5).

* for each placement: MACs on VTA, layout changes (``to_vdevice``), fsim wall time of one inference, and
  the host operators' time on this machine's CPU (a VM instrument times every call: host operators and
  the copies of ``to_vdevice``; not the VTA kernels, nor the VM's own bookkeeping);
* the host CPU's cost of the depthwise layers: the host time of the "cpu" placement minus that of the
  "vta" placement (the depthwise convolutions, their epilogues and the layout changes around them);
* with ``--tsim``: the VTA cycles of the depthwise kernels of the "vta" placement, in ms at 100 MHz (Pynq)
  and 333 MHz (Ultra96), and of the whole VTA part of each placement.

Both placements must equal the CPU run of the quantized network, bit for bit.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from .network_bench import CallTimer

PLACES = ("vta", "cpu")
#: VM builtins that do host work (a layout change's copy between the CPU and device memory)
HOST_BUILTINS = ("vm.builtin.to_device",)


class HostTimer(CallTimer):
    """CallTimer that also times the copies of ``to_vdevice``."""

    def __call__(self, func, name, before, ret, *args):
        name = str(name)
        if name in HOST_BUILTINS:
            if before:
                self._start[name] = (time.perf_counter(), 0)
            else:
                t0, _ = self._start.pop(name)
                self.calls.append((name, time.perf_counter() - t0, 0))
            return 0
        return super().__call__(func, name, before, ret, *args)


def _run(ex, x, device, repeat: int = 1):
    """(output, best wall time, host operators' time, timer of the last run) on ``device``.

    The host time sums each host call's best time over ``repeat`` runs: on a shared machine a single
    call is sometimes descheduled for tens of milliseconds, which would otherwise decide the comparison.
    """
    import tvm
    from tvm import relax

    import vta_runtime
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(device))
    walls, runs = [], []
    try:
        vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
        xt = tvm.runtime.tensor(x)
        got = vm["main"](xt).numpy()                  # first run: uop kernels made, weights copied
        for _ in range(repeat):
            timer = HostTimer(device if "cycle_count" in device.stats() else None)
            vm.set_instrument(timer)
            t0 = time.perf_counter()
            vm["main"](xt).numpy()
            walls.append(time.perf_counter() - t0)
            runs.append([dt for name, dt, _ in timer.calls if not name.startswith("vta_")])
    finally:
        vta_runtime.set_command_queue(None)
    host = float(np.sum(np.min(np.array(runs), axis=0)))
    return got, min(walls), host, timer


def run(quick: bool = False, tsim: bool = False, repeat: int = 3) -> dict:
    import tvm
    from tvm import relax

    from sim.fsim import FsimDevice
    from vta_compiler import graph
    from vta_compiler.graph.models import imagenet_like, mobilenet_v1_onnx

    image, width = (64, 0.5) if quick else (224, 1.0)
    model = mobilenet_v1_onnx(image=image, width=width)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, image, seed=s) for s in (11, 12)])
    x = imagenet_like(1, image, seed=13)
    want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    out: dict = {"network": f"MobileNet v1, {image}x{image}, width {width}, batch 1"}
    for place in PLACES:
        t0 = time.perf_counter()
        pmod = graph.graph_pack(qmod, depthwise=place)
        ex = graph.build(pmod)
        pl = graph.placement(pmod)
        row = {"build_s": time.perf_counter() - t0, "vta_mac_share": pl.vta_share,
               "layout_changes": pmod["main"].script().count("R.to_vdevice(")}
        got, row["fsim_s"], row["host_s"], _ = _run(ex, x, FsimDevice(), repeat)
        row["exact"] = bool(np.array_equal(got, want))
        if tsim:
            from sim.tsim import TsimDevice, verilator_available
            if verilator_available():
                dev = TsimDevice()
                try:
                    got, _, _, ttimer = _run(ex, x, dev)
                finally:
                    dev.close()
                cyc = [c for name, _, c in ttimer.calls if name.startswith("vta_")]
                row["tsim_exact"] = bool(np.array_equal(got, want))
                row["tsim_vta_cycles"] = sum(cyc)
                row["tsim_depthwise_cycles"] = sum(c for r, c in zip(pl.vta_rows, cyc)
                                                   if r["op"].startswith("depthwise"))
            else:
                row["tsim"] = "skipped: Verilator is not installed"
        out[place] = row
        print(f"depthwise={place!r}: {pl.summary()}; {row['layout_changes']} layout changes; fsim "
              f"{1e3 * row['fsim_s']:.0f} ms, of which host {1e3 * row['host_s']:.1f} ms; exact: {row['exact']}",
              flush=True)
    vta, cpu = out["vta"], out["cpu"]
    out["cpu_depthwise_ms"] = 1e3 * (cpu["host_s"] - vta["host_s"])
    print(f"  depthwise on this CPU (with the layout changes around it): {out['cpu_depthwise_ms']:.1f} ms")
    if "tsim_depthwise_cycles" in vta:
        c = vta["tsim_depthwise_cycles"]
        out["vta_depthwise_ms_100mhz"], out["vta_depthwise_ms_333mhz"] = c / 100e3, c / 333e3
        for place in PLACES:
            out[place]["vta_ms_100mhz"] = out[place]["tsim_vta_cycles"] / 100e3
        print(f"  depthwise on VTA (tsim): {c:,} cycles = {c / 100e3:.1f} ms at 100 MHz, {c / 333e3:.1f} ms at "
              f"333 MHz; VTA part: {vta['vta_ms_100mhz']:.1f} ms (vta) / {cpu['vta_ms_100mhz']:.1f} ms (cpu) at "
              "100 MHz")
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv, tsim="--tsim" in sys.argv), indent=2, default=str))
