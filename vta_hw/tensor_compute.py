"""The uop loop of GEMM and ALU instructions and the datapath behind it.

Loop (spec 2.11): for o < iter_out, i < iter_in, u in [uop_bgn, uop_end), in that order, with
``dst = uop.dst + o*dst_factor_out + i*dst_factor_in`` (likewise src, wgt).

Pipeline, one slot per cycle (ALU with a register operand: two slots per uop, the first reads
the source, the second the destination):

* G  the loop generator presents the uop address to the UOP SRAM
* U  uop arrives; dst/src/wgt indices are formed
* I  indices are checked against the buffer depths (an index past a depth stops the loop and
  reports INDEX_RANGE), then presented to the SRAMs: GEMM reads INP[src] and WGT[wgt];
  ALU reads ACC[src] (first slot) or ACC[dst]
* GEMM: the dot-product array (``gemm.DotArray``, LATENCY cycles); ACC[dst] is read one cycle
  before the sum comes out, then ``ACC[dst] += dot`` and ``OUT[dst] = low 8 bits`` (a reset GEMM
  writes zero to ACC and leaves OUT)
* ALU: one cycle after the read, ``ACC[dst] = op(ACC[dst], src or imm)`` and OUT likewise

Hazards: every ACC value is used exactly one cycle after its read was presented, so the only
write it can miss is the one made in the cycle of its read; that write is kept in ``last_write``
and forwarded. Back-to-back uops on one accumulator therefore give the sequential result at one
uop per cycle (GEMM, ALU with immediate) or per two cycles (ALU with a register operand), and a
source written earlier in the same ALU instruction is read after that write.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from vta_hw.spec import Opcode
from vta_hw.spec.regmap import IndexOperand

from .alu import alu_lane
from .gemm import DotArray
from .sram import SramReadSignature, SramWriteSignature

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
            "uop_rd": Out(SramReadSignature((cfg.UOP_BUFF_DEPTH - 1).bit_length() or 1, 32)),
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
            for k in ("dst", "src", "wgt"):
                m.d.sync += [base[k].eq(0), cur[k].eq(0)]

        emit = Signal()
        m.d.comb += emit.eq(gen & ~self.halt & ~aborted)
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

        # ---- U: form indices
        u_valid = Signal()
        u_phase = Signal()
        u_cur = {k: Signal(OFFSET_BITS, name=f"u_cur_{k}") for k in ("dst", "src", "wgt")}
        m.d.sync += [u_valid.eq(emit), u_phase.eq(phase)]
        for k in ("dst", "src", "wgt"):
            m.d.sync += u_cur[k].eq(cur[k])
        uop = data.View(lay.uop, self.uop_rd.data)
        i_valid = Signal()
        i_phase = Signal()
        idx = {k: Signal(OFFSET_BITS + 1, name=f"i_{k}") for k in ("dst", "src", "wgt")}
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

        # last ACC write (forwarded to a read presented in the same cycle as that write)
        lw_en = Signal()
        lw_addr = Signal(self.acc_addr_bits)
        lw_data = Signal(cfg.ACC_ELEM_BITS)
        m.d.sync += [lw_en.eq(self.acc_wr.en), lw_addr.eq(self.acc_wr.addr), lw_data.eq(self.acc_wr.data)]

        def fwd(read_addr_reg):
            return Mux(lw_en & (lw_addr == read_addr_reg), lw_data, self.acc_rd.data)

        # ---- GEMM datapath
        m.submodules.dot = dot = DotArray(cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT)
        lat = DotArray.LATENCY
        # the SRAM data arrive one cycle after I: feed the array from there
        m.d.comb += [dot.inp.eq(self.inp_rd.data), dot.wgt.eq(self.wgt_rd.data)]
        sb_valid = [Signal(name=f"sb_valid_{k}") for k in range(lat + 1)]
        sb_dst = [Signal(self.acc_addr_bits, name=f"sb_dst_{k}") for k in range(lat + 1)]
        sb_reset = [Signal(name=f"sb_reset_{k}") for k in range(lat + 1)]
        # sb[0]: the cycle after I (SRAM data), sb[lat]: the dot product is out
        m.d.sync += [sb_valid[0].eq(i_ok & ~is_alu), sb_dst[0].eq(idx["dst"]), sb_reset[0].eq(reset)]
        for k in range(1, lat + 1):
            m.d.sync += [sb_valid[k].eq(sb_valid[k - 1]), sb_dst[k].eq(sb_dst[k - 1]), sb_reset[k].eq(sb_reset[k - 1])]
        w_valid, w_dst, w_reset = sb_valid[lat], sb_dst[lat], sb_reset[lat]
        gemm_old = Signal(cfg.ACC_ELEM_BITS)
        m.d.comb += gemm_old.eq(fwd(w_dst))
        gemm_new = Cat(*[(gemm_old.word_select(k, acc_w).as_signed() + dot.dot[k])[:acc_w] for k in range(lanes)])

        # ---- ALU datapath
        d_valid = Signal()
        d_phase = Signal()
        d_addr = Signal(self.acc_addr_bits)
        d_dst = Signal(self.acc_addr_bits)
        first_of_two = i_phase == 0
        alu_read_addr = Mux(two_slot & first_of_two, idx["src"], idx["dst"])
        m.d.sync += [d_valid.eq(i_ok & is_alu), d_phase.eq(i_phase), d_addr.eq(alu_read_addr), d_dst.eq(idx["dst"])]
        d_data = Signal(cfg.ACC_ELEM_BITS)
        m.d.comb += d_data.eq(fwd(d_addr))
        src_hold = Signal(cfg.ACC_ELEM_BITS)
        src_addr = Signal(self.acc_addr_bits)
        with m.If(d_valid & two_slot & (d_phase == 0)):
            m.d.sync += [src_hold.eq(d_data), src_addr.eq(d_addr)]
        with m.Elif(self.acc_wr.en & (self.acc_wr.addr == src_addr)):
            m.d.sync += src_hold.eq(self.acc_wr.data)
        alu_do = d_valid & (~two_slot | (d_phase == 1))
        alu_res = []
        for k in range(lanes):
            av = d_data.word_select(k, acc_w).as_signed()
            bv = Mux(two_slot, src_hold.word_select(k, acc_w).as_signed(), imm)
            alu_res.append(alu_lane(m, alu_op, av, bv, acc_w, cfg.LOG_ACC_WIDTH + 1, name=f"alu{k}"))
        alu_new = Cat(*alu_res)

        # ---- ACC / OUT writes
        m.d.comb += self.acc_rd.addr.eq(Mux(is_alu, alu_read_addr, sb_dst[lat - 1]))
        with m.If(w_valid):
            m.d.comb += [self.acc_wr.en.eq(1), self.acc_wr.addr.eq(w_dst),
                         self.acc_wr.data.eq(Mux(w_reset, 0, gemm_new)),
                         self.out_wr.en.eq(~w_reset), self.out_wr.addr.eq(w_dst),
                         self.gemm_uop.eq(~w_reset)]
        with m.Elif(alu_do):
            m.d.comb += [self.acc_wr.en.eq(1), self.acc_wr.addr.eq(d_dst), self.acc_wr.data.eq(alu_new),
                         self.out_wr.en.eq(1), self.out_wr.addr.eq(d_dst), self.alu_uop.eq(1)]
        new = Mux(w_valid, gemm_new, alu_new)
        m.d.comb += self.out_wr.data.eq(Cat(*[new.word_select(k, acc_w)[:out_w] for k in range(lanes)]))

        busy = gen | u_valid | i_valid | d_valid
        for v in sb_valid:
            busy = busy | v
        m.d.comb += [self.busy.eq(busy), self.gemm_active.eq(busy & ~is_alu), self.alu_active.eq(busy & is_alu)]
        return m
