"""The GEMM array: BATCH x BLOCK_OUT dot products of length BLOCK_IN per cycle, pipelined.

Two int8 products share one multiplier: for output lanes n0 = 2j and n1 = 2j+1 and input x,
``P = x * ((w1 << 16) + w0) + 2^15`` (a 25x8-bit signed multiply and a constant add: one DSP48
with its pre-adder, multiplier and post-adder) holds ``w1*x*2^16 + (w0*x + 2^15)``. Since
``|w0*x| <= 2^14`` the low half ``w0*x + 2^15`` lies in [0, 2^16): the high product is
``P >> 16`` and the low one is ``P[15:0] - 2^15`` (bit 15 flipped, sign-extended), with no
borrow to correct. The default 1x16x16 array thus needs 128 multipliers instead of 256 (xc7z020
has 220 DSP48E1).

Pipeline (timing, see ``vta_hw.timing``): operand registers (the DSP's input registers), the
product (its M register), P (its P register), then a balanced adder tree with a register after
every ``ADDS_PER_STAGE`` levels and at its output. Operands presented in cycle t give ``dot`` in
cycle t + ``latency``; the caller budgets ``latency`` cycles and the array checks, when it is
built, that its tree fits them.

The tree adds each product plus 2^15, an unsigned 16-bit number (the low one is ``P[15:0]`` as it
is, the high one ``P[31:16]`` with bit 15 flipped), so no level sign-extends; the sum of
BLOCK_IN = 2^n such terms is the dot product + 2^(15+n), which flipping the top bit of the
(16+n)-bit sum removes. The datapath registers have no reset: the caller only takes ``dot`` for a
slot it issued, latency cycles before. They also load only when the slot at their input is one:
``valid`` (the caller's "this slot's dot product is taken"), delayed stage by stage along the
pipeline, is each stage's clock enable (the DSP48's CE pins; fabric flip-flops have one too), so an
idle array holds its registers, and Verilator, which would otherwise compute every product and sum
in every cycle, skips them (tsim simulates the Verilog in which a register with an enable is
written ``if (en) q <= d``: ``vta_hw.verilog.convert_with_clock_enables``). These choices keep the
results and the cycles.

The packing pays where a DSP is one wide multiplier (DSP48: 25x18). A Cyclone V variable-precision
DSP block is one 27x27, two 18x19 or three 9x9 multipliers: the 25x8 packed product takes a whole
block for two products, plain 8x8 products fit three to a block. A platform whose
``vta_pack_int8_products`` is false (``boards.cyclonev``) gets one plain product per multiplier;
``packed`` overrides the platform. Both have the same latency and results.
"""

from __future__ import annotations

import math

from amaranth.hdl import Cat, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

PACK_SHIFT = 16
PACK_BIAS = 1 << (PACK_SHIFT - 1)
#: adder-tree levels between two registers (two ~20-bit carry chains in a row)
ADDS_PER_STAGE = 2
#: registers before the tree: operands, product (M), P
PRODUCT_STAGES = 3


class DotArrayLatencyError(ValueError):
    """The adder tree needs more register stages than the latency the caller budgets for it."""


def tree_stages(block_in: int, adds_per_stage: int = ADDS_PER_STAGE) -> int:
    """Register stages of the adder tree over ``block_in`` terms (the last one at its output)."""
    return max(1, math.ceil(math.ceil(math.log2(block_in)) / adds_per_stage)) if block_in > 1 else 1


def _tree(m: Module, terms: list, adds_per_stage: int, name: str, enables: list) -> tuple:
    """Balanced adder tree over unsigned ``terms`` with a register after every ``adds_per_stage``
    levels and at its output, register stage k loading when ``enables[k]``; each level is one bit
    wider than the one below it. Returns (registered sum, number of register stages)."""
    stages = level = 0
    while True:
        if len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
            level += 1
        if len(terms) == 1 or level % adds_per_stage == 0:
            regs = [Signal(len(t), name=f"{name}_s{stages}_{k}", reset_less=True) for k, t in enumerate(terms)]
            with m.If(enables[stages]):
                m.d.sync += [r.eq(t) for r, t in zip(regs, terms)]
            terms, stages = regs, stages + 1
        if len(terms) == 1:
            return terms[0], stages


