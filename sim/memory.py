"""Simulated physical memory shared by the simulated devices (fsim and tsim).

One flat numpy arena indexed by physical address. Page 0 is reserved so that physical
address 0 is never valid; allocations are whole 4 KiB pages. The arena is allocated with
``np.zeros`` so the operating system commits only the pages that are touched.
"""

from __future__ import annotations

import bisect

import numpy as np

from vta_hw.spec import PAGE_BYTES
from vta_runtime.errors import DeviceMemoryError, DramAccessError

DEFAULT_DRAM_BYTES = 1 << 30


class SimulatedDram:
    def __init__(self, nbytes: int = DEFAULT_DRAM_BYTES):
        if nbytes % PAGE_BYTES or nbytes < 2 * PAGE_BYTES:
            raise ValueError(f"simulated DRAM size {nbytes} must be a multiple of {PAGE_BYTES} and hold 2 pages")
        self.data = np.zeros(nbytes, dtype=np.uint8)
        self.nbytes = nbytes
        self._starts: list[int] = []          # sorted physical start addresses of live allocations
        self._sizes: dict[int, int] = {}      # start -> requested size in bytes
        self._free: list[tuple[int, int]] = [(PAGE_BYTES, nbytes - PAGE_BYTES)]  # sorted (start, size)

    # ------------------------------------------------------------------ allocation
    def alloc(self, nbytes: int) -> int:
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise DeviceMemoryError(f"cannot allocate {nbytes} bytes of device memory")
        span = -(-nbytes // PAGE_BYTES) * PAGE_BYTES
        for k, (start, size) in enumerate(self._free):
            if size >= span:
                if size == span:
                    del self._free[k]
                else:
                    self._free[k] = (start + span, size - span)
                bisect.insort(self._starts, start)
                self._sizes[start] = nbytes
                self.data[start:start + span] = 0
                return start
        largest = max((s for _, s in self._free), default=0)
        raise DeviceMemoryError(
            f"out of simulated device memory: cannot allocate {nbytes} bytes "
            f"(largest free run {largest} bytes of {self.nbytes})")

    def free(self, phys: int) -> None:
        phys = int(phys)
        if phys not in self._sizes:
            raise DeviceMemoryError(f"free of {phys:#x}, which is not the start of a device allocation")
        span = -(-self._sizes.pop(phys) // PAGE_BYTES) * PAGE_BYTES
        self._starts.remove(phys)
        bisect.insort(self._free, (phys, span))
        merged: list[tuple[int, int]] = []
        for start, size in self._free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((start, size))
        self._free = merged

    def allocation_of(self, phys: int) -> tuple[int, int] | None:
        """(start, nbytes) of the allocation containing ``phys``, or None."""
        k = bisect.bisect_right(self._starts, phys) - 1
        if k < 0:
            return None
        start = self._starts[k]
        size = self._sizes[start]
        return (start, size) if phys < start + size else None

    def check(self, phys: int, nbytes: int, what: str, index: int | None = None) -> None:
        """Raise DramAccessError unless [phys, phys+nbytes) lies inside one allocation."""
        if nbytes <= 0:
            return
        a = self.allocation_of(phys)
        if a is None or phys + nbytes > a[0] + a[1]:
            where = f"instruction {index}: " if index is not None else ""
            inside = (f"; the allocation at {a[0]:#x} has only {a[1]} bytes" if a is not None else
                      "; no allocation contains its start")
            raise DramAccessError(
                f"{where}{what} accesses device memory [{phys:#x}, {phys + nbytes:#x}) outside any "
                f"allocation{inside}", index)

    # ------------------------------------------------------------------ host access
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
