"""Mock-mode skips, the closing ``Synchronize`` and the debug-mode prologue."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call
from tvm.tirx import AttrStmt

from ..environment import Environment
from ..intrin import SKIP_GEMM, UOP_SCOPE
from .common import RUNTIME, SKIP_ALU_PRAGMA, SKIP_DMA_PRAGMA, packed, seq


def inject_skip(func, env: Environment):
    """Mock mode: nests under ``skip_dma_copy`` / ``skip_alu`` and mock GEMM kernels do nothing (InjectSkipCopy)."""
    def on_attr(a):
        if a.attr_key in (SKIP_DMA_PRAGMA, SKIP_ALU_PRAGMA) or \
                (a.attr_key == UOP_SCOPE and isinstance(a.value, tvm.ir.StringImm) and a.value.value == SKIP_GEMM):
            return tirx.Evaluate(tirx.const(0, "int32"))
        return a
    return func.with_body(tvm_ffi.structural_map(func.body, (AttrStmt, on_attr), order="post"))


def uses_runtime(body) -> bool:
    found = []

    def on_call(c):
        if c.op.name == "tirx.tvm_call_packed" and isinstance(c.args[0], tvm.ir.StringImm) and \
                c.args[0].value.startswith(RUNTIME):
            found.append(c)
    tvm_ffi.structural_walk(body, (Call, on_call))
    return bool(found)


def inject_sync(func, env: Environment, timeout_s: float = 0.0):
    """Close the kernel's instruction stream: ``Synchronize`` runs it on the device and waits."""
    if not uses_runtime(func.body):
        return func
    return func.with_body(seq([func.body, packed("Synchronize", tirx.const(timeout_s, "float64"))]))


def debug_prologue(func, flag: int):
    """Set the runtime's debug flags for this kernel (DEBUG_DUMP_INSN, ...) and clear them afterwards."""
    if not uses_runtime(func.body):
        return func
    return func.with_body(seq([packed("SetDebugMode", int(flag)), func.body, packed("SetDebugMode", 0)]))
