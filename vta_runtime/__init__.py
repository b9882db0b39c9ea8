"""The VTA runtime: instruction and uop streams over any ``Device`` (spec 4.2-4.4)."""

from __future__ import annotations

import sys

from . import native as _native
from .command_queue import (
    COPY_DEVICE_DST,
    COPY_DEVICE_SRC,
    DEBUG_DUMP_INSN,
    DEBUG_DUMP_UOP,
    DEBUG_FORCE_SERIAL,
    DEBUG_SKIP_READ_BARRIER,
    DEBUG_SKIP_WRITE_BARRIER,
    MODE_ALU,
    MODE_GEMM,
    CommandQueue,
    DataBuffer,
)
from .device import (
    DEVICE_METHODS,
    ENTRY_POINT_GROUP,
    Device,
    device_factory,
    device_targets,
    open_device,
    register_device,
    unregister_device,
)
from .errors import (
    DeadlockError,
    DeviceError,
    DeviceMemoryError,
    DeviceTimeout,
    DramAccessError,
    IllegalInstructionError,
    MissingFinishError,
    ProgramError,
    RuntimeUsageError,
    SramIndexError,
    UnbalancedTokensError,
    VTAError,
)

_command_queue: CommandQueue | None = None


def command_handle() -> CommandQueue:
    """The process-wide command queue (VTATLSCommandHandle), opened on the configured device on first use."""
    if _command_queue is None:
        set_command_queue(CommandQueue(open_device()))
    return _command_queue


def _release_device_buffers() -> None:
    """Before the device changes: free what TVM keeps of the old device's memory for reuse (the pooled
    allocator's free buffers, the device copies of compiled networks' constants)."""
    if "tvm" in sys.modules and _command_queue is not None:
        from . import tvm_bridge
        tvm_bridge.release_device_buffers()


def set_command_queue(queue: CommandQueue | None) -> None:
    """Make ``queue`` the process-wide command queue (for example one over a tsim or board device);
    compiled code runs on it."""
    global _command_queue
    if queue is not _command_queue:
        _release_device_buffers()
    _command_queue = queue
    if queue is not None or _native.loaded():   # (a queue has loaded the core; no queue needs none)
        _native.func("SetCurrent")(0 if queue is None else queue.handle)


def shutdown() -> None:
    """Drop the process-wide command queue (VTARuntimeShutdown)."""
    _release_device_buffers()
    if _command_queue is not None:
        _command_queue.close()
    set_command_queue(None)


__all__ = [
    "COPY_DEVICE_DST", "COPY_DEVICE_SRC", "DEBUG_DUMP_INSN", "DEBUG_DUMP_UOP", "DEBUG_FORCE_SERIAL",
    "DEBUG_SKIP_READ_BARRIER", "DEBUG_SKIP_WRITE_BARRIER", "CommandQueue", "DataBuffer", "DEVICE_METHODS", "Device",
    "open_device", "ENTRY_POINT_GROUP", "device_factory", "device_targets", "register_device",
    "unregister_device", "DeadlockError", "DeviceError", "DeviceMemoryError", "DeviceTimeout", "DramAccessError",
    "IllegalInstructionError", "MissingFinishError", "ProgramError", "RuntimeUsageError", "SramIndexError",
    "UnbalancedTokensError", "VTAError", "MODE_ALU", "MODE_GEMM", "command_handle",
    "set_command_queue", "shutdown",
]
