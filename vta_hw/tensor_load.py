"""2-D tensor load with zero padding: DRAM rows -> a dense block of SRAM elements.

For a memory instruction (spec 2.11): SRAM[sram_base + r*P + c] for r < y_pad_0+y_size+y_pad_1
and c < P = x_pad_0+x_size+x_pad_1 is DRAM element (dram_base + (r-y_pad_0)*x_stride + (c-x_pad_0))
inside the data window and zero in the pads. Rows are requested from the ``DmaReader`` ahead of
the SRAM writer, which writes one element per cycle (pads do not wait for the bus).
Used for INP and WGT (load module) and for UOP and ACC (compute module). With ``lane_bits`` (ACC_8BIT
loads, ISA extension ``acc_8bit``) each byte of a DRAM element is sign-extended into a lane of that
many bits of the SRAM element.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDR_BITS, ReadClientSignature
from .dma import COUNT_BITS, WIDE_ADDR_BITS, DmaReader, _log2
from .sram import SramWriteSignature


class TensorLoad(wiring.Component):
    def __init__(self, layouts, elem_bits: int, data_bits: int, sram_addr_bits: int, lane_bits: int | None = None):
        self.layouts = layouts
        self.elem_bits = elem_bits        # a DRAM element
        self.data_bits = data_bits
        self.sram_addr_bits = sram_addr_bits
        self.lane_bits = lane_bits        # None: SRAM elements are DRAM elements; else bytes widen to lanes
        sram_bits = elem_bits if lane_bits is None else elem_bits // 8 * lane_bits
        super().__init__({
            "start": In(1),
            "insn": In(layouts.mem),
            "busy": Out(1),
            "sram": Out(SramWriteSignature(sram_addr_bits, sram_bits)),
            "axi": Out(ReadClientSignature(data_bits)),
            "halt": In(1),
            "dma_idle": Out(1),
            "error": Out(1),
            "error_addr": Out(ADDR_BITS),
            "data_elem": Out(1),   # one strobe per data (non-pad) element written
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = DmaReader(self.elem_bits, self.data_bits,
                                                 max_burst_beats=self.layouts.max_burst_beats)
        wiring.connect(m, wiring.flipped(self.axi), reader.axi)
        m.d.comb += [reader.halt.eq(self.halt), self.dma_idle.eq(reader.idle), self.error.eq(reader.error),
                     self.error_addr.eq(reader.error_addr)]
        log_e = _log2(self.elem_bits // 8)
        insn = self.insn

        # ---- row issuer
        rows_left = Signal(16)
        row_elem = Signal(WIDE_ADDR_BITS)
        stride = Signal(16)
        x_size = Signal(16)
        m.d.comb += [reader.cmd.payload.addr.eq(row_elem << log_e), reader.cmd.payload.count.eq(x_size),
                     reader.cmd.valid.eq((rows_left != 0) & ~self.halt)]
        with m.If(reader.cmd.valid & reader.cmd.ready):
            m.d.sync += [rows_left.eq(rows_left - 1), row_elem.eq(row_elem + stride)]

        # ---- SRAM writer
        active = Signal()
        r = Signal(COUNT_BITS + 1)
        c = Signal(COUNT_BITS + 1)
        addr = Signal(self.sram_addr_bits)
        y_lo, y_hi, rows = (Signal(COUNT_BITS + 1, name=n) for n in ("y_lo", "y_hi", "rows"))
        x_lo, x_hi, cols = (Signal(COUNT_BITS + 1, name=n) for n in ("x_lo", "x_hi", "cols"))
        in_data = Signal()
        m.d.comb += in_data.eq((r >= y_lo) & (r < y_hi) & (c >= x_lo) & (c < x_hi))
        step = Signal()
        m.d.comb += [self.sram.addr.eq(addr), self.sram.data.eq(0)]
        elem = reader.out.payload
        if self.lane_bits is not None:   # sign-extend every byte into its lane
            lanes = [elem.word_select(k, 8).as_signed() for k in range(self.elem_bits // 8)]
            elem = Cat(*[Cat(x, x[7].replicate(self.lane_bits - 8)) for x in lanes])
        with m.If(active & ~self.halt):
            with m.If(in_data):
                m.d.comb += [reader.out.ready.eq(1), self.sram.data.eq(elem),
                             self.sram.en.eq(reader.out.valid), step.eq(reader.out.valid),
                             self.data_elem.eq(reader.out.valid)]
            with m.Else():
                m.d.comb += [self.sram.en.eq(1), step.eq(1)]
        with m.If(step):
            m.d.sync += addr.eq(addr + 1)
            with m.If(c == cols - 1):
                m.d.sync += [c.eq(0), r.eq(r + 1)]
                with m.If(r == rows - 1):
                    m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += c.eq(c + 1)

        with m.If(self.start):
            nrows = insn.y_pad_0 + insn.y_size + insn.y_pad_1
            m.d.sync += [
                rows_left.eq(insn.y_size), row_elem.eq(insn.dram_base), stride.eq(insn.x_stride),
                x_size.eq(insn.x_size),
                active.eq(nrows != 0), r.eq(0), c.eq(0), addr.eq(insn.sram_base),
                y_lo.eq(insn.y_pad_0), y_hi.eq(insn.y_pad_0 + insn.y_size), rows.eq(nrows),
                x_lo.eq(insn.x_pad_0), x_hi.eq(insn.x_pad_0 + insn.x_size),
                cols.eq(insn.x_pad_0 + insn.x_size + insn.x_pad_1),
            ]
        with m.If(self.halt):
            m.d.sync += [active.eq(0), rows_left.eq(0)]
        m.d.comb += self.busy.eq(active | (rows_left != 0))
        return m
