"""The on-board driver. Its mapping layer is exercised on files here; its run sequence and memory
handling run against the Verilated core (the same register file a board has), with only the
mmap layer swapped: the register window is tsim's AXI-Lite port and the contiguous arena is
tsim's memory. Pynq and DE10-Nano configurations (the DE10-Nano's core differs in its AXI
attributes, so it is its own build)."""

import contextlib
import ctypes
import mmap
import shutil
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

from boards.driver import DE10NANO_DMA_LIMIT, Arena, BoardDevice, DevMemWindow, check_arena_reachable, program_bitstream
from vta_hw.spec import MemType, Opcode, load_config
from vta_hw.spec.regmap import OFFSET, Control
from vta_runtime import CommandQueue, DeviceError, DeviceTimeout, SramIndexError
from vta_runtime.mmio import DEFAULT_STALL_TIMEOUT, stall_timeout_from_env
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


@pytest.fixture(scope="module", params=["pynq", "de10nano"])
def board(request):
    tsim_mod = pytest.importorskip("sim.tsim")
    if not tsim_mod.verilator_available():
        pytest.skip("Verilator is not installed")
    cfg = load_config({**load_config().cfg_dict, "TARGET": request.param})
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


class StuckWindow(TsimWindow):
    """The register window of a core that hangs once a run starts: its registers still answer, but
    nothing in it moves (as a core waiting forever on a bus that never answers, or with a stopped
    clock, looks from the host). ABORT brings it back: the real core then stops the run."""

    def __init__(self, tsim):
        super().__init__(tsim)
        self._read, self._write = self.read32, self.write32
        self.read32, self.write32 = self._read_frozen, self._write_watched
        self.hang_next_run = True
        self.frozen: dict[int, int] | None = None

    def _read_frozen(self, offset):
        if self.frozen is None:
            return self._read(offset)
        if offset not in self.frozen:   # the first look at a register after the hang: its value stays
            self.frozen[offset] = self._read(offset)
        return self.frozen[offset]

    def _write_watched(self, offset, value):
        self._write(offset, value)
        if offset == OFFSET["CONTROL"] and value & Control.ABORT:
            self.frozen = None
        elif offset == OFFSET["CONTROL"] and value & Control.START and self.hang_next_run:
            self.hang_next_run, self.frozen = False, {}


@contextlib.contextmanager
def fails_instead_of_hanging(seconds):
    def alarm(*_):
        raise AssertionError(f"still waiting after {seconds} s: the wait has no bound")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_stuck_core_raises_with_the_register_dump_and_recovers():
    """A compiled kernel's Synchronize waits without a timeout of its own: a stuck core still ends
    the wait (no progress for stall_timeout seconds) with the registers in the message, is aborted,
    and the next run works."""
    tsim_mod = pytest.importorskip("sim.tsim")
    if not tsim_mod.verilator_available():
        pytest.skip("Verilator is not installed")
    cfg = load_config({**load_config().cfg_dict, "TARGET": "pynq"})
    t = tsim_mod.TsimDevice(cfg)
    try:
        window = StuckWindow(t)
        dev = BoardDevice(cfg, window=window, arena=Arena(t.dram.data, 0))
        assert dev.stall_timeout == DEFAULT_STALL_TIMEOUT
        dev.stall_timeout = 0.3
        cq = CommandQueue(dev)
        rng = np.random.default_rng(7)
        a = rng.integers(-128, 128, (8, 128), dtype=np.int8)
        b = rng.integers(-128, 128, (32, 128), dtype=np.int8)
        shift = informative_shift(a, b)
        with fails_instead_of_hanging(60), pytest.raises(DeviceTimeout) as e:
            blocked_gemm(cq, a, b, shift, GemmTiling(2, 1, 4, 2))      # its synchronize passes no timeout
        msg = str(e.value)
        assert "the VTA core is stuck: no instruction dispatched or retired, no data moved and no uop computed " \
               "for 0.3 s" in msg
        assert "  registers: CONTROL=0x1 ERROR=0x0" in msg and "  counters: inp_load_nbytes=" in msg
        assert "  fetch  :" in msg and "  compute:" in msg
        assert not dev.mmio.busy()                                        # aborted
        cq = CommandQueue(dev)
        np.testing.assert_array_equal(blocked_gemm(cq, a, b, shift, GemmTiling(2, 1, 4, 2)),
                                      gemm_reference(a, b, shift))
        # a long run that keeps moving is not stuck, however long it takes beside the bound
        isa = cfg.isa
        ub = dev.alloc(4096)
        dev.write(ub, np.zeros(1, np.uint32))
        words = [isa.load(MemType.UOP, 0, ub // 4, 1, 1, 1),
                 isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=200, iter_in=100), isa.finish_insn()]
        insns = dev.alloc(64)
        dev.write(insns, b"".join(w.to_bytes(16, "little") for w in words))
        dev.stall_timeout = 0.05
        dev.clear_stats()
        started = time.monotonic()
        with fails_instead_of_hanging(120):
            dev.run(insns, 3)
        assert dev.stats()["gemm_counter"] == 20000 and time.monotonic() - started > 0.05
    finally:
        t.close()


def test_stall_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("VTA_STALL_TIMEOUT", "2.5")
    assert stall_timeout_from_env() == 2.5
    for bad in ("soon", "0", "-1", "inf", "nan"):
        monkeypatch.setenv("VTA_STALL_TIMEOUT", bad)
        with pytest.raises(DeviceError, match=f"VTA_STALL_TIMEOUT='{bad}': need a number of seconds greater than 0"):
            stall_timeout_from_env()


