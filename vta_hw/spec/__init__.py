"""The VTA contract: configuration, derived parameters and the ISA field tables.

Pure Python (numpy only): importing this never imports amaranth or tvm.
"""

from .config import (
                     BOARD_TARGETS,
                     CONFIG_ENV_VAR,
                     DEFAULT_CONFIG_PATH,
                     HW_VER,
                     INSN_BYTES,
                     KEYS,
                     MAX_XFER,
                     OPTIONAL_KEYS,
                     PAGE_BITS,
                     PAGE_BYTES,
                     SIMULATED_TARGETS,
                     TARGETS,
                     UOP_ELEM_BYTES,
                     Config,
                     ConfigError,
                     load_config,
)
from .counters import DEVICE_COUNTERS, PERF_COUNTERS
from .disasm import describe, disassemble
from .isa import (
                     EXTENSIONS,
                     LOADABLE_MEM_TYPES,
                     SUPPORTED_ALU_OPS,
                     TOKEN_QUEUES,
                     AluOp,
                     Extension,
                     Field,
                     Format,
                     Isa,
                     IsaEncodeError,
                     IsaLayoutError,
                     MemType,
                     Opcode,
                     Stage,
                     extension_for,
                     illegal_dep_flags,
                     queue_between,
                     stage_of,
                     token_pops,
                     token_pushes,
)

__all__ = [
    "BOARD_TARGETS", "CONFIG_ENV_VAR", "DEFAULT_CONFIG_PATH", "HW_VER", "INSN_BYTES", "KEYS", "MAX_XFER",
    "OPTIONAL_KEYS", "PAGE_BITS",
    "PAGE_BYTES", "SIMULATED_TARGETS", "TARGETS", "UOP_ELEM_BYTES", "Config", "ConfigError", "load_config",
    "DEVICE_COUNTERS", "PERF_COUNTERS", "describe", "disassemble",
    "EXTENSIONS", "LOADABLE_MEM_TYPES", "SUPPORTED_ALU_OPS", "TOKEN_QUEUES", "AluOp", "Extension", "Field", "Format",
    "Isa", "IsaEncodeError", "IsaLayoutError", "MemType", "Opcode", "Stage", "extension_for", "illegal_dep_flags",
    "queue_between", "stage_of", "token_pops", "token_pushes",
]
