"""The Device protocol every VTA device implements, and the registry that opens one by TARGET.

The runtime knows no device: devices join the registry (entry points or ``register_device``).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vta_hw.spec import Config, load_config

#: Methods that make a device, in the order the protocol documents them.
DEVICE_METHODS = ("alloc", "free", "write", "read", "run", "stats", "clear_stats")


@runtime_checkable
class Device(Protocol):
    """A VTA device: physical memory plus an engine that runs instruction streams.

    Physical memory is handed out in 4 KiB pages and physical address 0 is never valid. A device may also
    have ``run_stream(stream, count, insn_phys, uops, uop_phys, timeout)``, which ``CommandQueue`` then calls
    instead of ``write(uop_phys, uops)`` (if ``uops``), ``write(insn_phys, stream)`` and ``run(insn_phys,
    count, timeout)``, with the same effects and errors (fsim does the three in one engine call).
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


#: Entry-point group through which installed packages offer devices: the name is a config TARGET,
#: the value a factory ``factory(config, **kwargs) -> Device`` (a Device class will do). This
#: repository's pyproject.toml declares sim, tsim and the boards (pynq, ultra96, zcu104, de10nano) there.
ENTRY_POINT_GROUP = "vta.devices"

_registered: dict[str, Callable[..., Device]] = {}


def register_device(target: str, factory: Callable[..., Device]) -> None:
    """Make ``open_device`` use ``factory(config, **kwargs)`` for configs whose TARGET is ``target``.

    A registration made here takes precedence over the entry points of installed packages.
    """
    _registered[target] = factory


def unregister_device(target: str) -> None:
    """Undo :func:`register_device` (the entry points, if any, apply again)."""
    _registered.pop(target, None)


def _entry_points(target: str) -> list[Any]:
    # one distribution can be visible twice (an editable install and its source tree): same value, one device
    found = {ep.value: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP, name=target)}
    return list(found.values())


def device_targets() -> list[str]:
    """Every TARGET a device is registered or installed for."""
    return sorted(set(_registered) | {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)})


def device_factory(target: str) -> Callable[..., Device]:
    """The factory that :func:`open_device` uses for ``target``; a clear error if there is none or two."""
    from .errors import RuntimeUsageError
    if target in _registered:
        return _registered[target]
    eps = _entry_points(target)
    if not eps:
        known = ", ".join(device_targets()) or "none"
        raise RuntimeUsageError(
            f"no device is registered for TARGET {target!r} (devices are registered for: {known}). A device "
            f"joins through the entry-point group {ENTRY_POINT_GROUP!r} of an installed package or through "
            "vta_runtime.register_device(target, factory); in a source checkout of this repository, "
            "`pip install -e .` installs the entry points of sim, tsim, pynq, ultra96, zcu104 and de10nano")
    if len(eps) > 1:
        raise RuntimeUsageError(f"more than one device is installed for TARGET {target!r}: "
                                + ", ".join(f"{ep.value} (from {ep.dist.name if ep.dist else '?'})" for ep in eps)
                                + "; uninstall one, or choose with vta_runtime.register_device")
    return eps[0].load()


def open_device(config: Config | dict[str, Any] | str | None = None, **kwargs: Any) -> Device:
    """Open the device that the config's TARGET names (:func:`device_factory`; for this repository's
    targets: sim -> fsim, tsim -> the Verilated core, pynq/ultra96/zcu104/de10nano -> the board driver)."""
    cfg = load_config(config)
    return device_factory(cfg.TARGET)(cfg, **kwargs)
