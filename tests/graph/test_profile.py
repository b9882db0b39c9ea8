"""graph.profile on the digits classifier: the trace against the Trace Event Format (valid JSON, every event well
formed, the tracks and the layer spans present, time ordered and properly nested per track), its slices against the
instruction streams and the table, the table's figures between tsim and fsim, and the pictures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("sklearn")
tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import vta_compiler as vta  # noqa: E402
import vta_runtime  # noqa: E402
from sim.fsim import FsimDevice  # noqa: E402
from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.models.digits import digits_onnx, load_split  # noqa: E402
from vta_compiler.graph.profiler import (  # noqa: E402
    BOUNDS,
    LayerProfile,
    ProfileUsageError,
    layer_bound,
)

MODULE_TRACKS = {"fetch", "load", "compute: UOP/ACC loads", "compute: GEMM", "compute: ALU", "store", "GEMM engine",
                 "ALU engine"}
META_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def check_trace(trace: dict) -> list[str]:
    """Problems of a trace against the Trace Event Format as this project writes it (X slices, M metadata)."""
    problems = []
    evs = trace.get("traceEvents")
    if not isinstance(evs, list) or not evs:
        return ["no traceEvents list"]
    named_threads, named_procs = set(), set()
    last_ts: dict[tuple, float] = {}
    open_ends: dict[tuple, list[float]] = {}
    for k, e in enumerate(evs):
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") not in META_NAMES or not isinstance(e.get("args"), dict):
                problems.append(f"event {k}: bad metadata {e}")
                continue
            key = "sort_index" if e["name"].endswith("sort_index") else "name"
            want = int if key == "sort_index" else str
            if not isinstance(e["args"].get(key), want) or not isinstance(e.get("pid"), int):
                problems.append(f"event {k}: metadata without {key} or pid {e}")
            if e["name"].startswith("thread"):
                if not isinstance(e.get("tid"), int):
                    problems.append(f"event {k}: thread metadata without tid")
                elif e["name"] == "thread_name":
                    named_threads.add((e["pid"], e["tid"]))
            elif e["name"] == "process_name":
                named_procs.add(e["pid"])
        elif ph == "X":
            for f, t in (("name", str), ("cat", str), ("pid", int), ("tid", int)):
                if not isinstance(e.get(f), t):
                    problems.append(f"event {k}: field {f} missing or not {t.__name__}")
            ts, dur = e.get("ts"), e.get("dur")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (ts, dur)) or ts < 0 or dur < 0:
                problems.append(f"event {k}: ts/dur not finite non-negative numbers ({ts}, {dur})")
                continue
            track = (e.get("pid"), e.get("tid"))
            if ts < last_ts.get(track, -1.0):
                problems.append(f"event {k}: ts {ts} before the track's previous {last_ts[track]}")
            last_ts[track] = ts
            stack = open_ends.setdefault(track, [])
            while stack and stack[-1] <= ts + 1e-6:
                stack.pop()
            if stack and ts + dur > stack[-1] + 1e-6:
                problems.append(f"event {k}: slice [{ts}, {ts + dur}] overlaps its track's enclosing one, which ends "
                                f"at {stack[-1]}")
            stack.append(ts + dur)
        else:
            problems.append(f"event {k}: phase {ph!r}")
    for track in last_ts:
        if track not in named_threads:
            problems.append(f"track {track} has no thread_name")
        if track[0] not in named_procs:
            problems.append(f"process {track[0]} has no process_name")
    return problems


@pytest.fixture(scope="module")
def digits():
    xtr, _, xte, _ = load_split()
    mod, params = graph.from_onnx(digits_onnx(batch=1))
    env = vta.get_env()
    with env:
        qmod = graph.quantize(mod, params, calibration=[xtr[k:k + 1] for k in range(4)])
        pmod = graph.graph_pack(qmod, env)
        ex = graph.build(pmod, env)
    x = xte[3:4]
    dev = FsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        want = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])["main"](tvm.runtime.tensor(x)).numpy()
    finally:
        vta_runtime.set_command_queue(None)
    pl = graph.placement(pmod)
    on_tsim = graph.profile(ex, x, "tsim", env=env, placement=pl)
    on_fsim = graph.profile(ex, x, "fsim", env=env, placement=pl, warmup=1, repeat=2)
    return pl, want, on_tsim, on_fsim


def _x(trace, **match):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and all(e.get(k) == v for k, v in match.items())]


def test_the_trace_is_valid_json_in_the_trace_event_format(digits, tmp_path):
    _, _, prof, _ = digits
    path = prof.write_trace(tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    assert check_trace(trace) == []
    assert trace["otherData"]["clock_mhz"] == 100


def test_the_checker_sees_broken_traces(digits):
    """Negative controls: the format check is not blind."""
    _, _, prof, _ = digits
    good = prof.trace()
    first = next(k for k, e in enumerate(good["traceEvents"]) if e["ph"] == "X")
    cases = {
        "dur": lambda evs: evs[first].pop("dur"),
        "before the track's previous": lambda evs: evs.append(dict(evs[first + 1], ts=0.0)),
        "overlaps": lambda evs: evs.insert(first + 1, dict(evs[first], ts=evs[first]["ts"] + evs[first]["dur"] / 2,
                                                           dur=evs[first]["dur"])),
        "no thread_name": lambda evs: evs.append(dict(evs[first], tid=99, ts=1e9)),
        "phase": lambda evs: evs.append({"ph": "Q"}),
    }
    for what, breaks in cases.items():
        broken = json.loads(json.dumps(good))
        breaks(broken["traceEvents"])
        assert any(what in p for p in check_trace(broken)), what


def test_the_trace_has_every_module_track_the_host_and_the_layers_as_spans(digits):
    pl, _, prof, _ = digits
    trace = prof.trace()
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert MODULE_TRACKS | {"layers", "host operators"} <= names
    layers = sorted(_x(trace, cat="layer"), key=lambda e: e["ts"])
    assert [e["name"] for e in layers] == [r["name"] for r in pl.vta_rows] == ["conv2d_0", "conv2d_1", "dense_0"]
    assert [e["args"]["kernel"] for e in layers] == [r["kernel"] for r in pl.vta_rows]
    host_ops = _x(trace, cat="host op")
    # host operators appear by their compiled functions' names (fused chains: fused_<op>_<op>...)
    host_names = " ".join(e["name"] for e in host_ops)
    assert "multiply" in host_names and "transpose" in host_names, host_names
    # each layer's runs, and every module slice of them, lie inside the layer's span
    for span in layers:
        runs = [r for r in _x(trace, cat="run") if span["ts"] <= r["ts"] <= span["ts"] + span["dur"]]
        assert len(runs) == span["args"]["runs"] >= 1
        slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("args", {}).get("layer") == span["name"]]
        assert slices
        lo, hi = min(r["ts"] for r in runs), max(r["ts"] + r["dur"] for r in runs)
        assert all(lo - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-6 for e in slices)


def test_module_slices_are_the_instructions_and_add_up_to_the_table(digits):
    _, _, prof, _ = digits
    trace = prof.trace()
    per_cycle = 1 / prof.clock_mhz
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] ==
              "thread_name" and e["pid"] == 1}
    busy = {}
    for e in _x(trace, cat="busy"):
        busy.setdefault(tracks[e["tid"]], []).append(e)
    insns = sum(ly.insns for ly in prof.layers)
    assert len(busy["fetch"]) == insns          # every instruction dispatched once
    modules = sum(len(busy[t]) for t in MODULE_TRACKS - {"fetch", "GEMM engine", "ALU engine"})
    assert modules == insns                     # ... and executed once, in one module
    assert {e["name"] for e in busy["compute: GEMM"]} == {"GEMM"}
    assert {e["name"].split()[0] for e in busy["compute: ALU"]} == {"ALU"}
    for ly, row in zip(prof.layers, prof.rows()):
        runs = [r for r in _x(trace, cat="run") if r["args"]["cycles"] and any(
            e["args"]["layer"] == ly.name and abs(e["ts"] - r["ts"]) < 1e-6 for e in busy["fetch"])]
        assert sum(r["args"]["cycles"] for r in runs) == ly.cycles == row["cycles"]
        assert round(sum(r["dur"] for r in runs) / per_cycle) == ly.cycles
        gemm = sum(e["dur"] for e in _x(trace, cat="active") if e["args"]["layer"] == ly.name and
                   tracks[e["tid"]] == "GEMM engine")
        assert round(gemm / per_cycle) == ly.busy["GEMM"] == ly.counters["gemm_busy_cycles"] > 0

        def cycles(cat, *names, layer=ly.name):
            return round(sum(e["dur"] for e in _x(trace, cat=cat) if e["args"]["layer"] == layer and
                             tracks[e["tid"]] in names) / per_cycle)
        # busy and stall slices against the core's counters (the same cycles, counted by other logic)
        compute = ("compute: UOP/ACC loads", "compute: GEMM", "compute: ALU")
        for module, names in (("load", ("load",)), ("store", ("store",)), ("compute", compute)):
            assert cycles("busy", *names) == ly.counters[f"{module}_busy_cycles"], (ly.name, module)
            assert cycles("stall", *names) == ly.counters[f"{module}_stall_cycles"], (ly.name, module)
        assert cycles("stall", "fetch") == ly.counters["fetch_stall_cycles"]


def test_the_time_line_is_host_wall_time_plus_vta_cycles_at_the_clock(digits):
    """A layer's span is its kernel call: the runtime's host work at its wall time, its runs at cycles / clock."""
    _, _, prof, _ = digits
    spans = sorted(_x(prof.trace(), cat="layer"), key=lambda e: e["ts"])
    for span, ly in zip(spans, prof.layers):
        assert span["dur"] == pytest.approx(ly.host_seconds * 1e6 + ly.cycles / prof.clock_mhz, abs=0.01)
    assert prof.total_us >= sum(s["dur"] for s in spans)
    # the time line adds up: host operators, builtins, kernel calls (host work + VTA) and the gaps between calls
    host = sum(h.seconds for h in prof.host_ops + prof.builtins) + sum(ly.host_seconds for ly in prof.layers)
    vta_us = sum(ly.cycles for ly in prof.layers) / prof.clock_mhz
    assert prof.total_us == pytest.approx((host + prof.between_calls_seconds) * 1e6 + vta_us, abs=0.05)


def test_the_table_on_tsim_and_fsim(digits):
    pl, want, on_tsim, on_fsim = digits
    assert on_tsim.warmup == 0 and on_fsim.warmup in (1, 2)     # the better of two repeats after a warm-up
    assert "the first inference: one-time host costs" in on_tsim.table()
    assert "the first inference" not in on_fsim.table()
    for prof in (on_tsim, on_fsim):
        assert np.array_equal(prof.outputs[0], want)             # profiling changes no result
        assert [ly.name for ly in prof.layers] == ["conv2d_0", "conv2d_1", "dense_0"]
        assert [ly.macs for ly in prof.layers] == [r["macs"] for r in pl.vta_rows]
        assert all(r["bound"] in BOUNDS for r in prof.rows())
    for t, f in zip(on_tsim.rows(), on_fsim.rows()):
        # the same counters on both simulators: the same traffic and the same issued MACs
        assert t["dram_bytes"] == f["dram_bytes"] > 0 and t["issued_macs"] == f["issued_macs"] > 0
        assert f["cycles"] is None and 0 < f["cycles_lower_bound"] <= t["cycles"]
        assert t["mb_per_s"] == pytest.approx(t["dram_bytes"] / (t["cycles"] / 100e6) / 1e6)
        assert t["macs_per_cycle"] == pytest.approx(t["macs"] / t["cycles"])
        assert 0 < t["peak_fraction"] < 1
    c = on_tsim.layers[1].counters
    assert on_tsim.rows()[1]["dram_bytes"] == sum(c[k] for k in ("inp_load_nbytes", "wgt_load_nbytes",
                                                                 "acc_load_nbytes", "uop_load_nbytes",
                                                                 "out_store_nbytes")) + 16 * on_tsim.layers[1].insns
    text = on_tsim.table()
    assert "conv2d_1" in text and "MAC/cyc" in text and "% peak" in text and "bound" in text
    assert ">=" in on_fsim.table() and ">=" not in text.split("\n")[1]
    with pytest.raises(ProfileUsageError, match="has no timeline: profile on tsim"):
        on_fsim.trace()


def _layer(cycles, **kw):
    base = dict(name="x", kernel="k", op="", calls=1, runs=1, insns=10, macs=1, issued_macs=1, counters={},
                host_seconds=0.0, cycles=cycles, bound_cycles=0)
    return LayerProfile(**{**base, **kw})


def test_what_bounds_a_layer():
    busy = {"GEMM": 800, "ALU": 100, "load": 300, "store": 50}
    assert layer_bound(_layer(1000, busy=busy), 100, 8) == "GEMM"
    assert layer_bound(_layer(1000, busy=dict(busy, load=950)), 100, 8) == "load"     # GEMM + ALU: 900
    # GEMM and ALU take turns in the compute module: together busy most of the time, the larger one bounds
    assert layer_bound(_layer(1000, busy={"GEMM": 300, "ALU": 400, "load": 450, "store": 100}), 100, 8) == "ALU"
    assert layer_bound(_layer(1000, busy={"GEMM": 200, "ALU": 200, "load": 450, "store": 100}), 100, 8) == \
        "dependency wait"
    assert layer_bound(_layer(1000, busy=busy, host_seconds=11e-6), 100, 8) == "host"      # 1,100 cycles
    assert layer_bound(_layer(1000, busy=busy, host_seconds=9e-6), 100, 8) == "GEMM"
    # fsim: the counters' lower bounds
    fsim = {"gemm_counter": 100, "alu_counter": 10, "inp_load_nbytes": 8000, "out_store_nbytes": 80}
    assert layer_bound(_layer(None, counters=fsim), 100, 8) == "load"              # 1,000 beats + 20 of insns
    assert layer_bound(_layer(None, counters=dict(fsim, gemm_counter=2000)), 100, 8) == "GEMM"


def test_pictures(digits, tmp_path):
    _, _, prof, on_fsim = digits
    import matplotlib.image as mpimg
    for path in (prof.plot_roofline(tmp_path / "r.png"), on_fsim.plot_roofline(tmp_path / "rf.png"),
                 prof.plot_timeline(tmp_path / "t.png"), prof.plot_timeline(tmp_path / "l.png", layer="conv2d_1")):
        img = mpimg.imread(path)
        assert img.shape[0] > 300 and img.shape[1] > 600 and img.std() > 0.05, path
    with pytest.raises(ProfileUsageError, match=r"no layer 'conv9' in this profile; its layers are \['conv2d_0'"):
        prof.plot_timeline(tmp_path / "x.png", layer="conv9")


def test_bad_arguments():
    with pytest.raises(ProfileUsageError, match="device 'board'; choose tsim"):
        graph.profile(None, np.zeros(1), "board")
    with pytest.raises(ProfileUsageError, match="repeat=0; need warmup >= 0 and repeat >= 1"):
        graph.profile(None, np.zeros(1), "fsim", repeat=0)
