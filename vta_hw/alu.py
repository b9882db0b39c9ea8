"""The vector ALU: one operation on every accumulator lane (spec 2.9, README "Semantics").

MIN, MAX and ADD are signed 32-bit (ADD wraps). SHR shifts by the low LOG_ACC_WIDTH+1 bits of the
second operand read as a signed number: 0..31 shifts right (arithmetic), -32..-1 shifts left by
the negated amount (a left shift by 32 gives 0). MUL (ISA extension ``alu_mul``) is ``mul_lane``:
tensor_compute gives it a pipeline stage of its own (the product register); without the extension
fetch refuses it.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import AluOp
from vta_hw.spec.isa import MUL_OPERAND_BITS


def alu_lane(m: Module, op, a, b, acc_bits: int = 32, shift_bits: int = 6, name: str = "lane"):
    """Combinational result of ``op`` on signed lanes ``a``, ``b`` (both ``acc_bits`` wide)."""
    res = Signal(signed(acc_bits), name=f"{name}_res")
    amt = Signal(signed(shift_bits), name=f"{name}_amt")
    m.d.comb += amt.eq(b[:shift_bits].as_signed())
    right = a >> amt.as_unsigned()[:shift_bits - 1]
    left = (a << (-amt).as_unsigned()[:shift_bits])[:acc_bits]
    with m.Switch(op):
        with m.Case(AluOp.MIN):
            m.d.comb += res.eq(Mux(a < b, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += res.eq(Mux(a > b, a, b))
        with m.Case(AluOp.ADD):
            m.d.comb += res.eq(a + b)
        with m.Default():
            m.d.comb += res.eq(Mux(amt < 0, left, right))
    return res


def mul_lane(a, b, operand_bits: int = MUL_OPERAND_BITS):
    """MUL: the low ``operand_bits`` of both lanes, signed, multiplied; an exact product (one DSP)."""
    return a[:operand_bits].as_signed() * b[:operand_bits].as_signed()


class AluLanes(wiring.Component):
    """Combinational ALU over ``lanes`` lanes (for unit tests and the compute pipeline)."""

    def __init__(self, lanes: int, acc_bits: int = 32):
        self.lanes = lanes
        self.acc_bits = acc_bits
        super().__init__({
            "op": In(3),
            "a": In(signed(acc_bits)).array(lanes),
            "b": In(signed(acc_bits)).array(lanes),
            "res": Out(signed(acc_bits)).array(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        for k in range(self.lanes):
            m.d.comb += self.res[k].eq(alu_lane(m, self.op, self.a[k], self.b[k], self.acc_bits,
                                                name=f"lane{k}"))
        return m
