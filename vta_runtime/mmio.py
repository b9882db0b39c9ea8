"""Host-side sequencing of the VTA register file (``vta_hw.spec.regmap``), shared by every device
that talks to the real core: tsim now, the board drivers later. It only needs ``read32`` and
``write32`` callables (offsets relative to the register window) and a ``wait`` callable that
lets time pass between polls (tsim: clock the model; a board: sleep).

Sequence of a run: check that nothing is running, write INSN_ADDR and INSN_COUNT, write START,
poll CONTROL until BUSY drops, then read ERROR/ERROR_INSN/ERROR_INFO, the counters and the cycle
count. The poll always has a bound: the caller's timeout if it gives one, and in any case a
watchdog on the core's progress registers (instructions dispatched and retired, bytes moved, uops
computed, bus beats). A core whose progress registers stay still for ``stall_timeout`` seconds
(default :data:`DEFAULT_STALL_TIMEOUT`, or the environment variable ``VTA_STALL_TIMEOUT``) is
stuck: it is aborted and the run raises :class:`DeviceTimeout` with the register dump. (A core
that works always moves one of them within microseconds; a stream is finite, so they cannot move
forever.) :func:`Mmio.raise_for` turns an error into the
runtime's exception classes, with the message worded by ``vta_runtime.diagnose`` from the
instruction stream and the state the hardware reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vta_hw.spec import TOKEN_QUEUES, Stage, describe
from vta_hw.spec.regmap import (
    COUNTER_BASE,
    COUNTERS,
    ID_VALUE,
    INDEX_OPERAND_TEXT,
    NO_INSN,
    OFFSET,
    STATE,
    STATE_BASE,
    Control,
    DmaClient,
    ErrorCode,
    IndexOperand,
    ModuleState,
    describe_hwconfig,
    hwconfig_word,
)

from . import diagnose
from .errors import (
    DeadlockError,
    DeviceError,
    DeviceTimeout,
    DramAccessError,
    IllegalInstructionError,
    MissingFinishError,
    ProgramError,
    SramIndexError,
    UnbalancedTokensError,
)

ERROR_CLASSES: dict[int, type[DeviceError]] = {
    ErrorCode.ILLEGAL_OPCODE: IllegalInstructionError,
    ErrorCode.ILLEGAL_MEM_TYPE: IllegalInstructionError,
    ErrorCode.ILLEGAL_ALU_OPCODE: IllegalInstructionError,
    ErrorCode.ILLEGAL_DEP_FLAGS: IllegalInstructionError,
    ErrorCode.STORE_PADDING: IllegalInstructionError,
    ErrorCode.SRAM_RANGE: SramIndexError,
    ErrorCode.UOP_RANGE: SramIndexError,
    ErrorCode.INDEX_RANGE: SramIndexError,
    ErrorCode.DRAM_ACCESS: DramAccessError,
    ErrorCode.DEADLOCK: DeadlockError,
    ErrorCode.UNBALANCED: UnbalancedTokensError,
    ErrorCode.MISSING_FINISH: MissingFinishError,
    ErrorCode.TOKEN_OVERFLOW: UnbalancedTokensError,
    ErrorCode.ABORTED: DeviceError,
}

_MODULES = ("fetch", "load", "compute", "store")

#: seconds without progress after which a running core counts as stuck (see the module docstring):
#: the core moves a progress register every few cycles while it works, and tsim on a loaded machine
#: simulates at least thousands of cycles a second, so 10 s is far beyond any working run's gap.
DEFAULT_STALL_TIMEOUT = 10.0
#: counters that only move when work is done (not the busy, stall and cycle counters, which also
#: move while a module waits)
PROGRESS_COUNTERS = tuple(n for n in COUNTERS if not n.endswith("_cycles"))
#: seconds between two looks at the progress registers while polling
_PROGRESS_EVERY = 0.05


def stall_timeout_from_env(default: float = DEFAULT_STALL_TIMEOUT) -> float:
    """``VTA_STALL_TIMEOUT`` (seconds, > 0) if set, else ``default``."""
    raw = os.environ.get("VTA_STALL_TIMEOUT")
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise DeviceError(f"VTA_STALL_TIMEOUT={raw!r}: need a number of seconds greater than 0")
    return value


@dataclass
class RunOutcome:
    """What the register file says after a run."""
    done: bool
    code: int
    detail: int
    insn: int | None
    info: int
    cycles: int
    counters: dict[str, int] = field(default_factory=dict)
    state: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.done and self.code == ErrorCode.NONE


class Mmio:
    def __init__(self, read32: Callable[[int], int], write32: Callable[[int, int], None],
                 wait: Callable[[], None] | None = None, *, clock: Callable[[], float] = time.monotonic,
                 stall_timeout: float | None = None):
        self.read32 = read32
        self.write32 = write32
        self.wait = wait or (lambda: time.sleep(1e-4))
        self.clock = clock
        self.stall_timeout = stall_timeout_from_env() if stall_timeout is None else float(stall_timeout)
        if not self.stall_timeout > 0:
            raise DeviceError(f"stall_timeout={stall_timeout!r}: need a number of seconds greater than 0")

    # ------------------------------------------------------------------ registers
    def reg(self, name: str) -> int:
        return self.read32(OFFSET[name])

    def check_identity(self, cfg) -> None:
        """Refuse a core whose ID or hardware parameters do not match ``cfg``."""
        ident = self.reg("ID")
        if ident != ID_VALUE:
            raise DeviceError(f"no VTA core at this register window: ID reads {ident:#010x}, expected {ID_VALUE:#010x}")
        hw, want = self.reg("HWCONFIG"), hwconfig_word(cfg)
        if hw != want:
            raise DeviceError(f"the VTA core was built for {describe_hwconfig(hw)}, but the configuration is "
                              f"{describe_hwconfig(want)} ({cfg.MODEL})")

    def busy(self) -> bool:
        return bool(self.reg("CONTROL") & Control.BUSY)

    def start(self, insn_phys: int, insn_count: int) -> None:
        if insn_phys % 16:
            raise DeviceError(f"the instruction stream at {insn_phys:#x} is not 16-byte aligned")
        if self.busy():
            raise DeviceError("the VTA core is still running a previous stream")
        self.write32(OFFSET["INSN_ADDR"], insn_phys)
        self.write32(OFFSET["INSN_COUNT"], insn_count)
        self.write32(OFFSET["CONTROL"], Control.START)

    def abort(self) -> None:
        self.write32(OFFSET["CONTROL"], Control.ABORT)

    def progress(self) -> tuple[int, ...]:
        """The registers that move only when the core does work (see PROGRESS_COUNTERS)."""
        return (self.reg("INSN_DISPATCHED"), *(self.read32(STATE_BASE + 4 * STATE.index(f"retired_{m}"))
                                               for m in _MODULES[1:]),
                *(self.read32(COUNTER_BASE + 4 * COUNTERS.index(n)) for n in PROGRESS_COUNTERS))

    def wait_idle(self, timeout: float | None) -> str | None:
        """Poll CONTROL until BUSY drops. Returns None then, "timeout" if ``timeout`` seconds (None:
        no limit of its own) passed first, or "stuck" if the progress registers did not move for
        ``stall_timeout`` seconds."""
        start = self.clock()
        deadline = None if timeout is None else start + timeout
        last, moved, look = None, start, start
        while self.busy():
            now = self.clock()
            if deadline is not None and now > deadline:
                return "timeout"
            if now >= look:
                seen = self.progress()
                if seen != last:
                    last, moved = seen, now
                elif now - moved > self.stall_timeout:
                    return "stuck"
                look = now + min(_PROGRESS_EVERY, self.stall_timeout / 4)
            self.wait()
        return None

    def counters(self) -> dict[str, int]:
        out = {n: self.read32(COUNTER_BASE + 4 * k) for k, n in enumerate(COUNTERS)}
        out["cycle_count"] = self.reg("CYCLES_LO") | self.reg("CYCLES_HI") << 32
        return out

    def state(self) -> dict[str, int]:
        out = {n: self.read32(STATE_BASE + 4 * k) for k, n in enumerate(STATE)}
        out["insn_dispatched"] = self.reg("INSN_DISPATCHED")
        return out

    def outcome(self) -> RunOutcome:
        ctl = self.reg("CONTROL")
        err = self.reg("ERROR")
        insn = self.reg("ERROR_INSN")
        counters = self.counters()
        return RunOutcome(done=bool(ctl & Control.DONE), code=err & 0xFF, detail=err >> 8 & 0xFF,
                          insn=None if insn == NO_INSN else insn, info=self.reg("ERROR_INFO"),
                          cycles=counters["cycle_count"], counters=counters, state=self.state())

    def run(self, insn_phys: int, insn_count: int, timeout: float | None) -> RunOutcome | str:
        """Start a stream and wait for it: its outcome, or why the wait ended first ("timeout" after
        ``timeout`` seconds, "stuck" when the core made no progress for ``stall_timeout`` seconds)."""
        self.start(insn_phys, insn_count)
        why = self.wait_idle(timeout)
        return self.outcome() if why is None else why

    # ------------------------------------------------------------------ explaining
    def state_lines(self, st: dict[str, int], insn_count: int | None = None) -> list[str]:
        """A line per module and queue from the live state registers."""
        lines = []
        names = {ModuleState.BUSY: "busy", ModuleState.WAITING: "waiting for a token", ModuleState.HALTED: "halted",
                 ModuleState.FINISHED: "finished", ModuleState.DMA_ACTIVE: "DMA active"}
        for mod in _MODULES:
            word = st[f"state_{mod}"]
            flags = [n for b, n in names.items() if word & b] or ["idle"]
            if mod == "fetch":
                flags = [("dispatching" if f == "busy" else "blocked by a full queue" if f == "waiting for a token"
                          else "FINISH dispatched" if f == "finished" else f) for f in flags]
                of = f" of {insn_count}" if insn_count is not None else ""
                lines.append(f"  fetch  : {', '.join(flags)}; {st['insn_dispatched']}{of} instructions dispatched")
            else:
                lines.append(f"  {mod:<7}: {', '.join(flags)}; command queue holds {word >> 8 & 0xFF}; "
                             f"retired up to instruction {st[f'retired_{mod}']}")
        lines.append("  tokens : " + " ".join(f"{t}={st[f'tokens_{t}']}" for t in TOKEN_QUEUES))
        return lines

    def register_dump(self) -> list[str]:
        """Every register of the run's outcome, state and counters, as lines (for a stuck core)."""
        ctl, err = self.reg("CONTROL"), self.reg("ERROR")
        lines = [f"  registers: CONTROL={ctl:#x} ERROR={err:#x} ERROR_INSN={self.reg('ERROR_INSN'):#x} "
                 f"ERROR_INFO={self.reg('ERROR_INFO'):#x} INSN_ADDR={self.reg('INSN_ADDR'):#x} "
                 f"INSN_COUNT={self.reg('INSN_COUNT')}"]
        st = self.state()
        lines.append("  state: " + " ".join(f"{n}={st[n]:#x}" for n in st))
        lines.append("  counters: " + " ".join(f"{n}={v}" for n, v in self.counters().items()))
        return lines

    def timeout_error(self, timeout: float | None, cycles: int, insn_count: int, isa=None, words=None,
                      stuck: bool = False) -> DeviceTimeout:
        st = self.state()
        if stuck:
            msg = [f"the VTA core is stuck: no instruction dispatched or retired, no data moved and no uop "
                   f"computed for {self.stall_timeout} s ({cycles} cycles into the run; VTA_STALL_TIMEOUT "
                   "sets this bound). State:"]
        else:
            msg = [f"the VTA core did not finish within {timeout} s ({cycles} cycles). State:"]
        msg += self.state_lines(st, insn_count)
        if stuck:
            msg += self.register_dump()
        if isa is not None and words is not None:
            p = diagnose.Program(isa, words)
            q = diagnose.remaining_after(p, _retired(st))
            tokens = {t: st[f"tokens_{t}"] for t in TOKEN_QUEUES}
            msg.append(diagnose.state_report(isa, p, q, tokens))
        return DeviceTimeout("\n".join(msg))

    def raise_for(self, o: RunOutcome, cfg, words, dram: Any = None) -> None:
        """Raise the exception a failed run deserves (nothing if it succeeded).

        ``words`` is the (n, 2) uint64 instruction stream that ran; ``dram`` (optional) can check
        DRAM extents against the allocations, so DRAM_ACCESS gets the same message as fsim."""
        if o.ok:
            return
        isa = cfg.isa
        p = diagnose.Program(isa, words)
        i = o.insn
        cls = ERROR_CLASSES.get(o.code, DeviceError)
        code_name = ErrorCode(o.code).name if o.code in ErrorCode._value2member_map_ else str(o.code)
        if o.code == ErrorCode.NONE:
            raise DeviceError("the VTA core stopped without DONE or an error code")
        if o.code == ErrorCode.INDEX_RANGE:
            buf, what = INDEX_OPERAND_TEXT.get(IndexOperand(o.detail), ("?", "index"))
            depth = {"ACC": cfg.ACC_BUFF_DEPTH, "INP": cfg.INP_BUFF_DEPTH, "WGT": cfg.WGT_BUFF_DEPTH}.get(buf, 0)
            raise SramIndexError(f"instruction {i}: {what} index {o.info} is past the buffer depth {depth}", i)
        if o.code in (ErrorCode.DEADLOCK, ErrorCode.UNBALANCED):
            q = diagnose.remaining_after(p, _retired(o.state))
            tokens = {t: o.state[f"tokens_{t}"] for t in TOKEN_QUEUES}
            hw = "\n".join(self.state_lines(o.state, p.n))
            if o.code == ErrorCode.DEADLOCK:
                raise DeadlockError("deadlock: no module can make progress\n" +
                                    diagnose.state_report(isa, p, q, tokens) + "\n  hardware:\n" + hw, i)
            err = diagnose.unbalanced_error(isa, p, q, tokens)
            if err is None:
                err = UnbalancedTokensError(f"FINISH ran but the program is not balanced: instruction {i} and "
                                            "later ones were not executed\n" + hw, i)
            err.index = i
            raise err
        if o.code == ErrorCode.MISSING_FINISH:
            raise MissingFinishError(f"the stream of {p.n} instructions has no FINISH instruction")
        if o.code == ErrorCode.TOKEN_OVERFLOW:
            raise UnbalancedTokensError(f"the {TOKEN_QUEUES[o.detail]} token queue overflowed: too many tokens "
                                        "pushed and not popped", i)
        if o.code == ErrorCode.ABORTED:
            raise DeviceError("the run was aborted by the host")
        # errors about one instruction: word them like fsim when the host sees the same problem
        if i is not None and 0 <= i < p.n:
            try:
                diagnose.check_instruction(cfg, p, i, dram if o.code == ErrorCode.DRAM_ACCESS else None)
            except ProgramError as exc:
                if isinstance(exc, cls):
                    raise
            text = describe(isa, p.word(i))
        else:
            text = "?"
        extra = ""
        if o.code == ErrorCode.DRAM_ACCESS:
            client = DmaClient(o.detail).name if o.detail in DmaClient._value2member_map_ else o.detail
            extra = f" ({client} DMA, bus error near address {o.info:#x})"
        raise cls(f"instruction {i}: the core reported {code_name}{extra} for {text}", i)


