"""The VTA runtime: instruction and uop streams over any ``Device`` (spec 4.2-4.4)."""

from __future__ import annotations

import sys

from .command_queue import (
    COPY_DEVICE_DST,
    COPY_DEVICE_SRC,
    DEBUG_DUMP_INSN,
    DEBUG_DUMP_UOP,
    DEBUG_FORCE_SERIAL,
    DEBUG_SKIP_READ_BARRIER,
    DEBUG_SKIP_WRITE_BARRIER,
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
from .uop import MODE_ALU, MODE_GEMM, UopKernel

_command_queue: CommandQueue | None = None


def command_handle() -> CommandQueue:
    """The process-wide command queue (VTATLSCommandHandle), opened on the configured device on first use."""
    global _command_queue
    if _command_queue is None:
        _command_queue = CommandQueue(open_device())
    return _command_queue


def _release_device_buffers() -> None:
    """Before the device changes: free what TVM keeps of the old device's memory for reuse (the pooled
    allocator's free buffers, the device copies of compiled networks' constants)."""
    if "tvm" in sys.modules and _command_queue is not None:
        from . import tvm_bridge
        tvm_bridge.release_device_buffers()


def set_command_queue(queue: CommandQueue | None) -> None:
    """Make ``queue`` the process-wide command queue (for example one over a tsim or board device)."""
    global _command_queue
    if queue is not _command_queue:
        _release_device_buffers()
    _command_queue = queue


def shutdown() -> None:
    """Drop the process-wide command queue (VTARuntimeShutdown)."""
    global _command_queue
    _release_device_buffers()
    if _command_queue is not None:
        _command_queue.close()
    _command_queue = None


__all__ = [
    "COPY_DEVICE_DST", "COPY_DEVICE_SRC", "DEBUG_DUMP_INSN", "DEBUG_DUMP_UOP", "DEBUG_FORCE_SERIAL",
    "DEBUG_SKIP_READ_BARRIER", "DEBUG_SKIP_WRITE_BARRIER", "CommandQueue", "DataBuffer", "DEVICE_METHODS", "Device",
    "open_device", "ENTRY_POINT_GROUP", "device_factory", "device_targets", "register_device",
    "unregister_device", "DeadlockError", "DeviceError", "DeviceMemoryError", "DeviceTimeout", "DramAccessError",
    "IllegalInstructionError", "MissingFinishError", "ProgramError", "RuntimeUsageError", "SramIndexError",
    "UnbalancedTokensError", "VTAError", "MODE_ALU", "MODE_GEMM", "UopKernel", "command_handle",
    "set_command_queue", "shutdown",
]
