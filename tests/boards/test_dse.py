"""``nox -s dse``'s pieces that need neither yosys nor tsim: the sweeps are valid configurations for their
boards, the clock a timing report supports, fit and timing verdicts, the Pareto front, the best point and
what is shipped, the network cycles summed from tuning logs with each layer's multiplicity."""

import json
from types import SimpleNamespace

import pytest

from boards import dse
from boards.platforms import BOARDS
from vta_hw import timing
from vta_hw.spec import load_config


@pytest.mark.parametrize("board", sorted(dse.DEFAULT_SWEEP))
def test_default_sweeps_are_configurations_of_their_board(board):
    from vta_hw.core import check_buildable
    b = BOARDS[board]
    for p in dse.DEFAULT_SWEEP[board]:
        cfg = load_config({**dse.base_config(b), **p})
        check_buildable(cfg)
        assert cfg.TARGET == b.target and b.config_for(cfg).fpga_device == b.part
    full = dse.full_sweep(b)
    assert len({json.dumps(p, sort_keys=True) for p in full}) == len(full) >= 12
    # every depth choice fits the ISA (a uop: ACC index, INP-or-ACC index, WGT index in 32 bits)
    for name, (lid, lwd, lad) in dse.DEPTHS.items():
        assert lad + max(lad, lid) + lwd <= 32, name


def test_sizes_follow_the_element_sizes():
    assert dse.point(0, 4) == {"LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_INP_BUFF_SIZE": 15, "LOG_WGT_BUFF_SIZE": 18,
                               "LOG_ACC_BUFF_SIZE": 17, "LOG_UOP_BUFF_SIZE": 15}       # the default configuration
    big = load_config({**load_config().cfg_dict, **dse.point(1, 5, "wgt", ports=2), "TARGET": "zcu104"})
    assert (big.INP_BUFF_DEPTH, big.WGT_BUFF_DEPTH, big.ACC_BUFF_DEPTH, big.AXI_PORTS) == (2048, 2048, 1024, 2)


def _synth(worst_ns, unregistered=(), **used):
    s = {"luts": 1000, "ffs": 1000, "bram36": 10, "dsps": 100, "uram": 0, **used}
    return {"summary": s, "sram_styles": None,
            "timing": {"paths": [{"ns": worst_ns, "routed_ns": worst_ns * 1.5, "levels": 3}],
                       "unregistered": list(unregistered)}}


def test_the_clock_a_timing_report_supports():
    u96, pynq = BOARDS["ultra96"], BOARDS["pynq-z2"]
    r = dse.Result(config=dse.base_config(u96))
    dse.apply_synthesis(r, u96, _synth(2.2))           # 70% of 1/2.2 ns: 318 MHz -> the PS's 300 MHz
    assert r.status == "synthesised" and r.clock_mhz == 300 and round(r.fmax_mhz) == 318
    assert r.config["FPGA_FREQ"] == 300 and r.cfg.fpga_freq == 300
    assert r.fmax_mhz == pytest.approx(1000 * (1 - timing.ROUTING_SHARE) / 2.2)
    r = dse.Result(config=dse.base_config(pynq))
    dse.apply_synthesis(r, pynq, _synth(3.4))          # 206 MHz -> 200
    assert r.clock_mhz == 200
    r = dse.Result(config=dse.base_config(pynq))
    dse.apply_synthesis(r, pynq, _synth(7.5))          # 93 MHz: below every clock the sweep offers
    assert r.status == "misses timing" and "93 MHz is below every clock of pynq-z2" in r.note
    r = dse.Result(config=dse.base_config(pynq))
    dse.apply_synthesis(r, pynq, _synth(3.0, unregistered=["RAMB36E1 x (e.g. y)"]))
    assert r.status == "misses timing" and "unregistered" in r.note
    r = dse.Result(config=dse.base_config(pynq))
    dse.apply_synthesis(r, pynq, _synth(3.0, dsps=256))
    assert r.status == "does not fit" and r.note == "dsps 256 > 220"


