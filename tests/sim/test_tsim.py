"""tsim-specific behaviour: counters, timeouts with state reports, FST waveforms, bus models."""

import dataclasses
import random

import numpy as np
import pytest

tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

from sim import tsim as tsim_mod  # noqa: E402
from sim.tsim import BusModel, BusProtocolError, TsimDevice  # noqa: E402
from vta_hw.spec import Isa, MemType, Opcode, load_config  # noqa: E402
from vta_hw.spec.regmap import COUNTERS  # noqa: E402
from vta_runtime import CommandQueue, DeviceError, DeviceTimeout, open_device  # noqa: E402
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift  # noqa: E402

RNG = np.random.default_rng(5)


def _words(dev, words):
    data = Isa.to_bytes(words)
    phys = dev.alloc(len(data))
    dev.write(phys, data)
    return phys


def _long_gemm(dev, iters=4000):
    isa = dev.config.isa
    ub = dev.alloc(4096)
    dev.write(ub, np.zeros(1, np.uint32))
    return [isa.load(MemType.UOP, 0, ub // 4, 1, 1, 1),
            isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=iters, iter_in=iters), isa.finish_insn()]


def test_stats_add_cycles_and_performance_counters():
    dev = TsimDevice()
    a = RNG.integers(-128, 128, (4, 64), dtype=np.int8)
    b = RNG.integers(-128, 128, (32, 64), dtype=np.int8)
    shift = informative_shift(a, b)
    c = blocked_gemm(CommandQueue(dev), a, b, shift, GemmTiling(tile_m=1, tile_n=2, tile_k=2, vthreads=2))
    assert np.array_equal(c, gemm_reference(a, b, shift))
    s = dev.stats()
    assert set(s) == {"cycle_count", *COUNTERS}
    assert s["gemm_counter"] == 32 and s["cycle_count"] > s["gemm_busy_cycles"] >= 32
    assert s["axi_read_beats"] * dev.config.AXI_DATA_BYTES >= s["wgt_load_nbytes"] + s["inp_load_nbytes"]
    dev.clear_stats()
    assert all(v == 0 for v in dev.stats().values())


def test_timeout_reports_every_module_and_queue_then_recovers():
    dev = TsimDevice()
    words = _long_gemm(dev)
    phys = _words(dev, words)
    with pytest.raises(DeviceTimeout) as e:
        dev.run(phys, len(words), timeout=0.05)
    msg = str(e.value)
    assert "did not finish within 0.05 s" in msg
    for line in ("fetch  :", "load   :", "compute: busy", "store  :", "tokens : l2g=0"):
        assert line in msg, line
    assert "compute: at instruction 1 (GEMM" in msg
    # the core was aborted: the next run works
    isa = dev.config.isa
    ok = [isa.load(MemType.INP, 0, 0, 0, 0, 0), isa.finish_insn()]
    dev.run(_words(dev, ok), 2, timeout=10)


def test_bus_latency_and_backpressure_do_not_change_results():
    a = RNG.integers(-128, 128, (8, 64), dtype=np.int8)
    b = RNG.integers(-128, 128, (32, 64), dtype=np.int8)
    shift = informative_shift(a, b)
    cycles = []
    for kw in ({}, {"read_latency": 40, "write_latency": 30, "backpressure": 40, "seed": 3}):
        dev = TsimDevice(**kw)
        c = blocked_gemm(CommandQueue(dev), a, b, shift, GemmTiling(tile_m=2, tile_n=2, tile_k=2, vthreads=2))
        assert np.array_equal(c, gemm_reference(a, b, shift))
        cycles.append(dev.stats()["cycle_count"])
    assert cycles[1] > cycles[0]


def test_random_slaves_do_not_change_results_and_the_core_keeps_every_bus_rule():
    """Reordered, interleaved read data, W before AW, random stalls on all five channels and random
    latencies: the result is exact and the checker (which stops a run at the first violation) is
    silent. A reordering slave makes the run take another number of cycles than an in-order one."""
    a = RNG.integers(-128, 128, (8, 64), dtype=np.int8)
    b = RNG.integers(-128, 128, (48, 64), dtype=np.int8)
    cycles = {}
    for seed in range(4):
        bus = BusModel.random(random.Random(seed))
        for reorder in (False, True):
            dev = TsimDevice(bus=dataclasses.replace(bus, reorder=reorder))
            c = blocked_gemm(CommandQueue(dev), a, b, 7, GemmTiling(tile_m=2, tile_n=3, tile_k=2, vthreads=2))
            assert np.array_equal(c, gemm_reference(a, b, 7)), dev.bus
            assert dev._harness.violations() == ([], 0)
            cycles[seed, reorder] = dev.stats()["cycle_count"]
            dev.close()
    assert len(set(cycles.values())) > 4, cycles


def _checker_expects(monkeypatch, **override):
    """Make the harness's checker expect something of the core that the core does not do."""
    init = tsim_mod.Harness.__init__

    def strict(self, *args, **kw):
        init(self, *args, **{**kw, **override})
    monkeypatch.setattr(tsim_mod.Harness, "__init__", strict)


def _gemm_on(dev):
    a = RNG.integers(-128, 128, (2, 64), dtype=np.int8)
    b = RNG.integers(-128, 128, (32, 64), dtype=np.int8)
    return blocked_gemm(CommandQueue(dev), a, b, 8, GemmTiling(tile_m=1, tile_n=2, tile_k=4, vthreads=1))


