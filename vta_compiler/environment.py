"""The VTA compilation environment: every hardware number, the dtypes and scopes, the targets.

``Environment`` takes every number from ``vta_hw.spec`` (it has none of its own). ``get_env()``
returns the current environment: the innermost ``with vta.Environment(cfg):`` block, else the
one made from the default configuration (``$VTA_CONFIG`` or the repository's vta_config.json).
"""

from __future__ import annotations

import copy
from typing import Any

from vta_hw.spec import SIMULATED_TARGETS as SIMULATED_TARGETS  # targets simulated in this process
from vta_hw.spec import AluOp, Config, MemType, Stage, load_config
from vta_runtime import (
    DEBUG_DUMP_INSN,
    DEBUG_DUMP_UOP,
    DEBUG_FORCE_SERIAL,
    DEBUG_SKIP_READ_BARRIER,
    DEBUG_SKIP_WRITE_BARRIER,
)

#: Host CPU of each target, in the dictionary target form TVM 0.27 requires (CLI strings are refused).
TARGET_HOSTS: dict[str, dict[str, Any]] = {
    "sim": {"kind": "llvm"},
    "tsim": {"kind": "llvm"},
    # Pynq-Z1/Z2: Zynq-7000, dual Cortex-A9, ARMv7 hard-float with NEON
    "pynq": {"kind": "llvm", "mtriple": "armv7-none-linux-gnueabihf", "mcpu": "cortex-a9", "mattr": ["+neon"]},
    # Ultra96: Zynq UltraScale+, quad Cortex-A53, AArch64
    "ultra96": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a53"},
    # ZCU104: Zynq UltraScale+ as well (the original raised an error here, spec gotcha G11)
    "zcu104": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a53"},
    # DE10-Nano: Cyclone V SoC, dual Cortex-A9, ARMv7 hard-float with NEON
    "de10nano": {"kind": "llvm", "mtriple": "armv7-none-linux-gnueabihf", "mcpu": "cortex-a9", "mattr": ["+neon"]},
}


class DevContext:
    """Device constants used by generated code: memory ids, ALU opcodes, queue ids (spec 5.2)."""

    MEM_ID_UOP = int(MemType.UOP)
    MEM_ID_WGT = int(MemType.WGT)
    MEM_ID_INP = int(MemType.INP)
    MEM_ID_ACC = int(MemType.ACC)
    MEM_ID_OUT = int(MemType.OUT)
    MEM_ID_ACC_8BIT = int(MemType.ACC_8BIT)
    ALU_OPCODE_MIN = int(AluOp.MIN)
    ALU_OPCODE_MAX = int(AluOp.MAX)
    ALU_OPCODE_ADD = int(AluOp.ADD)
    ALU_OPCODE_SHR = int(AluOp.SHR)
    ALU_OPCODE_MUL = int(AluOp.MUL)
    QID_LOAD_INP = int(Stage.LOAD)
    QID_LOAD_WGT = int(Stage.LOAD)
    QID_LOAD_OUT = int(Stage.COMPUTE)   # ACC loads run on the compute module
    QID_COMPUTE = int(Stage.COMPUTE)
    QID_STORE_OUT = int(Stage.STORE)

    def __init__(self, env: Environment):
        self.env = env

    @property
    def gemm(self) -> str:
        return self.env.gemm


