"""Amaranth data layouts generated from the ISA field tables of ``vta_hw.spec`` (never hand-copied).

``insn_layout(fmt)`` turns a :class:`vta_hw.spec.Format` into a ``data.FlexibleLayout`` whose
fields sit at exactly the bit positions of the table, idle bits included, so a 128-bit
instruction word can be viewed as a memory, GEMM or ALU instruction.
"""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from vta_hw.spec import Config, Format
from vta_hw.spec.isa import INSN_BITS

from .axi import MAX_BURST_BEATS

#: Width of the instruction index carried with every command (INSN_COUNT is 32 bits).
INDEX_BITS = 32


def insn_layout(fmt: Format) -> data.FlexibleLayout:
    fields = {f.name: data.Field(signed(f.width) if f.signed else unsigned(f.width), f.lsb) for f in fmt}
    return data.FlexibleLayout(fmt.total_bits, fields)


class Layouts:
    """Every layout of one configuration."""

    def __init__(self, cfg: Config, max_burst_beats: int = MAX_BURST_BEATS):
        isa = cfg.isa
        self.cfg = cfg
        if not 1 <= max_burst_beats <= MAX_BURST_BEATS or max_burst_beats & (max_burst_beats - 1):
            raise ValueError(f"max_burst_beats={max_burst_beats} must be a power of two in 1..{MAX_BURST_BEATS}")
        #: Longest AXI burst the DMA engines issue (AXI4: 256; the Zynq-7000's AXI3 ports: 16).
        self.max_burst_beats = max_burst_beats
        self.mem = insn_layout(isa.mem)
        self.gemm = insn_layout(isa.gemm)
        self.alu = insn_layout(isa.alu)
        self.uop = insn_layout(isa.uop)
        #: A command-queue entry: the raw instruction and its index in the stream.
        self.cmd = data.StructLayout({"insn": unsigned(INSN_BITS), "index": unsigned(INDEX_BITS)})
        self.opcode_bits = isa.mem["opcode"].width
