"""DMA injection: loop nests under the ``dma_copy`` pragma become 2-D VTA loads and stores.

A nest copies DRAM -> on-chip (a LOAD into INP, WGT or ACC, optionally zero-padded) or ACC ->
DRAM (a STORE from the OUT buffer, int32 narrowed to int8). An int8 tensor copied into the
accumulator scope (into an int8 buffer, or cast to int32) is an ACC_8BIT load, which sign-extends
each value into its lane; it needs the ISA extension ``acc_8bit`` (config key ``ISA_EXTENSIONS``).
The nest is analysed as follows:

1. Both indices must be affine in the nest's loop variables.
2. The innermost loops must copy whole elements (BATCH x BLOCK_IN lanes for INP, ...), contiguously
   on both sides.
3. The remaining element-level loops are merged where both sides are contiguous; unit loops are
   dropped. At most two dimensions may remain (y rows of x elements): that is one instruction.
4. The on-chip side must be dense (row pitch = x extent); the DRAM side must be contiguous along x
   and gives the row stride.
5. Padding comes from ``if_then_else(cond, src[...], 0)`` (an inlined pad stage): ``cond`` must
   bound each loop variable separately; the pads follow from the bounds and may depend on outer
   loop variables (they are computed at run time).

Anything else is refused with a message; an unconverted nest is never left for the CPU.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import Call, TensorLoad
from tvm.tirx import BufferStore

from vta_hw.spec import MemType

from ..environment import Environment
from .common import (
    DMA_PRAGMA,
    VTACompileError,
    const_int,
    decl_roots,
    is_on_chip,
    lanes_of,
    linear_coeffs,
    packed,
    peel_loops,
    scope_label,
    scope_of,
    sram_plan,
    substitute,
)


def _is_zero(e) -> bool:
    while isinstance(e, tirx.Cast):
        e = e.value
    return isinstance(e, tirx.IntImm) and int(e.value) == 0


def _unpack_value(value, what):
    """(load, pad condition or None, cast dtype or None) of a copy's stored value."""
    cast = None
    cond = None
    v = value
    if isinstance(v, tirx.Cast):
        cast, v = str(v.ty), v.value
    if isinstance(v, Call) and v.op.name.endswith("if_then_else"):
        cond, t, f = v.args
        if not _is_zero(f):
            raise VTACompileError(f"{what}: padding must be zero (VTA pads with zeros); the value is {value}")
        v = t
    if isinstance(v, tirx.Cast):
        if cast is None:
            cast = str(v.ty)
        v = v.value
    if not isinstance(v, TensorLoad):
        raise VTACompileError(f"{what}: the {DMA_PRAGMA[7:]} pragma needs a plain copy of one buffer "
                              f"(optionally zero-padded); the stored value is {value}")
    return v, cond, cast


class _Dim:
    __slots__ = ("var", "extent", "chip", "dram", "lo", "hi")

    def __init__(self, var, extent, chip, dram, lo=None, hi=None):
        self.var, self.extent, self.chip, self.dram, self.lo, self.hi = var, extent, chip, dram, lo, hi

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None


