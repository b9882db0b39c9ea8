"""The instruction stream under construction, with the dependency-token bookkeeping of spec 4.3.

The queue itself lives in the runtime's C++ core (``runtime.cc``, class ``InsnQueue``), shared
with ``CommandQueue``; this is its Python face. Instructions are kept as field values until the
stream is encoded, because dependency pushes are merged into the last instruction after it was
created:

* ``dep_pop(a, b)`` makes the next instruction of stage ``b`` pop a token from ``a`` (a second
  pending pop of the same kind is first committed as a NOP);
* ``dep_push(a, b)`` sets the push flag on the last instruction if it belongs to stage ``a``
  (a LOAD NOP or FINISH counts as no stage) and the flag is free, else appends a NOP that pushes;
* ``rewrite_force_serial()`` drops NOPs and flags and chains every change of stage.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

from vta_hw.spec import TOKEN_QUEUES, Isa, Stage

from . import native

_STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)
_MEM_FIELDS = ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")


class InsnQueue:
    def __init__(self, isa: Isa, *, _handle: int | None = None, _owner: Any = None):
        self.isa = isa
        self._f = _Functions.get()
        if _handle is None:
            _handle = self._f.new(*native.spec_tables(isa))
            weakref.finalize(self, self._f.free, _handle)
        self._h = _handle
        self._owner = _owner      # keeps the CommandQueue that owns this queue alive

    def __len__(self) -> int:
        return int(self._f.len(self._h))

    def reset(self) -> None:
        self._f.reset(self._h)

    # ------------------------------------------------------------------ creation
    def create(self, stage: Stage, fields: dict[str, int]) -> None:
        """Append an instruction for ``stage``; it takes over the stage's pending pops."""
        self._f.create(self._h, int(stage), {k: int(v) for k, v in fields.items()})

    def mem(self, opcode: int, memory_type: int, **fields: int) -> None:
        unknown = set(fields) - set(_MEM_FIELDS)
        if unknown:
            raise ValueError(f"memory instruction: no field(s) named {', '.join(sorted(unknown))}")
        self._f.mem(self._h, int(opcode), int(memory_type), *(int(fields.get(k, 0)) for k in _MEM_FIELDS))

    def noop(self, stage: Stage, *, push_prev=0, push_next=0, pop_prev=0, pop_next=0) -> None:
        self._f.noop(self._h, int(stage), int(push_prev), int(push_next), int(pop_prev), int(pop_next))

    # ------------------------------------------------------------------ dependency tokens
    def commit_pending_pop(self, stage: Stage) -> None:
        self._f.commit(self._h, int(stage))

    def dep_pop(self, from_stage: int, to_stage: int) -> None:
        """The next instruction of ``to_stage`` waits for a token from ``from_stage``."""
        self._f.dep_pop(self._h, int(from_stage), int(to_stage))

    def dep_push(self, from_stage: int, to_stage: int) -> None:
        """The last instruction of ``from_stage`` (or a NOP) pushes a token to ``to_stage``."""
        self._f.dep_push(self._h, int(from_stage), int(to_stage))

    def token_balance(self) -> Counter:
        """Pushes minus pops per queue over the committed instructions (pending pops not included)."""
        state = list(self._f.state(self._h))
        return Counter(dict(zip(TOKEN_QUEUES, state[:4])))

    @property
    def pending_pop_prev(self) -> dict[Stage, int]:
        state = list(self._f.state(self._h))
        return {s: state[4 + s] for s in _STAGES}

    @property
    def pending_pop_next(self) -> dict[Stage, int]:
        state = list(self._f.state(self._h))
        return {s: state[8 + s] for s in _STAGES}

    @property
    def insns(self) -> list[dict[str, int]]:
        """A snapshot of the instructions: each one's fields in its format (vta_hw.spec)."""
        names = self._f.names()
        flat = list(self._f.insns(self._h))
        out = []
        for k in range(0, len(flat), len(names)):
            values = dict(zip(names, flat[k:k + len(names)]))
            fmt = self.isa.format_of(values["opcode"])
            out.append({f.name: values[f.name] for f in fmt})
        return out

    # ------------------------------------------------------------------ rewriting and encoding
    def rewrite_force_serial(self) -> None:
        """Make execution strictly sequential: drop NOPs and all flags, then chain every stage change."""
        self._f.rewrite(self._h)

    def encode(self) -> bytes:
        return bytes(self._f.encode(self._h))


class _Functions:
    """The core's InsnQueue functions, looked up once."""

    _instance: _Functions | None = None

    def __init__(self):
        f = native.func
        self.new, self.free = f("NewInsnQueue"), f("FreeInsnQueue")
        self.len, self.reset, self.create, self.mem = f("IQLen"), f("IQReset"), f("IQCreate"), f("IQMem")
        self.noop, self.commit = f("IQNoop"), f("IQCommitPendingPop")
        self.dep_pop, self.dep_push, self.state = f("IQDepPop"), f("IQDepPush"), f("IQState")
        self.insns, self.rewrite, self.encode = f("IQInsns"), f("IQRewriteForceSerial"), f("IQEncode")
        self._names = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = native.field_names()
        return self._names

    @classmethod
    def get(cls) -> _Functions:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

