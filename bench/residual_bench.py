"""Residual adds fused into the convolutions (ISA extension acc_8bit): ResNet-18 (224x224, batch 1; 64x64 with
``--quick``) on fsim with the default config ``+ext`` (every ISA extension), packed twice from the same quantized
module: ``graph_pack(residual="cpu")`` (the eight residual adds on the host, as on a config without the
extension) and ``residual="vta"`` (fused into the convolution before each). Side by side in one run: the host
operators (number of ops in the placement, host time per inference from ``graph.profile``'s host operators, the
least disturbed of several inferences), the runtime's host work inside the VTA kernel calls (instruction streams,
device runs excluded), and that both equal the CPU int8 run. With ``--tsim``, the VTA part's cycles of both
(the fused adds' ACC_8BIT loads and ALU work against the host's adds).
"""

from __future__ import annotations

import numpy as np


def measure_placements(quick: bool, tsim: bool, pack_options: dict[str, dict], rows) -> dict:
    """ResNet-18 quantized once, packed once per ``pack_options`` entry (``graph_pack``'s keywords) on the default
    config ``+ext``, run on fsim (and tsim): per entry, exactness against the CPU int8 run, host ops and their
    time, the runtime's host work, and ``rows(placement, profile)``'s own figures."""
    import tvm
    from tvm import relax

    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler import graph
    from vta_compiler.graph.models import imagenet_like, resnet_onnx

    image = 64 if quick else 224
    repeat = 3 if quick else 5
    mod, params = graph.from_onnx(resnet_onnx(18, image=image))
    qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, image, seed=s) for s in (11, 12)])
    x = imagenet_like(1, image, seed=13)
    want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    cfg = vta.get_env().config.replace(ISA_EXTENSIONS=("alu_mul", "acc_8bit"))
    out: dict = {"network": f"ResNet-18, {image}x{image}, batch 1", "config": vta.Environment(cfg).MODEL}
    with vta.Environment(cfg) as env:
        built = {}
        for where, options in pack_options.items():
            pmod = graph.graph_pack(qmod, env, **options)
            built[where] = (graph.placement(pmod), graph.build(pmod))
        for where, (pl, ex) in built.items():
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
            try:
                got = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])["main"](tvm.runtime.tensor(x)).numpy()
            finally:
                vta_runtime.set_command_queue(None)
            prof = graph.profile(ex, x, "fsim", env=env, placement=pl, warmup=1, repeat=repeat)
            out[where] = {
                "exact": bool(np.array_equal(got, want)),
                "host_ops": len([r for r in pl.rows if r["device"] == "CPU"]),
                "host_s": prof.host_seconds(),
                "host_op_calls": sum(h.calls for h in prof.host_ops),
                "runtime_s": sum(ly.host_seconds for ly in prof.layers),
                **rows(pl, prof),
            }
            if tsim:
                from sim.tsim import verilator_available

                from .network_bench import vta_part_on_tsim
                if verilator_available():
                    t = vta_part_on_tsim(ex, x, cfg)
                    out[where].update(tsim_exact=bool(np.array_equal(t["output"], want)),
                                      tsim_vta_cycles=int(sum(t["cycles"])))
    return out


def run(quick: bool = False, tsim: bool = False) -> dict:
    out = measure_placements(quick, tsim, {"cpu": {"residual": "cpu"}, "vta": {"residual": "vta"}},
                             lambda pl, prof: {"fused_residuals": len([r for r in pl.vta_rows if "residual" in r])})
    cpu, fused = out["cpu"], out["vta"]
    out["host_s_ratio"] = fused["host_s"] / cpu["host_s"] if cpu["host_s"] else 0.0
    print(f"{out['network']} on fsim, {out['config']}:")
    for where, label in (("cpu", "residual adds on the host"), ("vta", "residual adds fused on VTA")):
        r = out[where]
        print(f"  {label:26s} {r['host_ops']:3d} host ops in the placement ({r['host_op_calls']} host calls), "
              f"host operators {1e3 * r['host_s']:7.1f} ms per inference, the runtime's host work in the VTA calls "
              f"{1e3 * r['runtime_s']:6.1f} ms; {r['fused_residuals']} fused adds; exact against the CPU: {r['exact']}")
    print(f"  host time fused / on the host: {out['host_s_ratio']:.2f}")
    if "tsim_vta_cycles" in cpu and "tsim_vta_cycles" in fused:
        c0, c1 = cpu["tsim_vta_cycles"], fused["tsim_vta_cycles"]
        out["tsim_cycles_ratio"] = c1 / c0
        print(f"  tsim VTA part: {c0:,} cycles with the adds on the host, {c1:,} fused ({c1 / c0:.3f}x; "
              f"{(c1 - c0) / 100e3:+.2f} ms at 100 MHz); exact: {cpu['tsim_exact']}, {fused['tsim_exact']}")
    return out
