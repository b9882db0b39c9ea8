"""The compute module's two engines, GEMM and ALU, each with its own uop loop, running at the same time.

Loop (spec 2.11): for o < iter_out, i < iter_in, u in [uop_bgn, uop_end), in that order, with
``dst = uop.dst + o*dst_factor_out + i*dst_factor_in`` (likewise src, wgt).

The compute module (``compute.py``) gives a GEMM instruction to the GEMM engine and an ALU instruction to
the ALU engine, and starts one only when the two instructions' ACC footprints are disjoint (it scans
their uops first), so the engines never touch the same accumulator and need not see each other's
writes. Each engine's loop has the same front (``_UopLoop``), one slot per cycle (ALU with a register
operand: two slots per uop, the first reads the source, the second the destination). Every SRAM read
takes ``READ_LATENCY`` (2) cycles: the block RAM and its output register.

* G  the loop generator presents the uop address to the engine's copy of the UOP SRAM
* U  uop arrives; dst/src/wgt indices are formed
* I  indices are checked against the buffer depths (an index past a depth stops the loop and
  reports INDEX_RANGE), then presented to the SRAMs

GEMM: I reads INP[src] and WGT[wgt]; the dot-product array (``gemm.DotArray``) gives the product
``latency`` cycles after the operands arrive, in E. The engine does not read ACC there: E adds the
dot product into a partial sum in a register while the slots keep the same destination (a
convolution's reduction is the inner loop: one destination for all its uops), and a slot with
another destination, or the end of the loop, sends the finished sum to a FIFO. The write-back unit
(WB) takes sums from the FIFO and does the read-modify-write: WB0 presents ``ACC[dst]``'s address,
WB2 adds the sum to the value that arrives (a reset GEMM's entry gives 0), WB3 writes ``ACC[dst]``
and ``OUT[dst] = low 8 bits`` (a reset GEMM leaves OUT). ACC is read and written once per run of a
destination instead of once per uop, which leaves the ports to the ALU. Two WB entries for one
address are kept three cycles apart (the read port is not transparent), and the loop generator
stops while the FIFO could not take every slot in flight.

ALU: I reads ACC[src] (first slot) or ACC[dst]; E (execute) computes ``op(ACC[dst], src or imm)``
into a register, W writes ``ACC[dst]`` and ``OUT[dst]``. An ACC value used in E was read two cycles
before, so it misses the ALU's writes of the last three cycles (the one in progress in W, and the
two before it). Those three writes are kept (W, W1, W2) and the youngest one to the same address is
forwarded; which one is decided a cycle ahead, so E only has a 4:1 multiplexer before its ALU.
Back-to-back uops on one accumulator therefore give the sequential result at one uop per cycle
(immediate) or per two cycles (register operand).

The ACC ports: WB has priority. In a cycle in which WB0 reads, the ALU's slot in I waits
(``hold`` freezes the ALU's loop generator, its UOP read and I; a bubble goes on). Both read three
cycles before they write, so their writes never fall in one cycle either.

MUL (ISA extension ``alu_mul``; without it none of this is built) has two stages of its own between
E and W, the registers a DSP wants: E presents the operands to a DSP per lane, X1 is its product
register (M), X2 its output register (P, or a fabric register Vivado packs there), and W writes X2.
A MUL's result is therefore written and usable two cycles after E instead of one: E forwards from
X2, W1 and W2 (and W, for the other opcodes), and a MUL slot that reads what the MUL slot just before
it writes would need it a cycle too early, so it holds one cycle at I. Otherwise MUL runs at the same
throughput; an instruction takes one cycle more. Since a MUL writes five cycles after its read, WB
takes no entry while the ALU runs a MUL.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import AluOp
from vta_hw.spec.regmap import IndexOperand

from .alu import alu_lane, mul_lane
from .gemm import DotArray
from .sram import READ_LATENCY, SramReadSignature, SramWriteSignature

OFFSET_BITS = 28
#: cycles from a WB read to its write, and from an ALU read to its write (not a MUL's)
READ_TO_WRITE = READ_LATENCY + 1


def _uop_loop(m: Module, cfg, lay, insn, start, halt, uop_rd, *, alu: bool, gate=None, hold=None):
    """G, U and I of one engine's uop loop. ``gate``: the generator may present a new slot; ``hold``
    (ALU): freeze G, the UOP read (its ``en``) and U, and keep I's slot for another cycle."""
    g = data.View(lay.gemm, insn)
    a = data.View(lay.alu, insn)
    s = SimpleNamespace()
    acc_w = cfg.ACC_WIDTH
    s.reset = Signal(name="reset" if not alu else "alu_reset")
    s.use_imm, s.alu_op, s.imm = Signal(), Signal(3), Signal(signed(acc_w))
    s.is_mul = Signal()
    bgn, end = Signal.like(g.uop_bgn), Signal.like(g.uop_end)
    it_out_n, it_in_n = Signal(14), Signal(14)
    f = {k: Signal(OFFSET_BITS, name=f"f_{k}") for k in
         ("dst_out", "dst_in", "src_out", "src_in", "wgt_out", "wgt_in")}
    s.gen = gen = Signal()
    s.aborted = aborted = Signal()
    u = Signal(len(g.uop_end))
    it_o, it_i = Signal(14), Signal(14)
    base = {k: Signal(OFFSET_BITS, name=f"base_{k}") for k in ("dst", "src", "wgt")}
    cur = {k: Signal(OFFSET_BITS, name=f"cur_{k}") for k in ("dst", "src", "wgt")}
    phase = Signal()
    s.two_slot = two_slot = Signal()

    with m.If(start):
        nonempty = (g.uop_end > g.uop_bgn) & (g.iter_out != 0) & (g.iter_in != 0)
        m.d.sync += [
            bgn.eq(g.uop_bgn), end.eq(g.uop_end), it_out_n.eq(g.iter_out), it_in_n.eq(g.iter_in),
            f["dst_out"].eq(g.dst_factor_out), f["dst_in"].eq(g.dst_factor_in),
            gen.eq(nonempty), aborted.eq(0), u.eq(g.uop_bgn), it_o.eq(0), it_i.eq(0), phase.eq(0),
        ]
        if alu:
            m.d.sync += [s.use_imm.eq(a.use_imm), s.alu_op.eq(a.alu_opcode), s.imm.eq(a.imm),
                         f["src_out"].eq(a.src_factor_out), f["src_in"].eq(a.src_factor_in),
                         f["wgt_out"].eq(0), f["wgt_in"].eq(0), two_slot.eq(~a.use_imm)]
            if cfg.isa.has("alu_mul"):
                m.d.sync += s.is_mul.eq(a.alu_opcode == AluOp.MUL)
        else:
            m.d.sync += [s.reset.eq(g.reset_reg), f["src_out"].eq(g.src_factor_out),
                         f["src_in"].eq(g.src_factor_in), f["wgt_out"].eq(g.wgt_factor_out),
                         f["wgt_in"].eq(g.wgt_factor_in)]
        for k in ("dst", "src", "wgt"):
            m.d.sync += [base[k].eq(0), cur[k].eq(0)]

    def unless_held():
        return m.If(~hold) if hold is not None else nullcontext()
    emit = Signal()
    ok = gen & ~halt & ~aborted
    if gate is not None:
        ok &= gate
    if hold is not None:
        ok &= ~hold
    m.d.comb += emit.eq(ok)
    advance = emit & (~two_slot | phase)
    with m.If(emit & two_slot):
        m.d.sync += phase.eq(~phase)
    with m.If(advance):
        with m.If(u + 1 == end):
            m.d.sync += u.eq(bgn)
            with m.If(it_i + 1 == it_in_n):
                m.d.sync += it_i.eq(0)
                with m.If(it_o + 1 == it_out_n):
                    m.d.sync += gen.eq(0)
                m.d.sync += it_o.eq(it_o + 1)
                for k in ("dst", "src", "wgt"):
                    nb = base[k] + f[f"{k}_out"]
                    m.d.sync += [base[k].eq(nb), cur[k].eq(nb)]
            with m.Else():
                m.d.sync += it_i.eq(it_i + 1)
                for k in ("dst", "src", "wgt"):
                    m.d.sync += cur[k].eq(cur[k] + f[f"{k}_in"])
        with m.Else():
            m.d.sync += u.eq(u + 1)
    with m.If(halt):
        m.d.sync += gen.eq(0)
    m.d.comb += uop_rd.addr.eq(u)
    if hold is not None:
        m.d.comb += uop_rd.en.eq(~hold)

    # U: form indices (the uop arrives READ_LATENCY cycles after G)
    u_valid, u_phase, u_cur = emit, phase, cur
    s.stage_valid = []
    for k in range(READ_LATENCY):
        nv, nphase = Signal(name=f"u{k}_valid"), Signal(name=f"u{k}_phase")
        ncur = {n: Signal(OFFSET_BITS, name=f"u{k}_cur_{n}") for n in ("dst", "src", "wgt")}
        with unless_held():
            m.d.sync += [nv.eq(u_valid & ~halt), nphase.eq(u_phase)] + [ncur[n].eq(u_cur[n]) for n in ncur]
        u_valid, u_phase, u_cur = nv, nphase, ncur
        s.stage_valid.append(nv)
    uop = data.View(lay.uop, uop_rd.data)
    s.i_valid = i_valid = Signal()
    s.i_phase = Signal()
    s.idx = idx = {k: Signal(OFFSET_BITS + 1, name=f"i_{k}") for k in ("dst", "src", "wgt")}
    with unless_held():
        m.d.sync += [i_valid.eq(u_valid & ~aborted & ~halt), s.i_phase.eq(u_phase),
                     idx["dst"].eq(uop.dst_idx + u_cur["dst"]), idx["src"].eq(uop.src_idx + u_cur["src"]),
                     idx["wgt"].eq(uop.wgt_idx + u_cur["wgt"])]

    # I: range checks
    bad, operand, value = Signal(), Signal(3), Signal(OFFSET_BITS + 1)
    dst_bad = idx["dst"] >= cfg.ACC_BUFF_DEPTH
    if alu:
        with m.If(dst_bad):
            m.d.comb += [bad.eq(1), operand.eq(IndexOperand.ALU_DST), value.eq(idx["dst"])]
        with m.Elif(~s.use_imm & (idx["src"] >= cfg.ACC_BUFF_DEPTH)):
            m.d.comb += [bad.eq(1), operand.eq(IndexOperand.ALU_SRC), value.eq(idx["src"])]
    else:
        with m.If(dst_bad):
            m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_DST), value.eq(idx["dst"])]
        with m.Elif(~s.reset & (idx["src"] >= cfg.INP_BUFF_DEPTH)):
            m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_SRC), value.eq(idx["src"])]
        with m.Elif(~s.reset & (idx["wgt"] >= cfg.WGT_BUFF_DEPTH)):
            m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_WGT), value.eq(idx["wgt"])]
    s.i_ok = Signal(name="alu_i_ok" if alu else "gemm_i_ok")
    m.d.comb += s.i_ok.eq(i_valid & ~bad & ~aborted & ~halt)
    s.error, s.error_operand, s.error_value = Signal(), Signal(3), Signal(32)
    with m.If(i_valid & bad & ~aborted & ~halt):
        m.d.sync += [aborted.eq(1), gen.eq(0), s.error.eq(1), s.error_operand.eq(operand),
                     s.error_value.eq(Mux(value >> 32 != 0, 0xFFFFFFFF, value))]
    s.busy_front = gen | i_valid
    for v in s.stage_valid:
        s.busy_front = s.busy_front | v
    return s