class Environment:
    """The hardware configuration as the compiler sees it; a context manager (``with vta.Environment(cfg):``).

    Every upper-case attribute of the :class:`vta_hw.spec.Config` is an attribute here (``BATCH``,
    ``BLOCK_IN``, ``BLOCK_OUT``, ``INP_BUFF_DEPTH``, ``MODEL``, ``TARGET`` ...), plus the dtypes
    (``inp_dtype`` ... ``out_dtype``), the SRAM scopes (``inp_scope``, ``wgt_scope``, ``acc_scope``),
    the pragma names (``dma_copy``, ``alu``), the GEMM intrinsics (``gemm``, ``gemm_reset``) and the
    targets (``target``, ``target_host``).

    Args:
        cfg: a :class:`~vta_hw.spec.Config`, a dict of the configuration keys, a path to a JSON file,
            or None for ``$VTA_CONFIG``, else the repository's ``vta_config.json``.

    Raises:
        vta_hw.spec.ConfigError: the configuration is invalid or cannot be read; the message names
            the key, the value and the limit.

    Example:
        >>> import vta_compiler as vta
        >>> with vta.Environment({**vta.get_env().config.cfg_dict, "LOG_BATCH": 1, "LOG_BLOCK": 3,
        ...                      "LOG_WGT_BUFF_SIZE": 16}) as env:
        ...     print(env.BATCH, env.BLOCK_IN, env.MODEL)
        2 8 sim_2x8_i8w8a32_15_15_16_17
    """

    current: Environment | None = None
    _stack: list[Environment | None] = []

    inp_scope = "local.inp_buffer"
    wgt_scope = "local.wgt_buffer"
    acc_scope = "local.acc_buffer"

    DEBUG_DUMP_INSN = DEBUG_DUMP_INSN
    DEBUG_DUMP_UOP = DEBUG_DUMP_UOP
    DEBUG_SKIP_READ_BARRIER = DEBUG_SKIP_READ_BARRIER
    DEBUG_SKIP_WRITE_BARRIER = DEBUG_SKIP_WRITE_BARRIER
    DEBUG_FORCE_SERIAL = DEBUG_FORCE_SERIAL

    def __init__(self, cfg: Config | dict[str, Any] | str | None = None):
        self.config = c = load_config(cfg)
        self.pkg = c
        for name, value in vars(c).items():
            if name[:1].isupper():
                setattr(self, name, value)
        # the original spelled the buffer-size keys this way too
        self.inp_dtype = f"int{c.INP_WIDTH}"
        self.wgt_dtype = f"int{c.WGT_WIDTH}"
        self.acc_dtype = f"int{c.ACC_WIDTH}"
        self.out_dtype = f"int{c.OUT_WIDTH}"
        self.mock_mode = False
        self._dev: DevContext | None = None

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Environment:
        Environment._stack.append(Environment.current)
        Environment.current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        Environment.current = Environment._stack.pop()

    # ------------------------------------------------------------------ derived views
    @property
    def cfg_dict(self) -> dict[str, Any]:
        return self.config.pkg_dict()

    @property
    def dev(self) -> DevContext:
        if self._dev is None:
            self._dev = DevContext(self)
        return self._dev

    @property
    def mock(self) -> Environment:
        """A copy whose DMA and ALU pragmas are skipped and whose GEMM intrinsic does nothing."""
        m = copy.copy(self)
        m.mock_mode = True
        m._dev = None
        return m

    @property
    def dma_copy(self) -> str:
        """Pragma name for DMA copies (annotate loops with ``"pragma_" + env.dma_copy``)."""
        return "skip_dma_copy" if self.mock_mode else "dma_copy"

    @property
    def alu(self) -> str:
        """Pragma name for element-wise ALU work."""
        return "skip_alu" if self.mock_mode else "alu"

    @property
    def gemm(self) -> str:
        """Name of the registered GEMM tensor intrinsic (the update form) for tensorize."""
        from .intrin import gemm_intrin_names
        return gemm_intrin_names(self)[0]

    @property
    def gemm_reset(self) -> str:
        """Name of the registered GEMM reset intrinsic (zeroes the accumulators)."""
        from .intrin import gemm_intrin_names
        return gemm_intrin_names(self)[1]

    # ------------------------------------------------------------------ lane counts of one element
    @property
    def inp_lanes(self) -> int:
        return self.BATCH * self.BLOCK_IN

    @property
    def wgt_lanes(self) -> int:
        return self.BLOCK_OUT * self.BLOCK_IN

    @property
    def acc_lanes(self) -> int:
        return self.BATCH * self.BLOCK_OUT

    # ------------------------------------------------------------------ targets
    @property
    def target_host(self):
        """The host CPU target (llvm for sim/tsim, ARMv7 hard-float for Pynq and DE10-Nano, AArch64 for
        Ultra96 and ZCU104)."""
        import tvm
        return tvm.target.Target(TARGET_HOSTS[self.TARGET])

    @property
    def target_vta_cpu(self):
        return self.target_host

    @property
    def target(self):
        """The VTA target: ``ext_dev`` (device type 12) with the host CPU as host."""
        import tvm
        return tvm.target.Target({"kind": "ext_dev", "keys": ["vta", "cpu"], "device": "vta", "model": self.MODEL},
                                 host=TARGET_HOSTS[self.TARGET])

    def __repr__(self) -> str:
        return f"Environment({self.MODEL!r}{', mock' if self.mock_mode else ''})"


def get_env() -> Environment:
    """The current environment: the innermost ``with Environment(...)`` block, else the default one.

    The default environment is made once, on the first call, from ``$VTA_CONFIG`` or the repository's
    ``vta_config.json``; the compiler's schedules and passes all read the hardware numbers from here.

    Raises:
        vta_hw.spec.ConfigError: the default configuration is invalid or cannot be read.

    Example:
        >>> import vta_compiler as vta
        >>> env = vta.get_env()
        >>> env.BATCH, env.BLOCK_IN, env.BLOCK_OUT, env.inp_dtype, env.acc_dtype
        (1, 16, 16, 'int8', 'int32')
    """
    if Environment.current is None:
        Environment.current = Environment()
    return Environment.current
