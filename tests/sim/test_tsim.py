"""tsim-specific behaviour: counters, timeouts with state reports, FST waveforms, bus models."""

import numpy as np
import pytest

tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

from sim.tsim import TsimDevice  # noqa: E402
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


def test_identity_check_refuses_a_core_built_for_another_config():
    dev = TsimDevice()
    other = load_config().replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16)
    with pytest.raises(DeviceError, match="built for 1x16 .* but the configuration is 2x8"):
        dev.mmio.check_identity(other)


def test_open_device_by_target():
    cfg = load_config().replace(TARGET="tsim")
    assert isinstance(open_device(cfg), TsimDevice)


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