class TensorCompute(wiring.Component):
    """The GEMM and ALU engines and the write-back unit. ``gemm_start``/``alu_start`` take the
    instruction on ``gemm_insn``/``alu_insn``; ``gemm_busy``/``alu_busy`` are high until its last
    write. ``gemm_uop_free``/``alu_uop_free``: the engine's UOP copy is not being read (its loop
    generator is idle), so the compute module may read it."""

    def __init__(self, layouts):
        cfg = layouts.cfg
        self.cfg = cfg
        self.layouts = layouts
        self.lanes = cfg.BATCH * cfg.BLOCK_OUT
        ab = (cfg.ACC_BUFF_DEPTH - 1).bit_length() or 1
        self.acc_addr_bits = ab
        ub = (cfg.UOP_BUFF_DEPTH - 1).bit_length() or 1
        super().__init__({
            "gemm_start": In(1), "gemm_insn": In(128), "alu_start": In(1), "alu_insn": In(128),
            "gemm_busy": Out(1), "alu_busy": Out(1), "busy": Out(1),
            "gemm_uop_free": Out(1), "alu_uop_free": Out(1),
            "uop_rd": Out(SramReadSignature(ub, 32)),
            "alu_uop_rd": Out(SramReadSignature(ub, 32, True)),
            "inp_rd": Out(SramReadSignature((cfg.INP_BUFF_DEPTH - 1).bit_length() or 1, cfg.INP_ELEM_BITS)),
            "wgt_rd": Out(SramReadSignature((cfg.WGT_BUFF_DEPTH - 1).bit_length() or 1, cfg.WGT_ELEM_BITS)),
            "acc_rd": Out(SramReadSignature(ab, cfg.ACC_ELEM_BITS)),
            "acc_wr": Out(SramWriteSignature(ab, cfg.ACC_ELEM_BITS)),
            "out_wr": Out(SramWriteSignature(ab, cfg.OUT_ELEM_BITS)),
            "halt": In(1),
            # an ACC load waits for the write port: the ALU reads nothing new, the write-back takes no entry
            "acc_yield": In(1),
            "gemm_error": Out(1), "gemm_error_operand": Out(3), "gemm_error_value": Out(32),
            "alu_error": Out(1), "alu_error_operand": Out(3), "alu_error_value": Out(32),
            "gemm_uop": Out(1),
            "alu_uop": Out(1),
            "gemm_active": Out(1),
            "alu_active": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        lanes, acc_w, out_w = self.lanes, cfg.ACC_WIDTH, cfg.OUT_WIDTH
        ab = self.acc_addr_bits
        lane_bits = cfg.ACC_ELEM_BITS
        mul = cfg.isa.has("alu_mul")

        # ================= GEMM engine
        m.submodules.dot = dot = DotArray(cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT)
        lat = dot.latency
        e_at = READ_LATENCY + lat              # E is this many cycles after I
        inflight = READ_LATENCY + 1 + e_at + 1   # slots between G and E, both included
        depth = 1 << (inflight + 2).bit_length()
        m.submodules.wb_fifo = wbf = fifo.SyncFIFO(width=ab + 1 + lane_bits, depth=depth)
        room = Signal()
        m.d.comb += room.eq(wbf.level + inflight + 1 <= depth)   # every slot in flight and the sum in E fit
        gl = _uop_loop(m, cfg, lay, self.gemm_insn, self.gemm_start, self.halt, self.uop_rd, alu=False, gate=room)
        m.d.comb += [self.inp_rd.addr.eq(gl.idx["src"]), self.wgt_rd.addr.eq(gl.idx["wgt"]),
                     dot.inp.eq(self.inp_rd.data), dot.wgt.eq(self.wgt_rd.data)]
        g_valid = [Signal(name=f"g_valid_{k}") for k in range(e_at + 1)]
        g_dst = [Signal(ab, name=f"g_dst_{k}") for k in range(e_at + 1)]
        m.d.comb += [g_valid[0].eq(gl.i_ok), g_dst[0].eq(gl.idx["dst"])]
        for k in range(1, e_at + 1):
            m.d.sync += [g_valid[k].eq(g_valid[k - 1] & ~self.halt), g_dst[k].eq(g_dst[k - 1])]
        # the array loads only the slots whose dot product E takes (operands arrive READ_LATENCY after I)
        m.d.comb += dot.valid.eq(g_valid[READ_LATENCY] & ~gl.reset)
        e_valid, e_dst = g_valid[e_at], g_dst[e_at]

        # E: the partial sum of the current destination
        psum_valid, psum_dst, psum = Signal(), Signal(ab), Signal(lane_bits)
        after_e = gl.busy_front
        for v in g_valid[1:e_at]:
            after_e = after_e | v
        last = psum_valid & ~e_valid & ~after_e     # no slot to come: the sum is final
        # "the slot in E adds to the current sum", decided a cycle ahead (it selects every lane's adder input):
        # the sum E will hold next cycle, against the destination of the slot about to enter E
        same = Signal()
        next_valid = (e_valid | (psum_valid & ~last)) & ~self.halt
        next_dst = Mux(e_valid, e_dst, psum_dst)
        m.d.sync += same.eq(next_valid & (next_dst == g_dst[e_at - 1]))
        flush = (e_valid & psum_valid & ~same) | last
        m.d.comb += [wbf.w_en.eq(flush & ~self.halt), wbf.w_data.eq(Cat(psum_dst, gl.reset, psum))]
        added = Cat(*[(Mux(same, psum.word_select(k, acc_w), 0) + dot.dot[k])[:acc_w] for k in range(lanes)])
        with m.If(e_valid):
            m.d.sync += [psum_valid.eq(1), psum_dst.eq(e_dst), psum.eq(Mux(gl.reset, 0, added))]
        with m.Elif(last):
            m.d.sync += psum_valid.eq(0)
        with m.If(self.halt):
            m.d.sync += psum_valid.eq(0)

        # ================= ALU engine
        wb0_valid = Signal()
        mul_hold = Signal()
        hold = Signal()
        m.d.comb += hold.eq(wb0_valid | mul_hold | self.acc_yield)
        al = _uop_loop(m, cfg, lay, self.alu_insn, self.alu_start, self.halt, self.alu_uop_rd, alu=True, hold=hold)
        idx = al.idx
        first_of_two = al.i_phase == 0
        alu_read_addr = Mux(al.two_slot & first_of_two, idx["src"], idx["dst"])
        r_valid, r_addr, r_dst, r_write, r_slot1 = Signal(), Signal(ab), Signal(ab), Signal(), Signal()
        m.d.comb += [r_valid.eq(al.i_ok & ~hold), r_addr.eq(alu_read_addr), r_dst.eq(idx["dst"]),
                     r_write.eq(~al.two_slot | ~first_of_two), r_slot1.eq(al.two_slot & first_of_two)]
        # delay line R -> P (the cycle before E) -> E
        chain = [(r_valid, r_addr, r_dst, r_write, r_slot1)]
        for k in range(READ_LATENCY):
            regs = (Signal(name=f"r{k}_valid"), Signal(ab, name=f"r{k}_addr"), Signal(ab, name=f"r{k}_dst"),
                    Signal(name=f"r{k}_write"), Signal(name=f"r{k}_slot1"))
            m.d.sync += [r.eq(v) for r, v in zip(regs, chain[-1])]
            chain.append(regs)
        p_addr = chain[-2][1]
        a_valid, _, a_dst, a_write, a_slot1 = chain[-1]
        if mul:   # the slot just ahead (its read went out last cycle) is a MUL writing what this one reads
            ahead_valid, _, ahead_dst, ahead_write = chain[1][:4]
            m.d.comb += mul_hold.eq(al.is_mul & al.i_valid & ~al.aborted & ~self.halt & ahead_valid & ahead_write &
                                    (ahead_dst == alu_read_addr))

        # writes of the last three cycles: WR (in progress), W1, W2. WR is W (the result E registered
        # last cycle) or, for a MUL, X2 (the product of the slot E had two cycles ago)
        w_valid, w_dst, w_data = Signal(), Signal(ab), Signal(lane_bits)
        x1_valid, x1_dst, x2_valid, x2_dst, x2_data = Signal(), Signal(ab), Signal(), Signal(ab), Signal(lane_bits)
        is_mul = al.is_mul
        wr_valid, wr_dst, wr_data = (Mux(is_mul, x2_valid, w_valid), Mux(is_mul, x2_dst, w_dst),
                                     Mux(is_mul, x2_data, w_data)) if mul else (w_valid, w_dst, w_data)
        w1_valid, w1_dst, w1_data = Signal(), Signal(ab), Signal(lane_bits)
        w2_data = Signal(lane_bits)
        m.d.sync += [w1_valid.eq(wr_valid), w1_dst.eq(wr_dst), w1_data.eq(wr_data), w2_data.eq(w1_data)]
        # forwarding choice for the value E uses next cycle: 3 = W's, 2 = W1's, 1 = W2's, 0 = the SRAM's;
        # 4 = X2's (a MUL's product two cycles after its E; hold keeps the slot right behind a MUL away)
        fwd_sel = Signal(3 if mul else 2)
        e_result_next = a_valid & a_write          # E's slot writes its result next cycle (not a MUL's)
        if mul:
            e_result_next &= ~is_mul
        with m.If(e_result_next & (a_dst == p_addr)):
            m.d.sync += fwd_sel.eq(3)
        if mul:
            with m.Elif(x1_valid & (x1_dst == p_addr)):
                m.d.sync += fwd_sel.eq(4)
        with m.Elif(wr_valid & (wr_dst == p_addr)):
            m.d.sync += fwd_sel.eq(2)
        with m.Elif(w1_valid & (w1_dst == p_addr)):
            m.d.sync += fwd_sel.eq(1)
        with m.Else():
            m.d.sync += fwd_sel.eq(0)
        acc_val = Signal(lane_bits)
        sources = [(3, w_data), (2, w1_data), (1, w2_data), (0, self.acc_rd.data)]
        if mul:
            sources.insert(0, (4, x2_data))
        with m.Switch(fwd_sel):
            for sel, src in sources:
                with m.Case(sel):
                    m.d.comb += acc_val.eq(src)

        # E: the ALU
        src_hold = Signal(lane_bits)
        with m.If(a_valid & a_slot1):
            m.d.sync += src_hold.eq(acc_val)
        alu_res = []
        for k in range(lanes):
            av = acc_val.word_select(k, acc_w).as_signed()
            bv = Mux(al.two_slot, src_hold.word_select(k, acc_w).as_signed(), al.imm)
            alu_res.append(alu_lane(m, al.alu_op, av, bv, acc_w, cfg.LOG_ACC_WIDTH + 1, name=f"alu{k}"))
        m.d.sync += [w_valid.eq(e_result_next), w_dst.eq(a_dst), w_data.eq(Cat(*alu_res))]
        w_result = w_valid
        if mul:   # E -> X1 (the DSP's product register) -> X2 (its output register) -> W
            products, x1_data = [], Signal(lane_bits)
            for k in range(lanes):
                av = acc_val.word_select(k, acc_w)
                bv = Mux(al.two_slot, src_hold.word_select(k, acc_w), al.imm)
                products.append(mul_lane(av, bv))
            m.d.sync += [x1_valid.eq(a_valid & a_write & is_mul), x1_dst.eq(a_dst), x1_data.eq(Cat(*products)),
                         x2_valid.eq(x1_valid), x2_dst.eq(x1_dst), x2_data.eq(x1_data)]
            w_result = Mux(is_mul, x2_valid, w_valid)
        alu_busy = al.busy_front | w_valid
        if mul:
            alu_busy = alu_busy | x1_valid | x2_valid
        for c in chain[1:]:
            alu_busy = alu_busy | c[0]

        # ================= write-back unit: WB0 reads ACC, WB2 adds, WB3 writes
        wb = [(Signal(name=f"wb{k}_valid"), Signal(ab, name=f"wb{k}_dst"), Signal(name=f"wb{k}_reset"),
               Signal(lane_bits, name=f"wb{k}_sum")) for k in range(4)]
        m.d.comb += wb0_valid.eq(wb[0][0])
        head_dst, head_reset, head_sum = wbf.r_data[:ab], wbf.r_data[ab], wbf.r_data[ab + 1:]
        # the entry taken now reads next cycle: it must not meet the write of an older entry still to come
        conflict = 0
        for k in range(READ_TO_WRITE):
            conflict = conflict | (wb[k][0] & (wb[k][1] == head_dst))
        take = wbf.r_rdy & ~conflict & ~self.halt & ~self.acc_yield
        if mul:
            take &= ~(is_mul & alu_busy)
        m.d.comb += wbf.r_en.eq(take)
        m.d.sync += [wb[0][0].eq(take), wb[0][1].eq(head_dst), wb[0][2].eq(head_reset), wb[0][3].eq(head_sum)]
        for k in range(1, 3):
            m.d.sync += [x.eq(y) for x, y in zip(wb[k], wb[k - 1])]
        wsum = Cat(*[(self.acc_rd.data.word_select(k, acc_w) + wb[2][3].word_select(k, acc_w))[:acc_w]
                     for k in range(lanes)])
        m.d.sync += [wb[3][0].eq(wb[2][0] & ~self.halt), wb[3][1].eq(wb[2][1]), wb[3][2].eq(wb[2][2]),
                     wb[3][3].eq(Mux(wb[2][2], 0, wsum))]
        wb_busy = wbf.r_rdy | wb[0][0] | wb[1][0] | wb[2][0] | wb[3][0]

        # ================= the shared ACC and OUT ports
        m.d.comb += self.acc_rd.addr.eq(Mux(wb[0][0], wb[0][1], alu_read_addr))
        wb3 = wb[3]
        with m.If(wb3[0]):
            m.d.comb += [self.acc_wr.en.eq(1), self.acc_wr.addr.eq(wb3[1]), self.acc_wr.data.eq(wb3[3]),
                         self.out_wr.en.eq(~wb3[2]), self.out_wr.addr.eq(wb3[1])]
            m.d.comb += self.out_wr.data.eq(Cat(*[wb3[3].word_select(k, acc_w)[:out_w] for k in range(lanes)]))
        with m.Else():
            m.d.comb += [self.acc_wr.en.eq(wr_valid), self.acc_wr.addr.eq(wr_dst), self.acc_wr.data.eq(wr_data),
                         self.out_wr.en.eq(w_result), self.out_wr.addr.eq(wr_dst)]
            m.d.comb += self.out_wr.data.eq(Cat(*[wr_data.word_select(k, acc_w)[:out_w] for k in range(lanes)]))

        gemm_busy = gl.busy_front | psum_valid | wb_busy
        for v in g_valid[1:]:
            gemm_busy = gemm_busy | v
        m.d.comb += [
            self.gemm_busy.eq(gemm_busy), self.alu_busy.eq(alu_busy), self.busy.eq(gemm_busy | alu_busy),
            self.gemm_uop_free.eq(~gl.gen), self.alu_uop_free.eq(~al.gen),
            self.gemm_uop.eq(e_valid & ~gl.reset), self.alu_uop.eq(w_result),
            self.gemm_active.eq(gemm_busy), self.alu_active.eq(alu_busy),
            self.gemm_error.eq(gl.error), self.gemm_error_operand.eq(gl.error_operand),
            self.gemm_error_value.eq(gl.error_value),
            self.alu_error.eq(al.error), self.alu_error_operand.eq(al.error_operand),
            self.alu_error_value.eq(al.error_value),
        ]
        return m
