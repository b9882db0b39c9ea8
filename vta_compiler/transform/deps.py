"""Dependency tokens between the load, compute and store stages (the replacement of CoProcSync).

VTA's three modules each run their own instruction stream in order; a module waits for another
only through tokens (``DepPush(from, to)`` after the producer, ``DepPop(from, to)`` before the
consumer; queues connect load<->compute and compute<->store). Tokens in a queue are counted, so
the n-th pop is satisfied by the n-th push: a set of push/pop pairs is correct if, for every
dependency, some pair has its push after the producer and its pop before the consumer, and the
pushes of a queue are in the same program order as the pops they pair with.

The pass works on the program after virtual-thread interleaving, where every leaf (DMA nest,
ALU nest, uop kernel) has a stage and reads/writes known on-chip buffers. A dependency is a
read-after-write, write-after-read or write-after-write on one piece of SRAM storage (buffers that
PlanMemory placed on overlapping ranges count as one) between leaves of two connected stages.
Within each statement sequence, items (leaves, or whole loops summarised by all
the stages and buffers they touch) are scanned in order; for a consumer, the latest conflicting
producer of each other stage is found, and a pair is added unless an earlier pair of that queue
already covers it (its producer is at or after this one: both stages run in order). Pushes and
pops then come in the same order, which makes the pairing right.

A loop body is scanned as a periodic sequence: dependencies of an item on items of the previous
iteration (a write-after-read on a tile buffer, say) become *carried* pairs, popped in the body
and pushed later in the body; one token is pushed before the loop for the first iteration and
popped after it for the last one. With private buffers per virtual thread, these carried pairs
are what lets thread 1 load while thread 0 computes.

An item that has tokens of its own inside (a loop) must not be spanned by a pair of the same
queue, or the counts would pair up across it: before such an item the queue is brought up to date
with every producer that a later consumer could need.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx import AttrStmt, For, SeqStmt

from ..environment import Environment
from .common import (
    COMPUTE,
    LOAD,
    RUNTIME,
    STORE,
    VTACompileError,
    W,
    decl_roots,
    leaf_of,
    packed,
    seq,
)
from .memory import overlaps, storage_regions

EDGES = ((LOAD, COMPUTE), (COMPUTE, LOAD), (COMPUTE, STORE), (STORE, COMPUTE))


class _Ctx:
    def __init__(self, env, roots, canon):
        self.env, self.roots, self.canon, self.cache = env, roots, canon, {}


def _canonical_storage(body, env) -> dict:
    """buffer var -> one representative per piece of storage (buffers whose SRAM ranges overlap).

    Dependencies are between storage, not buffer names: an ALU result shares its base operand's
    storage (PlanMemory), and a later write to either conflicts with a pending read of the other.
    """
    regions = storage_regions(body, env)
    bufs = list(regions)
    parent = {b: b for b in bufs}

    def find(b):
        while not parent[b].same_as(b):
            b = parent[b]
        return b
    for i, x in enumerate(bufs):
        for y in bufs[i + 1:]:
            if overlaps(regions, x, y):
                parent[find(y)] = find(x)
    return {b: find(b) for b in bufs}


def _summary(stmt, ctx) -> dict:
    """stage -> {storage: R|W bits} of everything ``stmt`` does."""
    env, roots, cache = ctx.env, ctx.roots, ctx.cache
    key = stmt
    if key in cache:
        return cache[key]
    out: dict = {}

    def merge(s):
        for st, acc in s.items():
            d = out.setdefault(st, {})
            for b, m in acc.items():
                d[b] = d.get(b, 0) | m
    leaf = leaf_of(stmt, env, roots)
    if leaf is not None:
        acc: dict = {}
        for b, m in leaf.access.items():
            k = ctx.canon.get(b, b)
            acc[k] = acc.get(k, 0) | m
        out = {leaf.stage: acc}
    elif isinstance(stmt, SeqStmt):
        for c in stmt.seq:
            merge(_summary(c, ctx))
    elif isinstance(stmt, (For, AttrStmt)):
        merge(_summary(stmt.body, ctx))
    elif isinstance(stmt, tirx.IfThenElse):
        merge(_summary(stmt.then_case, ctx))
        if stmt.else_case is not None:
            merge(_summary(stmt.else_case, ctx))
    cache[key] = out
    return out


def _conflict(a: dict, b: dict) -> bool:
    for buf, m in a.items():
        n = b.get(buf)
        if n is not None and (m | n) & W:
            return True
    return False


def _greedy(sums: list[dict], inner: list[set], reps: int, periodic: bool):
    """Token pairs (producer index, consumer index, from, to) over ``sums`` repeated ``reps`` times.

    ``inner[i]``: the queues that item i uses internally (its own tokens). No pair on such a queue
    may span the item, or the FIFO pairing would mix with the item's own tokens: before the item,
    the queue is brought up to date with every producer a later consumer could need.
    """
    n = len(sums)
    seqn = sums * reps
    later_b = []   # per position: union of accesses per stage after it (or in the whole body when periodic)
    whole: dict = {}
    for s_ in sums:
        for st, acc in s_.items():
            d = whole.setdefault(st, {})
            for b, m in acc.items():
                d[b] = d.get(b, 0) | m
    if not periodic:
        acc_after: dict = {}
        for i in range(len(seqn) - 1, -1, -1):
            later_b.append({st: dict(a) for st, a in acc_after.items()})
            for st, acc in seqn[i].items():
                d = acc_after.setdefault(st, {})
                for b, m in acc.items():
                    d[b] = d.get(b, 0) | m
        later_b.reverse()
    synced = {e: -1 for e in EDGES}
    pairs = []

    def add(p, q, a, b):
        if p >= 0 and p > synced[(a, b)]:
            pairs.append((p, q, a, b))
            synced[(a, b)] = p

    for q in range(len(seqn)):
        for a_stage, b_stage in EDGES:
            if (a_stage, b_stage) in inner[q % n]:
                def needed(i, a_stage=a_stage, b_stage=b_stage):
                    later = whole if periodic else later_b[i]
                    return a_stage in seqn[i] and b_stage in later and _conflict(seqn[i][a_stage], later[b_stage])
                add(next((i for i in range(q - 1, -1, -1) if needed(i)), -1), q, a_stage, b_stage)
        for b_stage, b_acc in seqn[q].items():
            for a_stage, b2 in EDGES:
                if b2 == b_stage:
                    add(next((i for i in range(q - 1, -1, -1)
                              if a_stage in seqn[i] and _conflict(seqn[i][a_stage], b_acc)), -1), q, a_stage, b_stage)
    return pairs


def _plan_sequence(sums, inner, periodic: bool):
    n = len(sums)
    if not periodic:
        return [(p, q, a, b, False) for p, q, a, b in _greedy(sums, inner, 1, False)]
    reps = 3
    while True:
        pairs = _greedy(sums, inner, reps, True)
        last = [(p - (reps - 1) * n, q - (reps - 1) * n, a, b) for p, q, a, b in pairs if q >= (reps - 1) * n]
        prev = [(p - (reps - 2) * n, q - (reps - 2) * n, a, b) for p, q, a, b in pairs
                if (reps - 2) * n <= q < (reps - 1) * n]
        if last == prev:
            break
        reps += 1
        if reps > 8:
            raise VTACompileError("internal error: dependency tokens of a loop body do not reach a steady state")
    # a producer index below 0 is in the previous iteration: a carried dependency
    return [(p + n if p < 0 else p, q, a, b, p < 0) for p, q, a, b in last]


def _process(stmt, ctx):
    """Insert tokens inside ``stmt``: (statement, pre-statements, post-statements, queues used inside)."""
    if isinstance(stmt, SeqStmt):
        return _process_seq(list(stmt.seq), ctx, periodic=False)
    if isinstance(stmt, For) and leaf_of(stmt, ctx.env, ctx.roots) is None:
        body, pre, post, used = _process_seq(_items(stmt.body), ctx, periodic=True)
        return For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                   stmt.annotations), pre, post, used
    if isinstance(stmt, AttrStmt) and leaf_of(stmt, ctx.env, ctx.roots) is None:
        body, pre, post, used = _process(stmt.body, ctx)
        return AttrStmt(stmt.node, stmt.attr_key, stmt.value, seq(pre + [body] + post)), [], [], used
    return stmt, [], [], set()


def _items(body):
    return list(body.seq) if isinstance(body, SeqStmt) else [body]


def _process_seq(items, ctx, periodic):
    done = [_process(s, ctx) for s in items]
    sums = [_summary(s, ctx) for s in items]
    inner = [d[3] for d in done]
    pairs = _plan_sequence(sums, inner, periodic)
    before = {i: [] for i in range(len(items))}
    after = {i: [] for i in range(len(items))}
    pre, post = [], []
    used = set().union(*inner) if inner else set()
    # pairs come in consumer order with increasing producers, per queue: pops and pushes line up
    for p, q, a, b, carried in pairs:
        before[q].append(packed("DepPop", a, b))
        after[p].append(packed("DepPush", a, b))
        used.add((a, b))
        if carried:
            pre.append(packed("DepPush", a, b))
            post.append(packed("DepPop", a, b))
    # an inner loop's first-iteration tokens (pushes before it that pair with no producer) move up to the latest
    # earlier push of their queue: the consumer's first iteration then waits only for the pairs that cover it, not for
    # whatever the producer stage does in between (the epilogue of one tile before the next tile's loads, say)
    hoisted = {i: [] for i in range(len(items))}
    for i, (_, s_pre, _, _) in enumerate(done):
        keep = []
        for st in s_pre:
            q = _dep_queue(st)
            if q is None:
                keep.append(st)
                continue
            j = i
            while j > 0 and not _pushes_on(hoisted[j] + before[j - 1] + done[j - 1][1] + done[j - 1][2] +
                                           after[j - 1], q) and q not in inner[j - 1]:
                j -= 1
            (hoisted[j] if j < i else keep).append(st)
        done[i] = (done[i][0], keep, done[i][2], done[i][3])
    out = []
    for i, (new, s_pre, s_post, _) in enumerate(done):
        out += hoisted[i] + before[i] + s_pre + [new] + s_post + after[i]
    return seq(out), pre, post, used


def _dep_queue(stmt):
    """(from, to) of a ``DepPush`` statement, or None."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if call is None or len(call.args) != 3 or not isinstance(call.args[0], tvm.ir.StringImm) or \
            call.args[0].value != RUNTIME + "DepPush":
        return None
    return int(call.args[1].value), int(call.args[2].value)


def _pushes_on(stmts, q) -> bool:
    return any(_dep_queue(s) == q for s in stmts)


def inject_dep_tokens(func, env: Environment):
    ctx = _Ctx(env, decl_roots(func.body), _canonical_storage(func.body, env))
    body, pre, post, _ = _process(func.body, ctx)
    if pre or post:
        body = seq(pre + [body] + post)
    return func.with_body(body)
