"""Load: runs INP and WGT loads (2-D DMA with zero padding) from the load command queue.

Dependency tokens (spec 2.3): pop_next waits on g2l before the load, push_next gives l2g after
its last SRAM write. A load with x_size = 0 only does its token work.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import MemType
from vta_hw.spec.regmap import DmaClient, ErrorCode

from .axi import ReadClientSignature
from .cmdproc import drive_status, latch_error, module_status_members, sequence_commands
from .layouts import INDEX_BITS
from .sram import SramWriteSignature
from .tensor_load import TensorLoad


class Load(wiring.Component):
    def __init__(self, layouts, data_bits: int):
        cfg = layouts.cfg
        self.cfg = cfg
        self.layouts = layouts
        self.data_bits = data_bits
        self.inp_addr_bits = (cfg.INP_BUFF_DEPTH - 1).bit_length() or 1
        self.wgt_addr_bits = (cfg.WGT_BUFF_DEPTH - 1).bit_length() or 1
        members = {
            "cmd": In(stream.Signature(layouts.cmd)),
            "g2l_avail": In(1), "g2l_pop": Out(1), "l2g_push": Out(1),
            "inp_wr": Out(SramWriteSignature(self.inp_addr_bits, cfg.INP_ELEM_BITS)),
            "wgt_wr": Out(SramWriteSignature(self.wgt_addr_bits, cfg.WGT_ELEM_BITS)),
            "inp_axi": Out(ReadClientSignature(data_bits)),
            "wgt_axi": Out(ReadClientSignature(data_bits)),
            "halt": In(1),
            "inp_elem": Out(1), "wgt_elem": Out(1),
        }
        members.update(module_status_members())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        m.submodules.inp = inp = TensorLoad(lay, cfg.INP_ELEM_BITS, self.data_bits, self.inp_addr_bits)
        m.submodules.wgt = wgt = TensorLoad(lay, cfg.WGT_ELEM_BITS, self.data_bits, self.wgt_addr_bits)
        wiring.connect(m, wiring.flipped(self.inp_axi), inp.axi)
        wiring.connect(m, wiring.flipped(self.wgt_axi), wgt.axi)
        wiring.connect(m, wiring.flipped(self.inp_wr), inp.sram)
        wiring.connect(m, wiring.flipped(self.wgt_wr), wgt.sram)
        halt = self.halt
        insn = Signal(128)
        index = Signal(INDEX_BITS)
        mem = data.View(lay.mem, insn)
        m.d.comb += [inp.halt.eq(halt), wgt.halt.eq(halt), inp.insn.eq(insn), wgt.insn.eq(insn),
                     self.inp_elem.eq(inp.data_elem), self.wgt_elem.eq(wgt.data_elem)]
        waiting = mem.pop_next_dep & ~self.g2l_avail
        dma_idle = inp.dma_idle & wgt.dma_idle

        def start():
            m.d.comb += [inp.start.eq(mem.memory_type == MemType.INP), wgt.start.eq(mem.memory_type == MemType.WGT)]

        idle, stalled, _ = sequence_commands(
            m, self, insn=insn, index=index, halt=halt, waiting=waiting, skip=mem.x_size == 0,
            done=~inp.busy & ~wgt.busy, start=start,
            pop=[self.g2l_pop.eq(mem.pop_next_dep)], push=[self.l2g_push.eq(mem.push_next_dep)])
        drive_status(m, self, idle=idle, waiting=stalled, index=index, dma_idle=dma_idle, halt=halt)
        with m.If(~self.error & (inp.error | wgt.error)):
            latch_error(m, self, ErrorCode.DRAM_ACCESS, Mux(inp.error, DmaClient.INP, DmaClient.WGT),
                        Mux(inp.error, inp.error_addr, wgt.error_addr), index)
        return m
