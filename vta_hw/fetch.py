"""Fetch: reads the instruction stream over AXI, checks each instruction and dispatches it.

Instructions are read in chunks into a small buffer; a chunk is requested only when the buffer
has room for all of it, so read data is never held up on the bus by a full command queue.
Each instruction goes through two stages: decode (opcode, memory type, dependency flags, ALU
opcode, uop range, store padding) and range check (SRAM extent of loads and stores, which needs
a multiply), then into the load, compute or store command queue together with its index. The
multiply is pipelined (the DSP's input, product and output registers), so a load or store waits
``RANGE_CHECK_CYCLES`` cycles in the second stage; other instructions pass in one.
An illegal instruction is not dispatched: fetch reports it and stops (spec 2.2, README "Bad input").
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import MemType, Opcode
from vta_hw.spec.regmap import ErrorCode

from .axi import ADDR_BITS, ReadClientSignature
from .dma import WIDE_ADDR_BITS, DmaReader
from .layouts import INDEX_BITS

STAGE_LOAD, STAGE_COMPUTE, STAGE_STORE = 0, 1, 2
#: cycles a load or store spends in the range-check stage (operands, product, output registers)
RANGE_CHECK_CYCLES = 3


class Fetch(wiring.Component):
    def __init__(self, layouts, data_bits: int, buffer_depth: int = 16, chunk: int = 8):
        cfg = layouts.cfg
        self.layouts = layouts
        self.cfg = cfg
        self.data_bits = data_bits
        self.buffer_depth = buffer_depth
        self.chunk = chunk
        cmd_sig = stream.Signature(layouts.cmd)
        super().__init__({
            "start": In(1),
            "insn_addr": In(32),
            "insn_count": In(32),
            "axi": Out(ReadClientSignature(data_bits)),
            "load_q": Out(cmd_sig),
            "compute_q": Out(cmd_sig),
            "store_q": Out(cmd_sig),
            "halt": In(1),
            "error": Out(1),
            "error_code": Out(8),
            "error_detail": Out(8),
            "error_info": Out(32),
            "error_index": Out(INDEX_BITS),
            "dma_error": Out(1),
            "dma_error_addr": Out(ADDR_BITS),
            "dispatched": Out(INDEX_BITS),
            "all_dispatched": Out(1),
            "saw_finish": Out(1),
            "quiet": Out(1),
            "busy": Out(1),
            "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        m.submodules.reader = reader = DmaReader(128, self.data_bits, max_burst_beats=lay.max_burst_beats)
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=128, depth=self.buffer_depth)
        wiring.connect(m, wiring.flipped(self.axi), reader.axi)
        halted = Signal()
        m.d.comb += [reader.halt.eq(self.halt | halted), self.dma_error.eq(reader.error),
                     self.dma_error_addr.eq(reader.error_addr)]

        # ---- chunked requests; the size of the next chunk is registered (stale for a cycle after a
        # request or START, so requests are at most every other cycle: a chunk is `chunk` instructions)
        remaining = Signal(32)
        next_addr = Signal(WIDE_ADDR_BITS)
        inflight = Signal(range(self.buffer_depth + 1))
        reserved = Signal(range(2 * self.buffer_depth + 1))
        n = Signal(range(self.chunk + 1))
        n_fresh = Signal()
        m.d.sync += [n.eq(Mux(remaining < self.chunk, remaining, self.chunk)), n_fresh.eq(1)]
        m.d.comb += [
            reserved.eq(buf.level + inflight),
            reader.cmd.payload.addr.eq(next_addr), reader.cmd.payload.count.eq(n),
        ]
        can_issue = Signal()
        m.d.comb += can_issue.eq(n_fresh & (n != 0) & (reserved + n <= self.buffer_depth) & ~halted & ~self.halt)
        m.d.comb += reader.cmd.valid.eq(can_issue)
        issue = reader.cmd.valid & reader.cmd.ready
        got = reader.out.valid & reader.out.ready
        m.d.comb += [buf.w_en.eq(reader.out.valid), buf.w_data.eq(reader.out.payload), reader.out.ready.eq(buf.w_rdy)]
        m.d.sync += inflight.eq(inflight + Mux(issue, n, 0) - got)
        with m.If(issue):
            m.d.sync += [remaining.eq(remaining - n), next_addr.eq(next_addr + (n << 4)), n_fresh.eq(0)]

        # ---- stage A: decode + static checks
        a_insn = buf.r_data
        mem = data.View(lay.mem, a_insn)
        gemm = data.View(lay.gemm, a_insn)
        alu = data.View(lay.alu, a_insn)
        op = mem.opcode
        mt = mem.memory_type
        flags = mem.as_value()[3:7]  # pop_prev, pop_next, push_prev, push_next (shared by every format)
        is_load, is_store = op == Opcode.LOAD, op == Opcode.STORE
        is_gemm, is_alu, is_finish = op == Opcode.GEMM, op == Opcode.ALU, op == Opcode.FINISH
        load_mod = is_load & ((mt == MemType.INP) | (mt == MemType.WGT))
        store_mod = is_store
        a_stage = Signal(2)
        m.d.comb += a_stage.eq(Mux(load_mod, STAGE_LOAD, Mux(store_mod, STAGE_STORE, STAGE_COMPUTE)))
        a_code = Signal(8)
        a_info = Signal(32)
        a_detail = Signal(8)
        # the LOAD memory types 0..ACC, and ACC_8BIT with the acc_8bit extension (OUT never)
        illegal_load_type = mt > MemType.ACC
        assert set(cfg.isa.alu_ops) == set(range(max(cfg.isa.alu_ops) + 1)), "ALU opcodes 0..n are legal"
        if cfg.isa.has("acc_8bit"):
            illegal_load_type = (mt == MemType.OUT) | (mt > MemType.ACC_8BIT)
        dep_bad = Mux(load_mod, mem.pop_prev_dep | mem.push_prev_dep,
                      Mux(store_mod, mem.pop_next_dep | mem.push_next_dep, 0))
        with m.If(op > Opcode.ALU):
            m.d.comb += [a_code.eq(ErrorCode.ILLEGAL_OPCODE), a_info.eq(op)]
        with m.Elif(is_load & illegal_load_type):
            m.d.comb += [a_code.eq(ErrorCode.ILLEGAL_MEM_TYPE), a_info.eq(mt), a_detail.eq(op)]
        with m.Elif(is_store & (((mem.x_size != 0) & (mt != MemType.OUT)) | (mt > MemType.OUT))):
            m.d.comb += [a_code.eq(ErrorCode.ILLEGAL_MEM_TYPE), a_info.eq(mt), a_detail.eq(op)]
        with m.Elif(dep_bad):
            m.d.comb += [a_code.eq(ErrorCode.ILLEGAL_DEP_FLAGS), a_info.eq(flags)]
        with m.Elif(is_alu & (alu.alu_opcode > max(cfg.isa.alu_ops))):
            m.d.comb += [a_code.eq(ErrorCode.ILLEGAL_ALU_OPCODE), a_info.eq(alu.alu_opcode)]
        with m.Elif((is_gemm | is_alu) & (gemm.uop_end > cfg.UOP_BUFF_DEPTH)):
            m.d.comb += [a_code.eq(ErrorCode.UOP_RANGE), a_info.eq(gemm.uop_end)]
        with m.Elif(is_store & (mem.x_size != 0) &
                    ((mem.y_pad_0 | mem.y_pad_1 | mem.x_pad_0 | mem.x_pad_1) != 0)):
            m.d.comb += a_code.eq(ErrorCode.STORE_PADDING)

        # ---- stage B: SRAM extent check, then dispatch
        b_valid = Signal()
        b_insn = Signal(128)
        b_stage = Signal(2)
        b_code = Signal(8)
        b_info = Signal(32)
        b_detail = Signal(8)
        b_rows = Signal(18)
        b_cols = Signal(18)
        b_check = Signal()
        max_depth = max(cfg.UOP_BUFF_DEPTH, cfg.INP_BUFF_DEPTH, cfg.WGT_BUFF_DEPTH, cfg.ACC_BUFF_DEPTH)
        b_mt = Signal(3)
        b_finish = Signal()
        index = Signal(INDEX_BITS)

        queues = {STAGE_LOAD: self.load_q, STAGE_COMPUTE: self.compute_q, STAGE_STORE: self.store_q}
        # extent = base + rows*cols must not pass the depth: rows*cols > depth - base (b_room, signed)
        b_room = Signal(range(-(1 << 16), max_depth + 1))
        b_base_m1 = Signal(signed(18))
        prod_m = Signal(36)       # the DSP's product register
        prod_p = Signal(36)       # its output register
        extent_m1 = Signal(signed(38))
        m.d.sync += [prod_m.eq(b_rows * b_cols), prod_p.eq(prod_m), extent_m1.eq(b_base_m1 + prod_p)]
        b_age = Signal(range(RANGE_CHECK_CYCLES + 1))   # cycles since the instruction entered stage B
        with m.If(b_age != RANGE_CHECK_CYCLES):
            m.d.sync += b_age.eq(b_age + 1)
        checked = b_age >= RANGE_CHECK_CYCLES - 1        # prod_p holds this instruction's product
        range_bad = b_check & checked & (prod_p > b_room)
        reported = b_age == RANGE_CHECK_CYCLES          # extent_m1 holds base + product - 1
        ready = Signal()
        for st, q in queues.items():
            m.d.comb += [q.payload.insn.eq(b_insn), q.payload.index.eq(index)]
            with m.If(b_stage == st):
                m.d.comb += ready.eq(q.ready)
        b_ok = b_valid & (b_code == 0) & (~b_check | checked) & ~range_bad & ~halted & ~self.halt
        for st, q in queues.items():
            m.d.comb += q.valid.eq(b_ok & (b_stage == st))
        dispatch = b_ok & ready
        with m.If(dispatch):
            m.d.sync += [index.eq(index + 1), b_valid.eq(0)]
            with m.If(b_finish):
                # nothing after FINISH is dispatched: it is left over (the core reports UNBALANCED)
                m.d.sync += [self.saw_finish.eq(1), halted.eq(1)]
        with m.If(b_valid & ~halted & ~self.halt & ((b_code != 0) | (range_bad & reported))):
            m.d.sync += [halted.eq(1), self.error.eq(1), self.error_index.eq(index)]
            with m.If(b_code != 0):
                m.d.sync += [self.error_code.eq(b_code), self.error_info.eq(b_info), self.error_detail.eq(b_detail)]
            with m.Else():
                m.d.sync += [self.error_code.eq(ErrorCode.SRAM_RANGE), self.error_info.eq(extent_m1),
                             self.error_detail.eq(b_mt)]

        load_b = ~b_valid | dispatch
        with m.If(load_b & buf.r_rdy & ~halted & ~self.halt):
            m.d.comb += buf.r_en.eq(1)
            depth = Signal(range(max_depth + 1))
            depths = [(MemType.UOP, cfg.UOP_BUFF_DEPTH), (MemType.WGT, cfg.WGT_BUFF_DEPTH),
                      (MemType.INP, cfg.INP_BUFF_DEPTH), (MemType.ACC, cfg.ACC_BUFF_DEPTH),
                      (MemType.OUT, cfg.ACC_BUFF_DEPTH)]
            if cfg.isa.has("acc_8bit"):
                depths.append((MemType.ACC_8BIT, cfg.ACC_BUFF_DEPTH))
            with m.Switch(mt):
                for t, d in depths:
                    with m.Case(t):
                        m.d.comb += depth.eq(d)
            pads_y = Mux(is_load, mem.y_pad_0 + mem.y_pad_1, 0)
            pads_x = Mux(is_load, mem.x_pad_0 + mem.x_pad_1, 0)
            m.d.sync += [
                b_valid.eq(1), b_insn.eq(a_insn), b_stage.eq(a_stage), b_code.eq(a_code), b_info.eq(a_info),
                b_detail.eq(a_detail), b_rows.eq(mem.y_size + pads_y), b_cols.eq(mem.x_size + pads_x),
                b_check.eq((is_load | is_store) & (mem.x_size != 0)), b_room.eq(depth - mem.sram_base),
                b_base_m1.eq(mem.sram_base - 1), b_mt.eq(mt), b_finish.eq(is_finish), b_age.eq(0),
            ]

        with m.If(self.halt):
            m.d.sync += halted.eq(1)

        with m.If(self.start):
            m.d.sync += [remaining.eq(self.insn_count), next_addr.eq(self.insn_addr), n_fresh.eq(0)]

        m.d.comb += [
            self.dispatched.eq(index),
            self.all_dispatched.eq(index == self.insn_count),
            self.busy.eq(~self.all_dispatched & ~halted & ~self.halt),
            self.stall.eq(b_valid & (b_code == 0) & (~b_check | checked) & ~range_bad & ~ready & ~halted),
        ]
        blocked = b_valid & ~dispatch & ~(b_code != 0) & ~range_bad & (~b_check | checked)
        drained = ~b_valid & ~buf.r_rdy & (inflight == 0) & ((remaining == 0) | self.halt)
        m.d.comb += self.quiet.eq(reader.idle & (halted | blocked | drained))
        return m