def test_pareto_front():
    pts = [(100, 10.0), (200, 5.0), (150, 12.0), (200, 6.0), (400, 5.0), (50, 30.0)]
    assert dse.pareto(pts) == [True, True, False, False, False, True]


def _done(board, batch, ms18, dsps, routed_ns=3.9):
    cfg = load_config({**dse.base_config(board), "LOG_BATCH": batch, "LOG_WGT_BUFF_SIZE": 18 + batch * 0})
    r = dse.Result(config={**cfg.cfg_dict, "FPGA_FREQ": 300}, status="ok", clock_mhz=300, worst_routed_ns=routed_ns,
                   summary={"dsps": dsps, "bram36": 100, "luts": 1, "ffs": 1, "uram": 0})
    r.cycles = {"resnet18": int(ms18 * cfg.BATCH * 300e3), "resnet50": int(3 * ms18 * cfg.BATCH * 300e3)}
    return r


def test_best_point_and_what_is_shipped(tmp_path):
    u96 = BOARDS["ultra96"]
    a, b = _done(u96, 0, 20.0, 129), _done(u96, 1, 12.0, 257)
    assert b.ms("resnet18") == pytest.approx(12.0) and b.ms("resnet18", per_image=False) == pytest.approx(24.0)
    assert dse.best([a, b, dse.Result(config=a.config, status="does not fit")]) is b
    # it ships with the clock of its worst path with estimated routing: 1 / 3.9 ns = 256 MHz -> the PS's 250
    assert dse.routed_clock(u96, b) == 250 and dse.shipped_ms(u96, b, "resnet18") == pytest.approx(12.0 * 300 / 250)
    path = dse.ship(u96, b, tmp_path)
    shipped = json.loads(path.read_text())
    assert path.name == "ultra96.json" and shipped["FPGA_FREQ"] == 250 and shipped["LOG_BATCH"] == 1
    assert load_config(path).fpga_freq == 250
    text = dse.table(u96, [a, b])
    assert "2x16x16" in text and "300 MHz (250)" in text and "| 24.00 (28.80) |" in text
    assert "12.00 (14.40) / 36.00 (43.20)" in text
    # never above the 70% rule's clock; and the ranking is at the shipped clock: a routing-bound point loses
    fast = _done(u96, 0, 20.0, 129, routed_ns=1.0)
    assert dse.routed_clock(u96, fast) == 300
    slow = _done(u96, 1, 12.0, 257, routed_ns=6.0)                    # 166 MHz -> 150: 24 ms per image
    assert dse.best([fast, slow]) is slow and dse.best([fast, slow], u96) is fast
    with pytest.raises(ValueError, match="no clock with estimated routing"):
        dse.ship(u96, _done(u96, 0, 20.0, 129, routed_ns=None), tmp_path)


def test_network_cycles_are_the_layers_times_their_uses(tmp_path):
    from vta_compiler.autotune import Record, Task
    from vta_compiler.tiling.records import append_record, config_hash
    from vta_compiler.top import RESNET18
    cfg = load_config().replace(TARGET="tsim")
    h = config_hash(cfg)
    t2, t5 = Task.of(RESNET18["C2"], 2, "C2", uses=4), Task.of(RESNET18["C5"], 2, "C5", uses=3)
    log = tmp_path / "net.jsonl"
    knobs = {"tile_co": 1}
    for task, cycles, err in ((t2, 900, None), (t2, 700, None), (t2, 500, "wrong result"), (t5, 300, None)):
        append_record(log, Record(task, knobs, cycles, err, h, "x", "tsim"))
    append_record(log, Record(t5, knobs, 100, None, "another-config", "x", "tsim"))     # not this hardware
    best = dse._best_from_log(log, [t2, t5], h)
    assert (best[t2.key].cycles, best[t5.key].cycles) == (700, 300)
    assert dse._best_from_log(tmp_path / "none.jsonl", [t2], h) == {t2.key: None}


def test_a_board_without_a_timing_model_is_refused():
    with pytest.raises(SystemExit, match="de10-nano has no timing model here"):
        dse.run("de10-nano", [], SimpleNamespace(out="/nonexistent"))