def lower_dma(attr, env: Environment, plan: dict, roots: dict) -> tirx.Stmt:
    ana = tvm.sym.Analyzer()
    loops, body = peel_loops(attr.body)
    if not isinstance(body, BufferStore):
        raise VTACompileError(f"the {env.dma_copy} pragma must be on a loop nest that copies one buffer; found "
                              f"{type(body).__name__}:\n{attr.body}")
    dst = body.buffer
    load, cond, cast = _unpack_value(body.value, f"DMA copy into {dst.name}")
    src = load.source
    what = f"DMA copy {src.name} -> {dst.name}"
    dst_chip, src_chip = is_on_chip(dst, env), is_on_chip(src, env)
    if dst_chip and src_chip:
        raise VTACompileError(f"{what}: both buffers are on-chip ({scope_of(src)} -> {scope_of(dst)}); VTA moves "
                              "data only between DRAM and on-chip buffers")
    if not dst_chip and not src_chip:
        raise VTACompileError(f"{what}: neither buffer is on-chip; a dma_copy pragma needs a DRAM <-> "
                              f"{env.inp_scope}/{env.wgt_scope}/{env.acc_scope} copy")
    is_load = dst_chip
    chip, dram = (dst, src) if is_load else (src, dst)
    scope = scope_of(chip)
    if is_load:
        narrow = scope == env.acc_scope and str(src.ty.dtype) == env.out_dtype
        if scope == env.acc_scope and str(src.ty.dtype) != env.acc_dtype and not narrow:
            raise VTACompileError(f"{what}: the accumulator scope loads {env.acc_dtype} data, or {env.out_dtype} "
                                  f"data with an ACC_8BIT load; {src.name} is {src.ty.dtype}")
        if narrow and not env.config.isa.has("acc_8bit"):
            raise VTACompileError(
                f"{what}: loading {src.ty.dtype} data into the accumulator scope would need an ACC_8BIT load, "
                f"which VTA does not support unless the config key ISA_EXTENSIONS enables the ISA extension "
                f"'acc_8bit' ({env.config.isa.refusal(mem_type=MemType.ACC_8BIT)}); enable it, or give {src.name} "
                f"dtype {env.acc_dtype}")
        if narrow:
            # ACC_8BIT sign-extends each int8 value into its 32-bit lane: the on-chip copy may be int8 or int32
            if cast not in (None, env.out_dtype, env.acc_dtype) or str(dst.ty.dtype) not in (env.out_dtype,
                                                                                             env.acc_dtype):
                raise VTACompileError(f"{what}: an ACC_8BIT load sign-extends {env.out_dtype} to {env.acc_dtype}; it "
                                      f"cannot make {dst.ty.dtype} (cast {cast})")
            mem_type = MemType.ACC_8BIT
        else:
            if cast is not None and cast != str(src.ty.dtype):
                raise VTACompileError(f"{what}: a DMA load cannot convert {src.ty.dtype} to {cast}")
            if str(dst.ty.dtype) != str(src.ty.dtype):
                raise VTACompileError(f"{what}: dtypes differ ({src.ty.dtype} -> {dst.ty.dtype})")
            mem_type = {env.inp_scope: MemType.INP, env.wgt_scope: MemType.WGT, env.acc_scope: MemType.ACC}[scope]
    else:
        if scope != env.acc_scope:
            raise VTACompileError(f"{what}: only accumulator ({env.acc_scope}) data can be stored to DRAM; "
                                  f"{src.name} is in {scope}")
        if str(dst.ty.dtype) != env.out_dtype:
            raise VTACompileError(
                f"{what}: VTA stores the OUT buffer, whose elements are {env.out_dtype}; {dst.name} is "
                f"{dst.ty.dtype} (store {env.out_dtype}, or clip and cast the result)")
        if cond is not None:
            raise VTACompileError(f"{what}: stores cannot be padded")
        mem_type = MemType.OUT

    if len(body.indices) != 1 or len(load.indices) != 1:
        raise VTACompileError(f"{what}: internal error: buffers are not flattened")
    lanes = lanes_of(scope, env)
    vars_ = [lp.loop_var for lp in loops]
    extents = []
    for lp in loops:
        if const_int(lp.min, f"{what}: loop {lp.loop_var} start") != 0:
            raise VTACompileError(f"{what}: loop {lp.loop_var} does not start at 0")
        extents.append(const_int(lp.extent, f"{what}: extent of loop {lp.loop_var}"))
    cond_vars: set = set()
    if cond is not None:
        tvm_ffi_walk_vars(cond, cond_vars)
    # unit loops that no padding bound mentions contribute nothing: drop them
    unit = {v: tirx.const(0, "int32") for v, e in zip(vars_, extents) if e == 1 and v not in cond_vars}
    dst_idx, src_idx = substitute(body.indices[0], unit), substitute(load.indices[0], unit)
    keep = [n for n, v in enumerate(vars_) if v not in unit]
    vars_, extents = [vars_[n] for n in keep], [extents[n] for n in keep]
    dco = linear_coeffs(dst_idx, vars_, what)
    sco = linear_coeffs(src_idx, vars_, what)
    cco, rco = (dco, sco) if is_load else (sco, dco)

    # 2. whole elements, innermost
    group, k = 1, len(vars_) - 1
    while group < lanes:
        if k < 0 or not (ana.can_prove_equal(cco[k], group) and ana.can_prove_equal(rco[k], group)):
            lane_loops = ", ".join(f"{v}:{e}" for v, e in zip(vars_[k + 1:], extents[k + 1:]))
            raise VTACompileError(
                f"{what}: the innermost loops must copy whole {scope_label(scope, env)} elements of {lanes} "
                f"contiguous {chip.ty.dtype} values on both sides; they cover {group} ({lane_loops or 'none'}), "
                f"then loop {vars_[k] if k >= 0 else '-'} breaks contiguity")
        group *= extents[k]
        k -= 1
    if group != lanes:
        raise VTACompileError(f"{what}: the innermost contiguous loops copy {group} values, not a whole number of "
                              f"{lanes}-value {scope_label(scope, env)} elements")
    lane_vars = vars_[k + 1:]
    chip_base, dram_base = cco[-1], rco[-1]
    for name, base in (("on-chip", chip_base), ("DRAM", dram_base)):
        if not ana.can_prove_equal(tirx.floormod(base, lanes), 0):
            raise VTACompileError(f"{what}: the {name} start offset {base} is not a multiple of the {lanes}-value "
                                  "element")

    # 5. padding bounds
    bounds = {}
    if cond is not None:
        used = cond_vars
        if any(v in used for v in lane_vars):
            raise VTACompileError(f"{what}: the padding condition depends on the lanes of an element; VTA pads "
                                  f"whole elements only: {cond}")
        evars = [v for v in vars_[:k + 1] if v in used]
        clip = tvm.sym.detect_clip_bound(cond, evars) if evars else []
        if evars and len(clip) != 2 * len(evars):
            raise VTACompileError(f"{what}: the padding condition must bound each loop variable by a range: {cond}")
        for n, v in enumerate(evars):
            bounds[v] = (clip[2 * n], clip[2 * n + 1])

    dims = []
    for i in range(k + 1):
        c, r = cco[i], rco[i]
        for name, co in (("on-chip", c), ("DRAM", r)):
            if not ana.can_prove_equal(tirx.floormod(co, lanes), 0):
                raise VTACompileError(f"{what}: loop {vars_[i]} steps the {name} index by {co}, not by whole "
                                      f"{lanes}-value elements")
        lo, hi = bounds.get(vars_[i], (None, None))
        d = _Dim(vars_[i], extents[i], ana.simplify(tirx.floordiv(c, lanes)), ana.simplify(tirx.floordiv(r, lanes)),
                 lo, hi)
        if d.extent == 1 and not d.bounded:
            continue
        if dims and not dims[-1].bounded and not d.bounded and \
                ana.can_prove_equal(dims[-1].chip, d.chip * d.extent) and \
                ana.can_prove_equal(dims[-1].dram, d.dram * d.extent):
            prev = dims.pop()
            d = _Dim(d.var, prev.extent * d.extent, d.chip, d.dram)
        dims.append(d)
    if dims and not ana.can_prove_equal(dims[-1].dram, 1) and (not dims[-1].bounded or len(dims) == 1):
        # the innermost remaining loop strides through DRAM: rows of one element each (a lone padded loop too:
        # its padding becomes the rows' padding, as a one-column tile of a row-padded input needs)
        dims.append(_Dim(None, 1, tirx.const(1, "int32"), tirx.const(1, "int32")))
    if len(dims) > 2:
        desc = ", ".join(f"{d.var}:{d.extent}" for d in dims)
        raise VTACompileError(
            f"{what}: after merging contiguous loops the copy still has {len(dims)} dimensions ({desc}); one VTA "
            f"{'load' if is_load else 'store'} moves a 2-D block of rows. Put the {env.dma_copy} pragma on an "
            "inner loop so that each copy is 2-D (the outer loops then issue one instruction each)")
    one = _Dim(None, 1, tirx.const(0, "int32"), tirx.const(0, "int32"))
    y, x = ([one] + dims)[-2:] if dims else (one, one)
    if not ana.can_prove_equal(x.chip, 1) and x.extent > 1:
        raise VTACompileError(f"{what}: the on-chip side must be dense, but loop {x.var} steps it by {x.chip} "
                              "elements")
    if y.extent > 1 and not ana.can_prove_equal(y.chip, x.extent):
        raise VTACompileError(f"{what}: the on-chip side must be dense, but loop {y.var} steps it by {y.chip} "
                              f"elements for rows of {x.extent}")

    def pads(d):
        if not d.bounded:
            return tirx.const(0, "int32"), tirx.const(d.extent, "int32"), tirx.const(0, "int32")
        e = tirx.const(d.extent, "int32")
        lo = d.lo if d.lo is not None else tirx.const(0, "int32")
        hi1 = d.hi + 1 if d.hi is not None else e
        p0 = ana.simplify(tirx.max(0, tirx.min(lo, e)))
        end = ana.simplify(tirx.max(p0, tirx.min(hi1, e)))
        return p0, ana.simplify(end - p0), ana.simplify(e - end)

    xp0, x_size, xp1 = pads(x)
    yp0, y_size, yp1 = pads(y)

    def single(size) -> bool:      # one element inside the padding: its DRAM step only places the start
        return ana.can_prove(size <= 1)
    if x.extent > 1 and not ana.can_prove_equal(x.dram, 1) and not single(x_size):
        raise VTACompileError(f"{what}: the DRAM side must be contiguous along the inner dimension, but loop "
                              f"{x.var} steps it by {x.dram} elements")
    x_stride = y.dram if y.extent > 1 and not single(y_size) else tirx.const(x.extent, "int32")
    dram_off = ana.simplify(tirx.floordiv(dram_base, lanes) + y.dram * yp0 + x.dram * xp0)
    if dram.ty.elem_offset is not None and not (isinstance(dram.ty.elem_offset, tirx.IntImm) and
                                                int(dram.ty.elem_offset) == 0):
        dram_off = ana.simplify(dram_off + tirx.floordiv(dram.ty.elem_offset, lanes))
    root = roots.get(chip, chip)
    if root not in plan:
        raise VTACompileError(f"{what}: on-chip buffer {chip.name} has no SRAM address (is PlanMemory disabled?)")
    sram = ana.simplify(plan[root] + tirx.floordiv(chip_base, lanes))
    if is_load:
        return packed("LoadBuffer2D", src.data, dram_off, x_size, y_size, ana.simplify(x_stride), xp0, yp0, xp1, yp1,
                      sram, int(mem_type))
    return packed("StoreBuffer2D", sram, int(mem_type), dst.data, dram_off, x_size, y_size, ana.simplify(x_stride))


def tvm_ffi_walk_vars(expr, out: set) -> None:
    import tvm_ffi
    tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: out.add(v)))


def inject_dma(func, env: Environment):
    import tvm_ffi
    plan = sram_plan(func.body, env)
    roots = decl_roots(func.body)

    def on_attr(a):
        if a.attr_key == DMA_PRAGMA:
            return lower_dma(a, env, plan, roots)
        return a
    body = tvm_ffi.structural_map(func.body, (tirx.AttrStmt, on_attr), order="post")
    from .memory import check_stores
    check_stores(func.body, env)
    return func.with_body(body)
