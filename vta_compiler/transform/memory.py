"""On-chip memory: allocation hoisting, SRAM planning, and the final storage lowering / CPU access check.

* ``HoistAllocations`` moves every on-chip allocation to the start of the function: SRAM addresses
  are static, so every on-chip buffer lives for the whole kernel (the original's
  LiftAllocToScopeBegin hoisted them to their loop or thread scope).
* ``PlanMemory`` gives every on-chip buffer an SRAM element index (annotation ``vta.sram_base``),
  one region per buffer, packed in allocation order, and refuses a plan that does not fit,
  naming every buffer and its size. Buffers that an ALU op updates in place share the storage
  of their base operand (see ``alu.py``).
* ``LowerStorage`` (the replacement of LowerDeviceStorageAccessInfo and CPUAccessRewrite)
  removes the on-chip allocations once every access has become a runtime call, and refuses any
  host access left on an on-chip buffer (the CPU cannot reach SRAM; an access left over means a
  missing pragma or tensorize). DRAM tensors need no rewriting: their data pointers are host
  pointers into device memory (see ``ext_dev.cc``), so host code may read and write them.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad
from tvm.tirx import AttrStmt, BufferStore, SeqStmt

from ..environment import Environment
from ..intrin import UOP_SCOPE
from .alu import alu_nests
from .common import (
    ALU_PRAGMA,
    DMA_PRAGMA,
    KIND_NAMES,
    SRAM_BASE,
    STAGE_NAMES,
    VTACompileError,
    W,
    buffer_numel,
    collect_allocs,
    is_on_chip,
    lanes_of,
    leaf_of,
    scope_label,
    scope_of,
    seq,
)


def _remove_allocs(body, bufs: set):
    def on_seq(s):
        keep = [c for c in s.seq if not (isinstance(c, tirx.AllocBuffer) and c.buffer in bufs)]
        if len(keep) == len(s.seq):
            return s
        return seq(keep)
    return tvm_ffi.structural_map(body, (SeqStmt, on_seq), order="post")


def hoist_allocations(func, env: Environment):
    allocs = collect_allocs(func.body, env)
    if not allocs:
        return func
    body = _remove_allocs(func.body, {a.buffer for a in allocs})
    return func.with_body(seq(allocs + [body]))


def _leaf_list(body, env):
    out = []

    def on_attr(a):
        info = leaf_of(a, env)
        if info is not None:
            out.append((a, info))
    tvm_ffi.structural_walk(body, (AttrStmt, on_attr), order="pre")
    return out


def plan_memory(func, env: Environment):
    allocs = collect_allocs(func.body, env)
    if not allocs:
        return func
    bufs = [a.buffer for a in allocs]
    parent = {b: b for b in bufs}

    def find(b):
        while parent[b] is not b and not parent[b].same_as(b):
            b = parent[b]
        return b

    # ALU ops are in place: the destination takes over its base operand's storage
    leaves = _leaf_list(func.body, env)
    for attr, nest in alu_nests(func.body, env):
        dst, base = nest.dst, nest.base.source
        if base.same_as(dst) or base not in parent or dst not in parent:
            continue
        k = next(i for i, (a, _) in enumerate(leaves) if a.same_as(attr))
        for _a, info in leaves[k + 1:]:
            if base in info.access:
                raise VTACompileError(
                    f"ALU op writing {dst.name} works in place on {base.name} (they share storage), but {base.name} "
                    f"is used again afterwards by {KIND_NAMES[info.kind]} on the {STAGE_NAMES[info.stage]} stage; "
                    "compute that use first or keep a copy")
        parent[find(dst)] = find(base)

    sizes, scope_of_class = {}, {}
    for b in bufs:
        scope = scope_of(b)
        lanes = lanes_of(scope, env)
        n = buffer_numel(b)
        if n % lanes:
            raise VTACompileError(f"on-chip buffer {b.name} holds {n} values, not a whole number of "
                                  f"{lanes}-value {scope_label(scope, env)} elements")
        r = find(b)
        sizes[r] = max(sizes.get(r, 0), n // lanes)
        scope_of_class[r] = scope
    depth = {env.inp_scope: env.INP_BUFF_DEPTH, env.wgt_scope: env.WGT_BUFF_DEPTH, env.acc_scope: env.ACC_BUFF_DEPTH}
    key = {env.inp_scope: "LOG_INP_BUFF_SIZE", env.wgt_scope: "LOG_WGT_BUFF_SIZE",
           env.acc_scope: "LOG_ACC_BUFF_SIZE"}
    elem_bytes = {env.inp_scope: env.INP_ELEM_BYTES, env.wgt_scope: env.WGT_ELEM_BYTES,
                  env.acc_scope: env.ACC_ELEM_BYTES}
    base, used = {}, {}
    for b in bufs:
        r = find(b)
        if r in base:
            continue
        scope = scope_of_class[r]
        base[r] = used.get(scope, 0)
        used[scope] = base[r] + sizes[r]
    problems = []
    for scope, total in used.items():
        if total > depth[scope]:
            members = []
            for r in base:
                if scope_of_class[r] == scope:
                    names = "+".join(b.name for b in bufs if find(b).same_as(r))
                    members.append(f"{names}: {sizes[r]}")
            problems.append(
                f"the {scope_label(scope, env)} buffer ({scope}) holds {depth[scope]} elements of {elem_bytes[scope]} "
                f"bytes ({key[scope]}={getattr(env, key[scope])}) but the schedule needs {total}: "
                f"{'; '.join(members)}")
    if problems:
        raise VTACompileError("the schedule's tiles do not fit VTA's on-chip memory: " + "; and ".join(problems) +
                              ". Use smaller tiles or fewer virtual threads")

    def on_alloc(a):
        if a.buffer in parent:
            ann = dict(a.annotations)
            ann[SRAM_BASE] = tirx.const(base[find(a.buffer)], "int32")
            return tirx.AllocBuffer(a.buffer, ann)
        return a
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, on_alloc)))


def storage_regions(body, env: Environment) -> dict:
    """buffer var -> (scope, first, last+1) SRAM element range, from PlanMemory's annotations."""
    out = {}
    for a in collect_allocs(body, env):
        if SRAM_BASE in a.annotations:
            scope = scope_of(a.buffer)
            base = int(a.annotations[SRAM_BASE])
            out[a.buffer] = (scope, base, base + buffer_numel(a.buffer) // lanes_of(scope, env))
    return out


def overlaps(regions: dict, x, y) -> bool:
    if x.same_as(y):
        return True
    rx, ry = regions.get(x), regions.get(y)
    return rx is not None and ry is not None and rx[0] == ry[0] and rx[1] < ry[2] and ry[1] < rx[2]


def check_stores(body, env: Environment) -> None:
    """Refuse a store whose accumulators were last written by a DMA load (gotcha G4).

    VTA stores the OUT buffer, which only GEMM and ALU instructions write; the data of an ACC
    load never reaches it.
    """
    regions = storage_regions(body, env)
    leaves = _leaf_list(body, env)
    for k, (_, info) in enumerate(leaves):
        if info.kind != "dma_store":
            continue
        for src in info.access:
            last = next((lf for _, lf in reversed(leaves[:k])
                         if any(m & W and overlaps(regions, b, src) for b, m in lf.access.items())), None)
            if last is not None and last.kind == "dma_load":
                raise VTACompileError(
                    f"the store of {src.name} would store stale data: its accumulators were last written by a DMA "
                    "load, but VTA stores the OUT buffer, which only GEMM and ALU instructions write. Add an ALU "
                    f"stage before the store (the copy idiom: a plain copy of {src.name} under the {env.alu} "
                    "pragma becomes SHR 0)")


def lower_storage(func, env: Environment):
    """Drop on-chip allocations; refuse leftover pragmas and host accesses to on-chip buffers."""
    def on_attr(a):
        if a.attr_key in (DMA_PRAGMA, ALU_PRAGMA, UOP_SCOPE):
            raise VTACompileError(
                f"a {a.attr_key} region was not lowered to VTA instructions (is one of the VTA passes disabled?):\n"
                f"{a}")
    tvm_ffi.structural_walk(func.body, (AttrStmt, on_attr))
    allocs = collect_allocs(func.body, env)
    body = _remove_allocs(func.body, {a.buffer for a in allocs})

    def host_access(buf, kind, node):
        raise VTACompileError(
            f"host code {kind} the on-chip buffer {buf.name} ({scope_of(buf)}), which the CPU cannot access: "
            f"{node}\nEvery access to an on-chip buffer must be a DMA copy (dma_copy pragma), an ALU op (alu "
            "pragma) or a tensorized GEMM")

    def on_store(s):
        if is_on_chip(s.buffer, env):
            host_access(s.buffer, "writes", s)

    def on_load(ld):
        if is_on_chip(ld.source, env):
            host_access(ld.source, "reads", ld)

    def on_var(v):
        if tirx.is_buffer_var(v) and is_on_chip(v, env):
            host_access(v, "uses", v)
    tvm_ffi.structural_walk(body, [(BufferStore, on_store), (TensorLoad, on_load)])
    tvm_ffi.structural_walk(body, (tirx.Var, on_var))
    return func.with_body(body)
