"""The on-board driver. Its mapping layer is exercised on files here; its run sequence and memory
handling run against the Verilated core (the same register file a board has), with only the
mmap layer swapped: the register window is tsim's AXI-Lite port and the contiguous arena is
tsim's memory."""

import ctypes
import mmap
import struct

import numpy as np
import pytest

from boards.driver import Arena, BoardDevice, DevMemWindow
from vta_hw.spec import load_config
from vta_runtime import CommandQueue, DeviceError, SramIndexError
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift


def test_devmem_window_maps_a_page_aligned_window(tmp_path):
    f = tmp_path / "mem"
    f.write_bytes(bytes(3 * mmap.PAGESIZE))
    base = mmap.PAGESIZE + 0x40              # not page aligned: the window starts inside a page
    w = DevMemWindow(base, 0x100, path=str(f))
    w.write32(0x8, 0xDEADBEEF)
    w.write32(0xFC, 0x1_0000_0001)           # only 32 bits are written
    assert w.read32(0x8) == 0xDEADBEEF and w.read32(0xFC) == 1
    w.close()
    raw = f.read_bytes()
    assert struct.unpack_from("<I", raw, base + 0x8)[0] == 0xDEADBEEF
    with pytest.raises(DeviceError, match="cannot open .*nope to map the VTA registers"):
        DevMemWindow(0, 16, path=str(tmp_path / "nope"))


class TsimWindow:
    """tsim's register port as a board register window (read32/write32, and wait = run cycles)."""

    def __init__(self, tsim):
        self.t = tsim
        n = tsim.dram.nbytes                      # a board's bus has no allocation map: all of DDR is legal
        tsim.lib.tsim_set_allocations(tsim._h, (ctypes.c_uint64 * 1)(0), (ctypes.c_uint64 * 1)(n), 1)
        self.read32, self.write32, self.wait = tsim._read32, tsim._write32, tsim._advance

    def close(self):
        pass


@pytest.fixture(scope="module")
def board():
    tsim_mod = pytest.importorskip("sim.tsim")
    if not tsim_mod.verilator_available():
        pytest.skip("Verilator is not installed")
    cfg = load_config({**load_config().cfg_dict, "TARGET": "pynq"})
    t = tsim_mod.TsimDevice(cfg)
    dev = BoardDevice(cfg, window=TsimWindow(t), arena=Arena(t.dram.data, 0))
    yield dev
    t.close()


def test_board_device_runs_programs(board):
    board.clear_stats()
    cq = CommandQueue(board)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (8, 128), dtype=np.int8)
    b = rng.integers(-128, 128, (32, 128), dtype=np.int8)
    shift = informative_shift(a, b)
    np.testing.assert_array_equal(blocked_gemm(cq, a, b, shift, GemmTiling(2, 1, 4, 2)), gemm_reference(a, b, shift))
    s = board.stats()
    assert s["gemm_counter"] == 8 * 2 * 8 and s["cycle_count"] > 0
    lo, hi = board.host_window()
    phys = board.alloc(64)
    board.write(phys, bytes(range(64)))
    assert ctypes.string_at(lo + phys, 64) == bytes(range(64)) and hi > phys
    board.free(phys)


def test_board_device_reports_errors_and_keeps_working(board):
    isa = board.config.isa
    buf = board.alloc(4096)
    words = [isa.load(2, board.config.INP_BUFF_DEPTH, buf // 16, 1, 1, 1), isa.finish_insn()]
    insns = board.alloc(64)
    board.write(insns, b"".join(w.to_bytes(16, "little") for w in words))
    with pytest.raises(SramIndexError, match="instruction 0: LOAD into INP covers SRAM indices"):
        board.run(insns, 2, timeout=30)
    test_board_device_runs_programs(board)


def test_board_device_refuses_a_simulator_target():
    with pytest.raises(DeviceError, match="BoardDevice needs a board TARGET .pynq, ultra96., not 'sim'"):
        BoardDevice(load_config())


def test_program_bitstream_on_pynq_sets_the_pl_clock(tmp_path, monkeypatch):
    """With the pynq package, the bitstream goes through pynq.Bitstream and FCLK0 gets the config's clock.
    (No board here: a stand-in pynq module records what the driver asks of it.)"""
    import sys
    import types

    from boards.driver import program_bitstream

    calls = []
    pynq = types.ModuleType("pynq")

    class Bitstream:
        def __init__(self, path):
            self.path = path

        def download(self):
            calls.append(("download", self.path))

    class Clocks:
        fclk0_mhz = 0

    pynq.Bitstream, pynq.Clocks = Bitstream, Clocks
    monkeypatch.setitem(sys.modules, "pynq", pynq)
    bit = tmp_path / "vta.bit"
    bit.write_bytes(b"\0" * 16)
    cfg = load_config({**load_config().cfg_dict, "TARGET": "ultra96"})
    program_bitstream(bit, cfg)
    assert calls == [("download", str(bit))]
    assert Clocks.fclk0_mhz == cfg.fpga_freq == 333
