"""The host register map of the VTA core: one AXI4-Lite slave, 32-bit registers.

This table is the only description of the register file. The Amaranth register file
(``vta_hw.regfile``), the shared host sequencing (``vta_runtime.mmio``), tsim and the board
drivers are all generated from or written against it. Pure Python.

Layout (byte offsets inside the 0x1000 window; every register is 32 bits, 4-byte aligned,
reads of unlisted offsets return 0 and writes to them are ignored):

========  =================  ====  ===========================================================
Offset    Name               RW    Meaning
========  =================  ====  ===========================================================
0x000     CONTROL            RW    write: bit0 START (ignored while BUSY), bit1 ABORT (stops the
                                   run with error ABORTED). read: bit0 BUSY, bit1 DONE (the last
                                   run ended with FINISH and balanced tokens), bit2 ERROR (the
                                   last run stopped on an error, see ERROR*)
0x004     ERROR              R     bits 7:0 error code (:class:`ErrorCode`), bits 15:8 detail
                                   (:class:`IndexOperand` for INDEX_RANGE, :class:`DmaClient`
                                   for DRAM_ACCESS, the memory type for SRAM_RANGE)
0x008     ERROR_INSN         R     index of the offending instruction (0xFFFFFFFF: none)
0x00C     ERROR_INFO         R     the offending value (opcode, memory type, SRAM index, low 32
                                   bits of the DRAM byte address, ...)
0x010     INSN_ADDR          RW    physical byte address of the instruction stream
0x014     INSN_COUNT         RW    number of 16-byte instructions
0x018     ID                 R     0x56544102: "VTA" and ISA 0.0.2
0x01C     HWCONFIG           R     the hardware parameters (:func:`hwconfig_word`) so that a
                                   driver can check that the core matches its config
0x020     CYCLES_LO          R     cycles since START (64-bit, stops when the run ends)
0x024     CYCLES_HI          R
0x028     INSN_DISPATCHED    R     instructions fetch has dispatched to the module queues
0x02C     EXTENSIONS         R     the ISA extensions the core implements (:func:`extensions_word`: bit
                                   ``Extension.bit`` per extension; 0 for HW_VER 0.0.2 exactly)
0x040...  counters           R     32-bit, cleared by START (see COUNTERS)
0x0C0...  state              R     live state of tokens, queues and modules (see STATE)
========  =================  ====  ===========================================================

Counter semantics follow fsim exactly for the names fsim defines: ``*_load_nbytes`` count
x_size*y_size*element bytes of data moved (pads not counted; an ACC_8BIT load counts its DRAM
elements, BATCH*BLOCK_OUT bytes each, in ``acc_load_nbytes``), ``out_store_nbytes`` likewise,
``gemm_counter`` counts non-reset GEMM uop executions, ``alu_counter`` ALU uop executions; an
instruction with x_size = 0 counts nothing. The performance counters count cycles while the core
is BUSY: ``*_busy_cycles`` a module is executing an instruction, ``*_stall_cycles`` a module holds
an instruction that waits for a dependency token (fetch: waits for space in a command queue),
``axi_*`` bus activity.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .counters import DEVICE_COUNTERS, PERF_COUNTERS
from .isa import EXTENSIONS

ID_VALUE = 0x56544102
#: Reads of ERROR_INSN when the error names no instruction.
NO_INSN = 0xFFFFFFFF
WINDOW_BYTES = 0x1000


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str  # "R" or "RW"
    doc: str


class Control(IntEnum):
    """Bits of CONTROL."""
    START = 1 << 0   # write
    ABORT = 1 << 1   # write
    BUSY = 1 << 0    # read
    DONE = 1 << 1    # read
    ERROR = 1 << 2   # read


class ErrorCode(IntEnum):
    NONE = 0
    ILLEGAL_OPCODE = 1        # info: opcode
    ILLEGAL_MEM_TYPE = 2      # info: memory type (detail: opcode)
    ILLEGAL_ALU_OPCODE = 3    # info: ALU opcode
    ILLEGAL_DEP_FLAGS = 4     # info: the four flag bits (pop_prev, pop_next, push_prev, push_next)
    STORE_PADDING = 5         # a STORE with non-zero pad fields
    SRAM_RANGE = 6            # LOAD/STORE covers SRAM past the depth; detail: memory type; info: last index
    UOP_RANGE = 7             # GEMM/ALU uop_end past the UOP depth; info: uop_end
    INDEX_RANGE = 8           # GEMM/ALU computed index past a depth; detail: IndexOperand; info: index
    DRAM_ACCESS = 9           # bus error response or address past 32 bits; detail: DmaClient; info: address
    DEADLOCK = 10             # every module waits and nothing can change
    UNBALANCED = 11           # FINISH ran with work or tokens left; ERROR_INSN: first leftover instruction
    MISSING_FINISH = 12       # every instruction ran and none was FINISH
    TOKEN_OVERFLOW = 13       # a dependency queue counted past its capacity; detail: TokenQueue
    ABORTED = 14              # the host wrote ABORT


class IndexOperand(IntEnum):
    """ERROR detail for INDEX_RANGE: which index of a GEMM/ALU uop is past its buffer."""
    GEMM_DST = 0
    GEMM_SRC = 1
    GEMM_WGT = 2
    ALU_DST = 3
    ALU_SRC = 4


#: (buffer name as fsim prints it, what) per IndexOperand.
INDEX_OPERAND_TEXT = {
    IndexOperand.GEMM_DST: ("ACC", "GEMM ACC (dst)"),
    IndexOperand.GEMM_SRC: ("INP", "GEMM INP (src)"),
    IndexOperand.GEMM_WGT: ("WGT", "GEMM WGT"),
    IndexOperand.ALU_DST: ("ACC", "ALU ACC (dst)"),
    IndexOperand.ALU_SRC: ("ACC", "ALU ACC (src)"),
}


class DmaClient(IntEnum):
    """The AXI master's clients; also their AXI ID."""
    FETCH = 0
    UOP = 1
    INP = 2
    WGT = 3
    ACC = 4
    OUT = 5