def _retired(st: dict[str, int]) -> dict[Stage, int]:
    return {Stage.LOAD: st["retired_load"], Stage.COMPUTE: st["retired_compute"], Stage.STORE: st["retired_store"]}


class RegisterDevice:
    """The run sequence of every device that drives the real core through its register file.

    Subclasses (tsim, the board driver) supply register access, memory and a few hooks; the
    start / bounded wait / counters / error decoding / recovery lines are all here, so the tsim
    tests exercise exactly what a board runs.
    """

    #: polls of ``wait`` to give an ABORT before falling back to ``_hard_reset``
    ABORT_POLLS = 50

    def __init__(self, config, read32: Callable[[int], int], write32: Callable[[int, int], None],
                 wait: Callable[[], None] | None = None, *, stall_timeout: float | None = None):
        self.config = config
        self.isa = config.isa
        self.mmio = Mmio(read32, write32, wait, stall_timeout=stall_timeout)
        self.mmio.check_identity(config)
        self._stats = dict.fromkeys(("cycle_count", *COUNTERS), 0)
        self.last_outcome: RunOutcome | None = None

    @property
    def stall_timeout(self) -> float:
        """Seconds a run may go without progress before the core counts as stuck (see the module docstring)."""
        return self.mmio.stall_timeout

    @stall_timeout.setter
    def stall_timeout(self, seconds: float) -> None:
        if not seconds > 0:
            raise DeviceError(f"stall_timeout={seconds!r}: need a number of seconds greater than 0")
        self.mmio.stall_timeout = float(seconds)

    # -- hooks
    def _instruction_words(self, insn_phys: int, insn_count: int):
        """The (n, 2) uint64 stream about to run (checked against the allocations)."""
        raise NotImplementedError

    def _before_run(self) -> None:
        """Anything to do after the stream is in memory and before START."""

    def _after_run(self) -> None:
        """Anything to do once the core is idle again."""

    def _memory_for_diagnosis(self) -> Any:
        """An object with ``check(phys, nbytes, what, index)`` to word DRAM errors like fsim, or None."""
        return None

    def _hard_reset(self) -> None:
        raise DeviceError("the VTA core does not stop after ABORT; reload the bitstream (program_fpga) to reset it")

    # -- Device protocol (run, stats)
    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def clear_stats(self) -> None:
        self._stats = dict.fromkeys(self._stats, 0)

    def run(self, insn_phys: int, insn_count: int, timeout: float | None = None) -> None:
        insn_count = int(insn_count)
        if insn_count <= 0:
            raise MissingFinishError(f"cannot run {insn_count} instructions: a stream needs at least a FINISH")
        words = self._instruction_words(insn_phys, insn_count)
        self._before_run()
        self.recover()
        outcome = self.mmio.run(insn_phys, insn_count, timeout)
        if isinstance(outcome, str):   # the wait ended first: the core is still running
            err = self.mmio.timeout_error(timeout, self.mmio.counters()["cycle_count"], insn_count, self.isa, words,
                                          stuck=outcome == "stuck")
            try:
                self.recover()
            except DeviceError as exc:
                raise DeviceTimeout(f"{err}\n  and then: {exc}") from exc
            raise err
        self.last_outcome = outcome
        for k in COUNTERS:
            self._stats[k] += outcome.counters[k]
        self._stats["cycle_count"] += outcome.cycles
        self._after_run()
        self.mmio.raise_for(outcome, self.config, words, self._memory_for_diagnosis())

    def recover(self) -> None:
        """Bring a core that is still running (after a timeout) back to idle: ABORT, else a hard reset."""
        if not self.mmio.busy():
            return
        self.mmio.abort()
        for _ in range(self.ABORT_POLLS):
            self.mmio.wait()
            if not self.mmio.busy():
                return
        self._hard_reset()
