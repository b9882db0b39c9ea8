"""The VTA core: fetch, load, compute and store with their command queues, the four dependency
token queues, the INP/WGT/OUT SRAMs, one AXI4 master, and the AXI4-Lite register file.

Ports (flat, Xilinx-style names): ``clk``, ``rst`` (active high), ``m_axi_*`` (AXI4 master, data
width from the config: 64 bits for Pynq/sim/tsim, 128 for Ultra96), ``s_axi_*`` (AXI4-Lite
slave, 12-bit addresses, see ``vta_hw.spec.regmap``) and ``irq`` (high while a finished run's
DONE or ERROR is showing).

Run control (the supervisor below): START resets the datapath (SRAM contents are kept) and starts
fetch. The run ends when every module is *quiet* (nothing it can do until another module acts,
and no bus transaction outstanding) for QUIET_CYCLES cycles in a row, and then:

* after FINISH: DONE if every instruction was dispatched and retired and every token queue is
  empty, else the error UNBALANCED;
* without FINISH: MISSING_FINISH if every instruction ran, else DEADLOCK;
* after an error (the first one is kept, with the offending instruction index): ERROR. Errors stop
  fetch and every module at once; bus transactions in flight are completed first, so the bus is
  never left hanging.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import Out

from vta_hw.spec import Config, load_config
from vta_hw.spec.regmap import (
    COUNTERS,
    ID_VALUE,
    NO_INSN,
    STATE,
    DmaClient,
    ErrorCode,
    extensions_word,
    hwconfig_word,
)

from .axi import axi4_lite_slave_members, axi4_master_members
from .axi_master import AxiArbiter
from .compute import Compute
from .dep_queue import TokenQueue
from .fetch import Fetch
from .layouts import INDEX_BITS, Layouts
from .load import Load
from .regfile import RegFile
from .sram import Sram
from .store import Store

QUIET_CYCLES = 16


class HardwareConfigError(ValueError):
    """A configuration that fsim can run but this hardware generator cannot build."""


def check_buildable(cfg: Config) -> None:
    beat = cfg.AXI_DATA_BYTES
    for name in ("INP", "WGT", "ACC", "OUT"):
        eb = getattr(cfg, f"{name}_ELEM_BYTES")
        if eb < beat:
            article = "a" if name == "WGT" else "an"
            raise HardwareConfigError(
                f"{cfg.source}: {article} {name} element is {eb} bytes, narrower than the {cfg.AXI_DATA_BITS}-bit "
                f"AXI bus of TARGET={cfg.TARGET}" + (f" with AXI_PORTS={cfg.AXI_PORTS}" if cfg.AXI_PORTS > 1 else "")
                + f"; the hardware needs INP/WGT/ACC/OUT elements of at least {beat} bytes (raise LOG_BATCH or "
                "LOG_BLOCK" + (", or use fewer AXI_PORTS)" if cfg.AXI_PORTS > 1 else ")"))
    if cfg.INP_WIDTH != 8 or cfg.WGT_WIDTH != 8 or cfg.ACC_WIDTH != 32:
        raise HardwareConfigError(f"{cfg.source}: the hardware implements int8 inputs/weights and int32 accumulators")


class VtaCore(wiring.Component):
    #: AXI ID of every write (one write client, in order); AXI3 ports need it as WID.
    write_id = DmaClient.OUT

    def __init__(self, config=None, queue_depth: int = 16, max_burst_beats: int | None = None):
        cfg = self.cfg = load_config(config)
        check_buildable(cfg)
        # the target's memory port decides (16 beats on the Zynq-7000's AXI3 ACP)
        self.layouts = Layouts(cfg, cfg.AXI_MAX_BURST_BEATS if max_burst_beats is None else max_burst_beats)
        self.queue_depth = queue_depth
        self.data_bits = cfg.AXI_DATA_BITS
        members = {}
        members.update(axi4_master_members("m_axi", self.data_bits))
        members.update(axi4_lite_slave_members("s_axi"))
        members["irq"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.layouts
        dw = self.data_bits
        soft_rst = Signal()

        def dp(name, x):
            """A datapath submodule: reset by START as well as by rst."""
            m.submodules[name] = ResetInserter({"sync": soft_rst})(x)
            return x

        m.submodules.regs = regs = RegFile()
        fetch = dp("fetch", Fetch(lay, dw))
        load = dp("load", Load(lay, dw))
        compute = dp("compute", Compute(lay, dw))
        store = dp("store", Store(lay, dw))
        arb = dp("arbiter", AxiArbiter(dw, [DmaClient.FETCH, DmaClient.UOP, DmaClient.INP, DmaClient.WGT,
                                            DmaClient.ACC], self.write_id,
                                       cache_bits=int(cfg.axi_cache_bits, 2), prot_bits=int(cfg.axi_prot_bits, 2)))
        qs = {n: dp(f"{n}_q", fifo.SyncFIFOBuffered(width=lay.cmd.size, depth=self.queue_depth))
              for n in ("load", "compute", "store")}
        tok = {n: dp(f"tok_{n}", TokenQueue()) for n in ("l2g", "g2l", "g2s", "s2g")}
        inp = dp("inp_sram", Sram(cfg.INP_BUFF_DEPTH, cfg.INP_ELEM_BITS, "inp"))
        wgt = dp("wgt_sram", Sram(cfg.WGT_BUFF_DEPTH, cfg.WGT_ELEM_BITS, "wgt"))
        out = dp("out_sram", Sram(cfg.ACC_BUFF_DEPTH, cfg.OUT_ELEM_BITS, "out"))

        # ---- flat AXI ports
        for name in axi4_master_members("x", dw):
            sig = name.split("_", 1)[1]
            top, inner = getattr(self, f"m_axi_{sig}"), getattr(arb.bus, sig)
            flow = arb.bus.signature.members[sig].flow
            m.d.comb += (top.eq(inner) if flow == wiring.Out else inner.eq(top))
        for name in axi4_lite_slave_members("x"):
            sig = name.split("_", 1)[1]
            top, inner = getattr(self, f"s_axi_{sig}"), getattr(regs.bus, sig)
            flow = regs.bus.signature.members[sig].flow
            m.d.comb += (inner.eq(top) if flow == wiring.In else top.eq(inner))

        wiring.connect(m, fetch.axi, arb.client(DmaClient.FETCH))
        wiring.connect(m, compute.uop_axi, arb.client(DmaClient.UOP))
        wiring.connect(m, load.inp_axi, arb.client(DmaClient.INP))
        wiring.connect(m, load.wgt_axi, arb.client(DmaClient.WGT))
        wiring.connect(m, compute.acc_axi, arb.client(DmaClient.ACC))
        wiring.connect(m, store.axi, arb.wr)

        # ---- command queues
        for name, src, dst in (("load", fetch.load_q, load.cmd), ("compute", fetch.compute_q, compute.cmd),
                               ("store", fetch.store_q, store.cmd)):
            q = qs[name]
            m.d.comb += [q.w_en.eq(src.valid), q.w_data.eq(src.payload), src.ready.eq(q.w_rdy),
                         dst.valid.eq(q.r_rdy), dst.payload.eq(q.r_data), q.r_en.eq(dst.ready)]

        # ---- tokens
        m.d.comb += [
            tok["l2g"].push.eq(load.l2g_push), tok["l2g"].pop.eq(compute.l2g_pop),
            compute.l2g_avail.eq(tok["l2g"].avail),
            tok["g2l"].push.eq(compute.g2l_push), tok["g2l"].pop.eq(load.g2l_pop),
            load.g2l_avail.eq(tok["g2l"].avail),
            tok["g2s"].push.eq(compute.g2s_push), tok["g2s"].pop.eq(store.g2s_pop),
            store.g2s_avail.eq(tok["g2s"].avail),
            tok["s2g"].push.eq(store.s2g_push), tok["s2g"].pop.eq(compute.s2g_pop),
            compute.s2g_avail.eq(tok["s2g"].avail),
        ]

        # ---- SRAMs
        wiring.connect(m, load.inp_wr, inp.wr)
        wiring.connect(m, load.wgt_wr, wgt.wr)
        wiring.connect(m, compute.inp_rd, inp.rd)
        wiring.connect(m, compute.wgt_rd, wgt.rd)
        wiring.connect(m, compute.out_wr, out.wr)
        wiring.connect(m, store.out_rd, out.rd)

        # ---- supervisor
        running = Signal()
        launch = Signal()
        done_ok = Signal()
        err_code = Signal(8)
        err_detail = Signal(8)
        err_index = Signal(INDEX_BITS)
        err_info = Signal(32)
        cycles = Signal(64)
        quiet_cnt = Signal(range(QUIET_CYCLES + 1))
        halt = Signal()
        # an error stops everything until the next START (also after the run has ended)
        m.d.comb += halt.eq(err_code != 0)
        for x in (fetch, load, compute, store):
            m.d.comb += x.halt.eq(halt)
        m.d.comb += [fetch.insn_addr.eq(regs.insn_addr), fetch.insn_count.eq(regs.insn_count),
                     fetch.start.eq(launch)]

        start = regs.start & ~running & ~launch
        m.d.comb += soft_rst.eq(start)
        m.d.sync += launch.eq(start)
        counters = {n: Signal(32, name=f"cnt_{n}") for n in COUNTERS}
        with m.If(start):
            m.d.sync += [running.eq(1), done_ok.eq(0), err_code.eq(0), err_detail.eq(0), err_info.eq(0),
                         err_index.eq(0), cycles.eq(0), quiet_cnt.eq(0)]
            m.d.sync += [c.eq(0) for c in counters.values()]
        with m.If(running):
            m.d.sync += cycles.eq(cycles + 1)

        # the first error wins
        sources = [
            (fetch.error, fetch.error_code, fetch.error_detail, fetch.error_info, fetch.error_index),
            (compute.error, compute.error_code, compute.error_detail, compute.error_info, compute.error_index),
            (load.error, load.error_code, load.error_detail, load.error_info, load.error_index),
            (store.error, store.error_code, store.error_detail, store.error_info, store.error_index),
            (fetch.dma_error, ErrorCode.DRAM_ACCESS, DmaClient.FETCH, fetch.dma_error_addr, fetch.dispatched),
        ]
        for qn, q in enumerate(("l2g", "g2l", "g2s", "s2g")):
            sources.append((tok[q].overflow, ErrorCode.TOKEN_OVERFLOW, qn, 0, NO_INSN))
        sources.append((regs.abort, ErrorCode.ABORTED, 0, 0, NO_INSN))
        with m.If(running & (err_code == 0) & ~launch):
            for k, (valid, code, detail, info, index) in enumerate(sources):
                with (m.If(valid) if k == 0 else m.Elif(valid)):
                    m.d.sync += [err_code.eq(code), err_detail.eq(detail), err_info.eq(info), err_index.eq(index)]

        all_quiet = fetch.quiet & load.quiet & compute.quiet & store.quiet & arb.idle & ~launch
        with m.If(running & all_quiet):
            with m.If(quiet_cnt != QUIET_CYCLES):
                m.d.sync += quiet_cnt.eq(quiet_cnt + 1)
        with m.Elif(~start):
            m.d.sync += quiet_cnt.eq(0)
        settled = running & (quiet_cnt == QUIET_CYCLES)

        # first instruction not yet retired (for DEADLOCK / UNBALANCED), as a registered two-level
        # minimum: it is only read once everything has been quiet for QUIET_CYCLES cycles
        heads = [(load.head_valid, load.head_index), (compute.head_valid, compute.head_index),
                 (store.head_valid, store.head_index), (~fetch.all_dispatched, fetch.dispatched)]
        pairs = []
        for k in range(0, len(heads), 2):
            (va, ia), (vb, ib) = heads[k], heads[k + 1]
            lo = Signal(INDEX_BITS + 1, name=f"first_{k // 2}")
            m.d.sync += lo.eq(Mux(va & (~vb | (ia < ib)), ia, Mux(vb, ib, NO_INSN)))
            pairs.append(lo)
        first = Signal(INDEX_BITS)
        m.d.sync += first.eq(Mux(pairs[0] < pairs[1], pairs[0], pairs[1]))
        tokens_zero = ~(tok["l2g"].avail | tok["g2l"].avail | tok["g2s"].avail | tok["s2g"].avail)
        balanced = fetch.all_dispatched & ~load.head_valid & ~compute.head_valid & ~store.head_valid & tokens_zero

        with m.If(settled):
            m.d.sync += running.eq(0)
            with m.If(err_code != 0):
                pass
            with m.Elif(compute.finished):
                with m.If(balanced):
                    m.d.sync += done_ok.eq(1)
                with m.Else():
                    m.d.sync += [err_code.eq(ErrorCode.UNBALANCED), err_index.eq(first)]
            with m.Elif(fetch.all_dispatched & ~fetch.saw_finish):
                m.d.sync += [err_code.eq(ErrorCode.MISSING_FINISH), err_index.eq(NO_INSN)]
            with m.Else():
                m.d.sync += [err_code.eq(ErrorCode.DEADLOCK), err_index.eq(first)]

        # ---- counters
        strobes = {
            "inp_load_nbytes": (load.inp_elem, cfg.INP_ELEM_BYTES),
            "wgt_load_nbytes": (load.wgt_elem, cfg.WGT_ELEM_BYTES),
            "acc_load_nbytes": (compute.acc_elem, cfg.ACC_ELEM_BYTES),   # (ACC_8BIT: OUT_ELEM_BYTES, below)
            "uop_load_nbytes": (compute.uop_elem, cfg.UOP_ELEM_BYTES),
            "out_store_nbytes": (store.out_elem, cfg.OUT_ELEM_BYTES),
            "gemm_counter": (compute.gemm_uop, 1),
            "alu_counter": (compute.alu_uop, 1),
            "fetch_busy_cycles": (fetch.busy, 1), "fetch_stall_cycles": (fetch.stall, 1),
            "load_busy_cycles": (load.busy, 1), "load_stall_cycles": (load.stall, 1),
            "compute_busy_cycles": (compute.busy, 1), "compute_stall_cycles": (compute.stall, 1),
            "store_busy_cycles": (store.busy, 1), "store_stall_cycles": (store.stall, 1),
            "gemm_busy_cycles": (compute.gemm_active, 1), "alu_busy_cycles": (compute.alu_active, 1),
            "axi_read_beats": (arb.r_beat, 1), "axi_write_beats": (arb.w_beat, 1),
            "axi_read_stall_cycles": (arb.ar_stall, 1),
        }
        if cfg.isa.has("acc_8bit"):
            # an 8-bit ACC load counts the bytes it reads from DRAM; the strobes are registered first (the
            # step depends on them), so the count lags a cycle, long before a run can end
            acc_q, acc8_q = Signal(), Signal()
            m.d.sync += [acc_q.eq(compute.acc_elem | compute.acc8_elem), acc8_q.eq(compute.acc8_elem)]
            strobes["acc_load_nbytes"] = (acc_q, Mux(acc8_q, cfg.OUT_ELEM_BYTES, cfg.ACC_ELEM_BYTES))
        assert set(strobes) == set(COUNTERS)
        with m.If(running & ~start):
            for name, (strobe, step) in strobes.items():
                with m.If(strobe):
                    m.d.sync += counters[name].eq(counters[name] + step)

        # ---- register file inputs
        def mstate(x, level, finished=0):
            return Cat(x.busy, x.stall, halt, finished, x.dma_active, 0, 0, 0, level)

        state_vals = {
            "tokens_l2g": tok["l2g"].count, "tokens_g2l": tok["g2l"].count,
            "tokens_g2s": tok["g2s"].count, "tokens_s2g": tok["s2g"].count,
            "state_fetch": Cat(fetch.busy, fetch.stall, halt, fetch.saw_finish, ~fetch.quiet),
            "state_load": mstate(load, qs["load"].level),
            "state_compute": mstate(compute, qs["compute"].level, compute.finished),
            "state_store": mstate(store, qs["store"].level),
            "retired_load": load.retired, "retired_compute": compute.retired, "retired_store": store.retired,
        }
        assert set(state_vals) == set(STATE)
        error_shown = ~running & (err_code != 0)
        m.d.comb += [
            regs.rd_control.eq(Cat(running, done_ok & ~running, error_shown)),
            regs.rd_error.eq(Cat(err_code, err_detail)),
            regs.rd_error_insn.eq(err_index),
            regs.rd_error_info.eq(err_info),
            regs.rd_id.eq(ID_VALUE),
            regs.rd_hwconfig.eq(hwconfig_word(cfg)),
            regs.rd_extensions.eq(extensions_word(cfg)),
            regs.rd_cycles_lo.eq(cycles[:32]),
            regs.rd_cycles_hi.eq(cycles[32:]),
            regs.rd_insn_dispatched.eq(fetch.dispatched),
            self.irq.eq(~running & (done_ok | (err_code != 0))),
        ]
        for name, sig in counters.items():
            m.d.comb += getattr(regs, f"rd_{name}").eq(sig)
        for name, val in state_vals.items():
            m.d.comb += getattr(regs, f"rd_{name}").eq(val)
        return m
