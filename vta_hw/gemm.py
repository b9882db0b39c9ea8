"""The GEMM array: BATCH x BLOCK_OUT dot products of length BLOCK_IN per cycle, pipelined.

Two int8 products share one multiplier: for output lanes n0 = 2j and n1 = 2j+1 and input x,
``P = x * ((w1 << 16) + w0)`` (a 25x8-bit signed multiply, one DSP48) holds ``w1*x*2^16 + w0*x``.
Since ``|w0*x| <= 2^14`` the low product is ``sext(P[15:0])`` and the high one is
``(P >> 16) + P[15]`` (the borrow taken by a negative low half). The default 1x16x16 array thus
needs 128 multipliers instead of 256 (xc7z020 has 220 DSP48E1).

The packing pays where a DSP is one wide multiplier (DSP48: 25x18). A Cyclone V variable-precision
DSP block is one 27x27, two 18x19 or three 9x9 multipliers: the 25x8 packed product takes a whole
block for two products, plain 8x8 products fit three to a block. A platform whose
``vta_pack_int8_products`` is false (``boards.cyclonev``) gets one plain product per multiplier;
``packed`` overrides the platform. Both have the same latency and results.

Latency: operands presented in cycle t give ``dot`` in cycle t + LATENCY.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

PACK_SHIFT = 16


def _tree(m: Module, terms: list, width: int, register_every: int, name: str) -> tuple:
    """Balanced adder tree; inserts a register stage after every ``register_every`` levels.
    Returns (result, number of register stages inserted)."""
    level = 0
    stages = 0
    while len(terms) > 1:
        nxt = []
        for i in range(0, len(terms), 2):
            if i + 1 < len(terms):
                nxt.append(terms[i] + terms[i + 1])
            else:
                nxt.append(terms[i])
        level += 1
        if register_every and level % register_every == 0 and len(nxt) > 1:
            regs = []
            for k, t in enumerate(nxt):
                r = Signal(signed(width), name=f"{name}_l{level}_{k}")
                m.d.sync += r.eq(t)
                regs.append(r)
            nxt = regs
            stages += 1
        terms = nxt
    return terms[0], stages


class DotArray(wiring.Component):
    #: cycles from ``inp``/``wgt`` to ``dot``
    LATENCY = 4

    def __init__(self, batch: int, block_in: int, block_out: int, inp_bits: int = 8, wgt_bits: int = 8,
                 packed: bool | None = None):
        assert inp_bits == 8 and wgt_bits == 8, "the packed multiplier is written for int8 operands"
        assert block_out % 2 == 0
        self.batch, self.block_in, self.block_out = batch, block_in, block_out
        self.packed = packed
        self.sum_bits = 2 * 8 + block_in.bit_length() + 1
        super().__init__({
            "inp": In(batch * block_in * 8),
            "wgt": In(block_out * block_in * 8),
            "dot": Out(signed(self.sum_bits)).array(batch * block_out),
        })

    def elaborate(self, platform):
        packed = self.packed if self.packed is not None else getattr(platform, "vta_pack_int8_products", True)
        if not packed:
            return self._elaborate_plain()
        m = Module()
        bt, bi, bo = self.batch, self.block_in, self.block_out
        sw = self.sum_bits
        # stage 0: operand registers (x and the packed weight pair)
        x = [[Signal(signed(8), name=f"x_{b}_{k}") for k in range(bi)] for b in range(bt)]
        packed = [[Signal(signed(25), name=f"wp_{j}_{k}") for k in range(bi)] for j in range(bo // 2)]
        for b in range(bt):
            for k in range(bi):
                lane = b * bi + k
                m.d.sync += x[b][k].eq(self.inp[8 * lane:8 * lane + 8].as_signed())
        for j in range(bo // 2):
            for k in range(bi):
                w0 = self.wgt[8 * ((2 * j) * bi + k):][:8].as_signed()
                w1 = self.wgt[8 * ((2 * j + 1) * bi + k):][:8].as_signed()
                m.d.sync += packed[j][k].eq((w1 << PACK_SHIFT) + w0)
        # stage 1: packed products (one multiplier each); stage 2: split and sum
        for b in range(bt):
            for j in range(bo // 2):
                lo_terms, hi_terms = [], []
                for k in range(bi):
                    p = Signal(signed(34), name=f"p_{b}_{j}_{k}")
                    m.d.sync += p.eq(packed[j][k] * x[b][k])
                    lo = Signal(signed(17), name=f"lo_{b}_{j}_{k}")
                    hi = Signal(signed(19), name=f"hi_{b}_{j}_{k}")
                    m.d.comb += [lo.eq(p[:PACK_SHIFT].as_signed()), hi.eq((p >> PACK_SHIFT) + p[PACK_SHIFT - 1])]
                    lo_terms.append(lo)
                    hi_terms.append(hi)
                for n, terms in ((2 * j, lo_terms), (2 * j + 1, hi_terms)):
                    s, stages = _tree(m, terms, sw, 2, f"t_{b}_{n}")
                    out = Signal(signed(sw), name=f"dot_{b}_{n}")
                    # pad to a fixed latency: stage 2 + 3 registers after the multiply in total
                    chain = s
                    for k in range(2 - stages):
                        r = Signal(signed(sw), name=f"dpad_{b}_{n}_{k}")
                        m.d.sync += r.eq(chain)
                        chain = r
                    m.d.comb += out.eq(chain)
                    m.d.comb += self.dot[b * bo + n].eq(out)
        return m

    def _elaborate_plain(self) -> Module:
        """One 8x8 product per multiplier (a 9x9 DSP mode), the same stages as the packed array."""
        m = Module()
        bt, bi, bo = self.batch, self.block_in, self.block_out
        x = [[Signal(signed(8), name=f"x_{b}_{k}") for k in range(bi)] for b in range(bt)]
        w = [[Signal(signed(8), name=f"w_{n}_{k}") for k in range(bi)] for n in range(bo)]
        for b in range(bt):
            for k in range(bi):
                m.d.sync += x[b][k].eq(self.inp[8 * (b * bi + k):][:8].as_signed())
        for n in range(bo):
            for k in range(bi):
                m.d.sync += w[n][k].eq(self.wgt[8 * (n * bi + k):][:8].as_signed())
        for b in range(bt):
            for n in range(bo):
                terms = []
                for k in range(bi):
                    p = Signal(signed(16), name=f"p_{b}_{n}_{k}")
                    m.d.sync += p.eq(w[n][k] * x[b][k])
                    terms.append(p)
                s, stages = _tree(m, terms, self.sum_bits, 2, f"t_{b}_{n}")
                for k in range(2 - stages):          # the packed array's latency
                    r = Signal(signed(self.sum_bits), name=f"dpad_{b}_{n}_{k}")
                    m.d.sync += r.eq(s)
                    s = r
                m.d.comb += self.dot[b * bo + n].eq(s)
        return m