def test_board_device_refuses_a_simulator_target():
    with pytest.raises(DeviceError, match="BoardDevice needs a board TARGET .pynq, ultra96, zcu104, de10nano., not "
                                          "'sim'"):
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


def test_de10nano_arena_must_be_in_the_acp_window():
    cfg = load_config({**load_config().cfg_dict, "TARGET": "de10nano"})
    view = np.zeros(1 << 20, np.uint8)
    ok = Arena(view, DE10NANO_DMA_LIMIT - view.size)
    assert check_arena_reachable(ok, cfg) is ok
    with pytest.raises(DeviceError, match=r"memory at 0x3ff80000-0x4007ffff is beyond the first GiB of SDRAM, "
                                          r"which is all the DE10-Nano core reaches"):
        check_arena_reachable(Arena(view, DE10NANO_DMA_LIMIT - view.size // 2), cfg)
    far = Arena(view, 0x7000_0000)                   # other boards reach further
    assert check_arena_reachable(far, cfg.replace(TARGET="pynq")) is far


def _parse_fdt(blob: bytes) -> dict:
    """A flattened device tree as nested dicts (an independent reading of the format)."""
    magic, total, off_struct, off_strings = struct.unpack_from(">4I", blob)
    assert magic == 0xD00DFEED and total == len(blob)
    pos, root, stack = off_struct, {}, []
    node = root
    while True:
        tok, = struct.unpack_from(">I", blob, pos)
        pos += 4
        if tok == 1:                                   # begin node
            end = blob.index(b"\0", pos)
            name = blob[pos:end].decode()
            pos = (end + 4) & ~3
            stack.append(node)
            node = node.setdefault(name, {})
        elif tok == 3:                                 # property
            size, nameoff = struct.unpack_from(">II", blob, pos)
            pos += 8
            pname = blob[off_strings + nameoff:blob.index(b"\0", off_strings + nameoff)].decode()
            node[pname] = blob[pos:pos + size]
            pos = (pos + size + 3) & ~3
        elif tok == 2:
            node = stack.pop()
        elif tok == 9:
            return root
        else:
            raise AssertionError(f"token {tok}")


def test_de10nano_is_programmed_through_a_device_tree_overlay(tmp_path, monkeypatch):
    """No pynq package on a DE10-Nano image: the .rbf goes to the firmware directory and an overlay
    on the base FPGA region, enabling the lightweight and FPGA-to-HPS bridges, goes to configfs.
    (configfs and /lib/firmware are directories here; the kernel's side is not.)"""
    import sys
    import types
    monkeypatch.setitem(sys.modules, "pynq", types.ModuleType("pynq"))   # even with pynq installed: not a Zynq
    cfg = load_config({**load_config().cfg_dict, "TARGET": "de10nano"})
    rbf = tmp_path / f"{cfg.BITSTREAM}.rbf"
    rbf.write_bytes(bytes(range(256)) * 4)
    overlays, firmware = tmp_path / "overlays", tmp_path / "firmware"
    overlays.mkdir()
    how = program_bitstream(rbf, cfg, manager=tmp_path / "no-manager", overlays=overlays, firmware_dir=firmware)
    assert how == f"device-tree overlay {overlays / 'vta'} with {rbf.name}"
    assert (firmware / rbf.name).read_bytes() == rbf.read_bytes()
    blob = (overlays / "vta" / "dtbo").read_bytes()
    tree = _parse_fdt(blob)[""]
    overlay = tree["fragment@0"]["__overlay__"]
    assert overlay["firmware-name"] == rbf.name.encode() + b"\0"
    assert overlay["fpga-bridges"] == b"\xff" * 8 and tree["fragment@0"]["target"] == b"\xff" * 4
    assert tree["__fixups__"] == {"base_fpga_region": b"/fragment@0:target:0\0",
                                  "fpga_bridge0": b"/fragment@0/__overlay__:fpga-bridges:0\0",
                                  "fpga_bridge2": b"/fragment@0/__overlay__:fpga-bridges:4\0"}
    if shutil.which("dtc"):                            # and the device-tree compiler reads it the same way
        dts = subprocess.run(["dtc", "-I", "dtb", "-O", "dts"], input=blob, capture_output=True, check=True).stdout
        assert f'firmware-name = "{rbf.name}";'.encode() in dts
        assert b'fpga_bridge2 = "/fragment@0/__overlay__:fpga-bridges:4";' in dts
    with pytest.raises(DeviceError, match=r"1x16_i8w8a32_15_15_18_17.bit is not a .rbf file, which is what TARGET "
                                          r"de10nano loads"):
        program_bitstream(rbf.with_suffix(".bit"), cfg, overlays=overlays, firmware_dir=firmware)
    with pytest.raises(DeviceError, match="cannot program the FPGA: no pynq package, no device-tree overlay configfs"):
        program_bitstream(rbf, cfg, manager=tmp_path / "none", overlays=tmp_path / "none", firmware_dir=firmware)


def test_a_xilinx_board_without_pynq_uses_the_fpga_manager_firmware_attribute(tmp_path):
    cfg = load_config({**load_config().cfg_dict, "TARGET": "zcu104"})
    bit = tmp_path / "vta.bit"
    bit.write_bytes(b"\x00\x09" * 64)
    manager = tmp_path / "fpga0"
    manager.mkdir()
    (manager / "firmware").write_text("")
    assert program_bitstream(bit, cfg, manager=manager, overlays=tmp_path / "none",
                             firmware_dir=tmp_path / "fw") == "FPGA manager firmware vta.bit"
    assert (manager / "firmware").read_text() == "vta.bit" and (tmp_path / "fw" / "vta.bit").exists()