class TokenQueue(IntEnum):
    L2G = 0
    G2L = 1
    G2S = 2
    S2G = 3


class ModuleState(IntEnum):
    """Bits of the per-module STATE_* registers (bits 15:8 hold the command-queue level)."""
    BUSY = 1 << 0        # executing an instruction
    WAITING = 1 << 1     # holds an instruction whose dependency tokens are not available
    HALTED = 1 << 2      # stopped by an error
    FINISHED = 1 << 3    # compute: FINISH has run
    DMA_ACTIVE = 1 << 4  # AXI transactions outstanding


_REGS = [
    Register("CONTROL", 0x000, "RW", "start/abort (write), busy/done/error (read)"),
    Register("ERROR", 0x004, "R", "error code (7:0) and detail (15:8)"),
    Register("ERROR_INSN", 0x008, "R", "offending instruction index"),
    Register("ERROR_INFO", 0x00C, "R", "offending value"),
    Register("INSN_ADDR", 0x010, "RW", "instruction stream physical address"),
    Register("INSN_COUNT", 0x014, "RW", "instruction count"),
    Register("ID", 0x018, "R", "0x56544102"),
    Register("HWCONFIG", 0x01C, "R", "hardware parameters"),
    Register("CYCLES_LO", 0x020, "R", "cycle counter, low word"),
    Register("CYCLES_HI", 0x024, "R", "cycle counter, high word"),
    Register("INSN_DISPATCHED", 0x028, "R", "instructions dispatched by fetch"),
    Register("EXTENSIONS", 0x02C, "R", "ISA extensions implemented (bit 0 alu_mul, bit 1 acc_8bit)"),
]

#: The counters every device has first (fsim's names), then the performance counters. Offsets from 0x040.
COUNTERS = DEVICE_COUNTERS + PERF_COUNTERS
FSIM_COUNTERS = DEVICE_COUNTERS
COUNTER_BASE = 0x040

#: Live state registers, from 0x0C0.
STATE = (
    "tokens_l2g", "tokens_g2l", "tokens_g2s", "tokens_s2g",
    "state_fetch", "state_load", "state_compute", "state_store",
    "retired_load", "retired_compute", "retired_store",
)
STATE_BASE = 0x0C0

for _k, _n in enumerate(COUNTERS):
    _REGS.append(Register(_n.upper(), COUNTER_BASE + 4 * _k, "R", f"counter {_n}"))
for _k, _n in enumerate(STATE):
    _REGS.append(Register(_n.upper(), STATE_BASE + 4 * _k, "R", f"state {_n}"))
assert COUNTER_BASE + 4 * len(COUNTERS) <= STATE_BASE

REGISTERS: tuple[Register, ...] = tuple(_REGS)
BY_NAME: dict[str, Register] = {r.name: r for r in REGISTERS}
OFFSET: dict[str, int] = {r.name: r.offset for r in REGISTERS}


def hwconfig_word(cfg) -> int:
    """HWCONFIG: LOG_BATCH 3:0, LOG_BLOCK 7:4, LOG_UOP/INP/WGT/ACC_BUFF_SIZE 12:8/17:13/22:18/27:23,
    log2(AXI data bytes) 31:28."""
    return (cfg.LOG_BATCH | cfg.LOG_BLOCK << 4 | cfg.LOG_UOP_BUFF_SIZE << 8 | cfg.LOG_INP_BUFF_SIZE << 13
            | cfg.LOG_WGT_BUFF_SIZE << 18 | cfg.LOG_ACC_BUFF_SIZE << 23
            | (cfg.AXI_DATA_BYTES.bit_length() - 1) << 28)


def describe_hwconfig(word: int) -> str:
    return (f"{1 << (word & 15)}x{1 << (word >> 4 & 15)} uop{word >> 8 & 31} inp{word >> 13 & 31} "
            f"wgt{word >> 18 & 31} acc{word >> 23 & 31} axi{8 << (word >> 28 & 15)}")


def extensions_word(cfg) -> int:
    """EXTENSIONS: bit ``Extension.bit`` set for every ISA extension of ``cfg``."""
    return sum(1 << EXTENSIONS[n].bit for n in cfg.ISA_EXTENSIONS)


def describe_extensions(word: int) -> str:
    names = [e.name for e in EXTENSIONS.values() if word >> e.bit & 1]
    unknown = word & ~sum(1 << e.bit for e in EXTENSIONS.values())
    return (", ".join(names) or "no ISA extensions") + (f" and unknown bits {unknown:#x}" if unknown else "")
