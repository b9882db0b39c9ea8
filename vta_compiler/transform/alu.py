"""ALU injection: element-wise loop nests under the ``alu`` pragma become ALU uop kernels.

The stored value is read as a chain of operations applied in place to one *base* operand, the
accumulator load whose index equals the destination's:
``dst = op_k(... op_1(base, o_1) ..., o_k)``, each ``o_i`` an immediate (a constant, or one scalar
variable) or another accumulator load (any affine index: broadcasts such as a per-channel bias
are fine). Each op becomes one ALU instruction (``ACC[dst] = op(ACC[dst], o)``):

====================  ==========================================
``a + b``, ``a - imm`` ADD (immediate negated)
``max``, ``min``       MAX, MIN
``a >> k``             SHR k (``k`` immediate or a tensor)
``a << k``             SHR -k (immediate)
``a * b``              MUL (ISA extension ``alu_mul``)
``a`` (a plain copy)   SHR 0: the copy idiom that refreshes OUT
====================  ==========================================

VTA has no subtract of a tensor; such expressions are refused with a message. MUL exists only with the ISA
extension ``alu_mul`` (else refused, naming it) and multiplies the low 16 bits of both operands (exact int16 x
int16): the stage that multiplies must know its operands fit int16 (``vta_compiler.top.pool2d`` checks its
sums' range before it emits one). ALU instructions work in place, so when the destination
buffer differs from the base buffer, the two share storage (PlanMemory aliases them); the base
must not be used afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call, TensorLoad
from tvm.tirx import AttrStmt, BufferStore

from vta_hw.spec import AluOp

from ..environment import Environment
from .common import (
    ALU_PRAGMA,
    VTACompileError,
    const_int,
    decl_roots,
    is_on_chip,
    lanes_of,
    linear_coeffs,
    peel_loops,
    scope_of,
    seq,
    sram_plan,
)
from .uop import emit_kernel

IMM_MIN, IMM_MAX = -(1 << 15), (1 << 15) - 1


@dataclass
class AluNest:
    store: BufferStore
    loops: list
    base: TensorLoad
    ops: list = field(default_factory=list)    # [(AluOp, operand)] in execution order; operand: TensorLoad|PrimExpr

    @property
    def dst(self):
        return self.store.buffer


def _has_load(e) -> bool:
    found = []
    tvm_ffi.structural_walk(e, (TensorLoad, lambda x: found.append(x)))
    return bool(found)


def _strip_cast(e, dtype, env: Environment | None = None):
    """``e`` without casts that change nothing in the ALU: to ``dtype`` of ``dtype``, and (with ``env``) to
    ``dtype`` of an int8 accumulator-scope load (an ACC_8BIT load already sign-extended it into its lane)."""
    while isinstance(e, tirx.Cast) and str(e.ty) == dtype:
        inner = e.value
        if str(inner.ty) == dtype or (env is not None and isinstance(inner, TensorLoad) and
                                      str(inner.ty) == env.out_dtype and scope_of(inner.source) == env.acc_scope):
            e = inner
        else:
            break
    return e


def _binary(e):
    """(kind, a, b) of a binary expression node the ALU understands, else None."""
    for cls, kind in ((tirx.Add, "add"), (tirx.Sub, "sub"), (tirx.Max, "max"), (tirx.Min, "min"),
                      (tirx.Mul, "mul")):
        if isinstance(e, cls):
            return kind, e.a, e.b
    for cls, kind in ((getattr(tirx, "RShift", None), "shr"), (getattr(tirx, "LShift", None), "shl")):
        if cls is not None and isinstance(e, cls):
            return kind, e.a, e.b
    if isinstance(e, Call) and e.op.name in ("tirx.shift_right", "tirx.shift_left"):
        return ("shr" if e.op.name == "tirx.shift_right" else "shl"), e.args[0], e.args[1]
    return None


def analyze_alu(attr, env: Environment) -> AluNest:
    loops, body = peel_loops(attr.body)
    if not isinstance(body, BufferStore):
        raise VTACompileError(f"the {env.alu} pragma must be on a loop nest that stores one element-wise result; "
                              f"found {type(body).__name__}:\n{attr.body}")
    dst = body.buffer
    what = f"ALU op writing {dst.name}"
    if scope_of(dst) != env.acc_scope:
        raise VTACompileError(f"{what}: ALU results must be in the accumulator scope {env.acc_scope}, not "
                              f"{scope_of(dst)}")
    acc = env.acc_dtype
    if str(dst.ty.dtype) != acc:
        raise VTACompileError(f"{what}: the ALU computes on {acc}; {dst.name} is {dst.ty.dtype}")
    ana = tvm.sym.Analyzer()
    dst_idx = body.indices[0]

    def is_base(e):
        e = _strip_cast(e, acc, env)
        return isinstance(e, TensorLoad) and is_on_chip(e.source, env) and scope_of(e.source) == env.acc_scope \
            and ana.can_prove_equal(e.indices[0], dst_idx)

    def contains_base(e):
        found = []
        tvm_ffi.structural_walk(e, (TensorLoad, lambda x: found.append(x) if is_base(x) else None))
        return bool(found)

    def operand(e, op_name):
        e = _strip_cast(e, acc, env)
        if isinstance(e, TensorLoad):
            if scope_of(e.source) != env.acc_scope:
                raise VTACompileError(f"{what}: operand {e.source.name} of {op_name} must be in the accumulator "
                                      f"scope, not {scope_of(e.source)}")
            return e
        if _has_load(e):
            raise VTACompileError(f"{what}: the operand {e} of {op_name} is not a single accumulator load or "
                                  "an immediate; split the expression into stages")
        if str(e.ty) not in ("int32", "int64", "int16", "int8"):
            raise VTACompileError(f"{what}: immediate {e} of {op_name} must be an integer")
        return e

    ops = []
    e = _strip_cast(body.value, acc)
    while True:
        e = _strip_cast(e, acc, env)
        if is_base(e):
            base = e
            break
        if isinstance(e, tirx.Cast):
            raise VTACompileError(f"{what}: cannot convert {e.value.ty} to {e.ty} in the ALU (narrowing to "
                                  f"{env.out_dtype} happens when the result is stored)")
        b = _binary(e)
        if b is None:
            if isinstance(e, TensorLoad):
                raise VTACompileError(
                    f"{what}: ALU ops work in place, so one operand must have the same index as the destination; "
                    f"{e.source.name}[{e.indices[0]}] does not match {dst.name}[{dst_idx}]")
            raise VTACompileError(f"{what}: {type(e).__name__} ({e}) has no VTA ALU operation (supported: +, "
                                  "- immediate, max, min, >>, << immediate, copy)")
        kind, a, c = b
        if kind == "mul" and not env.config.isa.has("alu_mul"):
            raise VTACompileError(f"{what}: a*b needs the ALU MUL operation, which VTA does not support on this "
                                  f"configuration: {env.config.isa.refusal(alu_op=AluOp.MUL)} (see Semantics)")
        in_a, in_c = contains_base(a), contains_base(c)
        if not (in_a or in_c):
            raise VTACompileError(
                f"{what}: ALU ops work in place, so one operand must be {dst.name}'s own index pattern "
                f"({dst_idx}); neither side of {kind} is: {e}")
        commutative = kind in ("add", "max", "min", "mul")
        if in_a:
            chain, other = a, c
        elif commutative:
            chain, other = c, a
        else:
            raise VTACompileError(f"{what}: {'subtraction' if kind == 'sub' else 'a shift'} must have the "
                                  f"in-place operand on the left: {e}")
        other = operand(other, kind)
        tensor = isinstance(other, TensorLoad)
        if kind == "sub":
            if tensor:
                raise VTACompileError(f"{what}: VTA's ALU has no SUB operation, so {e} cannot subtract a tensor; "
                                      "negate the operand in an earlier stage or add a negated bias")
            ops.append((AluOp.ADD, -other))
        elif kind == "add":
            ops.append((AluOp.ADD, other))
        elif kind == "max":
            ops.append((AluOp.MAX, other))
        elif kind == "min":
            ops.append((AluOp.MIN, other))
        elif kind == "mul":
            ops.append((AluOp.MUL, other))
        elif kind == "shr":
            if not tensor:
                _check_shift(other, what, ">>")
            ops.append((AluOp.SHR, other))
        else:  # shl
            if tensor:
                raise VTACompileError(f"{what}: a left shift by a tensor is not supported (only by an immediate)")
            _check_shift(other, what, "<<")
            ops.append((AluOp.SHR, -other))
        e = chain
    ops.reverse()
    if not ops:
        ops = [(AluOp.SHR, tirx.const(0, "int32"))]   # the copy idiom
    for _op, o in ops:
        if not isinstance(o, TensorLoad):
            o = ana.simplify(o)
            if isinstance(o, tirx.IntImm) and not IMM_MIN <= int(o.value) <= IMM_MAX:
                raise VTACompileError(f"{what}: immediate {int(o.value)} does not fit the ALU's 16-bit signed field")
    return AluNest(body, loops, base, ops)


def _check_shift(k, what, sym):
    k = tvm.sym.Analyzer().simplify(k)
    if isinstance(k, tirx.IntImm) and not 0 <= int(k.value) <= 31:
        raise VTACompileError(f"{what}: shift {sym} {int(k.value)} is outside 0..31 (the ALU shifts by a signed "
                              "6-bit amount)")


def lower_alu(attr, env: Environment, plan: dict, roots: dict) -> tirx.Stmt:
    nest = analyze_alu(attr, env)
    ana = tvm.sym.Analyzer()
    dst = nest.dst
    what = f"ALU op writing {dst.name}"
    lanes = lanes_of(env.acc_scope, env)
    loops = nest.loops
    vars_ = [lp.loop_var for lp in loops]
    extents = [const_int(lp.extent, f"{what}: extent of loop {lp.loop_var}") for lp in loops]
    for lp in loops:
        if const_int(lp.min, f"{what}: start of loop {lp.loop_var}") != 0:
            raise VTACompileError(f"{what}: loop {lp.loop_var} does not start at 0")

    def root(b):
        return roots.get(b, b)
    for b in [dst] + [o.source for _, o in nest.ops if isinstance(o, TensorLoad)]:
        if root(b) not in plan:
            raise VTACompileError(f"{what}: on-chip buffer {b.name} has no SRAM address (is PlanMemory disabled?)")
    dco = linear_coeffs(nest.store.indices[0], vars_, what)
    out = []
    for op, o in nest.ops:
        tensor = isinstance(o, TensorLoad)
        sco = linear_coeffs(o.indices[0], vars_, what) if tensor else dco
        group, k = 1, len(vars_) - 1
        while group < lanes:
            if k < 0:
                break
            if extents[k] == 1:
                k -= 1
                continue
            if not (ana.can_prove_equal(dco[k], group) and ana.can_prove_equal(sco[k], group)):
                break
            group *= extents[k]
            k -= 1
        if group != lanes:
            raise VTACompileError(
                f"{what}: the innermost loops must run over the {lanes} lanes of whole accumulator elements, "
                f"contiguously for the destination and every tensor operand (VTA's ALU is lane-wise)")
        dims = []
        for i in range(k + 1):
            if extents[i] == 1:
                continue
            cs = []
            for co, name in ((dco, "destination"), (sco, "operand")):
                if not ana.can_prove_equal(tirx.floormod(co[i], lanes), 0):
                    raise VTACompileError(f"{what}: loop {vars_[i]} steps the {name} index by {co[i]} values, not "
                                          "whole elements")
                cs.append(ana.simplify(tirx.floordiv(co[i], lanes)))
            d = (vars_[i], extents[i], (cs[0], cs[1], tirx.const(0, "int32")))
            if dims and ana.can_prove_equal(dims[-1][2][0], d[2][0] * d[1]) and \
                    ana.can_prove_equal(dims[-1][2][1], d[2][1] * d[1]):
                pv, pe, _ = dims.pop()
                d = (d[0], pe * d[1], d[2])
            dims.append(d)
        for co, name in ((dco, "destination"), (sco, "operand")):
            if not ana.can_prove_equal(tirx.floormod(co[-1], lanes), 0):
                raise VTACompileError(f"{what}: the {name} offset {co[-1]} is not a whole number of elements")
        dbase = ana.simplify(plan[root(dst)] + tirx.floordiv(dco[-1], lanes))
        if tensor:
            sbase = ana.simplify(plan[root(o.source)] + tirx.floordiv(sco[-1], lanes))
            use_imm, imm = 0, 0
        else:
            sbase, use_imm, imm = dbase, 1, o
        out.append(emit_kernel(env, what, "PushALUOp", dims, (dbase, sbase, tirx.const(0, "int32")),
                               (1, 0, int(op), use_imm, imm)))
    return seq(out)


def alu_nests(body, env: Environment) -> list[tuple]:
    """(attr, AluNest) of every ALU pragma nest in ``body``, in program order."""
    out = []

    def on_attr(a):
        if a.attr_key == ALU_PRAGMA:
            out.append((a, analyze_alu(a, env)))
    tvm_ffi.structural_walk(body, (AttrStmt, on_attr), order="pre")
    return out


def inject_alu(func, env: Environment):
    plan = sram_plan(func.body, env)
    roots = decl_roots(func.body)

    def on_attr(a):
        if a.attr_key == ALU_PRAGMA:
            return lower_alu(a, env, plan, roots)
        return a
    return func.with_body(tvm_ffi.structural_map(func.body, (AttrStmt, on_attr), order="post"))
