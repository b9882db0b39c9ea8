"""Virtual threads: interleave the iterations of a ``vthread`` loop for latency hiding.

A loop bound to a virtual thread (``sch.bind(loop, "vthread.x")``; ``cthread`` in the original)
says that its V iterations are independent. This pass replaces it by one program that runs the
iterations interleaved, statement by statement:

* The virtual-thread loop is pushed inside every loop whose bounds do not depend on it, and VTA
  leaves (DMA nests, ALU nests, uop kernels) are replicated once per thread, so that the loads
  of one thread can overlap the computation of another. Consecutive leaves of one stage are
  replicated together (thread 0's input and weight loads, then thread 1's), so that a module
  that runs in order never makes one thread wait for another thread's work.
* Each on-chip buffer allocated inside the loop is *private* (one copy per thread) unless every
  leaf writing it is thread-invariant and reads only shared buffers: then its contents would be
  the same for every thread, so it is *shared* and written once (for example the input tile when
  the threads split the output channels).

A loop annotated ``vta.pipeline`` (the schedules use it on the input-channel chunks of a tile) is
treated the same way: its iterations only add into accumulators allocated outside it, which is
order-independent, so interleaving two chunks double-buffers their input and weight tiles.

A loop annotated ``vta.alternate`` (the schedules use it on a pair of consecutive tiles) is replicated
whole, one copy after the other, with private accumulators (ACC-scope buffers) per copy and every other
buffer shared: consecutive tiles then use different accumulators, so the next tile's resets and GEMMs need
not wait for this tile's epilogue and stores, and the compute module runs them beside each other.

The dependency-token pass afterwards sees distinct buffers per thread, so the tokens let load,
compute and store of different threads overlap, and the memory planner gives each copy its own
SRAM region.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx
from tvm.tirx import AttrStmt, For, SeqStmt

from ..environment import Environment
from .common import (
    R,
    VTACompileError,
    W,
    collect_allocs,
    const_int,
    leaf_of,
    scope_of,
    seq,
    substitute,
)

#: loop annotation: interleave this loop's iterations like a virtual thread (for a reduction loop whose
#: iterations only accumulate into shared accumulators: their order does not matter)
PIPELINE = "vta.pipeline"
#: loop annotation: run this loop's iterations one after the other, each with its own accumulators (for a loop over
#: whole tiles: each tile's epilogue then overlaps the next tile's GEMMs)
ALTERNATE = "vta.alternate"


def _vars_in(node) -> set:
    out: set = set()
    tvm_ffi.structural_walk(node, (tirx.Var, lambda v: out.add(v)))
    return out


def _leaves(stmt, env, out: list) -> None:
    if leaf_of(stmt, env) is not None:
        out.append(stmt)
    elif isinstance(stmt, SeqStmt):
        for c in stmt.seq:
            _leaves(c, env, out)
    elif isinstance(stmt, (For, AttrStmt)):
        _leaves(stmt.body, env, out)
    elif isinstance(stmt, tirx.IfThenElse):
        _leaves(stmt.then_case, env, out)
        if stmt.else_case is not None:
            _leaves(stmt.else_case, env, out)


def _clone(buf, suffix: str):
    t = buf.ty
    return tirx.decl_buffer(list(t.shape), str(t.dtype), f"{buf.name}{suffix}", scope=str(t.storage_scope),
                            data_alignment=int(t.data_alignment) if t.data_alignment else -1)


def _without_allocs(body, env: Environment):
    """``body`` without its on-chip allocations, and the buffers they allocated (the caller allocates them again,
    once or per copy)."""
    alloc_bufs = [a.buffer for a in collect_allocs(body, env)]

    def drop_allocs(s):
        if any(isinstance(c, tirx.AllocBuffer) and c.buffer in alloc_bufs for c in s.seq):
            return seq([c for c in s.seq if not (isinstance(c, tirx.AllocBuffer) and c.buffer in alloc_bufs)])
        return s
    return tvm_ffi.structural_map(body, (SeqStmt, drop_allocs), order="post"), alloc_bufs


def inject_one(v, extent, body, env: Environment) -> tirx.Stmt:
    n = const_int(extent, f"virtual thread {v} extent")
    body, alloc_bufs = _without_allocs(body, env)

    leaves = []
    _leaves(body, env, leaves)
    infos = [(lf, leaf_of(lf, env), _vars_in(lf)) for lf in leaves]
    shared = set(alloc_bufs)
    changed = True
    while changed:
        changed = False
        for _, info, used in infos:
            private_read = any(b not in shared and b in alloc_bufs and m & R for b, m in info.access.items())
            for b, m in info.access.items():
                if m & W and b in shared and (v in used or private_read):
                    shared.discard(b)
                    changed = True
    private = [b for b in alloc_bufs if b not in shared]
    copies = {b: [_clone(b, f"_vt{i}") for i in range(n)] for b in private}
    touched = set(private) | {v}

    def depends(s) -> bool:
        return bool(_vars_in(s) & touched)

    def replicate(s):
        out = []
        for i in range(n):
            vmap = {v: tirx.const(i, str(v.ty))}
            for b in private:
                vmap[b] = copies[b][i]
            out.append(substitute(s, vmap))
        return seq(out)

    def inj(s):
        if not depends(s):
            return s
        if isinstance(s, SeqStmt):
            # consecutive thread-dependent leaves of one stage are replicated as a group, so that each
            # thread's loads stay together: thread 0's GEMMs need not wait behind thread 1's loads
            out, run = [], []

            def flush():
                if run:
                    out.append(replicate(seq(run)))
                    run.clear()
            for c in s.seq:
                info = leaf_of(c, env)
                if info is not None and depends(c):
                    if run and leaf_of(run[-1], env).stage != info.stage:
                        flush()
                    run.append(c)
                else:
                    flush()
                    out.append(inj(c))
            flush()
            return seq(out)
        if isinstance(s, For) and not (_vars_in(s.min) | _vars_in(s.extent)) & touched and \
                leaf_of(s, env) is None:
            return For(s.loop_var, s.min, s.extent, s.kind, inj(s.body), s.thread_binding, s.annotations)
        if isinstance(s, tirx.Bind):
            raise VTACompileError(f"virtual thread {v}: a value bound inside the thread depends on it ({s.var}); "
                                  "this pass cannot interleave it")
        return replicate(s)

    new_allocs = [tirx.AllocBuffer(b) for b in alloc_bufs if b in shared]
    for b in private:
        new_allocs += [tirx.AllocBuffer(c) for c in copies[b]]
    return seq(new_allocs + [inj(body)])


def alternate_one(v, extent, body, env: Environment) -> tirx.Stmt:
    """The iterations of a ``vta.alternate`` loop one after the other, each with its own copy of the ACC-scope
    buffers allocated inside it (every other on-chip buffer is allocated once, shared)."""
    n = const_int(extent, f"alternating loop {v} extent")
    body, alloc_bufs = _without_allocs(body, env)
    private = [b for b in alloc_bufs if scope_of(b) == env.acc_scope]
    copies = {b: [_clone(b, f"_alt{i}") for i in range(n)] for b in private}
    out = [tirx.AllocBuffer(b) for b in alloc_bufs if b not in copies]
    for b in private:
        out += [tirx.AllocBuffer(c) for c in copies[b]]
    for i in range(n):
        vmap = {v: tirx.const(i, str(v.ty))}
        for b in private:
            vmap[b] = copies[b][i]
        out.append(substitute(body, vmap))
    return seq(out)


def inject_virtual_threads(func, env: Environment):
    def on_attr(a):
        if a.attr_key == "virtual_thread":
            return inject_one(a.node.var, a.value, a.body, env)
        return a

    def on_for(f):
        if PIPELINE in f.annotations:
            if const_int(f.min, f"pipelined loop {f.loop_var} start") != 0:
                raise VTACompileError(f"pipelined loop {f.loop_var} must start at 0")
            return inject_one(f.loop_var, f.extent, f.body, env)
        if ALTERNATE in f.annotations:
            if const_int(f.min, f"alternating loop {f.loop_var} start") != 0:
                raise VTACompileError(f"alternating loop {f.loop_var} must start at 0")
            return alternate_one(f.loop_var, f.extent, f.body, env)
        return f
    return func.with_body(tvm_ffi.structural_map(func.body, [(AttrStmt, on_attr), (For, on_for)], order="post"))
