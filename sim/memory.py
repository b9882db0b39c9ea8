"""Simulated physical memory shared by the simulated devices (fsim and tsim).

One flat numpy arena indexed by physical address, handed out in 4 KiB pages by
``vta_runtime.pages.PageAllocator`` (page 0 is reserved, so physical address 0 is never valid).
The arena is allocated with ``np.zeros`` so the operating system commits only the pages that are
touched, and starts on a page boundary, as a board's contiguous memory does: ext_dev tensors are
views of it, and compiled host code may use aligned vector loads on their data (TVM assumes 64-byte
aligned tensors).
"""

from __future__ import annotations

import numpy as np

from vta_hw.spec import PAGE_BYTES
from vta_runtime.pages import PageAllocator

DEFAULT_DRAM_BYTES = 1 << 30


class SimulatedDram:
    def __init__(self, nbytes: int = DEFAULT_DRAM_BYTES):
        if nbytes % PAGE_BYTES or nbytes < 2 * PAGE_BYTES:
            raise ValueError(f"simulated DRAM size {nbytes} must be a multiple of {PAGE_BYTES} and hold 2 pages")
        raw = np.zeros(nbytes + PAGE_BYTES, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE_BYTES
        self.data = raw[start:start + nbytes]
        self.nbytes = nbytes
        self.pages = PageAllocator(0, nbytes, "simulated device memory")
        self.check = self.pages.check
        self.allocation_of = self.pages.allocation_of

    def alloc(self, nbytes: int) -> int:
        phys = self.pages.alloc(nbytes)
        self.data[phys:phys + -(-int(nbytes) // PAGE_BYTES) * PAGE_BYTES] = 0
        return phys

    def free(self, phys: int) -> None:
        self.pages.free(phys)

    def write(self, phys: int, data: bytes | np.ndarray) -> None:
        buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.check(phys, buf.size, "host write")
        self.data[phys:phys + buf.size] = buf

    def read(self, phys: int, nbytes: int) -> bytes:
        self.check(phys, nbytes, "host read")
        return self.data[phys:phys + nbytes].tobytes()

    def elements(self, dtype: np.dtype | str, lanes: int) -> np.ndarray:
        """The arena viewed as elements of ``lanes`` values of ``dtype`` (element i at byte i*elem_bytes)."""
        return self.data.view(dtype).reshape(-1, lanes)


class SimulatedMemoryDevice:
    """The memory half of the Device protocol for devices whose memory is a ``SimulatedDram`` (``self.dram``)."""

    dram: SimulatedDram

    def alloc(self, nbytes: int) -> int:
        return self.dram.alloc(nbytes)

    def free(self, phys: int) -> None:
        self.dram.free(phys)

    def write(self, phys: int, data: bytes | np.ndarray) -> None:
        self.dram.write(phys, data)

    def read(self, phys: int, nbytes: int) -> bytes:
        return self.dram.read(phys, nbytes)
