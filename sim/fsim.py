"""fsim: the bit-exact functional simulator of VTA (spec 2.11).

It models what the hardware has: separate INP, WGT, UOP, ACC and OUT SRAMs (OUT is written
only by GEMM and ALU, gotcha G4), the load/compute/store modules with the four dependency-token
queues, and the original simulator's counters. Bad programs raise a ``ProgramError`` subclass
that names the instruction; a run never hangs (deadlocks are detected, not waited on) and its
timeout holds inside long instructions too.

The SRAMs and the simulated DRAM are numpy arrays; a small C++ engine (``fsim_engine.cc``, built
on first use by ``fsim_native``) checks and runs the stream over them without allocating anything
that grows with the loop counts. Messages are worded here, by the same ``vta_runtime.diagnose``
functions tsim and the boards use.

Semantic decisions shared with the hardware (README, "Semantics"):

* MUL and ACC_8BIT are opt-in ISA extensions (config key ``ISA_EXTENSIONS``, ``vta_hw.spec.EXTENSIONS``):
  run as the spec defines them when the config enables them, refused (IllegalInstructionError) when not.
* SHR shifts right by the low ``LOG_ACC_WIDTH+1`` bits of the operand read as a signed number;
  a negative amount shifts left. This equals HLS for -16..15 and the original fsim for -32..31.
* A reset GEMM zeroes ACC and leaves OUT unchanged.
* Every load type (UOP, INP, WGT, ACC) is a 2-D DMA with zero padding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vta_hw.spec import DEVICE_COUNTERS, TOKEN_QUEUES, Config, Opcode, Stage, load_config
from vta_runtime.diagnose import Program as _Program
from vta_runtime.diagnose import check_stream, remaining_after, state_report, unbalanced_error
from vta_runtime.errors import (
    DeadlockError,
    DeviceError,
    DeviceTimeout,
    MissingFinishError,
    SramIndexError,
)

from . import fsim_native as native
from .memory import DEFAULT_DRAM_BYTES, SimulatedDram, SimulatedMemoryDevice

_STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)


def _sram(shape: tuple[int, int], dtype) -> np.ndarray:
    """A zeroed SRAM array starting on a 64-byte cache line (numpy only promises 16 bytes): the
    engine's 32-byte row accesses then never straddle two lines."""
    nbytes = shape[0] * shape[1] * np.dtype(dtype).itemsize
    raw = np.zeros(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class FsimDevice(SimulatedMemoryDevice):
    """Functional simulator implementing the ``vta_runtime.Device`` protocol."""

    def __init__(self, config: Config | dict[str, Any] | str | None = None, *, dram_bytes: int = DEFAULT_DRAM_BYTES):
        cfg = self.config = load_config(config)
        self.isa = cfg.isa
        self.dram = SimulatedDram(dram_bytes)
        self.inp = _sram((cfg.INP_BUFF_DEPTH, cfg.BATCH * cfg.BLOCK_IN), np.int8)
        self.wgt = _sram((cfg.WGT_BUFF_DEPTH, cfg.BLOCK_OUT * cfg.BLOCK_IN), np.int8)
        self.acc = _sram((cfg.ACC_BUFF_DEPTH, cfg.BATCH * cfg.BLOCK_OUT), np.int32)
        self.out = _sram((cfg.ACC_BUFF_DEPTH, cfg.BATCH * cfg.BLOCK_OUT), np.int8)
        self.uop = np.zeros((cfg.UOP_BUFF_DEPTH, 1), np.uint32)
        self._counts = np.zeros(len(DEVICE_COUNTERS), np.int64)
        self.engine = native.Engine(cfg, DEVICE_COUNTERS)
        self.engine.bind(self.inp, self.wgt, self.acc, self.out, self.uop, self.dram.data, self._counts)
        # run_stream does write + run in one engine call, unless a subclass changes one of the steps
        self._one_call = all(getattr(type(self), m) is getattr(FsimDevice, m)
                             for m in ("write", "run", "_validate", "_execute"))

    # ------------------------------------------------------------------ Device protocol
    def stats(self) -> dict[str, int]:
        return dict(zip(DEVICE_COUNTERS, self._counts.tolist()))

    def clear_stats(self) -> None:
        self._counts[:] = 0

    def run(self, insn_phys: int, insn_count: int, timeout: float | None = None) -> None:
        insn_count = int(insn_count)
        if insn_count <= 0:
            raise MissingFinishError(f"cannot run {insn_count} instructions: a stream needs at least a FINISH")
        self.dram.check(insn_phys, insn_count * 16, f"the instruction fetch of {insn_count} instructions")
        # a copy: a STORE may overwrite the stream, and messages decode it afterwards
        words = self.dram.data[insn_phys:insn_phys + insn_count * 16].view("<u8").reshape(-1, 2).copy()
        prog = _Program(self.isa, words)
        self._validate(prog)
        self._execute(prog, timeout)

    def run_stream(self, stream: bytes, count: int, insn_phys: int, uops: bytes, uop_phys: int,
                   timeout: float | None = None) -> None:
        """``write(uop_phys, uops)`` (if any), ``write(insn_phys, stream)``, ``run(insn_phys, count, timeout)``
        in one engine call (the runtime hands every stream over so); the same effects and errors."""
        if not self._one_call or len(stream) != 16 * count:
            self._write_and_run(stream, count, insn_phys, uops, uop_phys, timeout)
            return
        status, report = self.engine.stream(stream, count, insn_phys, uops, uop_phys,
                                            self.dram.pages.allocation_table(), timeout)
        if status == native.OK:
            return
        if status in (native.WRITE_REFUSED, native.CHECK_REFUSED):   # nothing ran: the two steps word it
            self._write_and_run(stream, count, insn_phys, uops, uop_phys, timeout)
            raise DeviceError(f"fsim's engine refused a stream (status {status}) that its two-step path runs "
                              "(fsim_engine.cc's fsim_stream and fsim.py disagree: a bug)")
        prog = _Program(self.isa, np.frombuffer(stream, "<u8").reshape(-1, 2).copy())
        if status == native.UNBALANCED:   # as _execute: diagnose decides whether what is left is an error
            err = unbalanced_error(self.isa, prog, *self._progress(prog, report))
            if err is not None:
                raise err
            return
        self._raise(prog, status, report, timeout)

    def _write_and_run(self, stream: bytes, count: int, insn_phys: int, uops: bytes, uop_phys: int,
                       timeout: float | None) -> None:
        if uops:
            self.write(uop_phys, uops)
        self.write(insn_phys, stream)
        self.run(insn_phys, count, timeout)

    # ------------------------------------------------------------------ static checks
    def _validate(self, p: _Program) -> None:
        bad = self.engine.check(p.words, self.dram.pages.allocation_table())
        if bad < 0:
            return
        check_stream(self.config, p, self.dram)   # words the message
        raise DeviceError(f"fsim's engine refused instruction {bad}, which vta_runtime.diagnose accepts "
                          "(fsim_engine.cc and diagnose.py disagree: a bug)")

    # ------------------------------------------------------------------ execution
    def _execute(self, p: _Program, timeout: float | None) -> None:
        status, report = self.engine.run(p.words, timeout)
        if status != native.OK:
            self._raise(p, status, report, timeout)
        # every module done, no tokens left, and nothing after the FINISH that ran (the last instruction)
        if report[3:6] == [p.n] * 3 and not any(report[6:10]) and self._is_finish(p.words[-1]):
            return
        queues, tokens = self._progress(p, report)
        err = unbalanced_error(self.isa, p, queues, tokens)
        if err is not None:
            raise err

    def _is_finish(self, word: np.ndarray) -> bool:
        f = self.isa.mem["opcode"]
        return (int(word[f.word]) >> (f.lsb % 64)) & ((1 << f.width) - 1) == Opcode.FINISH

    def _exec_one(self, p: _Program, i: int) -> None:
        """Execute instruction ``i`` alone (for schedulers of its own, such as the tests' racy fsim)."""
        status, report = self.engine.exec_one(p.words[i], None)
        if status != native.OK:
            report[0] = i
            self._raise(p, status, report, None)

    def _progress(self, p: _Program, report: list[int]) -> tuple[dict, dict]:
        """The instructions each module has left, and the tokens in each queue, from an engine report."""
        queues = remaining_after(p, dict(zip(_STAGES, report[3:6])))
        tokens = dict(zip(TOKEN_QUEUES, report[6:10]))
        return queues, tokens

    def _raise(self, p: _Program, status: int, report: list[int], timeout: float | None) -> None:
        i = report[0]
        if status == native.SRAM_INDEX:
            what, depth = native.SRAM_WHAT[report[1]]
            raise SramIndexError(f"instruction {i}: {what} index {report[2]} is past the buffer depth "
                                 f"{getattr(self.config, depth)}", i)
        if status == native.DEADLOCK:
            queues, tokens = self._progress(p, report)
            raise DeadlockError("deadlock: no module can make progress\n" + self._state(p, queues, tokens),
                                min(q[0] for q in queues.values() if q))
        if status == native.TIMEOUT:
            queues, tokens = self._progress(p, report)
            during = f" (during instruction {i})" if i in report[3:6] else ""
            raise DeviceTimeout(f"fsim run exceeded its {timeout} s bound{during}\n" + self._state(p, queues, tokens))
        raise DeviceError(f"instruction {i}: fsim's engine refused an access that the checks accepted (a bug in fsim)")

    def _state(self, p: _Program, queues, tokens) -> str:
        return state_report(self.isa, p, queues, tokens)
