"""Mock-mode skips, the closing ``Synchronize``, the command-stream cache and the debug-mode prologue."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call, TensorLoad
from tvm.tirx import AttrStmt

from ..environment import Environment
from ..intrin import SKIP_GEMM, UOP_SCOPE
from .common import RUNTIME, SKIP_ALU_PRAGMA, SKIP_DMA_PRAGMA, is_buffer, new_static_handle, packed, packed_expr, seq

#: the runtime functions that only build and run streams: host code calling nothing else can be replayed
STREAM_FUNCTIONS = frozenset(RUNTIME + n for n in (
    "LoadBuffer2D", "StoreBuffer2D", "UopKernelBegin", "UopLoopBegin", "UopLoopEnd", "UopPush", "PushGEMMOp",
    "PushALUOp", "DepPush", "DepPop", "Synchronize"))
_STATEMENTS = (tirx.SeqStmt, tirx.For, tirx.IfThenElse, tirx.Evaluate, tirx.Bind, tirx.AttrStmt, tirx.DeclBuffer,
               tirx.AssertStmt)


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


def _stream_only(body) -> bool:
    """Whether host code only computes with scalars and calls the stream functions (no memory access, no other
    call with an effect): then what it builds depends on its arguments alone, and running it again can be
    replaced by running its streams again."""
    ok = [True]

    def on_stmt(st):
        if not isinstance(st, _STATEMENTS):
            ok[0] = False

    def on_call(c):
        name = c.op.name
        if name == "tirx.tvm_call_packed":
            ok[0] &= isinstance(c.args[0], tvm.ir.StringImm) and c.args[0].value in STREAM_FUNCTIONS
        elif name != "tirx.tvm_static_handle":
            effect = c.op.get_attr("TCallEffectKind")
            ok[0] &= effect is not None and int(effect) <= 1     # an annotation or a pure function

    def on_load(_):
        ok[0] = False

    tvm_ffi.structural_walk(body, [(tirx.Stmt, on_stmt), (Call, on_call), (TensorLoad, on_load)])
    return ok[0]


def _nbytes(buf) -> tvm.ir.PrimExpr:
    n = tirx.const(tvm.runtime.DataType(str(buf.dtype)).itemsize, "int64")
    for d in buf.shape:
        n = n * tirx.Cast("int64", d)
    return tvm.sym.Analyzer().simplify(n)


def inject_stream_cache(func, env: Environment):
    """Replay the kernel's streams while its buffers do not change (the runtime's command-stream cache):

    ``if StreamBegin(site, buffer, nbytes, ..., scalar, ...) == 0 { body; StreamEnd(site) }``. StreamBegin runs
    the streams a previous call with the same arguments built and returns 1, or records what the body builds.
    Only host code that does nothing but build streams (``_stream_only``) is wrapped."""
    if not uses_runtime(func.body) or not _stream_only(func.body):
        return func
    args = []
    for p in func.params:
        if not is_buffer(p):
            args += [p, tirx.const(0, "int64")] if isinstance(p.ty, tvm.ir.PointerType) else [p]
            continue
        args += [p.data, _nbytes(p)]
        args += [tirx.Cast("int64", e) for e in [*p.shape, *(p.strides or []), p.elem_offset]
                 if isinstance(e, tirx.Var)]      # symbolic shapes change what is built too
    site, bind = new_static_handle("vta_stream")
    begin = packed_expr("StreamBegin", site, *args)
    body = tirx.IfThenElse(begin == 0, seq([func.body, packed("StreamEnd", site)]), None)
    return func.with_body(tirx.SeqStmt([bind, body]))
