"""Matching: the layers of a quantized network that VTA can run, found by Relax dataflow patterns.

A layer is a registered operator's core op (its ``Operator.pattern``: an int8 ``conv2d``, grouped or
depthwise ``conv2d``, ``conv2d_transpose`` or ``matmul`` with a constant weight, ...) followed by VTA's
epilogue (``+ bias``, ``>> shift``, ``clip``, ``astype int8``, each but the cast optional). The operators
whose pattern matches are asked in registration order; the first that takes the layer, or refuses it with
a reason, decides (an operator returns None for a layer that is not its own, e.g. dense for a batched
matmul).
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment
from ..tiling import registry
from .ir import Const, Graph
from .legalize import VtaLayer, chain, legalize


def with_epilogue(core):
    """VTA's epilogue after a GEMM: (+ const) (>> const) (clip) astype."""
    biased = is_op("relax.add")(core, is_const()) | core
    shifted = is_op("relax.right_shift")(biased, is_const()) | biased
    clipped = is_op("relax.clip")(shifted, wildcard(), wildcard()) | shifted
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
