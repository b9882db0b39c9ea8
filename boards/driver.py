"""The on-board driver: a ``Device`` for a board running the VTA bitstream (Pynq-Z1/Z2, Ultra96,
ZCU104, DE10-Nano).

Only the mapping layer is board-specific, and it is thin:

* the register window (``fetch_base_addr``, 4 KiB) is mapped through PYNQ's ``MMIO`` when the
  ``pynq`` package is present (Zynq boards), else through ``/dev/mem``;
* device memory is one physically contiguous arena (PYNQ's ``allocate``, else a ``u-dma-buf``
  device ``/dev/udmabufN``, which takes its memory from the kernel's CMA) that is handed out in
  4 KiB pages. On the DE10-Nano the arena must lie in the first GiB of SDRAM, which the core
  reaches through the HPS's ACP window (``boards.cyclonev``);
* a bitstream is loaded with PYNQ's ``Bitstream``, else through the Linux FPGA manager: a
  device-tree overlay applied through configfs (``boards.overlay``; it also enables the HPS
  bridges of a Cyclone V), or the FPGA manager's ``firmware`` attribute where the kernel has it.

Everything else, every register access of a run included, is ``vta_runtime.mmio`` and
``vta_runtime.pages``, the same code that drives tsim in the test suite.

Checking it on a board (README, "Boards"): program the bitstream, then
``python -c "from boards.driver import BoardDevice; d = BoardDevice(); print(d.mmio.reg('ID'))"``
prints 0x56544102, and ``pytest tests/runtime/test_unit_programs.py --device board`` runs the
instruction-level tests on the board.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from vta_hw.spec import BOARD_TARGETS, Config, load_config
from vta_runtime.errors import DeviceError
from vta_runtime.mmio import RegisterDevice
from vta_runtime.pages import PageAllocator

from .overlay import fpga_region_overlay

DEFAULT_ARENA_BYTES = 64 << 20
#: Boards whose images come with the PYNQ stack (the others use /dev/mem and u-dma-buf).
PYNQ_TARGETS = ("pynq", "ultra96", "zcu104")
#: Physical memory the DE10-Nano core reaches: the ACP window maps the first GiB of SDRAM.
DE10NANO_DMA_LIMIT = 1 << 30
#: Where the Linux FPGA manager, its overlays and its firmware live.
SYSFS_FPGA_MANAGER = Path("/sys/class/fpga_manager/fpga0")
CONFIGFS_OVERLAYS = Path("/sys/kernel/config/device-tree/overlays")
FIRMWARE_DIR = Path("/lib/firmware")
#: Cyclone V bridges (labels of the kernel's socfpga device tree) the core needs after programming:
#: the lightweight HPS-to-FPGA bridge (registers) and the FPGA-to-HPS bridge (memory)
DE10NANO_BRIDGES = ("fpga_bridge0", "fpga_bridge2")


def _have_pynq(cfg: Config | None = None) -> bool:
    if cfg is not None and cfg.TARGET not in PYNQ_TARGETS:
        return False
    try:
        import pynq  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------- register window
class DevMemWindow:
    """A register window mapped with mmap from ``/dev/mem`` (or any file, page-aligned offset)."""

    def __init__(self, base: int, size: int, path: str = "/dev/mem"):
        page = mmap.PAGESIZE
        self.base, self.size = base, size
        start = base - base % page
        self._delta = base - start
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_SYNC)
        except OSError as exc:
            raise DeviceError(f"cannot open {path} to map the VTA registers at {base:#x}: {exc.strerror} "
                              "(run as root, or install the pynq package)") from None
        self._map = mmap.mmap(self._fd, self._delta + size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                              offset=start)

    def read32(self, offset: int) -> int:
        return struct.unpack_from("<I", self._map, self._delta + offset)[0]

    def write32(self, offset: int, value: int) -> None:
        struct.pack_into("<I", self._map, self._delta + offset, value & 0xFFFFFFFF)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class PynqWindow:
    """A register window through ``pynq.MMIO``."""

    def __init__(self, base: int, size: int):
        from pynq import MMIO
        self._mmio = MMIO(base, size)

    def read32(self, offset: int) -> int:
        return int(self._mmio.read(offset)) & 0xFFFFFFFF

    def write32(self, offset: int, value: int) -> None:
        self._mmio.write(offset, value & 0xFFFFFFFF)

    def close(self) -> None:
        pass


def open_register_window(cfg: Config):
    if _have_pynq(cfg):
        return PynqWindow(cfg.fetch_base_addr, cfg.ip_reg_map_range)
    return DevMemWindow(cfg.fetch_base_addr, cfg.ip_reg_map_range)


# ---------------------------------------------------------------------- contiguous memory
class Arena:
    """Physically contiguous memory: ``view`` is a uint8 numpy array at physical address ``phys_base``."""

    def __init__(self, view: np.ndarray, phys_base: int, keep: Any = None):
        self.view, self.phys_base, self._keep = view, phys_base, keep


def pynq_arena(nbytes: int) -> Arena:
    from pynq import allocate
    buf = allocate(shape=(nbytes,), dtype=np.uint8)
    return Arena(np.asarray(buf), int(buf.physical_address), buf)


def udmabuf_arena(name: str = "udmabuf0") -> Arena:
    sysfs = Path("/sys/class/u-dma-buf") / name
    if not sysfs.exists():
        raise DeviceError(f"no contiguous memory: neither the pynq package nor /dev/{name} (u-dma-buf) is present")
    phys = int((sysfs / "phys_addr").read_text().strip(), 0)
    size = int((sysfs / "size").read_text().strip(), 0)
    fd = os.open(f"/dev/{name}", os.O_RDWR | os.O_SYNC)
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    return Arena(np.frombuffer(mm, dtype=np.uint8), phys, (fd, mm))


def check_arena_reachable(arena: Arena, cfg: Config) -> Arena:
    """Refuse an arena the core cannot reach (DE10-Nano: beyond the ACP window's first GiB)."""
    end = arena.phys_base + arena.view.size
    if cfg.TARGET == "de10nano" and end > DE10NANO_DMA_LIMIT:
        raise DeviceError(f"the contiguous memory at {arena.phys_base:#x}-{end - 1:#x} is beyond the first GiB of "
                          f"SDRAM, which is all the DE10-Nano core reaches (the HPS's ACP window); reserve the "
                          "u-dma-buf (CMA) below 0x40000000")
    return arena


def open_arena(nbytes: int = DEFAULT_ARENA_BYTES, cfg: Config | None = None) -> Arena:
    arena = pynq_arena(nbytes) if _have_pynq(cfg) else udmabuf_arena()
    return check_arena_reachable(arena, cfg) if cfg is not None else arena


# ---------------------------------------------------------------------- bitstream
def program_bitstream(path: str | os.PathLike[str], cfg: Config, *, manager: Path = SYSFS_FPGA_MANAGER,
                      overlays: Path = CONFIGFS_OVERLAYS, firmware_dir: Path = FIRMWARE_DIR) -> str:
    """Load a bitstream into the FPGA; returns how.

    * With the pynq package (Zynq boards): PYNQ's ``Bitstream``, then PS clock 0 is set to the
      config's fpga_freq.
    * Else the Linux FPGA manager, with the bitstream copied to ``firmware_dir``: a device-tree
      overlay on the base FPGA region through configfs (the DE10-Nano's ``.rbf``; the overlay also
      names the HPS bridges to disable while programming and enable after), or the manager's
      ``firmware`` attribute (Xilinx kernels; the boot image's device tree sets the clock).
    """
    path = Path(path)
    if path.suffix != cfg.bitstream_ext:
        raise DeviceError(f"{path.name} is not a {cfg.bitstream_ext} file, which is what TARGET {cfg.TARGET} loads")
    if _have_pynq(cfg):
        from pynq import Bitstream, Clocks
        Bitstream(str(path)).download()
        Clocks.fclk0_mhz = cfg.fpga_freq
        return f"pynq.Bitstream({path.name}), FCLK0 {cfg.fpga_freq} MHz"
    use_overlay = overlays.is_dir() and (cfg.TARGET == "de10nano" or not (manager / "firmware").exists())
    if not use_overlay and not (manager / "firmware").exists():
        raise DeviceError(f"cannot program the FPGA: no pynq package, no device-tree overlay configfs ({overlays}) "
                          f"and no FPGA manager firmware attribute ({manager / 'firmware'}); mount configfs "
                          "(mount -t configfs none /sys/kernel/config) on a kernel with overlay support")
    try:
        firmware_dir.mkdir(parents=True, exist_ok=True)
        (firmware_dir / path.name).write_bytes(path.read_bytes())
    except OSError as exc:
        raise DeviceError(f"cannot copy the bitstream to {firmware_dir}: {exc.strerror} (run as root)") from None
    if not use_overlay:
        (manager / "firmware").write_text(path.name)
        return f"FPGA manager firmware {path.name}"
    node = overlays / "vta"
    if node.exists():
        node.rmdir()                  # removing the old overlay releases the region for the new one
    node.mkdir()
    bridges = DE10NANO_BRIDGES if cfg.TARGET == "de10nano" else ()
    (node / "dtbo").write_bytes(fpga_region_overlay(path.name, bridges=bridges))
    status = node / "status"
    if status.exists() and status.read_text().strip() != "applied":
        state = status.read_text().strip()
        node.rmdir()
        raise DeviceError(f"the FPGA manager did not program {path.name} (overlay status {state!r}); see dmesg")
    return f"device-tree overlay {node} with {path.name}"


# ---------------------------------------------------------------------- the device
class BoardDevice(RegisterDevice):
    """The VTA core on a board, as a ``vta_runtime.Device``."""

    def __init__(self, config: Config | dict[str, Any] | str | None = None, *, window=None,
                 arena: Arena | None = None, arena_bytes: int = DEFAULT_ARENA_BYTES):
        cfg = load_config(config)
        if cfg.TARGET not in BOARD_TARGETS:
            raise DeviceError(f"BoardDevice needs a board TARGET ({', '.join(BOARD_TARGETS)}), not {cfg.TARGET!r}")
        self.window = window or open_register_window(cfg)
        self.arena = check_arena_reachable(arena, cfg) if arena is not None else open_arena(arena_bytes, cfg)
        self.pages = PageAllocator(self.arena.phys_base, self.arena.view.size)
        super().__init__(cfg, self.window.read32, self.window.write32)

    # memory: physical address p lives at arena.view[p - phys_base]
    def _span(self, phys: int, nbytes: int) -> np.ndarray:
        self.pages.check(phys, nbytes, "host access")
        off = phys - self.arena.phys_base
        return self.arena.view[off:off + nbytes]

    def alloc(self, nbytes: int) -> int:
        return self.pages.alloc(nbytes)

    def free(self, phys: int) -> None:
        self.pages.free(phys)

    def write(self, phys: int, data: bytes | np.ndarray) -> None:
        buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._span(phys, buf.size)[:] = buf

    def read(self, phys: int, nbytes: int) -> bytes:
        return self._span(phys, nbytes).tobytes()

    def host_window(self) -> tuple[int, int]:
        """Physical address p is at host address base + p (see vta_runtime.device.host_window)."""
        return int(self.arena.view.ctypes.data) - self.arena.phys_base, self.arena.phys_base + self.arena.view.size

    def _instruction_words(self, insn_phys: int, insn_count: int) -> np.ndarray:
        return self._span(insn_phys, insn_count * 16).view("<u8").reshape(-1, 2).copy()

    def close(self) -> None:
        self.window.close()


def check_core_matches(cfg: Config) -> None:
    """Refuse a configuration that the programmed core does not implement (reads ID and HWCONFIG)."""
    from vta_runtime.mmio import Mmio
    window = open_register_window(cfg)
    try:
        Mmio(window.read32, window.write32).check_identity(cfg)
    finally:
        window.close()
