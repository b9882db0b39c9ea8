"""The zoo table: each real model of ``vta_compiler.graph.zoo`` at the users' input shapes.

Per model: its exporter, MACs (counted on the ONNX graph of the compiled part), the share of MACs on VTA,
the host operators and why they are not on VTA, the float (ONNX Runtime on the shipped file) against
int8 (VTA, equal to the CPU int8 run) metric on realistic samples, fsim against ONNX Runtime time (the
same input, measured side by side in one run), and the VTA cycles of one run on tsim at 100 and 333 MHz
where that takes under a minute or so (tsim runs about 250k cycles/s; ``--tsim`` runs it for every model).
A model that fails today prints the stage and the error.

``python -m bench --only zoo [--quick]`` (``--quick``: the test shapes and fewer samples).
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections import Counter

import numpy as np

from .breakdown import breakdown, format_breakdown
from .common import interleaved_best

#: tsim is run by default when the VTA part's ideal cycles (MACs / 256) are below this
TSIM_IDEAL_CYCLES = 1_500_000


def _host_ops(pl) -> str:
    """The CPU operators with MACs, and the counts of the others by reason."""
    heavy = Counter()
    other = Counter()
    for r in pl.rows:
        if r["device"] != "CPU":
            continue
        if r["macs"]:
            heavy[(r["op"], r["note"])] += r["macs"]
        else:
            other[r["note"]] += 1
    parts = [f"{op} {macs / 1e6:.1f} M MACs ({note})" for (op, note), macs in heavy.most_common(3)]
    parts += [f"{n} ops: {note}" for note, n in other.most_common(2)]
    return "; ".join(parts)


def _tsim_cycles(ex, feeds):
    import tvm
    from tvm import relax

    import vta_runtime
    from sim.tsim import TsimDevice
    dev = TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
        c0 = int(dev.stats().get("cycle_count", 0))
        res = vm["main"](*[tvm.runtime.tensor(x) for x in feeds])
        cycles = int(dev.stats().get("cycle_count", 0)) - c0
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    return cycles, res


def _outputs(res) -> list[np.ndarray]:
    import tvm
    items = list(res) if isinstance(res, tvm.ir.Array) or hasattr(res, "__len__") and not hasattr(res, "numpy") \
        else [res]
    return [r.numpy() for r in items]


def model_row(name: str, quick: bool, tsim: bool) -> dict:
    import onnx
    import tvm
    from tvm import relax

    import vta_runtime
    from sim.fsim import FsimDevice
    from vta_compiler import graph
    from vta_compiler.graph import onnx_import, zoo

    from .ort import OrtRunner
    m = zoo.MODELS[name]
    size = "test" if quick else "bench"
    row: dict = {"model": name, "description": m.description, "package": m.package, "exporter": m.exporter,
                 "licence": m.licence, "size": size, "metric": m.metric}
    stage = "import"
    try:
        args = m.import_args(size)
        row["input"] = {k: list(v) for k, v in args.get("shape_dict", {}).items()}
        t0 = time.perf_counter()
        mod, params = graph.from_onnx(m.onnx_model(), **args)
        row["import_s"] = time.perf_counter() - t0
        prepared, _, _ = onnx_import.prepare_onnx(m.onnx_model(), **args)
        row["macs"] = zoo.macs(prepared)
        with warnings.catch_warnings():     # onnxscript cannot read skl2onnx's ZipMap: it says so
            warnings.simplefilter("ignore")
            row["macs_shipped_model"] = zoo.macs(onnx_import.simplify_onnx(
                m.onnx_model(), args.get("shape_dict"), args.get("constants")))
        stage = "quantize"
        t0 = time.perf_counter()
        qmod = graph.quantize(mod, params, calibration=m.calibration(size, n=4))
        row["quantize_s"] = time.perf_counter() - t0
        row["quantized_layers"] = len(graph.layer_outputs(qmod))     # 0: every layer runs in float
        stage = "pack"
        pmod = graph.graph_pack(qmod)
        pl = graph.placement(pmod)
        row["vta_share"] = pl.vta_share
        row["vta_macs"] = pl.vta_macs
        row["placement_macs"] = pl.total_macs
        row["host_ops"] = _host_ops(pl)
        row["layout_changes"] = pmod["main"].script().count("R.to_vdevice(")
        stage = "build"
        t0 = time.perf_counter()
        ex = graph.build(pmod)
        ex.jit()
        row["build_s"] = time.perf_counter() - t0
        stage = "run"
        n = 4 if quick else m.bench_samples
        s = m.samples(n, seed=0, size=size)
        cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())     # as the host code is built: -O3
        dev = FsimDevice()
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
            q, exact = [], True
            for feeds, of in zip(s.feeds, s.onnx_feeds):
                got = _outputs(vm["main"](*[tvm.runtime.tensor(x) for x in feeds]))
                want = _outputs(cpu["main"](*[tvm.runtime.tensor(x) for x in feeds]))
                exact &= all(np.array_equal(a, b) for a, b in zip(got, want))
                q.append(m.finish(got, of, size))
            row["exact"] = bool(exact)
            row["score"] = m.score(m.float_outputs(s), q, s)
            # side by side: ONNX Runtime on the shipped model and fsim on the compiled part, same sample
            feeds, of = s.feeds[0], s.onnx_feeds[0]
            shipped = onnx.ModelProto()
            shipped.CopyFrom(m.onnx_model())
            ort_run = OrtRunner(shipped, of)
            ort_run()
            xs = [tvm.runtime.tensor(x) for x in feeds]
            best = interleaved_best({"onnxruntime": ort_run, "fsim": lambda: vm["main"](*xs)},
                                    3 if quick else 5, 0.0 if quick else 2.0)
            row["onnxruntime_ms"], row["fsim_ms"] = 1e3 * best["onnxruntime"][0], 1e3 * best["fsim"][0]
            row["fsim_over_onnxruntime"] = row["fsim_ms"] / row["onnxruntime_ms"]
            row["parts"] = breakdown(vm, xs, vta_runtime.command_handle())
        finally:
            vta_runtime.set_command_queue(None)
        stage = "tsim"
        from sim.tsim import verilator_available
        ideal = pl.vta_macs / 256
        if not verilator_available():
            row["tsim"] = "skipped: Verilator is not installed"
        elif not pl.vta_macs:
            row["tsim"] = "skipped: nothing runs on VTA"
        elif tsim or ideal < TSIM_IDEAL_CYCLES:
            cycles, res = _tsim_cycles(ex, feeds)
            row["tsim_cycles"] = cycles
            row["tsim_exact"] = all(np.array_equal(a, b) for a, b in
                                    zip(_outputs(res), _outputs(cpu["main"](*xs))))
            row["tsim_ms_100mhz"], row["tsim_ms_333mhz"] = cycles / 100e3, cycles / 333e3
        else:
            row["tsim"] = f"skipped: {ideal / 1e6:.1f} M ideal cycles (minutes on tsim); run with --tsim"
        row["status"] = "ok"
    except Exception as exc:        # a model that fails today: the stage and the error, for the table
        row["status"] = f"fails at {stage}"
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        row["traceback"] = traceback.format_exc(limit=-3)
    return row


def _fmt(row: dict) -> str:
    def g(k, f="{:.1f}", default="-"):
        return f.format(row[k]) if k in row and row[k] is not None else default
    score = row.get("score") or {}
    acc = f"{score['float']:.3f} / {score['int8']:.3f}" if score else "-"
    tsim = f"{row['tsim_ms_100mhz']:.2f} / {row['tsim_ms_333mhz']:.2f}" if "tsim_ms_100mhz" in row else "-"
    share = f"{100 * row['vta_share']:.1f}%" if "vta_share" in row else "-"
    macs = f"{row['macs'] / 1e6:.1f} M" if "macs" in row else "-"
    return (f"{row['model']:<12} {row['exporter']:<22} {macs:>9} {share:>7} {acc:>15} "
            f"{g('onnxruntime_ms', '{:.2f}'):>8} {g('fsim_ms', '{:.2f}'):>8} "
            f"{g('fsim_over_onnxruntime', '{:.1f}x'):>6} "
            f"{tsim:>15}  {row['status']}")


def run(quick: bool = False, tsim: bool = False) -> dict:
    from vta_compiler.graph import zoo
    rows = []
    head = (f"{'model':<12} {'exporter':<22} {'MACs':>9} {'on VTA':>7} {'float / int8':>15} {'ORT ms':>8} "
            f"{'fsim ms':>8} {'ratio':>6} {'tsim ms 100/333':>15}  status")
    print(head)
    for name in zoo.MODELS:
        try:
            zoo.MODELS[name].path() if zoo.MODELS[name].builder is None else None
        except zoo.ZooUnavailable as exc:
            rows.append({"model": name, "status": f"skipped: {exc}"})
            print(f"{name:<12} skipped: {exc}")
            continue
        row = model_row(name, quick, tsim)
        rows.append(row)
        print(_fmt(row), flush=True)
    print()
    for row in rows:
        if "score" in row:
            print(f"  {row['model']}: {row['metric']}: {row['score']}")
        if row.get("host_ops"):
            print(f"  {row['model']} on the CPU: {row['host_ops']}")
        if "error" in row:
            print(f"  {row['model']} {row['status']}: {row['error']}")
        if "parts" in row:
            print(f"  {row['model']} on fsim, CPU time by part: {format_breakdown(row['parts'])}")
        if "tsim" in row:
            print(f"  {row['model']} tsim {row['tsim']}")
        if row.get("quantized_layers") == 0:
            print(f"  {row['model']}: no layer is quantized (its int8 figures are float ones)")
        if "exact" in row:
            print(f"  {row['model']}: VTA equals the CPU int8 run bit for bit: {row['exact']}"
                  + (f" (tsim: {row['tsim_exact']})" if "tsim_exact" in row else ""))
    for row in rows:
        row.pop("traceback", None)
    return {"models": rows}


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(run(quick="--quick" in sys.argv, tsim="--tsim" in sys.argv), indent=2, default=str))
