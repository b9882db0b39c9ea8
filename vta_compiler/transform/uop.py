"""Uop kernels: lifting the uop scope over its loop nest, and folding loops into kernel loops.

``LiftUopScope`` moves each ``coproc_uop_scope`` attribute (left by the GEMM intrinsics) out over
every loop whose body is nothing but that scope, so that one attribute encloses the whole loop
nest of uop pushes: that nest becomes one uop kernel (one GEMM instruction). It also moves out
over an ``if`` without ``else`` (a block predicate, as conv2d_transpose's schedule leaves around
the GEMMs of kernel taps that only meet the zeros of stride dilation): the kernel then keeps the
condition and records only the uops for which it holds.

``FoldUopLoop`` lowers each kernel: up to two loops (the two with the largest extents) become
the kernel's loops (``UopLoopBegin``/``UopLoopEnd``, which the GEMM instruction's iter/factor
fields run in hardware); the other loops are unrolled into uops when the kernel is recorded. The
kernel is recorded once per call site (a static handle) and cached by the runtime; a kernel whose
indices depend on one variable from outside (for example a loop that was not lifted) passes it
as the cache signature; more than one such variable is refused (gotcha G15). A guarded kernel's
condition is evaluated when the kernel is recorded, so the loops it mentions are never folded
into hardware loops.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx import AttrStmt, Evaluate, For, IfThenElse

from ..environment import Environment
from ..intrin import UOP_SCOPE
from .common import (
    VTACompileError,
    access_ptr_parts,
    const_int,
    decl_roots,
    is_uop_push,
    lanes_of,
    linear_coeffs,
    new_static_handle,
    packed,
    packed_expr,
    peel_loops,
    scope_of,
    sram_plan,
    with_body,
)


def lift_uop_scope(func, env: Environment):
    def on_for(f):
        b = f.body
        if isinstance(b, AttrStmt) and b.attr_key == UOP_SCOPE:
            return AttrStmt(b.node, b.attr_key, b.value, with_body(f, b.body))
        return f

    def on_if(i):
        b = i.then_case
        if i.else_case is None and isinstance(b, AttrStmt) and b.attr_key == UOP_SCOPE:
            return AttrStmt(b.node, b.attr_key, b.value, IfThenElse(i.condition, b.body, None))
        return i
    return func.with_body(tvm_ffi.structural_map(func.body, [(IfThenElse, on_if), (For, on_for)], order="post"))


def free_vars(exprs) -> list:
    """Scalar (non-buffer) variables used by ``exprs``, in first-use order."""
    seen = []

    def on_var(v):
        if not tirx.is_buffer_var(v) and "handle" not in str(v.ty) and v not in seen:
            seen.append(v)
    for e in exprs:
        tvm_ffi.structural_walk(e, (tirx.Var, on_var))
    return seen


def kernel_uop_budget(env: Environment) -> int:
    """Most uops one kernel may have: a quarter of the UOP buffer, so that kernels stay resident together."""
    return max(env.UOP_BUFF_DEPTH // 4, 1)


def emit_kernel(env: Environment, what: str, op: str, dims: list, base: tuple, push_tail: tuple,
                host_loops: list | None = None, guard=None) -> tirx.Stmt:
    """A cached uop kernel plus the instruction that runs it.

    ``dims``: [(var, extent, (dst, src, wgt) element coefficients)] in nest order; ``base``: the
    (dst, src, wgt) element indices at all-zero loop variables; ``push_tail``: (mode, reset,
    opcode, use_imm, imm); ``op``: "PushGEMMOp" or "PushALUOp"; ``guard``: a condition on the
    loop variables; uops for which it is false are not recorded (its loops are never folded).
    """
    ana = tvm.sym.Analyzer()
    guarded = set(free_vars([guard])) if guard is not None else set()
    order = sorted((n for n in range(len(dims)) if dims[n][0] not in guarded), key=lambda n: -dims[n][1])
    folded = sorted(order[:2])
    unrolled = [n for n in range(len(dims)) if n not in folded]
    uops = math.prod(dims[n][1] for n in unrolled)
    if uops > env.UOP_BUFF_DEPTH:
        raise VTACompileError(
            f"{what}: the uop kernel needs {uops} uops (loops {', '.join(f'{d[0]}:{d[1]}' for d in dims)}, two of "
            f"them folded) but the UOP buffer holds {env.UOP_BUFF_DEPTH}; use smaller tiles")
    mode, reset, opcode, use_imm, imm = push_tail
    loop_vars = {d[0] for d in dims}
    fv = free_vars([*base, imm] + ([guard] if guard is not None else []))
    fv = [v for v in fv if v not in loop_vars]
    if len(fv) > 1:
        raise VTACompileError(
            f"{what}: the uop kernel depends on {len(fv)} variables from outside it ({', '.join(map(str, fv))}); "
            "a cached kernel may depend on at most one (its signature, gotcha G15): hoist the computation or "
            "change the schedule so that the on-chip indices do not depend on these loops")
    sig = tirx.Cast("int32", fv[0]) if fv and str(fv[0].ty) != "int32" else (fv[0] if fv else 0)
    push = packed("UopPush", mode, reset,
                  ana.simplify(base[0] + sum((dims[n][2][0] * dims[n][0] for n in unrolled), tirx.const(0, "int32"))),
                  ana.simplify(base[1] + sum((dims[n][2][1] * dims[n][0] for n in unrolled), tirx.const(0, "int32"))),
                  ana.simplify(base[2] + sum((dims[n][2][2] * dims[n][0] for n in unrolled), tirx.const(0, "int32"))),
                  opcode, use_imm, imm)
    body = push if guard is None else IfThenElse(guard, push, None)
    for n in reversed(unrolled):
        v, e, _ = dims[n]
        body = For(v, tirx.const(0, "int32"), tirx.const(e, "int32"), tirx.ForKind.SERIAL, body)
    rec = [packed("UopLoopBegin", dims[n][1], *(ana.simplify(c) for c in dims[n][2])) for n in folded]
    rec.append(body)
    rec += [packed("UopLoopEnd") for _ in folded]
    h, bind = new_static_handle()
    begin = packed_expr("UopKernelBegin", h, sig)
    stmt = tirx.SeqStmt([bind, IfThenElse(begin != 0, tirx.SeqStmt(rec) if len(rec) > 1 else rec[0], None),
                         packed(op, h, sig)])
    for lp in reversed(host_loops or []):
        stmt = with_body(lp, stmt)
    return stmt


def _element_dims(what, loops, exprs, lanes_list, ana):
    """Per loop, the element-unit coefficients of each index; and each index's element-unit base."""
    vars_ = [lp.loop_var for lp in loops]
    coeffs = [linear_coeffs(e, vars_, what) for e in exprs]
    dims = []
    for i, lp in enumerate(loops):
        if const_int(lp.min, f"{what}: start of loop {lp.loop_var}") != 0:
            raise VTACompileError(f"{what}: loop {lp.loop_var} does not start at 0")
        ext = const_int(lp.extent, f"{what}: extent of loop {lp.loop_var}")
        cs = []
        for co, lanes, name in zip(coeffs, lanes_list, ("dst", "src", "wgt")):
            c = co[i]
            if not ana.can_prove_equal(tirx.floormod(c, lanes), 0):
                raise VTACompileError(f"{what}: loop {lp.loop_var} steps the {name} index by {c} values, not whole "
                                      f"{lanes}-value elements")
            cs.append(ana.simplify(tirx.floordiv(c, lanes)))
        dims.append((lp.loop_var, ext, tuple(cs)))
    bases = []
    for co, lanes, name in zip(coeffs, lanes_list, ("dst", "src", "wgt")):
        if not ana.can_prove_equal(tirx.floormod(co[-1], lanes), 0):
            raise VTACompileError(f"{what}: the {name} offset {co[-1]} is not a whole number of elements")
        bases.append(ana.simplify(tirx.floordiv(co[-1], lanes)))
    return dims, bases


