"""Matching: the layers of a quantized network that VTA can run, found by Relax dataflow patterns.

A layer is a registered operator's core op (its ``Operator.pattern``: an int8 ``conv2d``, grouped or
depthwise ``conv2d``, ``conv2d_transpose`` or ``matmul`` with a constant weight, ...) followed by VTA's
epilogue (``+ bias``, ``>> shift``, ``clip``, ``astype int8``, each but the cast optional). The operators
whose pattern matches are asked in registration order; the first that takes the layer, or refuses it with
a reason, decides (an operator returns None for a layer that is not its own, e.g. dense for a batched
matmul).
"""

from __future__ import annotations

import dataclasses

from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment
from ..tiling import registry
from .ir import Const, Graph, GraphError, Node
from .legalize import VtaLayer, chain, fuse_residual, host_chain_cost, legalize, residual_cost


def with_epilogue(core):
    """VTA's epilogue after a GEMM: (+ const) (>> const) (fixed-point multiply) (clip) astype; the multiply
    (``requant="multiply"``, ALU MUL) is ``clip(x, int16) * const + const >> const``."""
    biased = is_op("relax.add")(core, is_const()) | core
    shifted = is_op("relax.right_shift")(biased, is_const()) | biased
    clip16 = is_op("relax.clip")(shifted, wildcard(), wildcard())
    multiplied = is_op("relax.right_shift")(
        is_op("relax.add")(is_op("relax.multiply")(clip16, is_const()), is_const()), is_const())
    scaled = multiplied | shifted
    clipped = is_op("relax.clip")(scaled, wildcard(), wildcard()) | scaled
    return is_op("relax.astype")(clipped)


def patterns() -> list[tuple[object, object]]:
    """(operator, pattern of its layer) of every registered operator that graph_pack can offload, in order."""
    return [(op, with_epilogue(op.pattern())) for op in registry.operators() if op.pattern() is not None]


def offloadable_ops() -> dict[str, object]:
    """Relax op name -> the first operator that can offload it (it counts the MACs of one left on the CPU)."""
    out: dict[str, object] = {}
    for op in registry.operators():
        for name in op.relax_ops:
            out.setdefault(name, op)
    return out


def match_layers(func: relax.Function, g: Graph, env: Environment,
                 options: dict | None = None) -> tuple[list[VtaLayer], dict[int, str]]:
    """The layers VTA runs, and for every GEMM op left on the CPU the reason (``options``: graph_pack's)."""
    options = dict(options or {})
    var2val = relax.analysis.get_var2val(func)
    users = g.users()
    pats = patterns()
    layers, reasons, taken = [], {}, set()
    for n in reversed(g.nodes):
        if id(n) in taken or n.op != "relax.astype" or n.call is None:
            continue
        matched = [op for op, pat in pats if pat.match(n.call, var2val)]
        if not matched:
            continue
        parts = chain(n)
        inner = [p for role, p in parts.items() if role != "astype"]
        shared = [p for p in inner if len(users[id(p)]) != 1]
        if shared or any(id(p) in taken for p in inner):
            reasons[id(parts["core"])] = (f"its int32 result {shared[0].name if shared else ''} is also used "
                                          "elsewhere, so it cannot be fused with VTA's epilogue")
            continue
        for op in matched:           # the first operator that takes the layer (or refuses it) decides
            got = legalize(op, parts, env, options)
            if got is None:
                continue
            if isinstance(got, str):
                reasons[id(parts["core"])] = got
            else:
                layers.append(got)
                taken.update(id(p) for p in parts.values())
            break
        else:
            core = parts["core"]
            reasons[id(core)] = (f"no registered operator runs a {core.op.removeprefix('relax.')} of "
                                 + " by ".join(str(tuple(a.shape)) for a in core.tensor_args))
    layers.reverse()
    layers = fuse_residuals(layers, env, options, users, reasons)
    layers += host_chains(g, env, options, users, taken, reasons)
    gemm_ops = offloadable_ops()
    for n in g.nodes:
        if n.op in gemm_ops and id(n) not in taken and id(n) not in reasons:
            if not n.dtype.startswith("float"):
                reasons[id(n)] = "not followed by VTA's int8 epilogue"
            elif len(n.tensor_args) >= 2 and not any(isinstance(a, Const) for a in n.tensor_args):
                # attention's scores and weighted sums: the quantizer only quantizes layers with a weight
                reasons[id(n)] = (f"a {n.op.removeprefix('relax.')} of two activations (no constant weight): the "
                                  "quantizer keeps it in float")
            else:
                reasons[id(n)] = "a float layer (kept in float or not quantized)"
    return layers, reasons


