"""Compute: runs UOP and ACC loads, GEMM, ALU and FINISH from the compute command queue.

It owns the UOP and ACC SRAMs, reads INP and WGT, and is the only writer of OUT. With the ISA
extension ``acc_8bit`` it also runs ACC_8BIT loads: a second ACC loader whose DRAM elements are
BATCH*BLOCK_OUT int8 values, sign-extended into the lanes, on the same AXI client as the ACC one.
Dependency tokens (spec 2.3): pop_prev waits on l2g, pop_next on s2g (before the instruction); push_prev
gives g2l, push_next gives g2s (after the instruction's last SRAM write). FINISH stops the module
(``finished``); the core then checks that the run is balanced.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import MemType, Opcode
from vta_hw.spec.regmap import DmaClient, ErrorCode

from .axi import ReadClientSignature
from .cmdproc import drive_status, latch_error, module_status_members, sequence_commands
from .layouts import INDEX_BITS
from .sram import Sram, SramReadSignature, SramWriteSignature
from .tensor_compute import TensorCompute
from .tensor_load import TensorLoad


class Compute(wiring.Component):
    def __init__(self, layouts, data_bits: int):
        cfg = layouts.cfg
        self.cfg = cfg
        self.layouts = layouts
        self.data_bits = data_bits
        ab = (cfg.ACC_BUFF_DEPTH - 1).bit_length() or 1
        members = {
            "cmd": In(stream.Signature(layouts.cmd)),
            "l2g_avail": In(1), "l2g_pop": Out(1),
            "s2g_avail": In(1), "s2g_pop": Out(1),
            "g2l_push": Out(1), "g2s_push": Out(1),
            "inp_rd": Out(SramReadSignature((cfg.INP_BUFF_DEPTH - 1).bit_length() or 1, cfg.INP_ELEM_BITS)),
            "wgt_rd": Out(SramReadSignature((cfg.WGT_BUFF_DEPTH - 1).bit_length() or 1, cfg.WGT_ELEM_BITS)),
            "out_wr": Out(SramWriteSignature(ab, cfg.OUT_ELEM_BITS)),
            "uop_axi": Out(ReadClientSignature(data_bits)),
            "acc_axi": Out(ReadClientSignature(data_bits)),
            "halt": In(1),
            "finished": Out(1),
            "uop_elem": Out(1), "acc_elem": Out(1), "acc8_elem": Out(1), "gemm_uop": Out(1), "alu_uop": Out(1),
            "gemm_active": Out(1), "alu_active": Out(1),
        }
        members.update(module_status_members())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        # with MUL the uop loop may hold the UOP read for a cycle
        m.submodules.uop_sram = uop_sram = Sram(cfg.UOP_BUFF_DEPTH, 32, "uop", read_enable=cfg.isa.has("alu_mul"))
        m.submodules.acc_sram = acc_sram = Sram(cfg.ACC_BUFF_DEPTH, cfg.ACC_ELEM_BITS, "acc")
        m.submodules.tc = tc = TensorCompute(lay)
        m.submodules.uop_load = uop_load = TensorLoad(lay, 32, self.data_bits, uop_sram.addr_bits)
        m.submodules.acc_load = acc_load = TensorLoad(lay, cfg.ACC_ELEM_BITS, self.data_bits, acc_sram.addr_bits)
        acc_loads = [acc_load]
        wiring.connect(m, wiring.flipped(self.uop_axi), uop_load.axi)
        acc8 = cfg.isa.has("acc_8bit")
        if acc8:
            m.submodules.acc8_load = acc8_load = TensorLoad(lay, cfg.OUT_ELEM_BITS, self.data_bits,
                                                            acc_sram.addr_bits, lane_bits=cfg.ACC_WIDTH)
            acc_loads.append(acc8_load)
            use8 = Signal()   # which loader has the ACC client: set as a load starts (the other is idle then)
            share_read_client(m, self.acc_axi, acc_load.axi, acc8_load.axi, use8)
        else:
            wiring.connect(m, wiring.flipped(self.acc_axi), acc_load.axi)
        wiring.connect(m, wiring.flipped(self.inp_rd), tc.inp_rd)
        wiring.connect(m, wiring.flipped(self.wgt_rd), tc.wgt_rd)
        wiring.connect(m, wiring.flipped(self.out_wr), tc.out_wr)
        wiring.connect(m, tc.uop_rd, uop_sram.rd)
        wiring.connect(m, tc.acc_rd, acc_sram.rd)
        wiring.connect(m, uop_load.sram, uop_sram.wr)
        # ACC write port: an ACC load or the uop loop (never two at once)
        for k, ld in enumerate(acc_loads):
            with (m.If(ld.busy) if k == 0 else m.Elif(ld.busy)):
                m.d.comb += [acc_sram.wr.addr.eq(ld.sram.addr), acc_sram.wr.data.eq(ld.sram.data),
                             acc_sram.wr.en.eq(ld.sram.en)]
        with m.Else():
            m.d.comb += [acc_sram.wr.addr.eq(tc.acc_wr.addr), acc_sram.wr.data.eq(tc.acc_wr.data),
                         acc_sram.wr.en.eq(tc.acc_wr.en)]

        halt = self.halt
        for x in (tc, uop_load, *acc_loads):
            m.d.comb += x.halt.eq(halt)

        insn = Signal(128)
        index = Signal(INDEX_BITS)
        mem = data.View(lay.mem, insn)
        m.d.comb += [uop_load.insn.eq(insn), tc.insn.eq(insn)] + [ld.insn.eq(insn) for ld in acc_loads]
        op = mem.opcode
        need_l2g = mem.pop_prev_dep & ~self.l2g_avail
        need_s2g = mem.pop_next_dep & ~self.s2g_avail
        waiting = need_l2g | need_s2g
        dma_idle = uop_load.dma_idle
        loads_busy = uop_load.busy
        for ld in acc_loads:
            dma_idle &= ld.dma_idle
            loads_busy |= ld.busy

        def start():
            with m.If(op == Opcode.LOAD):
                m.d.comb += uop_load.start.eq(mem.memory_type == MemType.UOP)
                if acc8:
                    is8 = mem.memory_type == MemType.ACC_8BIT
                    m.d.comb += [acc_load.start.eq(mem.memory_type == MemType.ACC), acc8_load.start.eq(is8)]
                    with m.If(mem.memory_type != MemType.UOP):
                        m.d.sync += use8.eq(is8)
                else:
                    m.d.comb += acc_load.start.eq(mem.memory_type != MemType.UOP)
            with m.Else():
                m.d.comb += tc.start.eq(1)

        # loads of x_size 0 and FINISH only do their token work
        works = Mux(op == Opcode.LOAD, mem.x_size != 0, (op == Opcode.GEMM) | (op == Opcode.ALU))
        idle, stalled, retiring = sequence_commands(
            m, self, insn=insn, index=index, halt=halt, waiting=waiting, skip=~works,
            done=~loads_busy & ~tc.busy, start=start, accept=~self.finished,
            pop=[self.l2g_pop.eq(mem.pop_prev_dep), self.s2g_pop.eq(mem.pop_next_dep)],
            push=[self.g2l_push.eq(mem.push_prev_dep), self.g2s_push.eq(mem.push_next_dep)])
        with m.If(retiring & (op == Opcode.FINISH)):
            m.d.sync += self.finished.eq(1)
        drive_status(m, self, idle=idle, waiting=stalled, index=index, dma_idle=dma_idle,
                     halt=halt, done=self.finished, engines_idle=~tc.busy)
        m.d.comb += [
            self.uop_elem.eq(uop_load.data_elem), self.acc_elem.eq(acc_load.data_elem),
            self.acc8_elem.eq(acc8_load.data_elem if acc8 else 0),
            self.gemm_uop.eq(tc.gemm_uop), self.alu_uop.eq(tc.alu_uop),
            self.gemm_active.eq(tc.gemm_active), self.alu_active.eq(tc.alu_active),
        ]
        # errors (sticky until the next START resets the module)
        with m.If(~self.error):
            with m.If(tc.error):
                latch_error(m, self, ErrorCode.INDEX_RANGE, tc.error_operand, tc.error_value, index)
            with m.Elif(uop_load.error):
                latch_error(m, self, ErrorCode.DRAM_ACCESS, DmaClient.UOP, uop_load.error_addr, index)
            for ld in acc_loads:
                with m.Elif(ld.error):
                    latch_error(m, self, ErrorCode.DRAM_ACCESS, DmaClient.ACC, ld.error_addr, index)
        return m


def share_read_client(m: Module, port, a, b, use_b) -> None:
    """Two DMA read clients ``a``, ``b`` on one read-client ``port`` (of the component, so flipped):
    ``use_b`` chooses which one it serves. Change it only while both are idle."""
    ar, r = port.ar, port.r
    m.d.comb += [
        ar.valid.eq(Mux(use_b, b.ar.valid, a.ar.valid)), ar.payload.eq(Mux(use_b, b.ar.payload, a.ar.payload)),
        a.ar.ready.eq(ar.ready & ~use_b), b.ar.ready.eq(ar.ready & use_b),
        a.r.valid.eq(r.valid & ~use_b), b.r.valid.eq(r.valid & use_b),
        a.r.payload.eq(r.payload), b.r.payload.eq(r.payload),
        r.ready.eq(Mux(use_b, b.r.ready, a.r.ready)),
    ]
