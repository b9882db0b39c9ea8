"""A dependency-token queue: tokens carry no data, so the queue is a counting semaphore.

``push`` and ``pop`` are one-cycle strobes (both in one cycle leave the count unchanged); the
consumer pops only while ``avail``. A push when the count is at its maximum sets the sticky
``overflow`` instead of losing the token (the core reports TOKEN_OVERFLOW). With the default
16-bit counter a run would need 65,535 unconsumed tokens in one queue to get there.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class TokenQueue(wiring.Component):
    def __init__(self, count_bits: int = 16):
        self.count_bits = count_bits
        super().__init__({
            "push": In(1),
            "pop": In(1),
            "avail": Out(1),
            "count": Out(count_bits),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        full = self.count == (1 << self.count_bits) - 1
        m.d.comb += self.avail.eq(self.count != 0)
        with m.If(self.push & ~self.pop):
            with m.If(full):
                m.d.sync += self.overflow.eq(1)
            with m.Else():
                m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(self.pop & ~self.push & self.avail):
            m.d.sync += self.count.eq(self.count - 1)
        return m