def lower_gemm_kernel(attr, env: Environment, plan: dict, roots: dict) -> tirx.Stmt:
    ana = tvm.sym.Analyzer()
    loops, body = peel_loops(attr.body)
    guard = None
    if isinstance(body, IfThenElse) and body.else_case is None:
        guard, body = body.condition, body.then_case
    if not (isinstance(body, Evaluate) and is_uop_push(body.value)):
        raise VTACompileError(f"a GEMM uop kernel must be a perfect loop nest around one uop (optionally guarded by "
                              f"an if); found:\n{attr.body}")
    args = body.value.args   # name, mode, reset, dst, src, wgt
    reset = const_int(args[2], "GEMM reset flag")
    ptrs = [access_ptr_parts(args[3])]
    if not reset:
        ptrs += [access_ptr_parts(args[4]), access_ptr_parts(args[5])]
    names = [p[0].name for p in ptrs]
    what = f"GEMM {'reset ' if reset else ''}kernel on {', '.join(names)}"
    for b, _ in ptrs:
        r = roots.get(b, b)
        if r not in plan:
            raise VTACompileError(f"{what}: on-chip buffer {b.name} has no SRAM address (is PlanMemory disabled?)")
    lanes = [lanes_of(scope_of(b), env) for b, _ in ptrs]
    exprs = [off for _, off in ptrs]
    host: list = []
    budget = kernel_uop_budget(env)
    guarded = set(free_vars([guard])) if guard is not None else set()
    while True:
        dims, bases = _element_dims(what, loops, exprs, lanes, ana)
        dims = [d for d in dims if d[1] > 1 or d[0] in guarded]
        sizes = sorted((d[1] for d in dims if d[0] not in guarded), reverse=True)
        forced = math.prod(d[1] for d in dims if d[0] in guarded)
        if forced * math.prod(sizes[2:]) <= budget or not loops:
            break
        host.append(loops[0])   # too big: leave the outermost loop to the host (its var becomes the signature)
        loops = loops[1:]
    sram = [plan[roots.get(b, b)] for b, _ in ptrs]
    base = [ana.simplify(s + o) for s, o in zip(sram, bases)]
    while len(base) < 3:
        base.append(tirx.const(0, "int32"))
    dims = [(v, e, tuple(list(c) + [tirx.const(0, "int32")] * (3 - len(c)))) for v, e, c in dims]
    return emit_kernel(env, what, "PushGEMMOp", dims, tuple(base), (0, reset, 0, 0, 0), host, guard)


def fold_uop_loop(func, env: Environment):
    plan = sram_plan(func.body, env)
    roots = decl_roots(func.body)

    def on_attr(a):
        if a.attr_key == UOP_SCOPE:
            return lower_gemm_kernel(a, env, plan, roots)
        return a
    return func.with_body(tvm_ffi.structural_map(func.body, (AttrStmt, on_attr), order="post"))
