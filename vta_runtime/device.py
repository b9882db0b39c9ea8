"""The Device protocol every VTA device implements, and the factory that opens one by TARGET."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from vta_hw.spec import Config, load_config

#: Methods that make a device, in the order the protocol documents them.
DEVICE_METHODS = ("alloc", "free", "write", "read", "run", "stats", "clear_stats")


@runtime_checkable
class Device(Protocol):
    """A VTA device: physical memory plus an engine that runs instruction streams.

    Physical memory is handed out in 4 KiB pages and physical address 0 is never valid.
    Devices are constructed from a config (a ``Config``, a dict or a path; default: the
    repository config).
    """

    config: Config

    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of physically contiguous, 4 KiB-aligned memory; return its physical address."""

    def free(self, phys: int) -> None:
        """Free an allocation made by :meth:`alloc`."""

    def write(self, phys: int, data: bytes | np.ndarray) -> None:
        """Copy host data into device memory at ``phys``."""

    def read(self, phys: int, nbytes: int) -> bytes:
        """Copy ``nbytes`` of device memory at ``phys`` to the host."""

    def run(self, insn_phys: int, insn_count: int, timeout: float | None = None) -> None:
        """Run ``insn_count`` instructions at ``insn_phys`` until FINISH; raise on error or after ``timeout`` s."""

    def stats(self) -> dict[str, int]:
        """Counters accumulated since the last :meth:`clear_stats`."""

    def clear_stats(self) -> None:
        """Reset every counter to zero."""


def host_window(device: Device) -> tuple[int, int]:
    """(host address, size) of the device's physical memory as mapped into this process.

    Physical address ``p`` is at host address ``base + p``. A device provides this by a
    ``host_window()`` method (a board driver: its contiguous-memory mapping); devices that keep
    their memory in a ``SimulatedDram`` (``device.dram``, fsim and tsim) need nothing more.
    Compiled code hands DRAM tensors to the runtime as host data pointers, translated here.
    """
    fn = getattr(device, "host_window", None)
    if fn is not None:
        return fn()
    dram = getattr(device, "dram", None)
    data = getattr(dram, "data", None)
    if isinstance(data, np.ndarray):
        return int(data.ctypes.data), int(data.nbytes)
    from .errors import RuntimeUsageError
    raise RuntimeUsageError(f"device {type(device).__name__} does not map its memory into this process "
                            "(it has neither host_window() nor a SimulatedDram .dram)")


def open_device(config: Config | dict[str, Any] | str | None = None, **kwargs: Any) -> Device:
    """Open the device that the config's TARGET names (sim -> fsim, tsim -> Verilated core, boards -> driver)."""
    cfg = load_config(config)
    if cfg.TARGET == "sim":
        from sim.fsim import FsimDevice
        return FsimDevice(cfg, **kwargs)
    if cfg.TARGET == "tsim":
        from sim.tsim import TsimDevice
        return TsimDevice(cfg, **kwargs)
    from boards.driver import BoardDevice
    return BoardDevice(cfg, **kwargs)
