"""Compute: runs UOP and ACC loads, GEMM, ALU and FINISH from the compute command queue.

It owns the UOP and ACC SRAMs, reads INP and WGT, and is the only writer of OUT. With the ISA
extension ``acc_8bit`` it also runs ACC_8BIT loads: a second ACC loader whose DRAM elements are
BATCH*BLOCK_OUT int8 values, sign-extended into the lanes, on the same AXI client as the ACC one.

GEMM and ALU instructions run on two engines at once (``tensor_compute``): while the GEMM engine
works on one tile, the ALU engine requantizes the tile before it. Instructions are taken in order.
Before a GEMM or ALU instruction is started, the sequencer scans its uops (on a copy of the UOP SRAM
that no engine is reading) for its ACC footprint: the interval of destinations (and of ALU sources)
its loop can touch. It starts when its footprint is disjoint from the other engine's unfinished
instructions: the GEMM the GEMM engine runs, or the ALU instructions the ALU engine has not finished.
Every started instruction has an entry in the retirement queue (``ALU_QUEUE`` deep, in program
order): the ALU engine runs the queue's ALU instructions in order, the GEMM engine one GEMM at a time,
and a GEMM that has finished waits there for the older ALU work, so the next GEMMs need not. A LOAD
(UOP, ACC, ACC_8BIT) or FINISH waits until both engines are done (except the loads that run beside
them, below), so no engine ever reads what a load writes.

Dependency tokens (spec 2.3): pop_prev waits on l2g, pop_next on s2g (before the instruction); push_prev
gives g2l, push_next gives g2s, after the instruction's last SRAM write and after every older
instruction's: instructions retire in order, so the other modules see the sequential machine (a g2l push,
which only says that INP and WGT are no longer read, needs only the older GEMMs done: the ALU reads
neither; it still comes in program order). An
index error is reported when the faulting instruction retires, with its own index. FINISH stops the
module (``finished``); the core then checks that the run is balanced.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import MemType, Opcode
from vta_hw.spec.regmap import DmaClient, ErrorCode

from .axi import ReadClientSignature
from .cmdproc import drive_status, latch_error, module_status_members
from .layouts import INDEX_BITS
from .sram import READ_LATENCY, Sram, SramReadSignature, SramWriteSignature
from .tensor_compute import TensorCompute
from .tensor_load import TensorLoad

#: started instructions not yet retired (GEMMs and ALU instructions; a tile's epilogue is 4-6 ALU instructions per
#: thread, and the GEMMs of the next tile queue behind them)
ALU_QUEUE = 16
#: width of a footprint bound (an index of the loop can reach about 2^26)
BOUND_BITS = 30


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
        # one copy of the UOP SRAM per engine (both written by the UOP loader)
        m.submodules.uop_sram = uop_sram = Sram(cfg.UOP_BUFF_DEPTH, 32, "uop")
        m.submodules.uop_alu_sram = uop_alu_sram = Sram(cfg.UOP_BUFF_DEPTH, 32, "uop_alu", read_enable=True)
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
        wiring.connect(m, tc.acc_rd, acc_sram.rd)
        for sram in (uop_sram, uop_alu_sram):
            m.d.comb += [sram.wr.addr.eq(uop_load.sram.addr), sram.wr.data.eq(uop_load.sram.data),
                         sram.wr.en.eq(uop_load.sram.en)]
        # ACC write port: the engines', or an ACC load's through a small FIFO, written in a cycle the engines do
        # not write (a load can run beside the engines on other accumulators): while the FIFO holds data the ALU
        # engine reads nothing new and the write-back takes no entry, so the engines stop writing within a few
        # cycles (a loader writes at most one element per cycle, the FIFO then drains one per cycle)
        ab = acc_sram.addr_bits
        m.submodules.acc_wfifo = acc_wfifo = fifo.SyncFIFO(width=ab + cfg.ACC_ELEM_BITS, depth=16)
        for k, ld in enumerate(acc_loads):
            with (m.If(ld.busy) if k == 0 else m.Elif(ld.busy)):
                m.d.comb += [acc_wfifo.w_data.eq(Cat(ld.sram.addr, ld.sram.data)), acc_wfifo.w_en.eq(ld.sram.en)]
        drain = acc_wfifo.r_rdy & ~tc.acc_wr.en
        m.d.comb += [acc_wfifo.r_en.eq(drain), tc.acc_yield.eq(acc_wfifo.r_rdy)]
        with m.If(drain):
            m.d.comb += [acc_sram.wr.addr.eq(acc_wfifo.r_data[:ab]), acc_sram.wr.data.eq(acc_wfifo.r_data[ab:]),
                         acc_sram.wr.en.eq(1)]
        with m.Else():
            m.d.comb += [acc_sram.wr.addr.eq(tc.acc_wr.addr), acc_sram.wr.data.eq(tc.acc_wr.data),
                         acc_sram.wr.en.eq(tc.acc_wr.en)]

        halt = self.halt
        for x in (tc, uop_load, *acc_loads):
            m.d.comb += x.halt.eq(halt)

        insn = Signal(128)
        index = Signal(INDEX_BITS)
        mem = data.View(lay.mem, insn)
        g = data.View(lay.gemm, insn)
        a = data.View(lay.alu, insn)
        # the loaders get their own copy of a LOAD (the sequencer's register fans out to the scan and checks)
        load_insn = Signal(128)
        m.d.comb += [uop_load.insn.eq(load_insn)] + [ld.insn.eq(load_insn) for ld in acc_loads]
        op = mem.opcode
        is_gemm, is_alu = op == Opcode.GEMM, op == Opcode.ALU
        need_l2g = mem.pop_prev_dep & ~self.l2g_avail
        need_s2g = mem.pop_next_dep & ~self.s2g_avail
        waiting = need_l2g | need_s2g
        dma_idle = uop_load.dma_idle
        loads_busy = uop_load.busy | acc_wfifo.r_rdy
        for ld in acc_loads:
            dma_idle &= ld.dma_idle
            loads_busy |= ld.busy

        # ---- the GEMM the GEMM engine runs (its retirement entry is ``g_slot``)
        g_running = Signal()
        g_lo, g_hi, g_empty = Signal(BOUND_BITS), Signal(BOUND_BITS), Signal()

        # ---- the retirement queue: a ring of entries in program order, head (oldest) .. tail; ``run`` is the next
        # ALU instruction to start (GEMM entries and loads beside the engines are skipped: started when queued)
        def ring(name, shape=1):
            return Array(Signal(shape, name=f"q{k}_{name}") for k in range(ALU_QUEUE))
        q_valid, q_started, q_done, q_g2l = ring("valid"), ring("started"), ring("done"), ring("g2l")
        q_insn, q_index = ring("insn", 128), ring("index", INDEX_BITS)
        q_push_prev, q_push_next, q_empty, q_src = ring("push_prev"), ring("push_next"), ring("empty"), ring("src")
        q_dlo, q_dhi = ring("dlo", BOUND_BITS), ring("dhi", BOUND_BITS)
        q_slo, q_shi = ring("slo", BOUND_BITS), ring("shi", BOUND_BITS)
        q_err, q_err_op, q_err_val = ring("err"), ring("err_op", 3), ring("err_val", 32)
        qb = (ALU_QUEUE - 1).bit_length()
        q_head, q_tail, q_run, g_slot = Signal(qb), Signal(qb), Signal(qb), Signal(qb)
        q_g2l_next = Signal(qb)     # the oldest entry whose g2l push (push_prev) is not settled yet
        q_count = Signal(range(ALU_QUEUE + 1))
        alu_running = Signal()

        # ---- footprint of the instruction the sequencer holds
        f_dmin, f_dmax, f_smin, f_smax = (Signal(BOUND_BITS, name=f"f_{n}") for n in ("dmin", "dmax", "smin", "smax"))
        f_wmax = Signal(BOUND_BITS)
        p_do, p_di, p_so, p_si, p_wo, p_wi = (Signal(BOUND_BITS, name=f"p_{n}") for n in ("do", "di", "so", "si",
                                                                                          "wo", "wi"))
        # an instruction whose loop leaves a buffer (it will stop with INDEX_RANGE) runs alone: everything
        # older has retired when it starts, nothing younger starts before it retires (precise errors)
        f_fault = Signal()
        f_lo, f_hi, f_slo, f_shi, f_whi = (Signal(BOUND_BITS, name=f"f_{n}") for n in ("lo", "hi", "slo", "shi", "whi"))
        f_empty = Signal()
        f_src = Signal()     # an ALU with a register operand: its sources are in ACC too
        f_src_now = is_alu & ~a.use_imm
        empty_now = (g.uop_end <= g.uop_bgn) | (g.iter_out == 0) | (g.iter_in == 0)

        def overlap(lo0, hi0, lo1, hi1):
            return (lo0 <= hi1) & (lo1 <= hi0)

        # conflicts of the held instruction, registered (the other engine's work only shrinks meanwhile)
        conflict_now = Signal()
        with m.If(is_gemm):
            hits = 0
            for k in range(ALU_QUEUE):
                hit = q_valid[k] & ~q_empty[k] & (overlap(f_lo, f_hi, q_dlo[k], q_dhi[k]) |
                                                  (q_src[k] & overlap(f_lo, f_hi, q_slo[k], q_shi[k])))
                hits = hits | hit
            m.d.comb += conflict_now.eq(~f_empty & hits)
        with m.Else():
            m.d.comb += conflict_now.eq(~f_empty & g_running & ~g_empty &
                                        (overlap(f_lo, f_hi, g_lo, g_hi) | (f_src & overlap(f_slo, f_shi, g_lo, g_hi))))
        conflict_q, checked = Signal(), Signal()
        unretired = q_count != 0

        # ---- the uop scan: on the GEMM engine's UOP copy if its loop is idle, else on the ALU engine's
        # copy if that engine has nothing to run
        sc_on_alu, sc_active, sc_addr, sc_left = Signal(), Signal(), Signal(len(g.uop_end)), Signal(len(g.uop_end))
        sc_pipe = [Signal(name=f"sc_v{k}") for k in range(READ_LATENCY)]
        # (the ALU engine has nothing to start; it does not start while a scan reads its copy)
        alu_idle = ~alu_running & ~(q_valid[q_run] & ~q_started[q_run])
        m.d.comb += [uop_sram.rd.addr.eq(Mux(sc_active & ~sc_on_alu, sc_addr, tc.uop_rd.addr)),
                     uop_alu_sram.rd.addr.eq(Mux(sc_active & sc_on_alu, sc_addr, tc.alu_uop_rd.addr)),
                     uop_alu_sram.rd.en.eq(Mux(sc_active & sc_on_alu, 1, tc.alu_uop_rd.en)),
                     tc.uop_rd.data.eq(uop_sram.rd.data), tc.alu_uop_rd.data.eq(uop_alu_sram.rd.data)]
        sc_data = data.View(lay.uop, Mux(sc_on_alu, uop_alu_sram.rd.data, uop_sram.rd.data))
        m.d.sync += [sc_pipe[0].eq(sc_active & (sc_left != 0))] + \
            [sc_pipe[k].eq(sc_pipe[k - 1]) for k in range(1, READ_LATENCY)]
        with m.If(sc_active & (sc_left != 0)):
            m.d.sync += [sc_addr.eq(sc_addr + 1), sc_left.eq(sc_left - 1)]
        with m.If(sc_pipe[-1]):
            d, s = sc_data.dst_idx, sc_data.src_idx
            w = sc_data.wgt_idx
            m.d.sync += [f_dmin.eq(Mux(d < f_dmin, d, f_dmin)), f_dmax.eq(Mux(d > f_dmax, d, f_dmax)),
                         f_smin.eq(Mux(s < f_smin, s, f_smin)), f_smax.eq(Mux(s > f_smax, s, f_smax)),
                         f_wmax.eq(Mux(w > f_wmax, w, f_wmax))]
        # the products (iter - 1) * factor of the loop's reach, by shift and add during the scan (one bit of the
        # iteration count per cycle: no multiplier, so no DSP whose output would need registers of its own)
        fsm_scanning = Signal()
        iter_bits = len(g.iter_out)
        m_out, m_in, m_step = Signal(iter_bits), Signal(iter_bits), Signal(range(iter_bits + 1))
        fac = {n: Signal(BOUND_BITS, name=f"fac_{n}") for n in ("do", "di", "so", "si", "wo", "wi")}
        prods = {"do": p_do, "di": p_di, "so": p_so, "si": p_si, "wo": p_wo, "wi": p_wi}
        products_done = m_step == iter_bits
        with m.If(fsm_scanning & ~products_done):
            m.d.sync += [m_out.eq(m_out >> 1), m_in.eq(m_in >> 1), m_step.eq(m_step + 1)]
            for n, x in prods.items():
                bit = (m_out if n.endswith("o") else m_in)[0]
                m.d.sync += [x.eq(Mux(bit, x + fac[n], x)), fac[n].eq(fac[n] << 1)]
        scan_done = sc_active & (sc_left == 0) & ~Cat(*sc_pipe).any() & products_done

        # a LOAD without pushes may run while the engines do (it retires after the older instructions, through
        # the ALU queue): a UOP load if no unretired GEMM or ALU instruction reads the uops it writes, an ACC
        # (ACC_8BIT) load if none touches the accumulators it writes (one row: [sram_base, sram_base + x_pad_0 +
        # x_size + x_pad_1)). In three registered stages (the comparators are long): the row, then a clash bit per
        # unretired instruction, then their OR. What they say can only get truer while the sequencer waits (only
        # it adds instructions), so the answer holds three cycles after the instruction was taken (``beside_age``).
        u_lo, u_hi, u_acc = Signal(BOUND_BITS), Signal(BOUND_BITS), Signal()
        m.d.sync += [u_lo.eq(mem.sram_base), u_hi.eq(mem.sram_base + mem.x_pad_0 + mem.x_size + mem.x_pad_1),
                     u_acc.eq(mem.memory_type != MemType.UOP)]

        def reads_uops(word):
            v = data.View(lay.gemm, word)
            return (v.uop_bgn < u_hi) & (u_lo < v.uop_end)

        def touches(lo, hi):
            return overlap(u_lo, u_hi - 1, lo, hi)
        clash_bits = Signal(ALU_QUEUE + 1)
        # the running GEMM's accumulators (a finished one has written them); its uops: its entry, below
        m.d.sync += clash_bits[ALU_QUEUE].eq(g_running & u_acc & ~g_empty & touches(g_lo, g_hi))
        for k in range(ALU_QUEUE):
            acc_k = ~q_empty[k] & (touches(q_dlo[k], q_dhi[k]) | (q_src[k] & touches(q_slo[k], q_shi[k])))
            m.d.sync += clash_bits[k].eq(q_valid[k] & Mux(u_acc, acc_k, ~q_done[k] & reads_uops(q_insn[k])))
        beside_kind = Signal()
        m.d.sync += beside_kind.eq((op == Opcode.LOAD) & (mem.x_size != 0) & (q_count != ALU_QUEUE) &
                                   (mem.y_size + mem.y_pad_0 + mem.y_pad_1 == 1) & ~mem.push_prev_dep &
                                   ~mem.push_next_dep)
        beside_age = Signal(2)
        load_beside = beside_kind & ~clash_bits.any() & (beside_age == 3)
        # a LOAD of nothing (x_size 0: the runtime's carrier of token pushes and pops) writes nothing: it joins the
        # retirement queue at once and pushes its tokens when it retires, after every older instruction
        nop_beside = (op == Opcode.LOAD) & (mem.x_size == 0) & (q_count != ALU_QUEUE)
        gemm_go, alu_go, load_done = Signal(), Signal(), Signal()
        seq_push = Signal()
        with m.FSM(init="IDLE", name="sequence") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(~halt & ~self.finished)
                with m.If(self.cmd.valid & self.cmd.ready):
                    m.d.sync += [insn.eq(self.cmd.payload.insn), index.eq(self.cmd.payload.index), beside_age.eq(0)]
                    with m.If(data.View(lay.mem, self.cmd.payload.insn).opcode == Opcode.LOAD):
                        m.d.sync += load_insn.eq(self.cmd.payload.insn)
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.sync += beside_age.eq(Mux(beside_age == 3, 3, beside_age + 1))
                with m.If(halt):
                    m.next = "IDLE"
                with m.Elif(~waiting):
                    m.d.comb += [self.l2g_pop.eq(mem.pop_prev_dep), self.s2g_pop.eq(mem.pop_next_dep)]
                    with m.If(is_gemm | is_alu):
                        m.d.sync += [
                            f_empty.eq(empty_now), f_src.eq(f_src_now), checked.eq(0), f_fault.eq(0),
                            f_dmin.eq(-1), f_dmax.eq(0), f_smin.eq(-1), f_smax.eq(0),
                            m_out.eq(g.iter_out - 1), m_in.eq(g.iter_in - 1), m_step.eq(0),
                            fac["do"].eq(g.dst_factor_out), fac["di"].eq(g.dst_factor_in),
                            fac["so"].eq(Mux(is_alu, a.src_factor_out, g.src_factor_out)),
                            fac["si"].eq(Mux(is_alu, a.src_factor_in, g.src_factor_in)),
                            fac["wo"].eq(g.wgt_factor_out), fac["wi"].eq(g.wgt_factor_in),
                            *[x.eq(0) for x in prods.values()],
                            f_wmax.eq(0),
                            sc_addr.eq(g.uop_bgn), sc_left.eq(g.uop_end - g.uop_bgn),
                        ]
                        with m.If(empty_now):
                            m.next = "CHECK"
                        with m.Else():
                            m.next = "SCAN"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("SCAN"):
                m.d.comb += fsm_scanning.eq(1)
                with m.If(halt):
                    m.d.sync += sc_active.eq(0)
                    m.next = "IDLE"
                with m.Elif(~sc_active):
                    with m.If(tc.gemm_uop_free):
                        m.d.sync += [sc_active.eq(1), sc_on_alu.eq(0)]
                    with m.Elif(alu_idle & tc.alu_uop_free):
                        m.d.sync += [sc_active.eq(1), sc_on_alu.eq(1)]
                with m.Elif(scan_done):
                    m.d.sync += [sc_active.eq(0),
                                 f_lo.eq(f_dmin), f_hi.eq(f_dmax + p_do + p_di),
                                 f_slo.eq(f_smin), f_shi.eq(f_smax + p_so + p_si), f_whi.eq(f_wmax + p_wo + p_wi)]
                    m.next = "BOUNDS"
            with m.State("BOUNDS"):
                dst_out = f_hi >= cfg.ACC_BUFF_DEPTH
                src_out = Mux(is_alu, f_src & (f_shi >= cfg.ACC_BUFF_DEPTH),
                              ~g.reset_reg & ((f_shi >= cfg.INP_BUFF_DEPTH) | (f_whi >= cfg.WGT_BUFF_DEPTH)))
                m.d.sync += f_fault.eq(dst_out | src_out)
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [conflict_q.eq(conflict_now), checked.eq(1)]
                with m.If(halt):
                    m.next = "IDLE"
                with m.Elif(checked & ~conflict_q & ~(is_gemm & g_running) & (q_count != ALU_QUEUE) &
                            (~f_fault | ~unretired)):
                    m.d.comb += [gemm_go.eq(is_gemm), alu_go.eq(is_alu)]
                    with m.If(f_fault):
                        m.next = "ALONE"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("ALONE"):
                with m.If(halt | ~unretired):
                    m.next = "IDLE"
            with m.State("DRAIN"):
                m.d.sync += beside_age.eq(Mux(beside_age == 3, 3, beside_age + 1))
                with m.If(halt):
                    m.next = "IDLE"
                with m.Elif(~unretired | load_beside | nop_beside):
                    works = (op == Opcode.LOAD) & (mem.x_size != 0)
                    with m.If(works):
                        with m.If(op == Opcode.LOAD):
                            m.d.comb += uop_load.start.eq(mem.memory_type == MemType.UOP)
                            if acc8:
                                is8 = mem.memory_type == MemType.ACC_8BIT
                                m.d.comb += [acc_load.start.eq(mem.memory_type == MemType.ACC),
                                             acc8_load.start.eq(is8)]
                                with m.If(mem.memory_type != MemType.UOP):
                                    m.d.sync += use8.eq(is8)
                            else:
                                m.d.comb += acc_load.start.eq(mem.memory_type != MemType.UOP)
                        m.next = "EXECUTING"
                    with m.Else():
                        m.next = "PUSH"
            with m.State("EXECUTING"):
                with m.If(halt):
                    m.next = "IDLE"
                with m.Elif(~loads_busy):
                    m.next = "PUSH"
            with m.State("PUSH"):
                with m.If(halt):
                    m.next = "IDLE"
                with m.Elif(unretired):
                    # a load beside older work: it retires after them, through the ALU queue (already done)
                    m.d.comb += load_done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += seq_push.eq(1)
                    m.next = "IDLE"

        # ---- start a GEMM or queue an ALU instruction (or a finished load beside the engines): an entry each
        m.d.comb += [tc.gemm_insn.eq(insn), tc.gemm_start.eq(gemm_go)]
        with m.If(gemm_go):
            m.d.sync += [g_running.eq(1), g_slot.eq(q_tail), g_lo.eq(f_lo), g_hi.eq(f_hi), g_empty.eq(f_empty)]
        with m.If(alu_go | load_done | gemm_go):
            t = q_tail
            # a GEMM's entry has no footprint: the running GEMM's is g_lo..g_hi, a finished one has written its own
            m.d.sync += [q_valid[t].eq(1), q_started[t].eq(load_done | gemm_go), q_done[t].eq(load_done),
                         q_g2l[t].eq(0),
                         q_err[t].eq(0), q_insn[t].eq(insn), q_index[t].eq(index),
                         q_push_prev[t].eq(mem.push_prev_dep), q_push_next[t].eq(mem.push_next_dep),
                         q_empty[t].eq(f_empty | load_done | gemm_go), q_src[t].eq(f_src),
                         q_dlo[t].eq(f_lo), q_dhi[t].eq(f_hi), q_slo[t].eq(f_slo), q_shi[t].eq(f_shi),
                         q_tail.eq(t + 1)]

        # ---- the ALU engine runs the queue's ALU instructions in order (not past an instruction that failed)
        alu_start = ~alu_running & q_valid[q_run] & ~q_started[q_run] & ~tc.alu_error & ~halt & \
            ~(sc_active & sc_on_alu)
        m.d.comb += [tc.alu_insn.eq(q_insn[q_run]), tc.alu_start.eq(alu_start)]
        with m.If(alu_start):
            m.d.sync += [alu_running.eq(1), q_started[q_run].eq(1)]
        with m.If(~alu_running & q_valid[q_run] & q_started[q_run] & (q_run != q_tail)):
            m.d.sync += q_run.eq(q_run + 1)     # a GEMM's or a load's entry: nothing to run
        with m.If(alu_running & ~tc.alu_busy):
            m.d.sync += [alu_running.eq(0), q_done[q_run].eq(1), q_err[q_run].eq(tc.alu_error),
                         q_err_op[q_run].eq(tc.alu_error_operand), q_err_val[q_run].eq(tc.alu_error_value),
                         q_run.eq(q_run + 1)]
        with m.If(g_running & ~tc.gemm_busy):
            s_ = g_slot
            m.d.sync += [g_running.eq(0), q_done[s_].eq(1), q_err[s_].eq(tc.gemm_error),
                         q_err_op[s_].eq(tc.gemm_error_operand), q_err_val[s_].eq(tc.gemm_error_value)]

        # ---- g2l pushes (push_prev) in program order, ahead of retirement: the load module waits on them only for
        # the GEMMs' reads of INP and WGT (the ALU reads neither), so an entry's push needs every older GEMM done,
        # not the older ALU work (which is what lets the next tile's loads start beside this tile's epilogue). The
        # settling walks the queue in order: past a finished entry (pushing if it has push_prev), or past an
        # unfinished ALU instruction or reset GEMM without push_prev (they read neither); a GEMM that reads stops it.
        push_prev, push_next = Signal(), Signal()
        p = q_g2l_next
        p_insn = data.View(lay.mem, q_insn[p])
        p_gemm = data.View(lay.gemm, q_insn[p])
        reads_nothing = (p_insn.opcode == Opcode.ALU) | ((p_insn.opcode == Opcode.GEMM) & p_gemm.reset_reg)
        passable = q_done[p] | (reads_nothing & ~q_push_prev[p])
        settle = ~halt & ~self.error & q_valid[p] & ~q_g2l[p] & passable
        with m.If(settle):
            m.d.sync += [q_g2l[p].eq(1), q_g2l_next.eq(p + 1)]
            with m.If(q_done[p] & ~q_err[p]):
                m.d.comb += push_prev.eq(q_push_prev[p])

        # ---- retire in order: the queue's head once it is done (and its g2l push settled)
        h = q_head
        retire = ~halt & ~self.error & q_valid[h] & q_done[h] & q_g2l[h]
        with m.If(retire):
            m.d.sync += [q_valid[h].eq(0), q_head.eq(h + 1), self.retired.eq(q_index[h] + 1)]
            with m.If(q_err[h]):
                latch_error(m, self, ErrorCode.INDEX_RANGE, q_err_op[h], q_err_val[h], q_index[h])
            with m.Else():
                m.d.comb += push_next.eq(q_push_next[h])
        with m.If(seq_push):
            m.d.comb += [push_prev.eq(mem.push_prev_dep), push_next.eq(mem.push_next_dep)]
            m.d.sync += self.retired.eq(index + 1)
            with m.If(op == Opcode.FINISH):
                m.d.sync += self.finished.eq(1)
        m.d.comb += [self.g2l_push.eq(push_prev), self.g2s_push.eq(push_next)]
        m.d.sync += q_count.eq(q_count + (alu_go | load_done | gemm_go) - retire)

        idle = fsm.ongoing("IDLE")
        drive_status(m, self, idle=idle, waiting=fsm.ongoing("WAIT") & waiting, index=index, dma_idle=dma_idle,
                     halt=halt, done=self.finished, engines_idle=halt | (~tc.busy & ~unretired))
        m.d.comb += [
            self.uop_elem.eq(uop_load.data_elem), self.acc_elem.eq(acc_load.data_elem),
            self.acc8_elem.eq(acc8_load.data_elem if acc8 else 0),
            self.gemm_uop.eq(tc.gemm_uop), self.alu_uop.eq(tc.alu_uop),
            self.gemm_active.eq(tc.gemm_active), self.alu_active.eq(tc.alu_active),
        ]
        # DMA errors of the loads (which run alone); index errors are latched as their instruction retires
        with m.If(~self.error):
            with m.If(uop_load.error):
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
