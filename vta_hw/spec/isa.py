"""The VTA instruction set (HW_VER 0.0.2) as field tables computed from the configuration.

One table per format (memory, GEMM, ALU, FINISH, uop). Fields are placed LSB first with the
C bit-field rule of the original ``hw_spec.h``: a field that would cross a 64-bit word starts at
the next word and the skipped bits stay zero (gotcha G1). The Python encoder/decoder below and
the Amaranth layouts in ``vta_hw`` are both made from these tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

INSN_BITS = 128
UOP_BITS = 32
WORD_BITS = 64

OPCODE_BITS = 3
MEMORY_TYPE_BITS = 3
ALU_OPCODE_BITS = 3
SRAM_BASE_BITS = 16
DRAM_BASE_BITS = 32
SIZE_BITS = 16
STRIDE_BITS = 16
PAD_BITS = 4
LOOP_ITER_BITS = 14
ALU_IMM_BITS = 16


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Stage(IntEnum):
    """Pipeline stages; the values are the queue ids of the runtime API (VTADepPush/Pop)."""
    LOAD = 1
    COMPUTE = 2
    STORE = 3


#: The ALU opcodes and LOAD memory types of HW_VER 0.0.2. MUL and ACC_8BIT are opt-in ISA extensions
#: (``EXTENSIONS``, config key ``ISA_EXTENSIONS``): every part refuses them unless the config enables them.
SUPPORTED_ALU_OPS = frozenset({AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR})
LOADABLE_MEM_TYPES = frozenset({MemType.UOP, MemType.WGT, MemType.INP, MemType.ACC})

#: Low bits of each operand a MUL multiplies (``alu_mul``).
MUL_OPERAND_BITS = 16


@dataclass(frozen=True)
class Extension:
    """An opt-in ISA extension: what it adds and what it means (the ISA page is generated from this)."""
    name: str                       # the spelling in the config's ISA_EXTENSIONS list
    tag: str                        # its part of the MODEL and BITSTREAM names
    bit: int                        # its bit in the EXTENSIONS register (vta_hw.spec.regmap)
    alu_ops: frozenset[AluOp]       # ALU opcodes it makes legal
    mem_types: frozenset[MemType]   # LOAD memory types it makes legal
    summary: str
    semantics: str


#: The extensions, in their canonical order (the order of names in MODEL, BITSTREAM and normalised configs).
EXTENSIONS: dict[str, Extension] = {e.name: e for e in (
    Extension(
        "alu_mul", "mul", 0, frozenset({AluOp.MUL}), frozenset(), "ALU opcode 4, MUL: an exact int16 x int16 product",
        "dst <- sext32(dst[15:0]) * sext32(B[15:0]) in every lane, where B is the source lane (register form) or "
        "the 16-bit immediate (use_imm). The product of two int16 values always fits int32, so there is no wrap "
        "and no saturation: the result is exact, and the upper 16 bits of both operands are ignored. It equals "
        "the original fsim's wrapping 32-bit product whenever both operands fit int16. One DSP per lane "
        "(DSP48E1 25x18, DSP48E2 27x18, a Cyclone V 18x18 half block). Clip an operand to int16 first where it "
        "may not fit (requantization: (acc >> s1) clipped to int16, MUL by an int16 multiplier, then >> s2). "
        "OUT gets the low 8 bits, as for every ALU opcode."),
    Extension(
        "acc_8bit", "acc8", 1, frozenset(), frozenset({MemType.ACC_8BIT}),
        "LOAD memory type 5, ACC_8BIT: int8 tensors into the accumulators, sign-extended",
        "A LOAD into the ACC SRAM, like ACC, whose DRAM elements are BATCH*BLOCK_OUT int8 values (the OUT "
        "element size; dram_base and x_stride count these elements): each value is sign-extended into its "
        "int32 accumulator lane. Padding as for every LOAD (zero accumulators). OUT is not written. "
        "acc_load_nbytes counts the bytes read from DRAM (BATCH*BLOCK_OUT per element), not the ACC element "
        "size the original fsim counted."),
)}


def extension_for(*, alu_op: int | None = None, mem_type: int | None = None) -> Extension | None:
    """The extension that makes an ALU opcode or a LOAD memory type legal (None if none does)."""
    for e in EXTENSIONS.values():
        if alu_op in e.alu_ops or mem_type in e.mem_types:
            return e
    return None

#: The four dependency-token queues, named producer-to-consumer.
TOKEN_QUEUES = ("l2g", "g2l", "g2s", "s2g")
DEP_FLAGS = ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")

# (stage, flag) -> token queue. Flags not listed here are illegal for that stage.
_POPS = {
    (Stage.LOAD, "pop_next_dep"): "g2l",
    (Stage.COMPUTE, "pop_prev_dep"): "l2g",
    (Stage.COMPUTE, "pop_next_dep"): "s2g",
    (Stage.STORE, "pop_prev_dep"): "g2s",
}
_PUSHES = {
    (Stage.LOAD, "push_next_dep"): "l2g",
    (Stage.COMPUTE, "push_prev_dep"): "g2l",
    (Stage.COMPUTE, "push_next_dep"): "g2s",
    (Stage.STORE, "push_prev_dep"): "s2g",
}
QUEUE_ENDS = {"l2g": (Stage.LOAD, Stage.COMPUTE), "g2l": (Stage.COMPUTE, Stage.LOAD),
              "g2s": (Stage.COMPUTE, Stage.STORE), "s2g": (Stage.STORE, Stage.COMPUTE)}


def stage_of(opcode: int, memory_type: int) -> Stage | None:
    """The module that executes an instruction, or None if no module can (illegal opcode/type).
    ACC_8BIT loads belong to the compute module; whether a config allows them is ``Isa.load_types``."""
    if opcode in (Opcode.GEMM, Opcode.ALU, Opcode.FINISH):
        return Stage.COMPUTE
    if opcode == Opcode.STORE:
        return Stage.STORE
    if opcode == Opcode.LOAD:
        if memory_type in (MemType.INP, MemType.WGT):
            return Stage.LOAD
        if memory_type in (MemType.UOP, MemType.ACC, MemType.ACC_8BIT):
            return Stage.COMPUTE
    return None


def token_pops(stage: Stage, flags: Mapping[str, int]) -> list[str]:
    """Token queues an instruction of ``stage`` waits on, for the set flags."""
    return [_POPS[(stage, f)] for f in ("pop_prev_dep", "pop_next_dep") if flags.get(f) and (stage, f) in _POPS]


def token_pushes(stage: Stage, flags: Mapping[str, int]) -> list[str]:
    """Token queues an instruction of ``stage`` pushes to after it completes."""
    return [_PUSHES[(stage, f)] for f in ("push_prev_dep", "push_next_dep")
            if flags.get(f) and (stage, f) in _PUSHES]


def illegal_dep_flags(stage: Stage, flags: Mapping[str, int]) -> list[str]:
    """Dependency flags that name a queue the stage does not have (load has no 'prev', store no 'next')."""
    return [f for f in DEP_FLAGS if flags.get(f) and (stage, f) not in _POPS and (stage, f) not in _PUSHES]


def queue_between(from_stage: int, to_stage: int) -> str:
    for q, ends in QUEUE_ENDS.items():
        if ends == (from_stage, to_stage):
            return q
    raise ValueError(f"there is no dependency queue from stage {from_stage} to stage {to_stage}")


class IsaLayoutError(ValueError):
    """A format whose fields do not fit its word; ``depends_on`` names the buffer depths involved."""

    def __init__(self, message: str, depends_on: tuple[str, ...]):
        super().__init__(message)
        self.depends_on = depends_on


class IsaEncodeError(ValueError):
    """A field value that does not fit its field."""


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    signed: bool = False

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def word(self) -> int:
        return self.lsb // WORD_BITS

    @property
    def min(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


class Format:
    """One instruction (or uop) format: an ordered table of fields plus encoder and decoder."""

    def __init__(self, name: str, total_bits: int, spec: Iterable[tuple[str, int, bool, tuple[str, ...]]]):
        self.name = name
        self.total_bits = total_bits
        fields: list[Field] = []
        pos = 0
        deps: set[str] = set()
        for fname, width, signed, depends in spec:
            deps.update(depends)
            if pos // WORD_BITS != (pos + width - 1) // WORD_BITS:
                pos = (pos // WORD_BITS + 1) * WORD_BITS  # no field straddles a 64-bit word
            fields.append(Field(fname, pos, width, signed))
            pos += width
        if pos > total_bits:
            order = ("LUD", "LAD", "LID", "LWD")
            raise IsaLayoutError(
                f"the {name} format needs {pos} bits but has {total_bits}",
                tuple(d for d in order if d in deps))
        self.fields: tuple[Field, ...] = tuple(fields)
        self.by_name: dict[str, Field] = {f.name: f for f in fields}
        self.used_bits = pos

    def __getitem__(self, name: str) -> Field:
        return self.by_name[name]

    def __iter__(self):
        return iter(self.fields)

    def idle_ranges(self) -> list[tuple[int, int]]:
        """Bit ranges (lsb, msb) that belong to no field and must be zero."""
        used = [False] * self.total_bits
        for f in self.fields:
            for b in range(f.lsb, f.lsb + f.width):
                used[b] = True
        out, start = [], None
        for b, u in enumerate(used + [True]):
            if not u and start is None:
                start = b
            elif u and start is not None:
                out.append((start, b - 1))
                start = None
        return out

    def encode(self, values: Mapping[str, int] | None = None, /, **kw: int) -> int:
        """Pack field values (missing fields are 0) into an integer; values are range-checked."""
        vals = dict(values or {}, **kw)
        unknown = set(vals) - set(self.by_name)
        if unknown:
            raise IsaEncodeError(f"{self.name}: no field(s) named {', '.join(sorted(unknown))}")
        word = 0
        for f in self.fields:
            v = vals.get(f.name, 0)
            v = int(v)
            if not f.min <= v <= f.max:
                raise IsaEncodeError(
                    f"{self.name} field {f.name}={v} does not fit its {f.width} bits "
                    f"(range {f.min}..{f.max})")
            word |= (v & ((1 << f.width) - 1)) << f.lsb
        return word

    def decode(self, word: int) -> dict[str, int]:
        out = {}
        for f in self.fields:
            v = (word >> f.lsb) & ((1 << f.width) - 1)
            if f.signed and v >> (f.width - 1):
                v -= 1 << f.width
            out[f.name] = v
        return out

    def extract(self, words: np.ndarray, name: str) -> np.ndarray:
        """Vectorised decode of one field from an (n, total_bits/64) uint64 array; returns int64."""
        f = self.by_name[name]
        w = words[:, f.word] if words.ndim == 2 else words
        v = (w >> np.uint64(f.lsb % WORD_BITS)) & np.uint64((1 << f.width) - 1)
        v = v.astype(np.int64)
        if f.signed:
            v = np.where(v >= (1 << (f.width - 1)), v - (1 << f.width), v)
        return v


def _dep_fields():
    return [("pop_prev_dep", 1, False, ()), ("pop_next_dep", 1, False, ()),
            ("push_prev_dep", 1, False, ()), ("push_next_dep", 1, False, ())]


class Isa:
    """All formats for one set of buffer depths (LUD/LAD/LID/LWD = log2 of UOP/ACC/INP/WGT depth)."""

    def __init__(self, lud: int, lad: int, lid: int, lwd: int, extensions: Iterable[str] = ()):
        self.LUD, self.LAD, self.LID, self.LWD = lud, lad, lid, lwd
        unknown = sorted(set(extensions) - set(EXTENSIONS))
        if unknown:
            raise ValueError(f"unknown ISA extension(s) {', '.join(unknown)}; known: {', '.join(EXTENSIONS)}")
        #: the enabled extensions, in canonical order
        self.extensions: tuple[str, ...] = tuple(n for n in EXTENSIONS if n in set(extensions))
        enabled = [EXTENSIONS[n] for n in self.extensions]
        #: the legal ALU opcodes and LOAD memory types of this ISA
        self.alu_ops: frozenset[AluOp] = SUPPORTED_ALU_OPS.union(*(e.alu_ops for e in enabled))
        self.load_types: frozenset[MemType] = LOADABLE_MEM_TYPES.union(*(e.mem_types for e in enabled))
        misfits: list[IsaLayoutError] = []

        def make(name: str, bits: int, spec) -> Format | None:
            try:
                return Format(name, bits, spec)
            except IsaLayoutError as exc:
                misfits.append(exc)
                return None

        self.mem = make("memory", INSN_BITS, [
            ("opcode", OPCODE_BITS, False, ()), *_dep_fields(),
            ("memory_type", MEMORY_TYPE_BITS, False, ()),
            ("sram_base", SRAM_BASE_BITS, False, ()),
            ("dram_base", DRAM_BASE_BITS, False, ()),
            ("y_size", SIZE_BITS, False, ()),
            ("x_size", SIZE_BITS, False, ()),
            ("x_stride", STRIDE_BITS, False, ()),
            ("y_pad_0", PAD_BITS, False, ()), ("y_pad_1", PAD_BITS, False, ()),
            ("x_pad_0", PAD_BITS, False, ()), ("x_pad_1", PAD_BITS, False, ()),
        ])
        loop_head = [
            ("opcode", OPCODE_BITS, False, ()), *_dep_fields(),
            ("reset_reg", 1, False, ()),
            ("uop_bgn", lud, False, ("LUD",)),
            ("uop_end", lud + 1, False, ("LUD",)),
            ("iter_out", LOOP_ITER_BITS, False, ("LUD",)),
            ("iter_in", LOOP_ITER_BITS, False, ("LUD",)),
        ]
        self.gemm = make("GEMM", INSN_BITS, [
            *loop_head,
            ("dst_factor_out", lad, False, ("LAD",)), ("dst_factor_in", lad, False, ("LAD",)),
            ("src_factor_out", lid, False, ("LID",)), ("src_factor_in", lid, False, ("LID",)),
            ("wgt_factor_out", lwd, False, ("LWD",)), ("wgt_factor_in", lwd, False, ("LWD",)),
        ])
        self.alu = make("ALU", INSN_BITS, [
            *loop_head,
            ("dst_factor_out", lad, False, ("LAD",)), ("dst_factor_in", lad, False, ("LAD",)),
            ("src_factor_out", lad, False, ("LAD",)), ("src_factor_in", lad, False, ("LAD",)),
            ("alu_opcode", ALU_OPCODE_BITS, False, ()),
            ("use_imm", 1, False, ()),
            ("imm", ALU_IMM_BITS, True, ()),
        ])
        # FINISH is GEMM-shaped with opcode 3 (spec 2.8).
        self.finish = self.gemm
        self.uop = make("uop", UOP_BITS, [
            ("dst_idx", lad, False, ("LAD",)),
            ("src_idx", max(lad, lid), False, ("LAD", "LID")),
            ("wgt_idx", lwd, False, ("LWD",)),
        ])
        if misfits:
            deps = {d for e in misfits for d in e.depends_on}
            raise IsaLayoutError(" and ".join(str(e) for e in misfits),
                                 tuple(d for d in ("LUD", "LAD", "LID", "LWD") if d in deps))

    def has(self, extension: str) -> bool:
        """Whether the extension (a name of ``EXTENSIONS``: ``alu_mul``, ``acc_8bit``) is enabled."""
        if extension not in EXTENSIONS:
            raise ValueError(f"unknown ISA extension {extension!r}; known: {', '.join(EXTENSIONS)}")
        return extension in self.extensions

    def refusal(self, *, alu_op: int | None = None, mem_type: int | None = None) -> str | None:
        """Why an ALU opcode or LOAD memory type that an extension defines is illegal here ("it needs the
        ISA extension ..."), or None if it is legal or no extension defines it. Every part words its
        refusal of an extension's instruction with it."""
        ext = extension_for(alu_op=alu_op, mem_type=mem_type)
        if ext is None or self.has(ext.name):
            return None
        return f"it needs the ISA extension {ext.name!r}, which the config key ISA_EXTENSIONS does not enable"

    def format_of(self, opcode: int) -> Format:
        if opcode in (Opcode.LOAD, Opcode.STORE):
            return self.mem
        if opcode == Opcode.ALU:
            return self.alu
        return self.gemm

    @staticmethod
    def opcode_of(word: int) -> int:
        return word & ((1 << OPCODE_BITS) - 1)

    def decode(self, word: int) -> dict[str, int]:
        return self.format_of(self.opcode_of(word)).decode(word)

    # --- convenience encoders used by the runtime and tests -----------------------------
    def load(self, memory_type: int, sram_base: int, dram_base: int, y_size: int, x_size: int, x_stride: int,
             y_pad_0: int = 0, y_pad_1: int = 0, x_pad_0: int = 0, x_pad_1: int = 0, **deps: int) -> int:
        return self.mem.encode(opcode=Opcode.LOAD, memory_type=memory_type, sram_base=sram_base,
                               dram_base=dram_base, y_size=y_size, x_size=x_size, x_stride=x_stride,
                               y_pad_0=y_pad_0, y_pad_1=y_pad_1, x_pad_0=x_pad_0, x_pad_1=x_pad_1, **deps)

    def store(self, sram_base: int, dram_base: int, y_size: int, x_size: int, x_stride: int,
              memory_type: int = MemType.OUT, **deps: int) -> int:
        return self.mem.encode(opcode=Opcode.STORE, memory_type=memory_type, sram_base=sram_base,
                               dram_base=dram_base, y_size=y_size, x_size=x_size, x_stride=x_stride, **deps)

    def finish_insn(self, **deps: int) -> int:
        return self.gemm.encode(opcode=Opcode.FINISH, **deps)

    @staticmethod
    def to_bytes(words: Iterable[int]) -> bytes:
        return b"".join(int(w).to_bytes(INSN_BITS // 8, "little") for w in words)

    @staticmethod
    def words_from_bytes(data: bytes | np.ndarray) -> np.ndarray:
        """(n, 2) uint64 little-endian view of an instruction stream."""
        buf = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), dtype="<u8")
        if buf.size % 2:
            raise ValueError("an instruction stream is a whole number of 16-byte instructions")
        return buf.reshape(-1, 2).astype(np.uint64)
