"""Errors raised by the runtime and by devices. Each message names the offending thing."""


class VTAError(RuntimeError):
    """Base class of every VTA runtime or device error."""


class DeviceError(VTAError):
    """A device refused or failed to run an instruction stream."""


class ProgramError(DeviceError):
    """The instruction stream itself is wrong. ``index`` is the offending instruction, when one is."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class IllegalInstructionError(ProgramError):
    """Unknown opcode, memory type, ALU opcode or dependency flag, or non-zero store padding."""


class SramIndexError(ProgramError):
    """An instruction reads or writes an SRAM index past the buffer depth."""


class DramAccessError(ProgramError):
    """A DMA touches device memory outside every allocation."""


class DeadlockError(ProgramError):
    """No module can make progress: a dependency token that is waited for is never pushed."""


class MissingFinishError(ProgramError):
    """The stream has no FINISH instruction."""


class UnbalancedTokensError(ProgramError):
    """Work or tokens are left over when FINISH runs."""


class DeviceTimeout(DeviceError):
    """A run exceeded its time bound; the message carries the state of every module and queue."""


class DeviceMemoryError(DeviceError):
    """Device memory allocation failed or an address is not an allocation."""


class RuntimeUsageError(VTAError, ValueError):
    """The runtime API was called with arguments it cannot turn into instructions."""
