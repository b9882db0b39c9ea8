"""tsim's timeline: what each module of the core did, cycle by cycle, decoded into instruction intervals.

The profile build of tsim (``TsimDevice(profile=True)``; Verilated with ``tsim_profile.vlt`` so that the
register file's live inputs stay readable) records an event whenever one of these changes (the harness
samples them every cycle, after the combinational settle):

* the run: the core's BUSY bit (``CONTROL`` bit 0);
* fetch, load, compute and store: their ``STATE_*`` busy and waiting bits (:class:`ModuleState`) with
  ``INSN_DISPATCHED`` (fetch) or ``RETIRED_*`` (index of the last retired instruction + 1);
* the compute module's GEMM and ALU engines: active or not.

:func:`decode_run` turns the events of one run and its instruction stream into one :class:`Interval`
per instruction: a command processor (load, compute, store) takes one instruction at a time and goes
idle for at least a cycle between two, so each stretch of busy-or-waiting cycles is one instruction,
the next of that module's instructions in stream order; it starts waiting for its dependency tokens
(``stall``), then works, and retires when it goes idle (checked against the retired index). Fetch's
interval of instruction ``i`` runs from the dispatch of ``i - 1`` to that of ``i``; its stall is the
time the instruction waited for room in its command queue. GEMM and ALU activity is attached to the
compute instruction during which it happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vta_hw.spec import AluOp, Isa, MemType, Opcode, Stage, stage_of, token_pops, token_pushes
from vta_hw.spec.regmap import ModuleState

#: harness event layout (``ProfileEvent`` in tsim_harness.cpp)
EVENT_DTYPE = np.dtype([("cycle", "<u8"), ("value", "<u4"), ("track", "<u2"), ("state", "<u2")])
#: harness track numbers (``enum Track`` in tsim_harness.cpp)
RUN, FETCH, LOAD, COMPUTE, STORE, GEMM, ALU = range(7)
MODULE_TRACKS = {"fetch": FETCH, "load": LOAD, "compute": COMPUTE, "store": STORE}
_STAGE_MODULE = {Stage.LOAD: "load", Stage.COMPUTE: "compute", Stage.STORE: "store"}
BUSY, WAITING = int(ModuleState.BUSY), int(ModuleState.WAITING)


class ProfileError(RuntimeError):
    """The recorded events do not fit the instruction stream (a lost event, or a run that stopped early)."""


@dataclass
class Interval:
    """One instruction in one module, in cycles since the run's START (``[start, end)``)."""
    module: str                        # fetch, load, compute, store
    index: int                         # position in the run's instruction stream
    name: str                          # "LOAD INP", "GEMM", "ALU ADD", "STORE", "FINISH", ...
    start: int
    end: int
    stall: tuple[int, int] | None = None     # waited for a dependency token (fetch: for queue room)
    active: list[tuple[int, int]] = field(default_factory=list)   # compute: the GEMM/ALU engine's active cycles
    pops: tuple[str, ...] = ()         # token queues it waited on (l2g, g2l, g2s, s2g)
    pushes: tuple[str, ...] = ()       # token queues it pushed to when it retired (compute's g2l: once its work and
    #                                    every older GEMM's were done, at or before that)
    retired: bool = True               # False: the run stopped (an error) before it retired
    issued: int | None = None          # compute: the sequencer let it go to its engine (end: it retired)

    @property
    def cycles(self) -> int:
        return self.end - self.start

    @property
    def stall_cycles(self) -> int:
        return self.stall[1] - self.stall[0] if self.stall else 0

    @property
    def busy_start(self) -> int:
        """First cycle of work (after the wait for tokens)."""
        return self.stall[1] if self.stall and self.module != "fetch" else self.start


@dataclass
class ProfiledRun:
    """One ``run`` of an instruction stream: its cycles and every instruction's intervals."""
    start_cycle: int                   # tsim's clock when the core went BUSY
    cycles: int                        # cycles the core was BUSY (the CYCLES register)
    names: list[str]                   # short name of each instruction of the stream
    intervals: dict[str, list[Interval]]   # by module: fetch, load, compute, store (stream order)
    engines: dict[str, list[tuple[int, int]]]  # "gemm", "alu": active stretches, cycles since START

    def module_of(self, index: int) -> str:
        for m, ivs in self.intervals.items():
            if m != "fetch" and any(iv.index == index for iv in ivs):
                return m
        raise KeyError(index)


def short_name(isa: Isa, word: int) -> str:
    """"LOAD INP", "LOAD UOP", "GEMM", "ALU ADD", "STORE", "FINISH" (a ``NOP`` suffix for x_size 0)."""
    op = isa.opcode_of(word)
    f = isa.decode(word)
    if op in (Opcode.LOAD, Opcode.STORE):
        kind = "LOAD" if op == Opcode.LOAD else "STORE"
        try:
            mt = MemType(f["memory_type"]).name
        except ValueError:
            mt = f"?{f['memory_type']}"
        nop = " NOP" if f["x_size"] == 0 else ""
        return (f"LOAD {mt}" if kind == "LOAD" else "STORE") + nop
    if op == Opcode.ALU:
        try:
            return f"ALU {AluOp(f['alu_opcode']).name}"
        except ValueError:
            return "ALU"
    try:
        return Opcode(op).name
    except ValueError:
        return f"opcode {op}"


def _track(events: np.ndarray, track: int, t0: int, t1: int):
    """(cycles, states, values) of one track from ``t0`` to ``t1``, relative to ``t0``. START resets every
    module, so each track starts idle at 0 (an event at ``t0`` itself says otherwise)."""
    ev = events[events["track"] == track]
    inside = ev[(ev["cycle"] >= t0) & (ev["cycle"] < t1)]
    state0 = value0 = 0
    cyc = np.concatenate([[0], inside["cycle"].astype(np.int64) - t0])
    st = np.concatenate([[state0], inside["state"].astype(np.int64)])
    val = np.concatenate([[value0], inside["value"].astype(np.int64)])
    return cyc, st, val


