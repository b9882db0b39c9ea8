"""Differential fuzzer: random legal VTA programs run on fsim and tsim, results compared.

``python -m sim.fuzz N [--seed S] [--config NAME ...] [--jobs J]`` (``nox -s fuzz -- N``) runs N
random programs, each on a fresh fsim and a fresh tsim device with the same DRAM contents, and
compares every output byte, the fsim counters both devices define, and the outcome (a tenth of the
cases have one instruction replaced by an illegal one: both devices must refuse it with the same
error class and instruction index; about another tenth has a GEMM or ALU whose loop runs an index past
its buffer after some uops in range: both must stop at the same instruction with the same first
failing index, and the same counters of the compute module, the uops before it included). Some
programs end without a token sync (FINISH while load and store still have work), a fifth use
sparse inputs (only 1-7 pairs of input channels non-zero: fsim's sparse GEMM kernel), and some run
twice on the same device at the same address, the stream changed in between or not (fsim's
memory of checked streams). tsim's bus checker must see no AXI violation. Program k uses
seed S+k and config k mod (number of configs); the seed also draws tsim's bus (random
back-pressure per channel, read/write latencies, read reordering, early W beats: see
``sim.tsim.BusModel.random``), so a case's result does not depend on J, the number of worker
processes (default: every core). A mismatch is printed and saved as a reproducer
(``build/fuzz/case-<config>-<seed>.npz``) that ``python -m sim.fuzz --replay FILE`` runs again.

A program is a random sequence of INP/WGT/ACC/UOP loads (random sizes, strides and pads), GEMM
and ALU instructions (random uop kernels, loop extents and factors that stay inside the buffers,
reset GEMMs, every ALU opcode with immediates or registers), layer epilogues (a run of ALU
instructions over one range of ACC rows, each after the load of its own kernel, as fsim fuses them)
and stores. Dependency tokens are added
exactly where two modules touch the same SRAM elements (load->compute, compute->load,
compute->store, store->compute), so the result does not depend on timing; a few extra token
round trips are sprinkled in. Some programs end with a dump of the whole ACC region (four shifted
copies through OUT) so that all 32 bits of every accumulator are compared.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vta_hw.spec import DEVICE_COUNTERS, AluOp, MemType, Opcode, Stage, load_config
from vta_runtime.errors import ProgramError, SramIndexError
from vta_runtime.insn_queue import InsnQueue

L, C, S = Stage.LOAD, Stage.COMPUTE, Stage.STORE
OUT_DIR = Path(__file__).resolve().parent.parent / "build" / "fuzz"
DRAM_BYTES = 64 << 20


def configs() -> dict[str, dict]:
    base = load_config().cfg_dict
    return {
        "1x16x16": {**base, "TARGET": "sim"},
        "2x8x8": {**base, "TARGET": "sim", "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16},
        "ultra96": {**base, "TARGET": "ultra96"},
    }


@dataclass
class Program:
    cfg_name: str
    seed: int
    insns: bytes
    buffers: list[tuple[int, np.ndarray]]       # (phys, bytes) to write before the run
    outputs: list[tuple[int, int]]              # (phys, nbytes) to compare after the run
    illegal_at: int | None = None
    notes: list[str] = field(default_factory=list)
    tsim_cycles: int | None = None              # set by run_case
    rerun: bytes | None = None                  # a changed stream run next at the same address, or None


class _Gen:
    """Builds one random program; see the module docstring."""

    def __init__(self, cfg, rnd: random.Random, alloc):
        self.cfg, self.rnd, self.isa = cfg, rnd, cfg.isa
        self.q = InsnQueue(self.isa)
        self.alloc = alloc
        lanes_in, lanes_out = cfg.BATCH * cfg.BLOCK_IN, cfg.BATCH * cfg.BLOCK_OUT
        # small regions so that hazards are frequent; one program in five is "big": long rows that
        # cross 4 KiB pages and need several bursts, long uop kernels and many loop iterations
        self.big = rnd.random() < 0.2
        k = 12 if self.big else 1
        self.R = {"inp": min(48 * k, cfg.INP_BUFF_DEPTH), "wgt": min(24 * (2 if self.big else 1), cfg.WGT_BUFF_DEPTH),
                  "acc": min(48 * k, cfg.ACC_BUFF_DEPTH), "uop": min(96 * (4 if self.big else 1), cfg.UOP_BUFF_DEPTH)}
        self.buffers = []
        nprng = np.random.default_rng(rnd.randrange(1 << 30))
        self.inp_n, self.wgt_n, self.acc_n = 256 * k, 64 * (2 if self.big else 1), 256 * k
        inp = nprng.integers(-128, 128, (self.inp_n, cfg.BATCH, cfg.BLOCK_IN), dtype=np.int8)
        self.sparse = rnd.random() < 0.2
        if self.sparse:   # only 1-7 pairs of input channels non-zero (fsim's sparse GEMM kernel)
            pairs = cfg.BLOCK_IN // 2
            active = rnd.sample(range(pairs), rnd.randrange(1, min(7, pairs - 1) + 1)) if pairs > 1 else [0]
            keep = np.zeros(cfg.BLOCK_IN, bool)
            for a in active:
                keep[2 * a:2 * a + 2] = True
            inp[:, :, ~keep] = 0
        self.inp_buf = self._buffer(inp.reshape(self.inp_n, lanes_in))
        self.wgt_buf = self._buffer(nprng.integers(-128, 128, (self.wgt_n, cfg.BLOCK_OUT * cfg.BLOCK_IN),
                                                   dtype=np.int8))
        acc = nprng.integers(-2**31, 2**31, (self.acc_n, lanes_out), dtype=np.int64)
        small = nprng.random(self.acc_n) < 0.6
        acc[small] = nprng.integers(-3000, 3000, (int(small.sum()), lanes_out))
        self.acc_buf = self._buffer(acc.astype(np.int32))
        self.uop_n = 512
        self.uops = [(0, 0, 0)] + [self._random_uop() for _ in range(self.uop_n - 1)]   # uop 0 serves dump_acc
        self.uop_buf = self._buffer(np.array([self.isa.uop.encode(dst_idx=d, src_idx=s, wgt_idx=w)
                                              for d, s, w in self.uops], np.uint32))
        self.out_n = 512 * (4 if self.big else 1)
        self.out_phys = alloc(self.out_n * cfg.OUT_ELEM_BYTES)
        self.buffers.append((self.out_phys, np.zeros(self.out_n * cfg.OUT_ELEM_BYTES, np.uint8)))
        self.uop_sram: dict[int, tuple[int, int, int]] = {}
        # hazard tracking
        self.l_dirty: set[tuple[str, int]] = set()    # INP/WGT written by load, not yet handed to compute
        self.c_read: set[tuple[str, int]] = set()     # INP/WGT read by compute, not yet handed back
        self.out_dirty: set[int] = set()              # OUT written by compute, not yet handed to store
        self.s_read: set[int] = set()                 # OUT read by store, not yet handed back
        self.out_valid: set[int] = set()              # OUT written in this program

    def _buffer(self, arr: np.ndarray) -> int:
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        phys = self.alloc(raw.size)
        self.buffers.append((phys, raw.copy()))
        return phys

    def _random_uop(self):
        r = self.rnd
        return r.randrange(self.R["acc"] // 2), r.randrange(min(self.R["inp"], self.R["acc"]) // 2), \
            r.randrange(self.R["wgt"] // 2)

    # ---------------------------------------------------------------- token hand-offs
    def sync(self, src: Stage, dst: Stage) -> None:
        self.q.dep_push(src, dst)
        self.q.dep_pop(src, dst)

    def _pads(self, allow_big: bool = True) -> list[int]:
        r = self.rnd
        return [0 if r.random() < 0.5 else (r.randrange(1, 16) if allow_big and r.random() < 0.1 else
                                             r.randrange(1, 3)) for _ in range(4)]

    def _block(self, region: str, y: int, x: int, pads) -> tuple[int, int] | None:
        rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
        n = rows * cols
        if n > self.R[region]:
            return None
        return self.rnd.randrange(0, self.R[region] - n + 1), n

    # ---------------------------------------------------------------- operations
    def load(self, kind: str) -> None:
        r, cfg = self.rnd, self.cfg
        mt = {"inp": MemType.INP, "wgt": MemType.WGT, "acc": MemType.ACC, "uop": MemType.UOP}[kind]
        y, x = r.randrange(0, 4), r.randrange(1, 5)
        if self.big and r.random() < 0.5:
            x = r.randrange(1, max(self.R[kind] // 2, 2))
            y = r.randrange(1, 3)
        if kind == "uop":
            y = r.randrange(1, 3)
            x = r.randrange(1, 17 if not self.big else 120)
        pads = self._pads(kind != "uop")
        blk = self._block(kind, y, x, pads)
        if blk is None:
            pads = [0, 0, 0, 0]
            blk = self._block(kind, y, x, pads)
            if blk is None:
                return
        base, n = blk
        stride = x + r.randrange(0, 3)
        src_n = {"inp": self.inp_n, "wgt": self.wgt_n, "acc": self.acc_n, "uop": self.uop_n}[kind]
        phys = {"inp": self.inp_buf, "wgt": self.wgt_buf, "acc": self.acc_buf, "uop": self.uop_buf}[kind]
        elem = {"inp": cfg.INP_ELEM_BYTES, "wgt": cfg.WGT_ELEM_BYTES, "acc": cfg.ACC_ELEM_BYTES, "uop": 4}[kind]
        span = max(x, (y - 1) * stride + x) if y else 0
        first = r.randrange(0, src_n - span + 1)
        written = range(base, base + n)
        if kind in ("inp", "wgt"):
            if any((kind, i) in self.c_read for i in written):
                self.sync(C, L)
                self.c_read.clear()
            self.l_dirty.update((kind, i) for i in written)
        if kind == "uop":
            rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
            for rr in range(rows):
                for cc in range(cols):
                    k = base + rr * cols + cc
                    yy, xx = rr - pads[0], cc - pads[2]
                    self.uop_sram[k] = self.uops[first + yy * stride + xx] if 0 <= yy < y and 0 <= xx < x \
                        else (0, 0, 0)
        self.q.mem(Opcode.LOAD, mt, sram_base=base, dram_base=phys // elem + first, y_size=y, x_size=x,
                   x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3])

    def _kernel(self, alu: bool):
        """A uop range with known contents and loop factors that keep every index inside the regions."""
        r = self.rnd
        known = sorted(self.uop_sram)
        if not known:
            return None
        bgn = r.choice(known)
        end = bgn
        longest = 40 if self.big else 8
        while end in self.uop_sram and end - bgn < longest and (end == bgn or r.random() < 0.9):
            end += 1
        if r.random() < 0.05:
            end = bgn                      # empty kernel
        uops = [self.uop_sram[k] for k in range(bgn, end)]
        it_out = r.choice([0, 1, 1, 2, 3]) if r.random() < 0.1 else r.choice([1, 2, 3])
        it_in = r.choice([1, 2, 3, 4]) if not self.big else r.choice([1, 4, 9, 16])
        lim = {"dst": self.R["acc"], "src": self.R["acc"] if alu else self.R["inp"], "wgt": self.R["wgt"]}
        f = {}
        for name, k in (("dst", 0), ("src", 1), ("wgt", 2)):
            top = max((u[k] for u in uops), default=0)
            room = lim[name] - 1 - top
            fo = r.randrange(0, max(room // max(it_out - 1, 1), 0) + 1) if it_out > 1 else r.randrange(0, 3)
            room2 = room - fo * max(it_out - 1, 0)
            fi = r.randrange(0, max(room2 // max(it_in - 1, 1), 0) + 1) if it_in > 1 else r.randrange(0, 3)
            f[name] = (fo, fi)
        idx = []
        for o in range(it_out):
            for i in range(it_in):
                for d, s, w in uops:
                    idx.append((d + o * f["dst"][0] + i * f["dst"][1], s + o * f["src"][0] + i * f["src"][1],
                                w + o * f["wgt"][0] + i * f["wgt"][1]))
        return bgn, end, it_out, it_in, f, idx

    def gemm(self) -> None:
        k = self._kernel(alu=False)
        if k is None:
            return
        bgn, end, it_out, it_in, f, idx = k
        reset = self.rnd.random() < 0.15
        if not reset:
            reads = {("inp", s) for _, s, _ in idx} | {("wgt", w) for _, _, w in idx}
            if reads & self.l_dirty:
                self.sync(L, C)
                self.l_dirty.clear()
            self.c_read |= reads
            self._writes_out({d for d, _, _ in idx})
        self.q.create(C, {"opcode": Opcode.GEMM, "reset_reg": int(reset), "uop_bgn": bgn, "uop_end": end,
                          "iter_out": it_out, "iter_in": it_in,
                          "dst_factor_out": f["dst"][0], "dst_factor_in": f["dst"][1],
                          "src_factor_out": f["src"][0], "src_factor_in": f["src"][1],
                          "wgt_factor_out": f["wgt"][0], "wgt_factor_in": f["wgt"][1]})

    def alu(self, op=None, imm=None, use_imm=None, kernel=None) -> None:
        r = self.rnd
        k = kernel or self._kernel(alu=True)
        if k is None:
            return
        bgn, end, it_out, it_in, f, idx = k
        op = r.choice([AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR]) if op is None else op
        use_imm = (r.random() < 0.6) if use_imm is None else use_imm
        if imm is None:
            imm = r.randrange(-40, 40) if op == AluOp.SHR or r.random() < 0.5 else r.randrange(-32768, 32768)
        self._writes_out({d for d, _, _ in idx})
        self.q.create(C, {"opcode": Opcode.ALU, "reset_reg": 0, "uop_bgn": bgn, "uop_end": end,
                          "iter_out": it_out, "iter_in": it_in,
                          "dst_factor_out": f["dst"][0], "dst_factor_in": f["dst"][1],
                          "src_factor_out": f["src"][0], "src_factor_in": f["src"][1],
                          "alu_opcode": int(op), "use_imm": int(use_imm), "imm": imm})

    def epilogue(self) -> None:
        """A layer's epilogue: an ALU instruction over a range of ACC rows (with an immediate, or source
        rows that may overlap the range), then immediate ALU instructions over the same rows, each
        loop shape writing every row once (now and then one that does not), each kernel loaded into
        the uop SRAM just before it."""
        r = self.rnd
        n = r.randrange(1, min(self.R["acc"], 96 if self.big else 24) + 1)
        base = r.randrange(0, self.R["acc"] - n + 1)
        for step in range(r.randrange(2, 6)):
            nu = r.choice([d for d in range(1, min(n, 8) + 1) if n % d == 0])
            ii = r.choice([d for d in range(1, n // nu + 1) if (n // nu) % d == 0])
            io, fi, fo, first = n // (nu * ii), nu, nu * ii, base
            if r.random() < 0.1:   # not the range once: shifted, or overlapping rows
                if first + n < self.R["acc"] and r.random() < 0.5:
                    first += 1
                elif ii > 1:
                    fi -= 1
                elif io > 1:
                    fo -= 1
            use_imm = step > 0 or r.random() < 0.3
            src = [0] * nu
            sf = (0, 0)
            if not use_imm:
                if r.random() < 0.5:   # a bias: one row per outer iteration
                    src = [r.randrange(0, self.R["acc"] - io + 1)] * nu
                    sf = (1, 0)
                else:                  # row by row from another range (or this one)
                    s0 = r.randrange(0, self.R["acc"] - n + 1)
                    src = [s0 + j for j in range(nu)]
                    sf = (fo, fi)
            uops = [(first + j, src[j], 0) for j in range(nu)]
            slot = r.randrange(0, self.R["uop"] - nu + 1)
            kernel = np.array([self.isa.uop.encode(dst_idx=d, src_idx=sr, wgt_idx=0) for d, sr, _ in uops], np.uint32)
            self.q.mem(Opcode.LOAD, MemType.UOP, sram_base=slot, dram_base=self._buffer(kernel) // 4, y_size=1,
                       x_size=nu, x_stride=nu)
            for j, u in enumerate(uops):
                self.uop_sram[slot + j] = u
            idx = [(d + o * fo + i * fi, sr + o * sf[0] + i * sf[1], 0)
                   for o in range(io) for i in range(ii) for d, sr, _ in uops]
            if max(d for d, _, _ in idx) >= self.R["acc"]:
                continue
            f = {"dst": (fo, fi), "src": sf, "wgt": (0, 0)}
            self.alu(use_imm=use_imm, kernel=(slot, slot + nu, io, ii, f, idx))

    def bad_loop(self) -> bool:
        """A GEMM or ALU whose loop runs an index past its buffer (not the region: the SRAM's depth)
        after some uops that are in range; the loop's largest index is usually past its first bad one."""
        r, cfg = self.rnd, self.cfg
        k = self._kernel(alu=r.random() < 0.5)
        if k is None or k[0] == k[1]:
            return False
        bgn, end, _, _, _, _ = k
        uops = [self.uop_sram[j] for j in range(bgn, end)]
        alu = r.random() < 0.5
        reset = not alu and r.random() < 0.2
        use_imm = alu and r.random() < 0.5
        names = ["dst"] + ([] if reset or use_imm else ["src"]) + ([] if alu or reset else ["wgt"])
        over = r.choice(names)
        depth = {"dst": cfg.ACC_BUFF_DEPTH, "src": cfg.ACC_BUFF_DEPTH if alu else cfg.INP_BUFF_DEPTH,
                 "wgt": cfg.WGT_BUFF_DEPTH}
        outer = r.random() < 0.5   # the loop that runs past the buffer: the outer one or the inner one
        it_out, it_in = (r.randrange(2, 5), r.randrange(1, 9)) if outer else (r.randrange(1, 3), r.randrange(2, 200))
        f = {}
        for name, col in (("dst", 0), ("src", 1), ("wgt", 2)):
            top = max(u[col] for u in uops)
            if name != over:   # in range
                fi = r.randrange(0, 2) if top + it_in - 1 < depth[name] else 0
                f[name] = (0, fi)
                continue
            width = (self.isa.alu if alu else self.isa.gemm)[f"{name}_factor_out"].width
            n_over, n_other = (it_out, it_in) if outer else (it_in, it_out)
            small = r.randrange(0, 3)
            need = -(-(depth[name] - top - small * (n_other - 1)) // (n_over - 1))
            big = min(max(need, 1) + r.randrange(0, 40), (1 << width) - 1)
            if big < need:
                return False
            f[name] = (big, small) if outer else (small, big)
        fields = {"uop_bgn": bgn, "uop_end": end, "iter_out": it_out, "iter_in": it_in,
                  "dst_factor_out": f["dst"][0], "dst_factor_in": f["dst"][1],
                  "src_factor_out": f["src"][0], "src_factor_in": f["src"][1]}
        if alu:
            fields.update(opcode=Opcode.ALU, alu_opcode=int(r.choice([AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR])),
                          use_imm=int(use_imm), imm=r.randrange(-40, 40))
        else:
            fields.update(opcode=Opcode.GEMM, reset_reg=int(reset), wgt_factor_out=f["wgt"][0],
                          wgt_factor_in=f["wgt"][1])
        if not reset and not use_imm and (self.l_dirty and not alu):
            self.sync(L, C)
            self.l_dirty.clear()
        self.q.create(C, fields)
        return True

    def _writes_out(self, dsts: set[int]) -> None:
        if dsts & self.s_read:
            self.sync(S, C)
            self.s_read.clear()
        self.out_dirty |= dsts
        self.out_valid |= dsts

    def store(self) -> None:
        r = self.rnd
        if not self.out_valid:
            return
        y, x = r.randrange(1, 3), r.randrange(1, 5)
        if self.big and r.random() < 0.5:
            x = r.randrange(1, 300)
            y = 1
        base = r.choice(sorted(self.out_valid))
        if base + x * y > self.R["acc"]:
            base = max(self.R["acc"] - x * y, 0)
        reads = set(range(base, base + x * y))
        if reads & self.out_dirty:
            self.sync(C, S)
            self.out_dirty.clear()
        self.s_read |= reads
        stride = x + r.randrange(0, 3)
        span = (y - 1) * stride + x
        first = r.randrange(0, self.out_n - span + 1)
        self.q.mem(Opcode.STORE, MemType.OUT, sram_base=base, dram_base=self.out_phys // self.cfg.OUT_ELEM_BYTES
                   + first, y_size=y, x_size=x, x_stride=stride)

    def prologue(self) -> None:
        """Fill the INP, WGT, ACC and UOP regions with data (padded loads come later)."""
        cfg = self.cfg
        for kind, mt, phys, elem in (("inp", MemType.INP, self.inp_buf, cfg.INP_ELEM_BYTES),
                                     ("wgt", MemType.WGT, self.wgt_buf, cfg.WGT_ELEM_BYTES),
                                     ("acc", MemType.ACC, self.acc_buf, cfg.ACC_ELEM_BYTES),
                                     ("uop", MemType.UOP, self.uop_buf, 4)):
            n = self.R[kind]
            src_n = {"inp": self.inp_n, "wgt": self.wgt_n, "acc": self.acc_n, "uop": self.uop_n}[kind]
            first = self.rnd.randrange(0, src_n - n + 1)
            self.q.mem(Opcode.LOAD, mt, sram_base=0, dram_base=phys // elem + first, y_size=1, x_size=n, x_stride=n)
            if kind in ("inp", "wgt"):
                self.l_dirty.update((kind, i) for i in range(n))
            if kind == "uop":
                for i in range(n):
                    self.uop_sram[i] = self.uops[first + i]

    def dump_acc(self) -> None:
        """Four ALU passes (SHR 0, then SHR 8 x3) over the ACC region, each stored to its own buffer."""
        n = self.R["acc"]
        self.q.mem(Opcode.LOAD, MemType.UOP, sram_base=self.R["uop"], dram_base=self.uop_buf // 4, y_size=1,
                   x_size=1, x_stride=1)
        kern = (self.R["uop"], self.R["uop"] + 1, 1, n, {"dst": (0, 1), "src": (0, 1), "wgt": (0, 0)},
                [(i, i, 0) for i in range(n)])
        dump = self.alloc(4 * n * self.cfg.OUT_ELEM_BYTES)
        self.buffers.append((dump, np.zeros(4 * n * self.cfg.OUT_ELEM_BYTES, np.uint8)))
        self.dump = (dump, 4 * n * self.cfg.OUT_ELEM_BYTES)
        for k in range(4):
            self.alu(AluOp.SHR, 0 if k == 0 else 8, True, kern)
            self.sync(C, S)
            self.out_dirty.clear()
            self.q.mem(Opcode.STORE, MemType.OUT, sram_base=0, dram_base=dump // self.cfg.OUT_ELEM_BYTES + k * n,
                       y_size=1, x_size=n, x_stride=n)
            self.s_read |= set(range(n))

    def build(self, n_ops: int, bad_loop: bool = False) -> tuple[bytes, list[tuple[int, int]]]:
        r = self.rnd
        ops = ["inp", "wgt", "acc", "uop", "gemm", "gemm", "alu", "alu", "epilogue", "store", "sync"]
        self.prologue()
        bad_at = r.randrange(0, n_ops) if bad_loop else -1
        self.bad_loop_made = False
        for step in range(n_ops):
            if step == bad_at:
                self.bad_loop_made = self.bad_loop()
            op = r.choice(ops)
            if op in ("inp", "wgt", "acc", "uop"):
                self.load(op)
            elif op == "gemm":
                self.gemm()
            elif op == "alu":
                self.alu()
            elif op == "epilogue":
                self.epilogue()
            elif op == "store":
                self.store()
            else:
                a, b = r.choice([(L, C), (C, L), (C, S), (S, C)])
                self.sync(a, b)
        self.dump = None
        if r.random() < 0.4:
            self.dump_acc()
        self.synced_end = r.random() < 0.7
        if self.synced_end:   # close like the runtime's synchronize
            self.q.dep_push(S, C)
            self.q.dep_push(L, C)
            self.q.dep_pop(S, C)
            self.q.dep_pop(L, C)
            self.q.commit_pending_pop(C)
        else:                 # end without a sync: load and store may still have work when FINISH runs
            if r.random() < 0.5:
                self.store()
            if r.random() < 0.5:
                self.load(r.choice(["inp", "wgt"]))
            for stage in (L, C, S):
                self.q.commit_pending_pop(stage)
        self.q.create(C, {"opcode": Opcode.FINISH})
        insns = self.q.encode()
        outputs = [(self.out_phys, self.out_n * self.cfg.OUT_ELEM_BYTES)]
        if self.dump:
            outputs.append(self.dump)
        return insns, outputs


def _illegal_word(isa, cfg, rnd):
    choices = [
        lambda: 5 + rnd.randrange(3),
        lambda: isa.load(rnd.choice([MemType.OUT, MemType.ACC_8BIT, 6, 7]), 0, 0, 1, 1, 1),
        lambda: isa.store(0, 0, 1, 1, 1, memory_type=rnd.choice([0, 1, 2, 3])),
        lambda: isa.alu.encode(opcode=Opcode.ALU, alu_opcode=rnd.choice([4, 5, 6, 7]), uop_end=1, iter_out=1,
                               iter_in=1),
        lambda: isa.gemm.encode(opcode=Opcode.GEMM, uop_end=cfg.UOP_BUFF_DEPTH + 1, iter_out=1, iter_in=1),
        lambda: isa.load(MemType.INP, cfg.INP_BUFF_DEPTH - 1, 0, 1, 2, 2),
        lambda: isa.load(MemType.INP, 0, 0, 0, 0, 0, pop_prev_dep=1),
    ]
    return rnd.choice(choices)()


def _with_word(insns: bytes, k: int, word: int) -> bytes:
    b = bytearray(insns)
    b[16 * k:16 * k + 16] = word.to_bytes(16, "little")
    return bytes(b)


def _changed_stream(cfg, insns: bytes, rnd: random.Random) -> tuple[bytes, str]:
    """The stream for a second run at the same address (fsim remembers streams it checked): the
    same, an ALU's immediate or opcode changed (still legal), or one instruction made illegal."""
    isa = cfg.isa
    words = [int.from_bytes(insns[k:k + 16], "little") for k in range(0, len(insns), 16)]
    alus = [k for k, w in enumerate(words) if isa.alu.decode(w)["opcode"] == Opcode.ALU]
    kind = rnd.choice(["same", "alu", "alu", "illegal"])
    if kind == "alu" and alus:
        k = rnd.choice(alus)
        fields = isa.alu.decode(words[k])
        fields.update(imm=rnd.randrange(-40, 40), alu_opcode=int(rnd.choice([AluOp.MIN, AluOp.MAX, AluOp.ADD,
                                                                              AluOp.SHR])))
        return _with_word(insns, k, isa.alu.encode(**fields)), f"ALU {k} changed"
    if kind == "illegal":
        k = rnd.randrange(0, len(words) - 1)
        return _with_word(insns, k, _illegal_word(isa, cfg, rnd)), f"instruction {k} made illegal"
    return insns, "the same"


def make_program(cfg_name: str, seed: int, alloc) -> Program:
    cfg = load_config(configs()[cfg_name])
    rnd = random.Random(seed)
    g = _Gen(cfg, rnd, alloc)
    illegal = rnd.random() < 0.1
    insns, outputs = g.build(rnd.randrange(5, 120), bad_loop=not illegal and rnd.random() < 0.1)
    prog = Program(cfg_name, seed, insns, g.buffers, outputs)
    prog.notes += [note for note, on in (("sparse inputs", g.sparse), ("no sync at the end", not g.synced_end),
                                         ("a loop past a buffer", g.bad_loop_made)) if on]
    if illegal:
        n = len(insns) // 16
        k = rnd.randrange(0, n - 1)
        prog.insns = _with_word(insns, k, _illegal_word(cfg.isa, cfg, rnd))
        prog.illegal_at = k
    elif not g.bad_loop_made and rnd.random() < 0.15:
        prog.rerun, how = _changed_stream(cfg, insns, rnd)
        prog.notes.append(f"run twice ({how})")
    return prog


# ---------------------------------------------------------------------------- running
#: counters of the compute module, which runs in order: at a run-time error in a compute instruction
#: they count exactly what ran before it (load and store may be anywhere at that moment)
COMPUTE_COUNTERS = ("uop_load_nbytes", "acc_load_nbytes", "gemm_counter", "alu_counter")


def _run_on(dev, prog: Program, insns: bytes | None = None, insn_phys: int | None = None):
    """Run the program's stream (or ``insns``, written at ``insn_phys``: a second run of a stream
    at the address of the first); returns (outcome, outputs, counters, insn_phys). The outcome is
    None, or the error's class and instruction index, and for an SRAM index its message too (which
    names the first failing index)."""
    if insns is None:
        insns = prog.insns
        for phys, data in prog.buffers:
            dev.write(phys, data)
    if insn_phys is None:
        insn_phys = dev.alloc(len(insns))
    dev.write(insn_phys, insns)
    try:
        dev.run(insn_phys, len(insns) // 16, timeout=120)
        err = None
    except SramIndexError as exc:
        err = (type(exc).__name__, exc.index, str(exc).splitlines()[0])
    except ProgramError as exc:
        err = (type(exc).__name__, exc.index)
    outs = [dev.read(p, n) for p, n in prog.outputs]
    stats = {k: dev.stats()[k] for k in DEVICE_COUNTERS}
    return err, outs, stats, insn_phys


def bus_for(seed: int):
    """tsim's bus for the program of ``seed`` (its own random stream: the program does not change)."""
    from .tsim import BusModel
    return BusModel.random(random.Random(f"bus-{seed}"))


def _fresh_pair(cfg_name: str, seed: int):
    from .fsim import FsimDevice
    from .tsim import TsimDevice
    cfg = load_config(configs()[cfg_name])
    return FsimDevice(cfg, dram_bytes=DRAM_BYTES), TsimDevice(cfg, dram_bytes=DRAM_BYTES, bus=bus_for(seed),
                                                             progress=None)


def run_case(cfg_name: str, seed: int) -> tuple[Program, list[str]]:
    """Run one random program on fresh fsim and tsim devices; returns (program, mismatch descriptions)."""
    fs, ts = _fresh_pair(cfg_name, seed)
    try:
        prog = make_program(cfg_name, seed, fs.alloc)
        for phys, data in prog.buffers:                    # the same allocations on tsim
            got = ts.alloc(data.size)
            assert got == phys, "fsim and tsim allocate alike"
        problems = compare(prog, fs, ts)
        prog.tsim_cycles = ts.cycles()
        return prog, problems
    finally:
        ts.close()


def compare(prog: Program, fs, ts) -> list[str]:
    from .tsim import BusProtocolError
    problems: list[str] = []
    runs = [("", None)] + ([("second run: ", prog.rerun)] if prog.rerun is not None else [])
    phys = (None, None)
    for what, insns in runs:
        fe, fo, fst, fphys = _run_on(fs, prog, insns, phys[0])
        try:
            te, to, tst, tphys = _run_on(ts, prog, insns, phys[1])
        except BusProtocolError as exc:
            return problems + [f"{what}tsim bus checker ({ts.bus}): {exc}"]
        phys = (fphys, tphys)
        if fe != te:
            problems.append(f"{what}outcome: fsim {fe or 'ok'}, tsim {te or 'ok'}")
        if fe is None and te is None:
            for k, (a, b) in enumerate(zip(fo, to)):
                if a != b:
                    da, db = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
                    first = int(np.flatnonzero(da != db)[0])
                    problems.append(f"{what}output buffer {k}: {int((da != db).sum())} bytes differ, "
                                    f"first at byte {first}")
        run_time_error = fe is not None and fe == te and fe[0] == "SramIndexError" and prog.illegal_at is None \
            and not what
        keys = DEVICE_COUNTERS if fe is None and te is None else COMPUTE_COUNTERS if run_time_error else ()
        problems += [f"{what}counter {key}: fsim {fst[key]}, tsim {tst[key]}" for key in keys if fst[key] != tst[key]]
        if problems:
            break
    return problems


def save(prog: Program, problems: list[str]) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"case-{prog.cfg_name}-{prog.seed}.npz"
    arrays = {"insns": np.frombuffer(prog.insns, np.uint8), "meta": np.array([prog.cfg_name, str(prog.seed)])}
    for k, (phys, data) in enumerate(prog.buffers):
        arrays[f"buf{k}_{phys}"] = data
    arrays["outputs"] = np.array(prog.outputs, dtype=np.int64).reshape(-1, 2)
    if prog.rerun is not None:
        arrays["rerun"] = np.frombuffer(prog.rerun, np.uint8)
    arrays["problems"] = np.array(problems or ["-"])
    np.savez_compressed(path, **arrays)
    return path


def load(path: str | Path) -> Program:
    z = np.load(path)
    cfg_name, seed = (str(x) for x in z["meta"])
    bufs = sorted(((int(k.split("_")[1]), int(k[3:].split("_")[0]), z[k]) for k in z.files if k.startswith("buf")),
                  key=lambda t: t[1])
    return Program(cfg_name, int(seed), z["insns"].tobytes(), [(p, d) for p, _, d in bufs],
                   [tuple(map(int, r)) for r in z["outputs"]],
                   rerun=z["rerun"].tobytes() if "rerun" in z.files else None)


def replay(path: str | Path) -> list[str]:
    prog = load(path)
    fs, ts = _fresh_pair(prog.cfg_name, prog.seed)
    try:
        for phys, data in prog.buffers:
            assert fs.alloc(data.size) == phys and ts.alloc(data.size) == phys
        return compare(prog, fs, ts)
    finally:
        ts.close()


def _case(job: tuple[str, int]) -> tuple[Program, list[str]]:
    name, case_seed = job
    try:
        prog, problems = run_case(name, case_seed)
    except Exception:  # a crash in the harness or a device is a finding too
        problems = ["exception:\n" + traceback.format_exc()]
        prog = Program(name, case_seed, b"", [], [])
    if problems and prog.insns:
        prog.notes.append(str(save(prog, problems)))
    return prog, problems


def build_all(names: list[str], quiet: bool = True) -> None:
    """Build each config's tsim library once, before any worker needs it."""
    from .tsim import build
    for name in names:
        build(load_config(configs()[name]), progress=(lambda msg: None) if quiet else None)


def run_all(cases: list[tuple[str, int]], jobs: int = 1):
    """Yield ``(program, problems)`` for each (config name, seed) in ``cases``, in completion order,
    from ``jobs`` worker processes (each case on its own fresh devices)."""
    build_all(sorted({name for name, _ in cases}))
    jobs = max(1, min(jobs, len(cases)))
    if jobs == 1:
        yield from map(_case, cases)
        return
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap_unordered(_case, cases)


def fuzz(n: int, seed: int = 0, names: list[str] | None = None, quiet: bool = False,
         jobs: int = 1) -> list[tuple[Program, list]]:
    """Run programs ``seed .. seed+n-1`` (config ``names[k % len(names)]``) on ``jobs`` worker
    processes; returns the failures, ordered by seed."""
    names = names or list(configs())
    cases = [(names[k % len(names)], seed + k) for k in range(n)]
    build_all(names, quiet)
    failures = []
    shapes: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for done, (prog, problems) in enumerate(run_all(cases, jobs), 1):
        shapes.update(note.split(" (")[0] for note in prog.notes if not note.endswith(".npz"))
        if problems:
            failures.append((prog, problems))
            where = f" (reproducer {prog.notes[-1]})" if prog.notes else ""
            print(f"MISMATCH {prog.cfg_name} seed {prog.seed}: " + "; ".join(problems) + where, flush=True)
        elif not quiet and done % 100 == 0:
            dt = time.perf_counter() - t0
            print(f"  {done}/{n} programs, {len(failures)} mismatches ({dt:.0f} s, {done / dt:.2f} programs/s)",
                  flush=True)
    if not quiet:
        print("programs by shape: " + ", ".join(f"{k} {v}" for k, v in sorted(shapes.items())), flush=True)
    return sorted(failures, key=lambda f: f[0].seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", nargs="?", type=int, default=100, help="number of random programs (default 100)")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first seed (default: from the clock)")
    p.add_argument("--config", action="append", choices=sorted(configs()), help="configs to use (default: all)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: every core; results do not depend on it)")
    p.add_argument("--replay", help="run a saved reproducer again")
    args = p.parse_args(argv)
    if args.replay:
        problems = replay(args.replay)
        print("\n".join(problems) if problems else "no mismatch")
        return 1 if problems else 0
    names = args.config or list(configs())
    print(f"fuzzing {args.n} programs (seeds {args.seed}..{args.seed + args.n - 1}) on {', '.join(names)} "
          f"with {args.jobs} worker(s)", flush=True)
    build_all(names, quiet=False)
    t0 = time.perf_counter()
    failures = fuzz(args.n, args.seed, names, jobs=args.jobs)
    dt = time.perf_counter() - t0
    print(f"{args.n} programs, {len(failures)} mismatches, {dt:.0f} s ({args.n / dt:.2f} programs/s, builds "
          f"excluded); seeds {args.seed}..{args.seed + args.n - 1} on {', '.join(names)}, {args.jobs} worker(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
