"""One Verilog top holding every unit under test side by side, so the cocotb suites of all units
share a single Verilator build (a build costs ~1 minute on 2 cores; one per unit would dominate
the CI budget). Each unit's ports appear flat with a prefix (``fetch_``, ``load_``, ...); units
that master AXI get their own ``AxiArbiter`` whose bus is ``<unit>_axi_*`` for cocotbext-axi.

``units`` builds a subset (the extension suites build only the tensor-compute unit and ``acc8``, the
ACC_8BIT loader of a config with the ``acc_8bit`` extension: a smaller, quicker build).
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vta_hw.axi import ReadClientSignature, WriteClientSignature
from vta_hw.axi_master import AxiArbiter
from vta_hw.dep_queue import TokenQueue
from vta_hw.fetch import Fetch
from vta_hw.layouts import Layouts
from vta_hw.load import Load
from vta_hw.regfile import RegFile
from vta_hw.spec import Opcode
from vta_hw.spec.regmap import DmaClient
from vta_hw.sram import READ_LATENCY, Sram
from vta_hw.store import Store
from vta_hw.tensor_compute import TensorCompute
from vta_hw.tensor_load import TensorLoad

BACKDOOR = {"uop": 0, "inp": 1, "wgt": 2, "acc": 3, "out": 4}


def _flat(prefix: str, sig: wiring.Signature, skip=()) -> dict:
    out = {}
    for path, member in sig.members.flatten():
        if path[0] in skip or member.is_signature:
            continue
        name = prefix + "_" + "_".join(str(p) for p in path)
        out[name] = Out(member.shape) if member.flow == wiring.Out else In(member.shape)
    return out


def _walk(obj, path):
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj


class TensorComputeOneAtATime(wiring.Component):
    """The two engines of ``TensorCompute`` behind one instruction port, as the unit suites drive them:
    ``start`` gives ``insn`` to the engine of its opcode; ``busy`` and the error outputs cover both."""

    def __init__(self, lay):
        self.tc = TensorCompute(lay)
        sig = self.tc.signature.members
        super().__init__({
            "start": In(1), "insn": In(128), "busy": Out(1), "halt": In(1),
            "error": Out(1), "error_operand": Out(3), "error_value": Out(32), "gemm_uop": Out(1), "alu_uop": Out(1),
            **{k: sig[k] for k in ("uop_rd", "alu_uop_rd", "inp_rd", "wgt_rd", "acc_rd", "acc_wr", "out_wr")},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tc = tc = self.tc
        for k in ("uop_rd", "alu_uop_rd", "inp_rd", "wgt_rd", "acc_rd", "acc_wr", "out_wr"):
            wiring.connect(m, wiring.flipped(getattr(self, k)), getattr(tc, k))
        is_alu = self.insn[:3] == Opcode.ALU
        m.d.comb += [tc.gemm_insn.eq(self.insn), tc.alu_insn.eq(self.insn), tc.halt.eq(self.halt),
                     tc.gemm_start.eq(self.start & ~is_alu), tc.alu_start.eq(self.start & is_alu),
                     self.busy.eq(tc.busy), self.gemm_uop.eq(tc.gemm_uop), self.alu_uop.eq(tc.alu_uop),
                     self.error.eq(tc.gemm_error | tc.alu_error),
                     self.error_operand.eq(Mux(tc.alu_error, tc.alu_error_operand, tc.gemm_error_operand)),
                     self.error_value.eq(Mux(tc.alu_error, tc.alu_error_value, tc.gemm_error_value))]
        return m


ALL_UNITS = ("fetch", "load", "store", "tc", "tok", "regs", "arb")


class UnitTop(wiring.Component):
    def __init__(self, cfg, units=ALL_UNITS):
        self.cfg = cfg
        lay = self.layouts = Layouts(cfg)
        dw = cfg.AXI_DATA_BITS
        ab = (cfg.ACC_BUFF_DEPTH - 1).bit_length() or 1
        make = {
            "fetch": lambda: Fetch(lay, dw),
            "load": lambda: Load(lay, dw),
            "store": lambda: Store(lay, dw),
            "tc": lambda: TensorComputeOneAtATime(lay),
            "tok": TokenQueue,
            "regs": RegFile,
            "acc8": lambda: TensorLoad(lay, cfg.OUT_ELEM_BITS, dw, ab, lane_bits=cfg.ACC_WIDTH),
        }
        self.units = {name: make[name]() for name in units if name in make}
        arbs = {
            "fetch": lambda: AxiArbiter(dw, [DmaClient.FETCH], DmaClient.OUT),
            "load": lambda: AxiArbiter(dw, [DmaClient.INP, DmaClient.WGT], DmaClient.OUT),
            "store": lambda: AxiArbiter(dw, [], DmaClient.OUT),
            "arb": lambda: AxiArbiter(dw, [0, 1, 2], 5),
            "acc8": lambda: AxiArbiter(dw, [DmaClient.ACC], DmaClient.OUT),
        }
        self.arbs = {name: arbs[name]() for name in units if name in arbs}
        self.skip = {
            "fetch": ("axi",), "load": ("inp_axi", "wgt_axi"), "store": ("axi", "out_rd"),
            "tc": ("uop_rd", "alu_uop_rd", "inp_rd", "wgt_rd", "acc_rd", "acc_wr", "out_wr"), "tok": (),
            "regs": ("bus",),
            "acc8": ("axi",),
        }
        members = {}
        for name, unit in self.units.items():
            members.update(_flat(name, unit.signature, self.skip[name]))
        for name, arb in self.arbs.items():
            for path, member in arb.signature.members["bus"].signature.members.flatten():
                members[f"{name}_axi_{path[0]}"] = Out(member.shape) if member.flow == wiring.Out else In(member.shape)
        # the stand-alone arbiter's clients are driven from the test
        for cid in (0, 1, 2) if "arb" in self.arbs else ():
            for path, member in ReadClientSignature(dw).members.flatten():
                if member.is_signature:
                    continue
                # from the client's side: ar is driven by the test (input to the top), r is observed
                members[f"arb_c{cid}_" + "_".join(path)] = In(member.shape) if member.flow == wiring.Out \
                    else Out(member.shape)
        for path, member in WriteClientSignature(dw).members.flatten() if "arb" in self.arbs else ():
            if member.is_signature:
                continue
            members["arb_w_" + "_".join(path)] = In(member.shape) if member.flow == wiring.Out else Out(member.shape)
        if "regs" in self.units:
            for path, member in self.units["regs"].signature.members["bus"].signature.members.flatten():
                members[f"regs_s_axi_{path[0]}"] = Out(member.shape) if member.flow == wiring.Out else In(member.shape)
        # backdoors into the SRAMs of the store and tensor-compute units
        if "store" in self.units:
            members.update({"store_bd_addr": In(16), "store_bd_data": In(cfg.OUT_ELEM_BITS), "store_bd_en": In(1)})
        if "tc" in self.units:
            members.update({
                "tc_bd_active": In(1), "tc_bd_mem": In(3), "tc_bd_addr": In(16), "tc_bd_wdata": In(cfg.WGT_ELEM_BITS),
                "tc_bd_we": In(1), "tc_bd_rdata": Out(cfg.WGT_ELEM_BITS),
            })
        super().__init__(members)

    def _connect_flat(self, m, name, unit, skip):
        for path, member in unit.signature.members.flatten():
            if path[0] in skip or member.is_signature:
                continue
            top = getattr(self, name + "_" + "_".join(str(p) for p in path))
            inner = _walk(unit, path)
            m.d.comb += top.eq(inner) if member.flow == wiring.Out else inner.eq(top)

    def elaborate(self, platform):
        m = Module()
        for name, unit in self.units.items():
            m.submodules[name] = unit
            self._connect_flat(m, name, unit, self.skip[name])
        for name, arb in self.arbs.items():
            m.submodules[f"{name}_arb"] = arb
            for path, member in arb.signature.members["bus"].signature.members.flatten():
                top = getattr(self, f"{name}_axi_{path[0]}")
                inner = getattr(arb.bus, path[0])
                m.d.comb += top.eq(inner) if member.flow == wiring.Out else inner.eq(top)
        u, a = self.units, self.arbs
        if "fetch" in u:
            wiring.connect(m, u["fetch"].axi, a["fetch"].client(DmaClient.FETCH))
        if "load" in u:
            wiring.connect(m, u["load"].inp_axi, a["load"].client(DmaClient.INP))
            wiring.connect(m, u["load"].wgt_axi, a["load"].client(DmaClient.WGT))
        if "store" in u:
            wiring.connect(m, u["store"].axi, a["store"].wr)
        if "acc8" in u:
            wiring.connect(m, u["acc8"].axi, a["acc8"].client(DmaClient.ACC))
        for name in ("fetch", "load", "acc8"):
            if name in a:
                m.d.comb += a[name].wr.aw.valid.eq(0)
                m.d.comb += [a[name].wr.w.valid.eq(0), a[name].wr.b.ready.eq(1)]
        if "arb" in a:
            self._standalone_arbiter(m, a["arb"])
        if "regs" in u:
            self._regs_bus(m, u["regs"])
        if "store" in u:
            self._store_backdoor(m, u["store"])
        if "tc" in u:
            self._tc_backdoor(m, u["tc"])
        return m

    def _standalone_arbiter(self, m, arb):
        """The stand-alone arbiter: clients from the top ports."""
        cfg = self.cfg
        for cid in (0, 1, 2):
            c = arb.client(cid)
            for path, member in ReadClientSignature(cfg.AXI_DATA_BITS).members.flatten():
                if member.is_signature:
                    continue
                top = getattr(self, f"arb_c{cid}_" + "_".join(path))
                inner = _walk(c, path)
                m.d.comb += inner.eq(top) if member.flow == wiring.Out else top.eq(inner)
        for path, member in WriteClientSignature(cfg.AXI_DATA_BITS).members.flatten():
            if member.is_signature:
                continue
            top = getattr(self, "arb_w_" + "_".join(path))
            inner = _walk(arb.wr, path)
            m.d.comb += inner.eq(top) if member.flow == wiring.Out else top.eq(inner)

    def _regs_bus(self, m, regs):
        for path, member in regs.signature.members["bus"].signature.members.flatten():
            top = getattr(self, f"regs_s_axi_{path[0]}")
            inner = getattr(regs.bus, path[0])
            m.d.comb += top.eq(inner) if member.flow == wiring.Out else inner.eq(top)

    def _store_backdoor(self, m, store):
        """store: OUT SRAM with a backdoor write port."""
        cfg = self.cfg
        m.submodules.store_out = so = Sram(cfg.ACC_BUFF_DEPTH, cfg.OUT_ELEM_BITS)
        wiring.connect(m, store.out_rd, so.rd)
        m.d.comb += [so.wr.addr.eq(self.store_bd_addr), so.wr.data.eq(self.store_bd_data),
                     so.wr.en.eq(self.store_bd_en)]

    def _tc_backdoor(self, m, tc):
        """tensor compute: five SRAMs; the backdoor takes their ports while tc_bd_active."""
        cfg = self.cfg
        srams = {
            "uop": Sram(cfg.UOP_BUFF_DEPTH, 32),
            "uop_alu": Sram(cfg.UOP_BUFF_DEPTH, 32, read_enable=True),
            "inp": Sram(cfg.INP_BUFF_DEPTH, cfg.INP_ELEM_BITS),
            "wgt": Sram(cfg.WGT_BUFF_DEPTH, cfg.WGT_ELEM_BITS), "acc": Sram(cfg.ACC_BUFF_DEPTH, cfg.ACC_ELEM_BITS),
            "out": Sram(cfg.ACC_BUFF_DEPTH, cfg.OUT_ELEM_BITS),
        }
        ports = {"uop": (tc.uop_rd, None), "uop_alu": (tc.alu_uop_rd, None), "inp": (tc.inp_rd, None),
                 "wgt": (tc.wgt_rd, None),
                 "acc": (tc.acc_rd, tc.acc_wr), "out": (None, tc.out_wr)}
        bd = self.tc_bd_active
        rdata = Signal(cfg.WGT_ELEM_BITS)
        sel_q = self.tc_bd_mem
        for _ in range(READ_LATENCY):     # the memory selected when the read was presented
            nxt = Signal(3)
            m.d.sync += nxt.eq(sel_q)
            sel_q = nxt
        for name, s in srams.items():
            m.submodules[f"tc_{name}"] = s
            rd, wr = ports[name]
            mine = self.tc_bd_mem == BACKDOOR[name.split("_")[0]]     # both UOP copies take a UOP write
            m.d.comb += s.rd.addr.eq(Mux(bd, self.tc_bd_addr, rd.addr if rd is not None else 0))
            if s.read_enable:   # the uop loop may hold its read (MUL); the backdoor always reads
                m.d.comb += s.rd.en.eq(bd | rd.en)
            if rd is not None:
                m.d.comb += rd.data.eq(s.rd.data)
            with m.If(bd):
                m.d.comb += [s.wr.addr.eq(self.tc_bd_addr), s.wr.data.eq(self.tc_bd_wdata),
                             s.wr.en.eq(self.tc_bd_we & mine)]
            if wr is not None:
                with m.Else():
                    m.d.comb += [s.wr.addr.eq(wr.addr), s.wr.data.eq(wr.data), s.wr.en.eq(wr.en)]
            with m.If((sel_q == BACKDOOR[name]) if name in BACKDOOR else 0):
                m.d.comb += rdata.eq(s.rd.data)
        m.d.comb += self.tc_bd_rdata.eq(rdata)