def _stretches(cyc: np.ndarray, on: np.ndarray, end: int) -> list[tuple[int, int]]:
    """[a, b) stretches where ``on`` holds (``on[k]`` holds from ``cyc[k]`` to ``cyc[k+1]``)."""
    on = on.astype(bool)
    prev = np.concatenate([[False], on[:-1]])
    rises = cyc[on & ~prev]
    falls = cyc[~on & prev]
    if len(falls) < len(rises):
        falls = np.concatenate([falls, [end]])
    return list(zip(rises.tolist(), falls.tolist()))


def decode_run(isa: Isa, words: np.ndarray, events: np.ndarray, start_cycle: int, end_cycle: int) -> ProfiledRun:
    """The intervals of one run: ``words`` its (n, 2) uint64 stream, ``events`` the harness's events (any
    superset of the run's), ``[start_cycle, end_cycle)`` the cycles the core was BUSY."""
    n = len(words)
    full = [int(a) | int(b) << 64 for a, b in np.asarray(words, dtype=np.uint64).reshape(-1, 2)]
    names = [short_name(isa, w) for w in full]
    decoded = [isa.decode(w) for w in full]
    stages = [stage_of(f["opcode"], f.get("memory_type", 0)) for f in decoded]
    span = end_cycle - start_cycle
    intervals: dict[str, list[Interval]] = {m: [] for m in MODULE_TRACKS}

    # load, compute, store: each stretch of busy-or-waiting cycles is the module's next instruction
    for module in ("load", "compute", "store"):
        stage = next(s for s, m in _STAGE_MODULE.items() if m == module)
        mine = [i for i in range(n) if stages[i] == stage]
        cyc, st, val = _track(events, MODULE_TRACKS[module], start_cycle, end_cycle)
        held = (st & (BUSY | WAITING)) != 0
        work = _stretches(cyc, held, span)
        if len(work) > len(mine):
            raise ProfileError(f"tsim profile: {module} held {len(work)} instructions but the stream gives it "
                               f"{len(mine)}")
        busy_rises = cyc[((st & BUSY) != 0) & ~np.concatenate([[False], (st[:-1] & BUSY) != 0])]
        for k, (a, b) in enumerate(work):
            i = mine[k]
            j = np.searchsorted(busy_rises, a)
            busy_at = int(busy_rises[j]) if j < len(busy_rises) and busy_rises[j] < b else b
            f = decoded[i]
            end, issued = b, None
            if module == "compute":
                # GEMM and ALU retire after the sequencer lets them go (their engine may still run), in order:
                # the cycle the retired index reaches i + 1
                later = np.nonzero(val >= i + 1)[0]
                retired = len(later) > 0
                if retired:
                    end, issued = max(b, int(cyc[later[0]])), b
            else:
                # the retired index as it reads from the cycle the module went idle
                after = np.searchsorted(cyc, b, side="right") - 1
                retired = b < span and int(val[after]) == i + 1
            intervals[module].append(Interval(
                module, i, names[i], a, end, stall=(a, busy_at) if busy_at > a else None,
                pops=tuple(token_pops(stage, f)), pushes=tuple(token_pushes(stage, f)), retired=retired,
                issued=issued))

    # fetch: instruction i from the dispatch of i - 1 to its own; stalled while it waited for queue room
    cyc, st, val = _track(events, FETCH, start_cycle, end_cycle)
    stalls = _stretches(cyc, (st & WAITING) != 0, span)
    prev = 0
    for k in range(1, len(cyc)):
        for i in range(int(val[k - 1]), min(int(val[k]), n)):
            a, b = prev, int(cyc[k])
            s = [(x, y) for x, y in stalls if x < b and y > a]
            stall = (max(a, s[0][0]), min(b, s[-1][1])) if s else None
            intervals["fetch"].append(Interval("fetch", i, names[i], a, b, stall=stall))
            prev = b

    # GEMM and ALU: active stretches, attached in order to the instructions of their engine whose loop is
    # not empty (each engine runs its instructions one at a time, in order)
    engines = {}
    comp = intervals["compute"]
    for name, track, opcode in (("gemm", GEMM, Opcode.GEMM), ("alu", ALU, Opcode.ALU)):
        cyc, st, _ = _track(events, track, start_cycle, end_cycle)
        engines[name] = _stretches(cyc, st != 0, span)
        mine = [iv for iv in comp if decoded[iv.index]["opcode"] == opcode and _loop_runs(decoded[iv.index])]
        k = 0
        for a, b in engines[name]:
            while k < len(mine) and mine[k].end < b:
                k += 1
            if k < len(mine) and mine[k].start <= a:
                mine[k].active.append((a, b))
                k += 1
    return ProfiledRun(start_cycle, span, names, intervals, engines)


def _loop_runs(f: dict) -> bool:
    return f["uop_end"] > f["uop_bgn"] and f["iter_out"] > 0 and f["iter_in"] > 0


def split_runs(events: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) harness cycles of each run (BUSY high), in order."""
    run = events[events["track"] == RUN]
    cyc = run["cycle"].astype(np.int64)
    on = run["state"] != 0
    out, start = [], None
    for c, o in zip(cyc.tolist(), on.tolist()):
        if o and start is None:
            start = c
        elif not o and start is not None:
            out.append((start, c))
            start = None
    if start is not None:
        raise ProfileError("tsim profile: a run has not ended")
    return out
