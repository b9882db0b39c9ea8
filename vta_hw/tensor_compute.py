"""The uop loop of GEMM and ALU instructions and the datapath behind it.

Loop (spec 2.11): for o < iter_out, i < iter_in, u in [uop_bgn, uop_end), in that order, with
``dst = uop.dst + o*dst_factor_out + i*dst_factor_in`` (likewise src, wgt).

Pipeline, one slot per cycle (ALU with a register operand: two slots per uop, the first reads
the source, the second the destination). Every SRAM read takes ``READ_LATENCY`` (2) cycles: the
block RAM and its output register.

* G  the loop generator presents the uop address to the UOP SRAM
* U  uop arrives; dst/src/wgt indices are formed
* I  indices are checked against the buffer depths (an index past a depth stops the loop and
  reports INDEX_RANGE), then presented to the SRAMs: GEMM reads INP[src] and WGT[wgt];
  ALU reads ACC[src] (first slot) or ACC[dst]
* GEMM: the dot-product array (``gemm.DotArray``, ``latency`` cycles after the operands arrive);
  ACC[dst] is read so that it arrives with the dot product
* E  (execute) the ACC value arrives; ``ACC[dst] + dot`` (GEMM; a reset GEMM gives 0) or
  ``op(ACC[dst], src or imm)`` (ALU) is computed into a register
* W  ``ACC[dst]`` and ``OUT[dst] = low 8 bits`` are written (a reset GEMM leaves OUT)

Hazards: an ACC value used in E was read two cycles before, so it misses the writes of the last
three cycles (the one in progress in W, and the two before it, since the read port is not
transparent). Those three writes are kept (W, W1, W2) and the youngest one to the same address
is forwarded; which one is decided a cycle ahead, so E only has a 4:1 multiplexer before its
adder. Back-to-back uops on one accumulator therefore give the sequential result at one uop per
cycle (GEMM, ALU with immediate) or per two cycles (ALU with a register operand), and a source
written earlier in the same ALU instruction is read after that write.

MUL (ISA extension ``alu_mul``; without it none of this is built) has two stages of its own between
E and W, the registers a DSP wants: E presents the operands to a DSP per lane, X1 is its product
register (M), X2 its output register (P, or a fabric register Vivado packs there), and W writes X2.
A MUL's result is therefore written and usable two cycles after E instead of one: E forwards from
X2, W1 and W2 (and W, for the other opcodes), and a MUL slot that reads what the MUL slot just before
it writes would need it a cycle too early, so it waits one cycle at I (``hold`` freezes the loop
generator, the UOP read and I; a bubble goes on). Otherwise MUL runs at the same throughput (one uop
per cycle with an immediate, per two cycles with a register operand); an instruction takes one
cycle more.
"""

from __future__ import annotations

from contextlib import nullcontext

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import AluOp, Opcode
from vta_hw.spec.regmap import IndexOperand

from .alu import alu_lane, mul_lane
from .gemm import DotArray
from .sram import READ_LATENCY, SramReadSignature, SramWriteSignature

OFFSET_BITS = 28