@pytest.mark.parametrize("override, message", [
    ({"max_burst_beats": 8}, r"AR channel, AR #\d+ \(id \d, addr 0x[0-9a-f]+, 16 beats\): ARLEN 15 makes a burst of "
                             r"16 beats, more than this port takes \(8\)"),
    ({"write_id": 4}, r"AW channel, AW #0 \(id 5, .*\): AWID 5 is not the write ID 4"),
    ({"read_ids": [0, 1, 3, 4]}, r"AR channel, AR #\d+ \(id 2, .*\): ARID 2 is not the ID of any read client"),
])
def test_a_violation_on_the_live_core_stops_the_run_with_a_clear_error(monkeypatch, override, message):
    """Negative control on the real signal path: with a checker told to expect less than the core
    legally does (shorter bursts, another write ID, one read client fewer), the run stops with
    BusProtocolError naming the cycle, channel, transaction and rule."""
    _checker_expects(monkeypatch, **override)
    dev = TsimDevice()
    with pytest.raises(BusProtocolError, match=message) as e:
        _gemm_on(dev)
    assert str(e.value).startswith("tsim: the core broke ") and "\n  cycle " in str(e.value)
    assert e.value.violations and all(v.startswith("cycle ") for v in e.value.violations)


def test_the_core_issues_the_longest_bursts_its_port_takes(monkeypatch):
    """The default target (the Pynq's AXI3 ACP) takes 16 beats and the core uses all 16 (with 15 the
    checker fires); Ultra96's AXI4 port takes 256."""
    assert load_config().AXI_MAX_BURST_BEATS == 16
    assert load_config().replace(TARGET="ultra96").AXI_MAX_BURST_BEATS == 256
    _checker_expects(monkeypatch, max_burst_beats=15)
    with pytest.raises(BusProtocolError, match="ARLEN 15 makes a burst of 16 beats"):
        _gemm_on(TsimDevice())


def test_bus_model_refuses_bad_settings():
    with pytest.raises(ValueError, match=r"BusModel.stall\['w'\]=100: a stall chance is a percentage from 0 to 95"):
        TsimDevice(bus=BusModel(stall={"w": 100}))
    with pytest.raises(ValueError, match="unknown channel"):
        BusModel(stall={"x": 1}).params()
    with pytest.raises(ValueError, match=r"read_latency=\(5, 2\)"):
        BusModel(read_latency=(5, 2)).params()
    with pytest.raises(ValueError, match="either bus= or"):
        TsimDevice(bus=BusModel(), backpressure=3)


def test_identity_check_refuses_a_core_built_for_another_config():
    dev = TsimDevice()
    other = load_config().replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16)
    with pytest.raises(DeviceError, match="built for 1x16 .* but the configuration is 2x8"):
        dev.mmio.check_identity(other)


def test_open_device_by_target():
    cfg = load_config().replace(TARGET="tsim")
    assert isinstance(open_device(cfg), TsimDevice)


@pytest.mark.slow      # a second Verilator build of the core, with tracing
def test_fst_waveform(tmp_path):
    pywellen = pytest.importorskip("pywellen")
    path = tmp_path / "run.fst"
    dev = TsimDevice(waveform=path)
    a = RNG.integers(-128, 128, (2, 32), dtype=np.int8)
    b = RNG.integers(-128, 128, (16, 32), dtype=np.int8)
    shift = informative_shift(a, b)
    c = blocked_gemm(CommandQueue(dev), a, b, shift, GemmTiling(tile_m=1, tile_n=1, tile_k=2, vthreads=1))
    assert np.array_equal(c, gemm_reference(a, b, shift))
    gemms = dev.stats()["gemm_counter"]
    end = dev.cycles() * 2 - 1       # two trace steps per clock cycle
    dev.close()
    w = pywellen.Waveform(str(path))
    var = next(v for v in w.all_vars() if v.full_name.endswith("vta_core.cnt_gemm_counter"))
    assert var.signal.value_at(end) == gemms


def test_only_rready_follows_an_input_within_a_cycle(tmp_path):
    """The harness evaluates the model once a cycle, sampling the master port before the inputs settle:
    right only for outputs that no input reaches within the cycle. The build checks the Verilated C++
    (``input_combinational_outputs``); for the core only RREADY (the ready of the client RID names)."""
    obj = tsim_mod.build(load_config()).parent / "obj"
    assert tsim_mod.input_combinational_outputs(obj) == tsim_mod.RID_COMBINATIONAL_OUTPUTS == {"m_axi_rready"}
    # negative control: a model whose input-combinational region also computes ARVALID
    (tmp_path / "Vtop.h").write_text("    VL_OUT8(&m_axi_arvalid,0,0);\n    VL_OUT8(&m_axi_rready,0,0);\n"
                                     "    VL_IN8(&clk,0,0);\n")
    (tmp_path / "Vtop___024root__0.cpp").write_text(
        "void Vtop___024root___ico_sequent__TOP__0(Vtop___024root* vlSelf) {\n"
        "    vlSelfRef.m_axi_arvalid \n        = vlSelfRef.clk;\n    vlSelfRef.x = (vlSelfRef.y == 1);\n}\n"
        "void Vtop___024root___nba_sequent__TOP__0(Vtop___024root* vlSelf) {\n    vlSelfRef.m_axi_rready = 1;\n}\n")
    assert tsim_mod.input_combinational_outputs(tmp_path) == {"m_axi_arvalid"}
