"""Activations on VTA (ISA extensions alu_mul and acc_8bit): the PP-OCR v2 text direction classifier (the zoo's
``ppocr_cls``, MobileNetV3 with hard-swish and squeeze-excite) at the users' input shape (the test shape with
``--quick``) on fsim with the default config ``+ext``, three ways side by side in one run:

* ``before``: ``quantize(int8_activations=False)``, the activations in float on the host (as before, and as on a
  configuration without ``alu_mul``), graph_pack's defaults;
* ``int8 cpu``: ``quantize(int8_activations=True)``, ``graph_pack(activation="cpu")``: the int8 activations on the
  host;
* ``int8 vta``: the same module, ``activation="vta"``: on VTA's ALU; and how many ``"auto"`` puts there at
  100 MHz (the simulators' Pynq clock), 125 and 150 MHz.

Per way: the ops on VTA by count (and the activations among them), the share of MACs, the host ops in the
placement, the host operators' time per inference (``graph.profile``), top-1 accuracy and agreement with float
(ONNX Runtime on the shipped file) on rendered text lines, the mean difference of the upside-down probability
from float's, that VTA equals the CPU int8 run, and fsim time against ONNX Runtime (least disturbed of several
interleaved runs). ``--tsim``: the VTA part's cycles of the int8 ways.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .common import interleaved_best

ACTIVATIONS = ("hard_swish", "hard_sigmoid", "channel_multiply", "multiply")


def run(quick: bool = False, tsim: bool = False) -> dict:
    import onnx
    import tvm
    from tvm import relax

    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler import graph
    from vta_compiler.graph import zoo

    from .ort import OrtRunner
    m = zoo.MODELS["ppocr_cls"]
    try:
        m.path()
    except zoo.ZooUnavailable as exc:
        print(f"ppocr_cls skipped: {exc}")
        return {"status": f"skipped: {exc}"}
    size = "test" if quick else "bench"
    n = 8 if quick else 32
    repeat = 3 if quick else 5
    mod, params = m.import_model(size)
    cal = m.calibration(size, n=4)
    s = m.samples(n, seed=0, size=size)
    flt = m.float_outputs(s)
    cfg = vta.get_env().config.replace(ISA_EXTENSIONS=("alu_mul", "acc_8bit"))
    out: dict = {"network": f"ppocr_cls {s.feeds[0][0].shape}", "config": vta.Environment(cfg).MODEL, "samples": n}
    qmods = {i8: graph.quantize(mod, params, calibration=cal, int8_activations=i8) for i8 in (False, True)}
    ways = {"before": (False, {}), "int8 cpu": (True, {"activation": "cpu"}), "int8 vta": (True, {"activation": "vta"})}
    shipped = onnx.ModelProto()
    shipped.CopyFrom(m.onnx_model())
    ort_run = OrtRunner(shipped, s.onnx_feeds[0])
    ort_run()
    out["auto_on_vta"] = {}
    for mhz in (100, 125, 150):        # what "auto" places on VTA at the simulators' clock and faster ones
        with vta.Environment(cfg.replace(FPGA_FREQ=mhz)) as env:
            auto = graph.placement(graph.graph_pack(qmods[True], env))
            out["auto_on_vta"][mhz] = len([r for r in auto.vta_rows if r["op"].split()[0] in ACTIVATIONS])
    with vta.Environment(cfg) as env:
        for way, (i8, options) in ways.items():
            qmod = qmods[i8]
            pmod = graph.graph_pack(qmod, env, **options)
            pl = graph.placement(pmod)
            ex = graph.build(pmod)
            cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())
            vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
            try:
                vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
                q, exact = [], True
                for feeds, of in zip(s.feeds, s.onnx_feeds):
                    got = vm["main"](*[tvm.runtime.tensor(x) for x in feeds]).numpy()
                    exact &= bool(np.array_equal(got, cpu["main"](*[tvm.runtime.tensor(x) for x in feeds]).numpy()))
                    q.append(m.finish([got], of, size))
                xs = [tvm.runtime.tensor(x) for x in s.feeds[0]]
                best = interleaved_best({"onnxruntime": ort_run, "fsim": lambda vm=vm, xs=xs: vm["main"](*xs)}, repeat,
                                        0.0 if quick else 2.0)
            finally:
                vta_runtime.set_command_queue(None)
            prof = graph.profile(ex, s.feeds[0][0], "fsim", env=env, placement=pl, warmup=1, repeat=repeat)
            ops = Counter(r["op"].split()[0] for r in pl.vta_rows)
            prob = np.array([o[0].reshape(-1)[1] for o in q])
            prob_f = np.array([o[0].reshape(-1)[1] for o in flt])
            row = {"vta_ops": len(pl.vta_rows), "vta_activations": sum(ops[a] for a in ACTIVATIONS),
                   "host_ops": len(pl.rows) - len(pl.vta_rows), "vta_share_ops": len(pl.vta_rows) / len(pl.rows),
                   "vta_share_macs": pl.vta_share, "host_s": prof.host_seconds(), "exact": exact,
                   "score": m.score(flt, q, s), "prob_diff": float(np.abs(prob - prob_f).mean()),
                   "onnxruntime_ms": 1e3 * best["onnxruntime"][0], "fsim_ms": 1e3 * best["fsim"][0]}
            row["fsim_over_onnxruntime"] = row["fsim_ms"] / row["onnxruntime_ms"]
            if tsim and i8:
                from sim.tsim import verilator_available

                from .network_bench import vta_part_on_tsim
                if verilator_available():
                    t = vta_part_on_tsim(ex, s.feeds[0][0], cfg)
                    row["tsim_vta_cycles"] = int(sum(t["cycles"]))
                    row["tsim_exact"] = bool(np.array_equal(
                        t["output"], cpu["main"](*[tvm.runtime.tensor(x) for x in s.feeds[0]]).numpy()))
            out[way] = row
    print(f"{out['network']} on fsim, {out['config']}, {n} rendered text lines:")
    print(f"  {'':10s} {'VTA ops':>8s} {'of them act.':>12s} {'host ops':>8s} {'ops on VTA':>10s} {'MACs on VTA':>11s} "
          f"{'host ms':>8s} {'accuracy f/i8':>14s} {'agree':>6s} {'|dp|':>7s} {'ORT ms':>7s} {'fsim ms':>8s} "
          f"{'ratio':>6s} exact")
    for way in ways:
        r = out[way]
        sc = r["score"]
        print(f"  {way:10s} {r['vta_ops']:8d} {r['vta_activations']:12d} {r['host_ops']:8d} "
              f"{100 * r['vta_share_ops']:9.1f}% {100 * r['vta_share_macs']:10.1f}% {1e3 * r['host_s']:8.2f} "
              f"{sc['float']:6.3f}/{sc['int8']:.3f} {sc['agreement']:6.3f} {r['prob_diff']:7.4f} "
              f"{r['onnxruntime_ms']:7.2f} {r['fsim_ms']:8.2f} {r['fsim_over_onnxruntime']:5.1f}x {r['exact']}")
        if "tsim_vta_cycles" in r:
            c = r["tsim_vta_cycles"]
            print(f"    tsim VTA part: {c:,} cycles ({c / 100e3:.2f} ms at 100 MHz); exact: {r['tsim_exact']}")
    print(f"  activation='auto' (the cost model against the Cortex-A9's estimate) runs on VTA, of the "
          f"{out['int8 vta']['vta_activations']} activations: "
          + ", ".join(f"{k} at {mhz} MHz" for mhz, k in out["auto_on_vta"].items()))
    return out