class TensorCompute(wiring.Component):
    def __init__(self, layouts):
        cfg = layouts.cfg
        self.cfg = cfg
        self.layouts = layouts
        self.lanes = cfg.BATCH * cfg.BLOCK_OUT
        ab = (cfg.ACC_BUFF_DEPTH - 1).bit_length() or 1
        self.acc_addr_bits = ab
        super().__init__({
            "start": In(1),
            "insn": In(128),
            "busy": Out(1),
            # with MUL the UOP read can be held for a cycle (see hold)
            "uop_rd": Out(SramReadSignature((cfg.UOP_BUFF_DEPTH - 1).bit_length() or 1, 32, cfg.isa.has("alu_mul"))),
            "inp_rd": Out(SramReadSignature((cfg.INP_BUFF_DEPTH - 1).bit_length() or 1, cfg.INP_ELEM_BITS)),
            "wgt_rd": Out(SramReadSignature((cfg.WGT_BUFF_DEPTH - 1).bit_length() or 1, cfg.WGT_ELEM_BITS)),
            "acc_rd": Out(SramReadSignature(ab, cfg.ACC_ELEM_BITS)),
            "acc_wr": Out(SramWriteSignature(ab, cfg.ACC_ELEM_BITS)),
            "out_wr": Out(SramWriteSignature(ab, cfg.OUT_ELEM_BITS)),
            "halt": In(1),
            "error": Out(1),
            "error_operand": Out(3),
            "error_value": Out(32),
            "gemm_uop": Out(1),
            "alu_uop": Out(1),
            "gemm_active": Out(1),
            "alu_active": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        lanes = self.lanes
        acc_w = cfg.ACC_WIDTH
        out_w = cfg.OUT_WIDTH

        g = data.View(lay.gemm, self.insn)
        a = data.View(lay.alu, self.insn)

        # ---- instruction registers (held for the whole loop)
        is_alu = Signal()
        mul = cfg.isa.has("alu_mul")
        is_mul = Signal()   # a MUL instruction (only with the alu_mul extension)
        reset = Signal()
        use_imm = Signal()
        alu_op = Signal(3)
        imm = Signal(signed(acc_w))
        bgn = Signal.like(g.uop_bgn)
        end = Signal.like(g.uop_end)
        it_out_n = Signal(14)
        it_in_n = Signal(14)
        f = {k: Signal(OFFSET_BITS, name=f"f_{k}") for k in
             ("dst_out", "dst_in", "src_out", "src_in", "wgt_out", "wgt_in")}

        # ---- G: loop generator
        gen = Signal()
        aborted = Signal()
        u = Signal(len(g.uop_end))
        it_o = Signal(14)
        it_i = Signal(14)
        base = {k: Signal(OFFSET_BITS, name=f"base_{k}") for k in ("dst", "src", "wgt")}
        cur = {k: Signal(OFFSET_BITS, name=f"cur_{k}") for k in ("dst", "src", "wgt")}
        phase = Signal()
        two_slot = Signal()

        with m.If(self.start):
            op_alu = g.opcode == Opcode.ALU
            nonempty = (g.uop_end > g.uop_bgn) & (g.iter_out != 0) & (g.iter_in != 0)
            m.d.sync += [
                is_alu.eq(op_alu), reset.eq(g.reset_reg & ~op_alu), use_imm.eq(a.use_imm), alu_op.eq(a.alu_opcode),
                imm.eq(a.imm), bgn.eq(g.uop_bgn), end.eq(g.uop_end), it_out_n.eq(g.iter_out), it_in_n.eq(g.iter_in),
                f["dst_out"].eq(g.dst_factor_out), f["dst_in"].eq(g.dst_factor_in),
                f["src_out"].eq(Mux(op_alu, a.src_factor_out, g.src_factor_out)),
                f["src_in"].eq(Mux(op_alu, a.src_factor_in, g.src_factor_in)),
                f["wgt_out"].eq(Mux(op_alu, 0, g.wgt_factor_out)), f["wgt_in"].eq(Mux(op_alu, 0, g.wgt_factor_in)),
                gen.eq(nonempty), aborted.eq(0), u.eq(g.uop_bgn), it_o.eq(0), it_i.eq(0), phase.eq(0),
                two_slot.eq(op_alu & ~a.use_imm),
            ]
            if mul:
                m.d.sync += is_mul.eq(op_alu & (a.alu_opcode == AluOp.MUL))
            for k in ("dst", "src", "wgt"):
                m.d.sync += [base[k].eq(0), cur[k].eq(0)]

        emit = Signal()
        hold = Signal()   # MUL: the slot in I waits a cycle, and everything before it (driven below)

        def unless_held():
            return m.If(~hold) if mul else nullcontext()
        m.d.comb += emit.eq(gen & ~self.halt & ~aborted & ~hold if mul else gen & ~self.halt & ~aborted)
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
        with m.If(self.halt):
            m.d.sync += gen.eq(0)
        m.d.comb += self.uop_rd.addr.eq(u)
        if mul:
            m.d.comb += self.uop_rd.en.eq(~hold)

        # ---- U: form indices (the uop arrives READ_LATENCY cycles after G)
        u_valid, u_phase, u_cur = emit, phase, cur
        stage_valid = []
        for k in range(READ_LATENCY):
            nv, nphase = Signal(name=f"u{k}_valid"), Signal(name=f"u{k}_phase")
            ncur = {n: Signal(OFFSET_BITS, name=f"u{k}_cur_{n}") for n in ("dst", "src", "wgt")}
            with unless_held():
                m.d.sync += [nv.eq(u_valid & ~self.halt), nphase.eq(u_phase)] + [ncur[n].eq(u_cur[n]) for n in ncur]
            u_valid, u_phase, u_cur = nv, nphase, ncur
            stage_valid.append(nv)
        uop = data.View(lay.uop, self.uop_rd.data)
        i_valid = Signal()
        i_phase = Signal()
        idx = {k: Signal(OFFSET_BITS + 1, name=f"i_{k}") for k in ("dst", "src", "wgt")}
        with unless_held():
            m.d.sync += [i_valid.eq(u_valid & ~aborted & ~self.halt), i_phase.eq(u_phase),
                         idx["dst"].eq(uop.dst_idx + u_cur["dst"]), idx["src"].eq(uop.src_idx + u_cur["src"]),
                         idx["wgt"].eq(uop.wgt_idx + u_cur["wgt"])]

        # ---- I: range checks, SRAM reads
        bad = Signal()
        operand = Signal(3)
        value = Signal(OFFSET_BITS + 1)
        dst_bad = idx["dst"] >= cfg.ACC_BUFF_DEPTH
        with m.If(~is_alu):
            with m.If(dst_bad):
                m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_DST), value.eq(idx["dst"])]
            with m.Elif(~reset & (idx["src"] >= cfg.INP_BUFF_DEPTH)):
                m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_SRC), value.eq(idx["src"])]
            with m.Elif(~reset & (idx["wgt"] >= cfg.WGT_BUFF_DEPTH)):
                m.d.comb += [bad.eq(1), operand.eq(IndexOperand.GEMM_WGT), value.eq(idx["wgt"])]
        with m.Else():
            with m.If(dst_bad):
                m.d.comb += [bad.eq(1), operand.eq(IndexOperand.ALU_DST), value.eq(idx["dst"])]
            with m.Elif(~use_imm & (idx["src"] >= cfg.ACC_BUFF_DEPTH)):
                m.d.comb += [bad.eq(1), operand.eq(IndexOperand.ALU_SRC), value.eq(idx["src"])]
        i_ok = Signal()
        m.d.comb += i_ok.eq(i_valid & ~bad & ~aborted & ~self.halt)
        with m.If(i_valid & bad & ~aborted & ~self.halt):
            m.d.sync += [aborted.eq(1), gen.eq(0), self.error.eq(1), self.error_operand.eq(operand),
                         self.error_value.eq(Mux(value >> 32 != 0, 0xFFFFFFFF, value))]
        m.d.comb += [self.inp_rd.addr.eq(idx["src"]), self.wgt_rd.addr.eq(idx["wgt"])]

        ab = self.acc_addr_bits
        lane_bits = cfg.ACC_ELEM_BITS

        # ---- GEMM: operands arrive READ_LATENCY cycles after I, the dot product `lat` cycles later
        m.submodules.dot = dot = DotArray(cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT)
        lat = dot.latency
        m.d.comb += [dot.inp.eq(self.inp_rd.data), dot.wgt.eq(self.wgt_rd.data)]
        # g_*[k]: a GEMM slot k cycles after I; its ACC read goes out at k = lat, so that the value
        # arrives with the dot product (READ_LATENCY + lat cycles after I)
        g_valid = [Signal(name=f"g_valid_{k}") for k in range(lat + 1)]
        g_dst = [Signal(ab, name=f"g_dst_{k}") for k in range(lat + 1)]
        g_reset = [Signal(name=f"g_reset_{k}") for k in range(lat + 1)]
        m.d.comb += [g_valid[0].eq(i_ok & ~is_alu), g_dst[0].eq(idx["dst"]), g_reset[0].eq(reset)]
        for k in range(1, lat + 1):
            m.d.sync += [g_valid[k].eq(g_valid[k - 1]), g_dst[k].eq(g_dst[k - 1]), g_reset[k].eq(g_reset[k - 1])]
        # the array loads only the slots whose dot product E takes (its operands arrive READ_LATENCY cycles after I)
        m.d.comb += dot.valid.eq(g_valid[READ_LATENCY] & ~g_reset[READ_LATENCY])

        # ---- the ACC read (R) of each slot: ALU in I, GEMM READ_LATENCY cycles before its dot product
        first_of_two = i_phase == 0
        alu_read_addr = Mux(two_slot & first_of_two, idx["src"], idx["dst"])
        r_valid, r_addr, r_dst = Signal(), Signal(ab), Signal(ab)
        r_write, r_slot1, r_reset = Signal(), Signal(), Signal()
        with m.If(is_alu):
            m.d.comb += [r_valid.eq(i_ok & ~hold if mul else i_ok), r_addr.eq(alu_read_addr), r_dst.eq(idx["dst"]),
                         r_write.eq(~two_slot | ~first_of_two), r_slot1.eq(two_slot & first_of_two)]
        with m.Else():
            m.d.comb += [r_valid.eq(g_valid[lat]), r_addr.eq(g_dst[lat]), r_dst.eq(g_dst[lat]), r_write.eq(1),
                         r_reset.eq(g_reset[lat])]
        m.d.comb += self.acc_rd.addr.eq(r_addr)
        # delay line R -> P (the cycle before E) -> E
        chain = [(r_valid, r_addr, r_dst, r_write, r_slot1, r_reset)]
        for k in range(READ_LATENCY):
            regs = (Signal(name=f"r{k}_valid"), Signal(ab, name=f"r{k}_addr"), Signal(ab, name=f"r{k}_dst"),
                    Signal(name=f"r{k}_write"), Signal(name=f"r{k}_slot1"), Signal(name=f"r{k}_reset"))
            m.d.sync += [r.eq(v) for r, v in zip(regs, chain[-1])]
            chain.append(regs)
        p_addr = chain[-2][1]
        e_valid, _, e_dst, e_write, e_slot1, e_reset = chain[-1]
        if mul:   # the slot just ahead (its read went out last cycle) is a MUL writing what this one reads
            ahead_valid, _, ahead_dst, ahead_write = chain[1][:4]
            # (i_valid, not i_ok: a bad index stops the loop anyway, and the path stays short)
            m.d.comb += hold.eq(is_mul & i_valid & ~aborted & ~self.halt & ahead_valid & ahead_write &
                                (ahead_dst == alu_read_addr))

        # ---- writes of the last three cycles: WR (in progress), W1, W2. WR is W (the result E registered
        # last cycle) or, for a MUL, X2 (the product of the slot E had two cycles ago)
        w_valid, w_dst, w_data = Signal(), Signal(ab), Signal(lane_bits)
        x1_valid, x1_dst, x2_valid, x2_dst, x2_data = Signal(), Signal(ab), Signal(), Signal(ab), Signal(lane_bits)
        wr_valid, wr_dst, wr_data = (Mux(is_mul, x2_valid, w_valid), Mux(is_mul, x2_dst, w_dst),
                                     Mux(is_mul, x2_data, w_data)) if mul else (w_valid, w_dst, w_data)
        w1_valid, w1_dst, w1_data = Signal(), Signal(ab), Signal(lane_bits)
        w2_data = Signal(lane_bits)
        m.d.sync += [w1_valid.eq(wr_valid), w1_dst.eq(wr_dst), w1_data.eq(wr_data), w2_data.eq(w1_data)]
        # forwarding choice for the value E uses next cycle: 3 = W's, 2 = W1's, 1 = W2's, 0 = the SRAM's;
        # 4 = X2's (a MUL's product two cycles after its E; hold keeps the slot right behind a MUL away)
        fwd_sel = Signal(3 if mul else 2)
        e_result_next = e_valid & e_write          # E's slot writes its result next cycle (not a MUL's)
        if mul:
            e_result_next &= ~is_mul
        with m.If(e_result_next & (e_dst == p_addr)):
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

        # ---- E: GEMM accumulate or ALU
        gemm_new = Cat(*[(acc_val.word_select(k, acc_w).as_signed() + dot.dot[k])[:acc_w] for k in range(lanes)])
        src_hold = Signal(lane_bits)
        with m.If(e_valid & e_slot1):
            m.d.sync += src_hold.eq(acc_val)
        alu_res = []
        for k in range(lanes):
            av = acc_val.word_select(k, acc_w).as_signed()
            bv = Mux(two_slot, src_hold.word_select(k, acc_w).as_signed(), imm)
            alu_res.append(alu_lane(m, alu_op, av, bv, acc_w, cfg.LOG_ACC_WIDTH + 1, name=f"alu{k}"))
        alu_new = Cat(*alu_res)
        w_result = Signal()     # a result (not a reset GEMM's zero): OUT is written and the uop counted
        m.d.sync += [w_valid.eq(e_result_next), w_dst.eq(e_dst),
                     w_data.eq(Mux(is_alu, alu_new, Mux(e_reset, 0, gemm_new))),
                     w_result.eq(e_result_next & ~e_reset)]
        if mul:   # E -> X1 (the DSP's product register) -> X2 (its output register) -> W
            products, x1_data = [], Signal(lane_bits)
            for k in range(lanes):
                av = acc_val.word_select(k, acc_w)
                bv = Mux(two_slot, src_hold.word_select(k, acc_w), imm)
                products.append(mul_lane(av, bv))
            m.d.sync += [x1_valid.eq(e_valid & e_write & is_mul), x1_dst.eq(e_dst), x1_data.eq(Cat(*products)),
                         x2_valid.eq(x1_valid), x2_dst.eq(x1_dst), x2_data.eq(x1_data)]
            w_result = Mux(is_mul, x2_valid, w_result)

        # ---- W: ACC / OUT writes
        m.d.comb += [self.acc_wr.en.eq(wr_valid), self.acc_wr.addr.eq(wr_dst), self.acc_wr.data.eq(wr_data),
                     self.out_wr.en.eq(w_result), self.out_wr.addr.eq(wr_dst),
                     self.out_wr.data.eq(Cat(*[wr_data.word_select(k, acc_w)[:out_w] for k in range(lanes)])),
                     self.gemm_uop.eq(w_result & ~is_alu), self.alu_uop.eq(w_result & is_alu)]

        busy = gen | i_valid | w_valid
        if mul:
            busy = busy | x1_valid | x2_valid
        for v in stage_valid + g_valid[1:] + [c[0] for c in chain[1:]]:
            busy = busy | v
        m.d.comb += [self.busy.eq(busy), self.gemm_active.eq(busy & ~is_alu), self.alu_active.eq(busy & is_alu)]
        return m
