"""The instruction stream under construction, with the dependency-token bookkeeping of spec 4.3.

Instructions are kept as field dictionaries until the stream is encoded, because dependency
pushes are merged into the last instruction after it was created.
"""

from __future__ import annotations

from collections import Counter

from vta_hw.spec import TOKEN_QUEUES, Isa, MemType, Opcode, Stage, queue_between, stage_of, token_pops, token_pushes

from .errors import RuntimeUsageError

_STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)


def _stage(insn: dict[str, int]) -> Stage:
    return stage_of(insn["opcode"], insn.get("memory_type", 0))


def _push_stage(insn: dict[str, int]) -> Stage | None:
    """Stage for merging a push: a LOAD NOP (x_size 0) counts as no stage (the original runtime's rule)."""
    if insn["opcode"] == Opcode.LOAD and insn["x_size"] == 0:
        return None
    if insn["opcode"] == Opcode.FINISH:
        return None
    return _stage(insn)


class InsnQueue:
    def __init__(self, isa: Isa):
        self.isa = isa
        self.insns: list[dict[str, int]] = []
        self.pending_pop_prev = dict.fromkeys(_STAGES, 0)
        self.pending_pop_next = dict.fromkeys(_STAGES, 0)
        self._balance: Counter = Counter()

    def __len__(self) -> int:
        return len(self.insns)

    def reset(self) -> None:
        self.insns.clear()
        self.pending_pop_prev = dict.fromkeys(_STAGES, 0)
        self.pending_pop_next = dict.fromkeys(_STAGES, 0)
        self._balance = Counter()

    def _account(self, insn: dict[str, int]) -> None:
        st = _stage(insn)
        for q in token_pushes(st, insn):
            self._balance[q] += 1
        for q in token_pops(st, insn):
            self._balance[q] -= 1

    # ------------------------------------------------------------------ creation
    def create(self, stage: Stage, fields: dict[str, int]) -> dict[str, int]:
        """Append an instruction for ``stage``; it takes over the stage's pending pops."""
        insn = dict(fields)
        insn["pop_prev_dep"] = self.pending_pop_prev[stage]
        insn["pop_next_dep"] = self.pending_pop_next[stage]
        insn["push_prev_dep"] = 0
        insn["push_next_dep"] = 0
        self.pending_pop_prev[stage] = 0
        self.pending_pop_next[stage] = 0
        self.insns.append(insn)
        self._account(insn)
        return insn

    def mem(self, opcode: int, memory_type: int, **fields: int) -> dict[str, int]:
        base = {"opcode": opcode, "memory_type": memory_type, "sram_base": 0, "dram_base": 0, "y_size": 0,
                "x_size": 0, "x_stride": 0, "y_pad_0": 0, "y_pad_1": 0, "x_pad_0": 0, "x_pad_1": 0}
        base.update(fields)
        return self.create(stage_of(opcode, memory_type), base)

    def noop(self, stage: Stage, *, push_prev=0, push_next=0, pop_prev=0, pop_next=0) -> dict[str, int]:
        if stage == Stage.LOAD:
            insn = {"opcode": Opcode.LOAD, "memory_type": MemType.INP}
        elif stage == Stage.COMPUTE:
            insn = {"opcode": Opcode.LOAD, "memory_type": MemType.UOP}
        else:
            insn = {"opcode": Opcode.STORE, "memory_type": MemType.UOP}
        insn.update(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, y_pad_0=0, y_pad_1=0,
                    x_pad_0=0, x_pad_1=0, pop_prev_dep=pop_prev, pop_next_dep=pop_next,
                    push_prev_dep=push_prev, push_next_dep=push_next)
        self.insns.append(insn)
        self._account(insn)
        return insn

    # ------------------------------------------------------------------ dependency tokens
    def commit_pending_pop(self, stage: Stage) -> None:
        if self.pending_pop_prev[stage] or self.pending_pop_next[stage]:
            self.noop(stage, pop_prev=self.pending_pop_prev[stage], pop_next=self.pending_pop_next[stage])
            self.pending_pop_prev[stage] = 0
            self.pending_pop_next[stage] = 0

    def dep_pop(self, from_stage: int, to_stage: int) -> None:
        """The next instruction of ``to_stage`` waits for a token from ``from_stage``."""
        from_stage, to_stage = Stage(from_stage), Stage(to_stage)
        queue_between(from_stage, to_stage)  # refuses load<->store and same-stage pairs
        pending = self.pending_pop_prev if from_stage < to_stage else self.pending_pop_next
        if pending[to_stage]:
            self.commit_pending_pop(to_stage)
        pending[to_stage] = 1

    def dep_push(self, from_stage: int, to_stage: int) -> None:
        """The last instruction of ``from_stage`` (or a NOP) pushes a token to ``to_stage``."""
        from_stage, to_stage = Stage(from_stage), Stage(to_stage)
        queue_between(from_stage, to_stage)
        self.commit_pending_pop(from_stage)
        flag = "push_next_dep" if from_stage < to_stage else "push_prev_dep"
        if self.insns:
            last = self.insns[-1]
            if _push_stage(last) == from_stage and not last[flag]:
                last[flag] = 1
                self._balance[queue_between(from_stage, to_stage)] += 1
                return
        if from_stage < to_stage:
            self.noop(from_stage, push_next=1)
        else:
            self.noop(from_stage, push_prev=1)

    def token_balance(self) -> Counter:
        """Pushes minus pops per queue over the committed instructions (pending pops not included)."""
        return Counter({q: self._balance[q] for q in TOKEN_QUEUES})

    # ------------------------------------------------------------------ rewriting
    def rewrite_force_serial(self) -> None:
        """Make execution strictly sequential: drop NOPs and all flags, then chain every stage change.

        Load and store have no queue between them, so a compute NOP relays that ordering.
        """
        work = [dict(i) for i in self.insns
                if not (i["opcode"] in (Opcode.LOAD, Opcode.STORE) and i["x_size"] == 0)]
        self.reset()
        for insn in work:
            for f in ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep"):
                insn[f] = 0
        prev: Stage | None = None
        for insn in work:
            now = _stage(insn)
            if prev is not None and prev != now:
                if {prev, now} == {Stage.LOAD, Stage.STORE}:
                    self._chain(prev, Stage.COMPUTE, None)
                    self.noop(Stage.COMPUTE)
                    self._chain(Stage.COMPUTE, now, insn, relay_pop=prev)
                else:
                    self._chain(prev, now, insn)
            self.insns.append(insn)
            prev = now
        if prev is not None and prev != Stage.COMPUTE:
            self._chain(prev, Stage.COMPUTE, None)
            self.noop(Stage.COMPUTE)
            self._set_pop(self.insns[-1], prev, Stage.COMPUTE)
        self._balance = Counter()
        for insn in self.insns:
            self._account(insn)

    def _chain(self, src: Stage, dst: Stage, nxt: dict[str, int] | None, relay_pop: Stage | None = None) -> None:
        """Last instruction pushes src->dst; ``nxt`` (if given) pops it."""
        last = self.insns[-1]
        last["push_next_dep" if src < dst else "push_prev_dep"] = 1
        if relay_pop is not None:  # the relay NOP itself pops from the stage before it
            self._set_pop(last, relay_pop, src)
        if nxt is not None:
            self._set_pop(nxt, src, dst)

    @staticmethod
    def _set_pop(insn: dict[str, int], src: Stage, dst: Stage) -> None:
        insn["pop_prev_dep" if src < dst else "pop_next_dep"] = 1

    # ------------------------------------------------------------------ encoding
    def encode(self) -> bytes:
        isa = self.isa
        out = bytearray()
        for k, insn in enumerate(self.insns):
            fmt = isa.format_of(insn["opcode"])
            try:
                word = fmt.encode(insn)
            except ValueError as exc:
                raise RuntimeUsageError(f"instruction {k}: {exc}") from None
            out += word.to_bytes(16, "little")
        return bytes(out)
