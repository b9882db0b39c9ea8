"""fsim: the bit-exact functional simulator of VTA (spec 2.11), vectorised with numpy.

It models what the hardware has: separate INP, WGT, UOP, ACC and OUT SRAMs (OUT is written
only by GEMM and ALU, gotcha G4), the load/compute/store modules with the four dependency-token
queues, and the original simulator's counters. Bad programs raise a ``ProgramError`` subclass
that names the instruction; a run never hangs (deadlocks are detected, not waited on).

Semantic decisions shared with the hardware (README, "Semantics"):

* MUL and ACC_8BIT are refused (IllegalInstructionError).
* SHR shifts right by the low ``LOG_ACC_WIDTH+1`` bits of the operand read as a signed number;
  a negative amount shifts left. This equals HLS for -16..15 and the original fsim for -32..31.
* A reset GEMM zeroes ACC and leaves OUT unchanged.
* Every load type (UOP, INP, WGT, ACC) is a 2-D DMA with zero padding.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from vta_hw.spec import (
    DEVICE_COUNTERS,
    TOKEN_QUEUES,
    AluOp,
    Config,
    MemType,
    Opcode,
    Stage,
    load_config,
)
from vta_runtime.diagnose import Program as _Program
from vta_runtime.diagnose import check_stream, state_report, unbalanced_error
from vta_runtime.errors import (
    DeadlockError,
    DeviceTimeout,
    MissingFinishError,
    SramIndexError,
)

from .memory import DEFAULT_DRAM_BYTES, SimulatedDram, SimulatedMemoryDevice


class FsimDevice(SimulatedMemoryDevice):
    """Functional simulator implementing the ``vta_runtime.Device`` protocol."""

    def __init__(self, config: Config | dict[str, Any] | str | None = None, *, dram_bytes: int = DEFAULT_DRAM_BYTES):
        cfg = self.config = load_config(config)
        self.isa = cfg.isa
        self.dram = SimulatedDram(dram_bytes)
        self.inp_lanes = cfg.BATCH * cfg.BLOCK_IN
        self.wgt_lanes = cfg.BLOCK_OUT * cfg.BLOCK_IN
        self.acc_lanes = cfg.BATCH * cfg.BLOCK_OUT
        self.inp = np.zeros((cfg.INP_BUFF_DEPTH, self.inp_lanes), np.int8)
        self.wgt = np.zeros((cfg.WGT_BUFF_DEPTH, self.wgt_lanes), np.int8)
        self.acc = np.zeros((cfg.ACC_BUFF_DEPTH, self.acc_lanes), np.int32)
        self.out = np.zeros((cfg.ACC_BUFF_DEPTH, self.acc_lanes), np.int8)
        self.uop = np.zeros((cfg.UOP_BUFF_DEPTH, 1), np.uint32)
        u = self.isa.uop
        self._uop_fields = [(np.uint32(f.lsb), np.uint32((1 << f.width) - 1)) for f in u]
        self._shift_bits = cfg.LOG_ACC_WIDTH + 1
        # memory type -> (SRAM, DRAM element view, element bytes, counter, name)
        self._mem = {
            MemType.UOP: (self.uop, self.dram.elements(np.uint32, 1), cfg.UOP_ELEM_BYTES, "uop_load_nbytes", "UOP"),
            MemType.INP: (self.inp, self.dram.elements(np.int8, self.inp_lanes), cfg.INP_ELEM_BYTES,
                          "inp_load_nbytes", "INP"),
            MemType.WGT: (self.wgt, self.dram.elements(np.int8, self.wgt_lanes), cfg.WGT_ELEM_BYTES,
                          "wgt_load_nbytes", "WGT"),
            MemType.ACC: (self.acc, self.dram.elements(np.int32, self.acc_lanes), cfg.ACC_ELEM_BYTES,
                          "acc_load_nbytes", "ACC"),
            MemType.OUT: (self.out, self.dram.elements(np.int8, self.acc_lanes), cfg.OUT_ELEM_BYTES,
                          "out_store_nbytes", "OUT"),
        }
        self._stats = dict.fromkeys(DEVICE_COUNTERS, 0)

    # ------------------------------------------------------------------ Device protocol
    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def clear_stats(self) -> None:
        self._stats = dict.fromkeys(DEVICE_COUNTERS, 0)

    def run(self, insn_phys: int, insn_count: int, timeout: float | None = None) -> None:
        insn_count = int(insn_count)
        if insn_count <= 0:
            raise MissingFinishError(f"cannot run {insn_count} instructions: a stream needs at least a FINISH")
        self.dram.check(insn_phys, insn_count * 16, f"the instruction fetch of {insn_count} instructions")
        words = self.dram.data[insn_phys:insn_phys + insn_count * 16].view("<u8").reshape(-1, 2)
        prog = _Program(self.isa, words)
        self._validate(prog)
        self._execute(prog, timeout)

    # ------------------------------------------------------------------ static checks
    def _validate(self, p: _Program) -> None:
        check_stream(self.config, p, self.dram)

    # ------------------------------------------------------------------ execution
    def _execute(self, p: _Program, timeout: float | None) -> None:
        queues = {Stage.LOAD: deque(), Stage.COMPUTE: deque(), Stage.STORE: deque()}
        for i in range(p.n):
            queues[p.stage[i]].append(i)
        tokens = dict.fromkeys(TOKEN_QUEUES, 0)
        deadline = None if timeout is None else time.monotonic() + timeout
        done = False
        while not done:
            progressed = False
            for q in queues.values():
                while q:
                    i = q[0]
                    pops = p.pops[i]
                    if any(tokens[t] == 0 for t in pops):
                        break
                    for t in pops:
                        tokens[t] -= 1
                    q.popleft()
                    self._exec_one(p, i)
                    for t in p.pushes[i]:
                        tokens[t] += 1
                    progressed = True
                    if p.opcode[i] == Opcode.FINISH:
                        done = True
                        break
                    if deadline is not None and time.monotonic() > deadline:
                        raise DeviceTimeout(f"fsim run exceeded its {timeout} s bound\n" +
                                            self._state(p, queues, tokens))
                if done:
                    break
            if not progressed and not done:
                raise DeadlockError("deadlock: no module can make progress\n" + self._state(p, queues, tokens),
                                    min(q[0] for q in queues.values() if q))
        err = unbalanced_error(self.isa, p, queues, tokens)
        if err is not None:
            raise err

    def _state(self, p: _Program, queues, tokens) -> str:
        return state_report(self.isa, p, queues, tokens)

    def _exec_one(self, p: _Program, i: int) -> None:
        op = p.opcode[i]
        if op == Opcode.LOAD:
            self._load(p.mem_fields(i))
        elif op == Opcode.STORE:
            self._store(p.mem_fields(i))
        elif op == Opcode.GEMM:
            self._gemm(p, i)
        elif op == Opcode.ALU:
            self._alu(p, i)

    def _load(self, f: dict[str, int]) -> None:
        x, y = f["x_size"], f["y_size"]
        if x == 0:
            return
        sram, elems, elem_bytes, counter, _ = self._mem[f["memory_type"]]
        self._stats[counter] += x * y * elem_bytes
        xp0, xp1, yp0, yp1 = f["x_pad_0"], f["x_pad_1"], f["y_pad_0"], f["y_pad_1"]
        rows, cols = yp0 + y + yp1, xp0 + x + xp1
        base = f["sram_base"]
        block = sram[base:base + rows * cols].reshape(rows, cols, sram.shape[1])
        if xp0 or xp1 or yp0 or yp1:
            block[...] = 0
        if y:
            start = f["dram_base"]
            src = np.lib.stride_tricks.as_strided(
                elems[start:], shape=(y, x, elems.shape[1]),
                strides=(f["x_stride"] * elems.strides[0], elems.strides[0], elems.strides[1]), writeable=False)
            block[yp0:yp0 + y, xp0:xp0 + x] = src

    def _store(self, f: dict[str, int]) -> None:
        x, y = f["x_size"], f["y_size"]
        if x == 0 or y == 0:
            return
        sram, elems, elem_bytes, counter, _ = self._mem[MemType.OUT]
        self._stats[counter] += x * y * elem_bytes
        start, base = f["dram_base"], f["sram_base"]
        dst = np.lib.stride_tricks.as_strided(
            elems[start:], shape=(y, x, elems.shape[1]),
            strides=(f["x_stride"] * elems.strides[0], elems.strides[0], elems.strides[1]))
        dst[...] = sram[base:base + x * y].reshape(y, x, -1)

    def _loop_indices(self, p: _Program, i: int, fmt: str, names: tuple[str, ...]):
        """Index arrays (in the hardware's loop order) for the uop fields, or None if the loop is empty."""
        g = p.gemm_fields(i) if fmt == "gemm" else p.alu_fields(i)
        bgn, end, it_o, it_i = g["uop_bgn"], g["uop_end"], g["iter_out"], g["iter_in"]
        if end <= bgn or it_o == 0 or it_i == 0:
            return g, None
        u = self.uop[bgn:end, 0]
        o = np.arange(it_o, dtype=np.int64)[:, None, None]
        n = np.arange(it_i, dtype=np.int64)[None, :, None]
        out = []
        for k, name in enumerate(names):
            shift, mask = self._uop_fields[k]
            base = ((u >> shift) & mask).astype(np.int64)[None, None, :]
            idx = base + o * g[f"{name}_factor_out"] + n * g[f"{name}_factor_in"]
            out.append(idx.reshape(-1))
        return g, out

    def _check_idx(self, i: int, idx: np.ndarray, depth: int, what: str) -> None:
        top = int(idx.max())
        if top >= depth:
            raise SramIndexError(f"instruction {i}: {what} index {top} is past the buffer depth {depth}", i)

    def _gemm(self, p: _Program, i: int) -> None:
        g, idx = self._loop_indices(p, i, "gemm", ("dst", "src", "wgt"))
        if idx is None:
            return
        a, x, w = idx
        cfg = self.config
        self._check_idx(i, a, cfg.ACC_BUFF_DEPTH, "GEMM ACC (dst)")
        if g["reset_reg"]:
            self.acc[a] = 0
            return
        self._check_idx(i, x, cfg.INP_BUFF_DEPTH, "GEMM INP (src)")
        self._check_idx(i, w, cfg.WGT_BUFF_DEPTH, "GEMM WGT")
        self._stats["gemm_counter"] += a.size
        prod = _gemm_products(self.inp, self.wgt, x, w, cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT)
        depth, lanes = self.acc.shape
        flat = (a[:, None] * lanes + np.arange(lanes)).reshape(-1)
        sums = np.bincount(flat, weights=prod.reshape(-1), minlength=depth * lanes).reshape(depth, lanes)
        rows = np.flatnonzero(np.bincount(a, minlength=depth))
        new = (self.acc[rows].astype(np.int64) + sums[rows].astype(np.int64)).astype(np.int32)
        self.acc[rows] = new
        self.out[rows] = new.astype(np.int8)

    def _alu(self, p: _Program, i: int) -> None:
        g, idx = self._loop_indices(p, i, "alu", ("dst", "src"))
        if idx is None:
            return
        a, s = idx
        depth = self.config.ACC_BUFF_DEPTH
        self._check_idx(i, a, depth, "ALU ACC (dst)")
        use_imm = g["use_imm"]
        if not use_imm:
            self._check_idx(i, s, depth, "ALU ACC (src)")
        self._stats["alu_counter"] += a.size
        op, imm = g["alu_opcode"], g["imm"]
        if _alu_vectorisable(a, s, use_imm, depth):
            lhs = self.acc[a].astype(np.int64)
            rhs = np.int64(imm) if use_imm else self.acc[s].astype(np.int64)
            res = _alu_op(op, lhs, rhs, self._shift_bits)
            self.acc[a] = res
            self.out[a] = res.astype(np.int8)
            return
        for k in range(a.size):  # read-after-write inside one instruction: keep program order
            d = a[k]
            lhs = self.acc[d].astype(np.int64)
            rhs = np.int64(imm) if use_imm else self.acc[s[k]].astype(np.int64)
            res = _alu_op(op, lhs, rhs, self._shift_bits)
            self.acc[d] = res
            self.out[d] = res.astype(np.int8)


def _alu_op(op: int, lhs: np.ndarray, rhs, shift_bits: int) -> np.ndarray:
    if op == AluOp.MIN:
        r = np.minimum(lhs, rhs)
    elif op == AluOp.MAX:
        r = np.maximum(lhs, rhs)
    elif op == AluOp.ADD:
        r = lhs + rhs
    else:  # SHR: signed low shift_bits of the operand; negative shifts left
        half = 1 << (shift_bits - 1)
        amount = ((np.asarray(rhs, dtype=np.int64) & ((1 << shift_bits) - 1)) ^ half) - half
        amount = np.broadcast_to(amount, lhs.shape)
        r = np.where(amount >= 0, lhs >> np.maximum(amount, 0), lhs << np.clip(-amount, 0, 32))
    return r.astype(np.int32)  # wraps to the accumulator width


def _alu_vectorisable(a: np.ndarray, s: np.ndarray, use_imm: int, depth: int) -> bool:
    """True when reading all operands first gives the same result as program order."""
    pos = np.full(depth, -1, dtype=np.int64)
    pos[a] = np.arange(a.size)
    if np.count_nonzero(pos >= 0) != a.size:
        return False  # a destination is written twice
    if use_imm:
        return True
    writer = pos[s]
    return not np.any((writer >= 0) & (writer < np.arange(a.size)))


def _gemm_products(inp, wgt, x, w, batch, block_in, block_out) -> np.ndarray:
    """Exact int products for each uop as float64 (N, batch*block_out); float32 is exact here (< 2^24)."""
    n = x.size
    order = np.argsort(w, kind="stable")
    ws = w[order]
    starts = np.flatnonzero(np.r_[True, ws[1:] != ws[:-1]])
    out = np.empty((n, batch, block_out), np.float32)
    if starts.size * 16 <= n:  # few distinct weights: one matmul per weight tile
        bounds = np.r_[starts, n]
        xs = inp[x[order]].astype(np.float32).reshape(n, batch, block_in)
        res = np.empty_like(out)
        for k in range(starts.size):
            lo, hi = bounds[k], bounds[k + 1]
            wt = wgt[ws[lo]].astype(np.float32).reshape(block_out, block_in)
            res[lo:hi] = xs[lo:hi] @ wt.T
        out[order] = res
    else:
        xs = inp[x].astype(np.float32).reshape(n, batch, block_in)
        wt = wgt[w].astype(np.float32).reshape(n, block_out, block_in)
        out[...] = np.einsum("nbk,nok->nbo", xs, wt)
    return out.reshape(n, batch * block_out).astype(np.float64)
