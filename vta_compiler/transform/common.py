"""Shared helpers of the VTA passes: IR construction, buffer facts, leaf classification, affine analysis.

Vocabulary used by every pass:

* An *on-chip buffer* is a buffer var in one of the scopes ``local.inp_buffer``,
  ``local.wgt_buffer``, ``local.acc_buffer``; everything else is DRAM.
* A *leaf* is one unit of VTA work before it is lowered: a loop nest under the DMA pragma
  (``pragma_dma_copy``), a loop nest under the ALU pragma (``pragma_alu``) or a uop kernel
  (``coproc_uop_scope`` around a GEMM uop nest). Each leaf runs on one stage (1 load,
  2 compute, 3 store) and reads/writes a set of on-chip buffers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call, TensorLoad
from tvm.tirx import AttrStmt, BufferStore, Evaluate, For, SeqStmt

from ..environment import Environment
from ..intrin import UOP_PUSH, UOP_SCOPE

LOAD, COMPUTE, STORE = 1, 2, 3
STAGE_NAMES = {LOAD: "load", COMPUTE: "compute", STORE: "store"}
KIND_NAMES = {"dma_load": "a DMA load", "dma_store": "a DMA store", "alu": "an ALU op", "gemm": "a GEMM"}
R, W = 1, 2

DMA_PRAGMA = "pragma_dma_copy"
ALU_PRAGMA = "pragma_alu"
SKIP_DMA_PRAGMA = "pragma_skip_dma_copy"
SKIP_ALU_PRAGMA = "pragma_skip_alu"
#: AllocBuffer annotation holding the SRAM element index assigned by PlanMemory
SRAM_BASE = "vta.sram_base"

RUNTIME = "vta.runtime."


@tvm_ffi.register_error
class VTACompileError(ValueError):
    """A schedule, shape or expression that VTA cannot run; the message says what and why."""


# ---------------------------------------------------------------------------------------------- IR building
def i32(v) -> tvm.ir.PrimExpr:
    return tirx.const(int(v), "int32") if isinstance(v, int) else v


def packed(name: str, *args) -> Evaluate:
    """``call_packed("vta.runtime.<name>", args...)`` as a statement."""
    return Evaluate(tirx.call_packed(RUNTIME + name, *[i32(a) for a in args]))


def packed_expr(name: str, *args) -> tvm.ir.PrimExpr:
    return tirx.call_packed(RUNTIME + name, *[i32(a) for a in args])


def seq(stmts: Iterable[tirx.Stmt]) -> tirx.Stmt:
    out: list[tirx.Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif s is not None:
            out.append(s)
    if not out:
        return Evaluate(tirx.const(0, "int32"))
    return out[0] if len(out) == 1 else SeqStmt(out)






def with_body(stmt, body):
    """A copy of a For / AttrStmt with a new body."""
    if isinstance(stmt, For):
        return For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, AttrStmt):
        return AttrStmt(stmt.node, stmt.attr_key, stmt.value, body)
    raise TypeError(type(stmt))


def substitute(node, vmap: dict):
    """Replace vars (keys compared by identity) in ``node``."""
    if not vmap:
        return node
    keys = list(vmap.items())

    def fn(v):
        for k, rep in keys:
            if v.same_as(k):
                return rep
        return v
    return tvm_ffi.structural_map(node, (tirx.Var, fn), order="pre")


def new_static_handle(name: str = "vta_kernel"):
    """(var, Bind statement) of a per-call-site static handle for the uop kernel cache."""
    v = tirx.Var(name, "handle")
    return v, tirx.Bind(v, tirx.call_intrin("handle", "tirx.tvm_static_handle"))


# ---------------------------------------------------------------------------------------------- buffers
def is_buffer(v) -> bool:
    return tirx.is_buffer_var(v)


def scope_of(buf) -> str:
    try:
        s = buf.ty.storage_scope
    except AttributeError:
        return "global"
    return str(s) if s else "global"


def on_chip_scopes(env: Environment) -> tuple[str, str, str]:
    return (env.inp_scope, env.wgt_scope, env.acc_scope)


def is_on_chip(buf, env: Environment) -> bool:
    return scope_of(buf) in on_chip_scopes(env)


def lanes_of(scope: str, env: Environment) -> int:
    return {env.inp_scope: env.inp_lanes, env.wgt_scope: env.wgt_lanes, env.acc_scope: env.acc_lanes}[scope]


def scope_label(scope: str, env: Environment) -> str:
    return {env.inp_scope: "INP", env.wgt_scope: "WGT", env.acc_scope: "ACC"}.get(scope, "DRAM")




def buffer_numel(buf) -> int:
    n = 1
    for d in buf.ty.shape:
        if not isinstance(d, tirx.IntImm):
            raise VTACompileError(f"on-chip buffer {buf.name} has a symbolic shape {list(buf.ty.shape)}")
        n *= int(d)
    return n


def data_buffer(ptr):
    """The buffer var behind ``buffer_data(buf)`` (the pointer argument of tvm_access_ptr)."""
    if isinstance(ptr, Call) and ptr.op.name == "tirx.buffer_data":
        return ptr.args[0]
    if is_buffer(ptr):
        return ptr
    return None


def decl_roots(func_body) -> dict:
    """Map DeclBuffer view vars to the buffer var they alias (``decl_buffer(..., data=x.data)``)."""
    roots = {}

    def on_decl(d):
        src = data_buffer(d.data) if d.data is not None else None
        if src is not None:
            roots[d.buffer] = src
    tvm_ffi.structural_walk(func_body, (tirx.DeclBuffer, on_decl))
    return roots


def is_uop_push(expr) -> bool:
    return isinstance(expr, Call) and expr.op.name == "tirx.call_extern" and \
        isinstance(expr.args[0], tvm.ir.StringImm) and expr.args[0].value == UOP_PUSH


# ---------------------------------------------------------------------------------------------- loops
def peel_loops(stmt) -> tuple[list[For], tirx.Stmt]:
    """A perfect nest of For loops (DeclBuffer views in between are skipped) and its innermost body."""
    loops = []
    while True:
        if isinstance(stmt, For):
            loops.append(stmt)
            stmt = stmt.body
        elif isinstance(stmt, tirx.DeclBuffer):
            stmt = stmt.body if hasattr(stmt, "body") and stmt.body is not None else stmt
            break
        else:
            break
    return loops, stmt


def const_int(e, what: str) -> int:
    e = tvm.sym.Analyzer().simplify(e) if not isinstance(e, int) else e
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    raise VTACompileError(f"{what} must be a constant, got {e}")


def linear_coeffs(expr, loop_vars, what: str):
    """Coefficients (one per loop var, then the rest) of an index that must be affine in the loop vars."""
    if not loop_vars:
        return [expr]
    co = tvm.sym.detect_linear_equation(expr, list(loop_vars))
    if len(co) != len(loop_vars) + 1:
        raise VTACompileError(f"{what}: index {expr} is not an affine function of the loop variables "
                              f"{', '.join(str(v) for v in loop_vars)}")
    return list(co)


# ---------------------------------------------------------------------------------------------- leaves
@dataclass
class Leaf:
    kind: str                 # "dma_load", "dma_store", "alu", "gemm"
    stage: int
    access: dict = field(default_factory=dict)   # on-chip buffer var -> R|W bits

    def add(self, buf, mode: int) -> None:
        self.access[buf] = self.access.get(buf, 0) | mode


def _loads_in(expr) -> list:
    out = []
    tvm_ffi.structural_walk(expr, (TensorLoad, lambda x: out.append(x)))
    return out


def leaf_of(stmt, env: Environment, roots: dict | None = None) -> Leaf | None:
    """The Leaf a statement is (before lowering), or None if it is not a VTA leaf."""
    if not isinstance(stmt, AttrStmt):
        return None
    key = stmt.attr_key
    roots = roots or {}

    def root(b):
        return roots.get(b, b)

    if key in (DMA_PRAGMA, SKIP_DMA_PRAGMA):
        _, body = peel_loops(stmt.body)
        if not isinstance(body, BufferStore):
            raise VTACompileError(f"the {env.dma_copy} pragma must be on a loop nest that copies one buffer into "
                                  f"another; found {type(body).__name__} inside:\n{stmt.body}")
        dst = body.buffer
        srcs = [ld.source for ld in _loads_in(body.value)]
        if is_on_chip(dst, env):
            scope = scope_of(dst)
            leaf = Leaf("dma_load", COMPUTE if scope == env.acc_scope else LOAD)
            leaf.add(root(dst), W)
        else:
            leaf = Leaf("dma_store", STORE)
            for s in srcs:
                if is_on_chip(s, env):
                    leaf.add(root(s), R)
        return leaf
    if key in (ALU_PRAGMA, SKIP_ALU_PRAGMA):
        leaf = Leaf("alu", COMPUTE)
        stores = []
        tvm_ffi.structural_walk(stmt.body, (BufferStore, lambda s: stores.append(s)))
        for s in stores:
            for ld in _loads_in(s.value):
                if is_on_chip(ld.source, env):
                    leaf.add(root(ld.source), R)
            leaf.add(root(s.buffer), W)
        return leaf
    if key == UOP_SCOPE:
        leaf = Leaf("gemm", COMPUTE)

        def on_call(c):
            if is_uop_push(c):
                reset = int(c.args[2].value) if isinstance(c.args[2], tirx.IntImm) else 0
                for k, mode in ((3, R | W if not reset else W), (4, R), (5, R)):
                    b = _ptr_buffer(c.args[k])
                    if b is not None:
                        leaf.add(root(b), mode)
        tvm_ffi.structural_walk(stmt.body, (Call, on_call))
        return leaf
    return None


def _ptr_buffer(arg):
    if isinstance(arg, Call) and arg.op.name == "tirx.tvm_access_ptr":
        return data_buffer(arg.args[1])
    return None


def access_ptr_parts(arg):
    """(buffer var, scalar offset) of a ``tvm_access_ptr``."""
    if not (isinstance(arg, Call) and arg.op.name == "tirx.tvm_access_ptr"):
        raise VTACompileError(f"expected an access pointer to an on-chip buffer, got {arg}")
    return data_buffer(arg.args[1]), arg.args[2]


def collect_allocs(body, env: Environment) -> list:
    """On-chip AllocBuffer statements anywhere in ``body``, in program order."""
    out = []

    def on_alloc(a):
        if is_on_chip(a.buffer, env):
            out.append(a)
    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, on_alloc), order="pre")
    return out


def sram_plan(body, env: Environment) -> dict:
    """buffer var -> SRAM element index, from the annotations PlanMemory left on the allocations."""
    plan = {}
    for a in collect_allocs(body, env):
        if SRAM_BASE in a.annotations:
            plan[a.buffer] = int(a.annotations[SRAM_BASE])
    return plan