def host_chains(g: Graph, env: Environment, options: dict, users: dict, taken: set,
                reasons: dict[int, str]) -> list[VtaLayer]:
    """The chains of int8 host ops (pooling, activations) an operator takes over (``Operator.host_chain``), placed
    by the operator's option (``Operator.host_option``: ``pool``, ``activation``): "auto" where the cost model's
    time at the configuration's clock beats the board host's estimate, "vta" every one VTA can run (else a
    GraphError), "cpu" none. A chain left on the CPU gets the reason as the placement note of its nodes."""
    out = []
    for n in g.nodes:
        if id(n) in taken or n.call is None:
            continue
        for op in registry.operators():
            got = op.host_chain(n, users, env, options)
            if got is None:
                continue
            opt = op.host_option
            where = options.get(opt, "auto")
            nodes = [n]
            if not isinstance(got, str):
                off, nodes, x, last = got
                if any(id(p) in taken for p in nodes):
                    break
                layer = VtaLayer(last.name, last, nodes[::-1], x, off, None, None, None)
                got = f"graph_pack({opt}='cpu') keeps {op.host_what} on the CPU" if where == "cpu" else \
                    (op.placement_refusal(off, env, 1) if x.shape[0] % env.BATCH == 0 else None)
                if got is None:
                    host_us, vta_us, cost = host_chain_cost(layer, env)
                    if where == "auto" and vta_us >= host_us:
                        got = f"the host is faster: {cost} (graph_pack({opt}='vta') runs it on VTA anyway)"
                    else:
                        off.note = f"{off.note}; {cost}" if off.note else cost
                        out.append(layer)
                        taken.update(id(p) for p in nodes)
                        break
            if where == "vta":
                raise GraphError(f"graph_pack({opt}='vta'): {n.op.removeprefix('relax.')} {n.name} cannot run on "
                                 f"VTA: {got}")
            for p in nodes:
                reasons.setdefault(id(p), got)
            break
    return out


def residual_chain(start: Node, users: dict) -> dict[str, Node] | None:
    """The quantizer's residual add (``graph.quantize``'s ``residual_add``) that reads a VTA layer's int8 result
    ``start`` and nothing else does, by role, or None: ``astype int32 [<< layer_shift]`` plus ``astype int32
    [<< shortcut_shift]`` of an int8 shortcut, ``[+ round >> out_shift | << k]``, ``clip``, ``astype int8``
    (the ``out`` node). Every node but the shortcut has one user."""
    def only_user(n):
        u = users[id(n)]
        return u[0] if len(u) == 1 else None

    def shift_of(n, op):
        return n is not None and n.op == op and isinstance(n.args[1], Const)
    parts: dict[str, Node] = {}
    cur = only_user(start)
    if cur is None or cur.op != "relax.astype" or cur.dtype != "int32":
        return None
    parts["layer_cast"] = cur
    nxt = only_user(cur)
    if shift_of(nxt, "relax.left_shift"):
        parts["layer_shift"], cur, nxt = nxt, nxt, only_user(nxt)
    if nxt is None or nxt.op != "relax.add" or not all(isinstance(a, Node) for a in nxt.args[:2]):
        return None
    add = nxt
    other = add.args[1] if add.args[0] is cur else add.args[0]
    if other is cur or only_user(other) is not add:
        return None
    if shift_of(other, "relax.left_shift"):
        parts["shortcut_shift"] = other
        other = other.args[0]
        if only_user(other) is not parts["shortcut_shift"]:
            return None
    if other.op != "relax.astype" or other.dtype != "int32" or not isinstance(other.args[0], Node) or \
            other.args[0].dtype != "int8":
        return None
    parts["shortcut_cast"], parts["shortcut"], parts["add"] = other, other.args[0], add
    nxt = only_user(add)
    if nxt is not None and nxt.op == "relax.add" and isinstance(nxt.args[1], Const):
        shr = only_user(nxt)
        if not shift_of(shr, "relax.right_shift"):
            return None
        parts["round"], parts["out_shift"], nxt = nxt, shr, only_user(shr)
    elif shift_of(nxt, "relax.left_shift"):
        parts["out_left_shift"], nxt = nxt, only_user(nxt)
    if nxt is None or nxt.op != "relax.clip":
        return None
    parts["clip"] = nxt
    out = only_user(nxt)
    if out is None or out.op != "relax.astype" or out.dtype != "int8":
        return None
    parts["out"] = out
    return parts


def fuse_residuals(layers: list[VtaLayer], env: Environment, options: dict, users: dict,
                   reasons: dict[int, str]) -> list[VtaLayer]:
    """The layers with the residual add after each fused into its epilogue where VTA can run it (option
    ``residual``: "auto" where it can, "vta" every one or a GraphError, "cpu" none). When both inputs of an add
    are layers, the first that can take it does. A residual add left on the CPU gets the reason as the placement
    note of its nodes."""
    where = options.get("residual", "auto")
    fused: set[int] = set()
    refused: dict[int, tuple[dict, VtaLayer, str]] = {}      # the first refusal of each add not fused
    out = []
    for ly in layers:
        parts = residual_chain(ly.out, users)
        if parts is None or id(parts["add"]) in fused:
            out.append(ly)
            continue
        got = "graph_pack(residual='cpu') keeps residual adds on the CPU" if where == "cpu" else \
            fuse_residual(ly, parts, env)
        if not isinstance(got, str):       # it can run on VTA: where is it faster on the board?
            host_us, vta_us, cost = residual_cost(ly, got, env)
            if where == "auto" and vta_us >= host_us:
                got = f"the host is faster: {cost} (graph_pack(residual='vta') fuses it anyway)"
            else:
                got = dataclasses.replace(got, residual_why=cost)
        if isinstance(got, str):
            refused.setdefault(id(parts["add"]), (parts, ly, got))
            out.append(ly)
        else:
            fused.add(id(parts["add"]))
            out.append(got)
    for key, (parts, ly, why) in refused.items():
        if key in fused:
            continue
        if where == "vta":
            raise GraphError(f"graph_pack(residual='vta'): the residual add {parts['out'].name} after layer "
                             f"{ly.name} cannot be fused into it: {why}")
        for role, n in parts.items():
            if role != "shortcut":
                reasons[id(n)] = f"residual add not fused into {ly.name}: {why}"
    return out
