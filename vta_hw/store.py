"""Store: OUT SRAM -> DRAM rows (spec 2.11) from the store command queue.

``DRAM_out[dram_base + r*x_stride + c] = OUT[sram_base + r*x_size + c]``. OUT elements are read
one per cycle (each arrives ``READ_LATENCY`` cycles later) into a small prefetch FIFO that feeds
the ``DmaWriter``. The instruction retires
(and pushes s2g) once every write response has come back. Dependency tokens: pop_prev waits on
g2s, push_prev gives s2g. A store with x_size = 0 only does its token work.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec.regmap import DmaClient, ErrorCode

from .axi import WriteClientSignature
from .cmdproc import drive_status, latch_error, module_status_members, sequence_commands
from .dma import WIDE_ADDR_BITS, DmaWriter, _log2
from .layouts import INDEX_BITS
from .sram import READ_LATENCY, SramReadSignature


class Store(wiring.Component):
    PREFETCH = 3 + READ_LATENCY

    def __init__(self, layouts, data_bits: int):
        cfg = layouts.cfg
        self.cfg = cfg
        self.layouts = layouts
        self.data_bits = data_bits
        self.addr_bits = (cfg.ACC_BUFF_DEPTH - 1).bit_length() or 1
        members = {
            "cmd": In(stream.Signature(layouts.cmd)),
            "g2s_avail": In(1), "g2s_pop": Out(1), "s2g_push": Out(1),
            "out_rd": Out(SramReadSignature(self.addr_bits, cfg.OUT_ELEM_BITS)),
            "axi": Out(WriteClientSignature(data_bits)),
            "halt": In(1),
            "out_elem": Out(1),
        }
        members.update(module_status_members())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        ew = cfg.OUT_ELEM_BITS
        m.submodules.writer = writer = DmaWriter(ew, self.data_bits, max_burst_beats=self.layouts.max_burst_beats)
        m.submodules.pf = pf = fifo.SyncFIFOBuffered(width=ew, depth=self.PREFETCH)
        wiring.connect(m, wiring.flipped(self.axi), writer.axi)
        halt = self.halt
        m.d.comb += writer.halt.eq(halt)
        insn = Signal(128)
        index = Signal(INDEX_BITS)
        mem = data.View(lay.mem, insn)
        log_e = _log2(ew // 8)

        # row commands
        rows_left = Signal(16)
        row_elem = Signal(WIDE_ADDR_BITS)
        m.d.comb += [writer.cmd.payload.addr.eq(row_elem << log_e), writer.cmd.payload.count.eq(mem.x_size),
                     writer.cmd.valid.eq((rows_left != 0) & ~halt)]
        with m.If(writer.cmd.valid & writer.cmd.ready):
            m.d.sync += [rows_left.eq(rows_left - 1), row_elem.eq(row_elem + mem.x_stride)]

        # SRAM reads into the prefetch FIFO
        rd_active = Signal()
        rd_addr = Signal(self.addr_bits)
        r = Signal(16)
        c = Signal(16)
        pending = [Signal(name=f"rd_pending_{k}") for k in range(READ_LATENCY)]   # reads on their way
        m.d.comb += self.out_rd.addr.eq(rd_addr)
        issue = Signal()
        m.d.sync += [pending[0].eq(issue)] + [pending[k].eq(pending[k - 1]) for k in range(1, READ_LATENCY)]
        in_flight = sum(pending)
        with m.If(rd_active & (pf.level + in_flight < self.PREFETCH) & ~halt):
            m.d.comb += [issue.eq(1), self.out_elem.eq(1)]
            m.d.sync += rd_addr.eq(rd_addr + 1)
            with m.If(c == mem.x_size - 1):
                m.d.sync += [c.eq(0), r.eq(r + 1)]
                with m.If(r == mem.y_size - 1):
                    m.d.sync += rd_active.eq(0)
            with m.Else():
                m.d.sync += c.eq(c + 1)
        m.d.comb += [pf.w_en.eq(pending[-1]), pf.w_data.eq(self.out_rd.data),
                     writer.inp.valid.eq(pf.r_rdy), writer.inp.payload.eq(pf.r_data), pf.r_en.eq(writer.inp.ready)]
        with m.If(halt):
            m.d.sync += [rd_active.eq(0), rows_left.eq(0)]

        waiting = mem.pop_prev_dep & ~self.g2s_avail

        def start():
            m.d.sync += [rows_left.eq(mem.y_size), row_elem.eq(mem.dram_base), rd_active.eq(1),
                         rd_addr.eq(mem.sram_base), r.eq(0), c.eq(0)]

        idle, stalled, _ = sequence_commands(
            m, self, insn=insn, index=index, halt=halt, waiting=waiting, skip=(mem.x_size == 0) | (mem.y_size == 0),
            done=~rd_active & (in_flight == 0) & ~pf.r_rdy & (rows_left == 0) & writer.idle, start=start,
            pop=[self.g2s_pop.eq(mem.pop_prev_dep)], push=[self.s2g_push.eq(mem.push_prev_dep)])
        drive_status(m, self, idle=idle, waiting=stalled, index=index, dma_idle=writer.idle, halt=halt)
        with m.If(~self.error & writer.error):
            latch_error(m, self, ErrorCode.DRAM_ACCESS, DmaClient.OUT, writer.error_addr, index)
        return m
