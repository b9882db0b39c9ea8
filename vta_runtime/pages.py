"""Page allocation of device memory: 4 KiB-aligned runs inside one physical range.

Used by the simulated memory of fsim/tsim (the range starts at 0 and page 0 is reserved, so
physical address 0 is never valid) and by the board driver (the range is a physically
contiguous arena).
"""

from __future__ import annotations

import bisect

import numpy as np

from vta_hw.spec import PAGE_BYTES

from .errors import DeviceMemoryError, DramAccessError


def _pages(nbytes: int) -> int:
    return -(-nbytes // PAGE_BYTES) * PAGE_BYTES


class PageAllocator:
    def __init__(self, base: int, nbytes: int, what: str = "device memory"):
        if base % PAGE_BYTES or nbytes % PAGE_BYTES or nbytes < PAGE_BYTES:
            raise ValueError(f"{what} [{base:#x}, +{nbytes:#x}) must be whole {PAGE_BYTES}-byte pages")
        first = base if base else PAGE_BYTES      # physical address 0 is never handed out
        self.base, self.nbytes, self.what = base, nbytes, what
        self._starts: list[int] = []              # sorted starts of live allocations
        self._sizes: dict[int, int] = {}          # start -> requested size in bytes
        self._free: list[tuple[int, int]] = [(first, base + nbytes - first)]  # sorted (start, size)
        self._table: np.ndarray | None = None     # allocation_table(), until the next alloc or free

    def alloc(self, nbytes: int) -> int:
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise DeviceMemoryError(f"cannot allocate {nbytes} bytes of {self.what}")
        span = _pages(nbytes)
        for k, (start, size) in enumerate(self._free):
            if size >= span:
                if size == span:
                    del self._free[k]
                else:
                    self._free[k] = (start + span, size - span)
                bisect.insort(self._starts, start)
                self._sizes[start] = nbytes
                self._table = None
                return start
        largest = max((s for _, s in self._free), default=0)
        raise DeviceMemoryError(f"out of {self.what}: cannot allocate {nbytes} bytes "
                                f"(largest free run {largest} bytes of {self.nbytes})")

    def free(self, phys: int) -> int:
        """Free an allocation; returns the number of bytes (whole pages) it spanned."""
        phys = int(phys)
        if phys not in self._sizes:
            raise DeviceMemoryError(f"free of {phys:#x}, which is not the start of a device allocation")
        span = _pages(self._sizes.pop(phys))
        self._starts.remove(phys)
        self._table = None
        bisect.insort(self._free, (phys, span))
        merged: list[tuple[int, int]] = []
        for start, size in self._free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((start, size))
        self._free = merged
        return span

    def allocations(self) -> list[tuple[int, int]]:
        """(start, requested bytes) of every live allocation, by address."""
        return [(s, self._sizes[s]) for s in self._starts]

    def allocation_table(self) -> np.ndarray:
        """The live allocations as a (2, n) int64 array: starts by address, then their requested bytes. Kept
        until the next alloc or free (the devices check every stream against it); do not modify it."""
        if self._table is None:
            t = np.array([self._starts, [self._sizes[s] for s in self._starts]], dtype=np.int64).reshape(2, -1)
            t.flags.writeable = False
            self._table = t
        return self._table

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