class DotArray(wiring.Component):
    def __init__(self, batch: int, block_in: int, block_out: int, inp_bits: int = 8, wgt_bits: int = 8,
                 latency: int | None = None, adds_per_stage: int = ADDS_PER_STAGE, packed: bool | None = None):
        assert inp_bits == 8 and wgt_bits == 8, "the packed multiplier is written for int8 operands"
        assert block_out % 2 == 0
        if block_in & (block_in - 1):
            raise ValueError(f"DotArray: block_in={block_in} must be a power of two (the adder tree's bias is one bit)")
        self.batch, self.block_in, self.block_out = batch, block_in, block_out
        self.adds_per_stage = adds_per_stage
        self.packed = packed
        self.sum_bits = 2 * 8 + block_in.bit_length() + 1
        #: cycles from ``inp``/``wgt`` to ``dot``
        self.latency = self.latency_for(block_in, adds_per_stage) if latency is None else latency
        super().__init__({
            "inp": In(batch * block_in * 8),
            "wgt": In(block_out * block_in * 8),
            "dot": Out(signed(self.sum_bits)).array(batch * block_out),
            # the caller takes ``dot`` for this slot (``latency`` cycles on); unconnected: every slot
            "valid": In(1, init=1),
        })

    @staticmethod
    def latency_for(block_in: int, adds_per_stage: int = ADDS_PER_STAGE) -> int:
        return PRODUCT_STAGES + tree_stages(block_in, adds_per_stage)

    def elaborate(self, platform):
        packed = self.packed if self.packed is not None else getattr(platform, "vta_pack_int8_products", True)
        if not packed:
            return self._elaborate_plain()
        m = Module()
        en = self._enables(m)
        bt, bi, bo = self.batch, self.block_in, self.block_out
        # operand registers (x and the packed weight pair): the DSP's input registers
        x = [[Signal(signed(8), name=f"x_{b}_{k}", reset_less=True) for k in range(bi)] for b in range(bt)]
        packed = [[Signal(signed(25), name=f"wp_{j}_{k}", reset_less=True) for k in range(bi)] for j in range(bo // 2)]
        with m.If(en[0]):
            for b in range(bt):
                for k in range(bi):
                    lane = b * bi + k
                    m.d.sync += x[b][k].eq(self.inp[8 * lane:8 * lane + 8].as_signed())
            for j in range(bo // 2):
                for k in range(bi):
                    w0 = self.wgt[8 * ((2 * j) * bi + k):][:8].as_signed()
                    w1 = self.wgt[8 * ((2 * j + 1) * bi + k):][:8].as_signed()
                    # w1 << 16 written as a concatenation: the shift becomes a sign extension by one bit per
                    # wire in the Verilog, which Verilator evaluates bit by bit (the value is the same)
                    m.d.sync += packed[j][k].eq(Cat(Const(0, PACK_SHIFT), w1).as_signed() + w0)
        for b in range(bt):
            for j in range(bo // 2):
                lo_terms, hi_terms = [], []
                for k in range(bi):
                    # the DSP's M and P registers; only P's low 32 bits are used, so both keep those
                    prod = Signal(2 * PACK_SHIFT, name=f"m_{b}_{j}_{k}", reset_less=True)
                    p = Signal(2 * PACK_SHIFT, name=f"p_{b}_{j}_{k}", reset_less=True)
                    with m.If(en[1]):
                        m.d.sync += prod.eq(packed[j][k] * x[b][k])
                    with m.If(en[2]):
                        m.d.sync += p.eq(prod + PACK_BIAS)
                    # both products plus 2^15, unsigned: w0*x + 2^15 is P's low half as it is, and
                    # w1*x (|w1*x| <= 2^14) + 2^15 is P[31:16] with its top bit flipped
                    lo_terms.append(p[:PACK_SHIFT])
                    hi_terms.append(p[PACK_SHIFT:] ^ PACK_BIAS)
                for n, terms in ((2 * j, lo_terms), (2 * j + 1, hi_terms)):
                    m.d.comb += self.dot[b * bo + n].eq(self._sum(m, terms, f"{b}_{n}", en))
        return m

    def _enables(self, m: Module) -> list:
        """``en[k]``: register stage k (0: the operand registers) loads, because the slot at its input
        is valid: ``valid`` delayed k cycles. An idle array thus holds its registers (the DSP's and the
        fabric registers' clock enables, free in hardware) and Verilator skips their arithmetic."""
        en = [self.valid]
        # (as many as the tree needs, should the latency be too short for it: _sum then says so)
        for k in range(1, max(self.latency, self.latency_for(self.block_in, self.adds_per_stage))):
            v = Signal(name=f"valid_{k}")
            m.d.sync += v.eq(en[-1])
            en.append(v)
        return en

    def _sum(self, m: Module, terms: list, name: str, en: list):
        """The adder tree over one dot product's terms (each product + 2^15, 16 bits unsigned), padded
        to the latency the caller budgets. The tree is unsigned, so no level sign-extends (cheaper in
        logic and in a simulator); the sum of BLOCK_IN = 2^n biased terms is the dot product +
        2^(15+n), which flipping the top bit of the (16+n)-bit sum removes."""
        s, stages = _tree(m, terms, self.adds_per_stage, f"t_{name}", en[PRODUCT_STAGES:])
        s = (s ^ (1 << (len(s) - 1))).as_signed()
        pad = self.latency - PRODUCT_STAGES - stages
        if pad < 0:
            raise DotArrayLatencyError(
                f"DotArray({self.batch}, {self.block_in}, {self.block_out}): the adder tree over {self.block_in} "
                f"terms needs {stages} register stages at {self.adds_per_stage} adds per stage, but the latency "
                f"of {self.latency} cycles leaves room for {self.latency - PRODUCT_STAGES}")
        for k in range(pad):
            r = Signal(signed(self.sum_bits), name=f"dpad_{name}_{k}", reset_less=True)
            with m.If(en[PRODUCT_STAGES + stages + k]):
                m.d.sync += r.eq(s)
            s = r
        return s

    def _elaborate_plain(self) -> Module:
        """One 8x8 product per multiplier (a 9x9 DSP mode), the same stages as the packed array."""
        m = Module()
        en = self._enables(m)
        bt, bi, bo = self.batch, self.block_in, self.block_out
        x = [[Signal(signed(8), name=f"x_{b}_{k}", reset_less=True) for k in range(bi)] for b in range(bt)]
        w = [[Signal(signed(8), name=f"w_{n}_{k}", reset_less=True) for k in range(bi)] for n in range(bo)]
        with m.If(en[0]):
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
                    prod = Signal(signed(16), name=f"m_{b}_{n}_{k}", reset_less=True)   # the multiplier's output
                    p = Signal(signed(16), name=f"p_{b}_{n}_{k}", reset_less=True)      # its second (P) register
                    with m.If(en[1]):
                        m.d.sync += prod.eq(w[n][k] * x[b][k])
                    with m.If(en[2]):
                        m.d.sync += p.eq(prod)
                    terms.append(p.as_unsigned() ^ PACK_BIAS)     # the product + 2^15 (|w*x| <= 2^14)
                m.d.comb += self.dot[b * bo + n].eq(self._sum(m, terms, f"{b}_{n}", en))
        return m
