"""The activations ``graph.quantize`` keeps in int8 with the ISA extension ``alu_mul``: hard-sigmoid, hard-swish, the
squeeze-excite channel multiply and the elementwise multiply of two activations.

Without int8 activations they run in float on dequantized inputs (the quantizer's path for operators it does not
know). With them (``quantize(int8_activations=True)``, the default when the current VTA configuration has
``alu_mul``) each runs on int8 values with the integer formulation of ``vta_compiler.top.activation`` (a fixed-point
multiplier ``M * 2**-k``, ``M`` in [2**14, 2**15)); ``graph_pack`` can then run it on VTA's ALU (option
``activation``), and the CPU's int8 chain and VTA compute the same bits.

Forms recognised in the float graph (4-D tensors, every inner node with one user):

* hard-sigmoid: ``clip(alpha * x + beta, 0, 1)`` (ONNX HardSigmoid), ``relu6(x + 3) / 6`` (PyTorch's form; any
  ``clip(x + c, 0, d) / d``, with ``maximum``/``minimum`` for the clip and ``* (1/d)`` for the divide);
* hard-swish: ``x * hard_sigmoid(x)`` (ONNX HardSwish as TVM imports it) and ``x * relu6(x + 3) / 6``;
* multiply: ``a * b`` of two activations of one shape, or of ``[N, C, H, W]`` by ``[N, C, 1, 1]`` (squeeze-excite).

The gate's bounds of a hard-sigmoid or hard-swish of an input at exponent ``e`` are ``T = round(beta/alpha * 2**e)``
and ``U = round(2**e / alpha)``; a hard-swish needs ``U <= 255`` (its product stays int16) and each needs one
exponent per tensor (its input and output do not take per-channel scales): otherwise it stays in float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .canon import LAYERS
from .ir import Const, Graph, Node


@dataclass
class Int8Activation:
    """A recognised activation: its kind (a ``top.activation`` mode but ``channel_multiply``, which is
    ``multiply`` with a broadcast operand), inputs, the gate's ``alpha``, ``beta`` and its nodes (forward order, the
    last is the output)."""
    kind: str
    inputs: list[Node]
    nodes: list[Node]
    alpha: float = 0.0
    beta: float = 0.0


def _scalar(a) -> float | None:
    if isinstance(a, Const):
        return float(a.value.reshape(-1)[0]) if a.value.size == 1 else None
    v = getattr(a, "value", None)
    if v is None or isinstance(a, Node):
        return None
    try:
        return float(np.asarray(v).reshape(-1)[0])
    except (TypeError, ValueError):
        return None


def _node_and_const(n: Node) -> tuple[Node, float] | None:
    """(the node operand, the scalar constant) of a binary op with one of each."""
    if len(n.args) < 2:
        return None
    a, b = n.args[:2]
    if isinstance(a, Node) and _scalar(b) is not None:
        return a, _scalar(b)
    if isinstance(b, Node) and _scalar(a) is not None and n.op in ("relax.add", "relax.multiply"):
        return b, _scalar(a)
    return None


class _Finder:
    def __init__(self, g: Graph):
        self.users = g.users()

    def single(self, n) -> bool:
        return isinstance(n, Node) and len(self.users[id(n)]) == 1 and n.dtype.startswith("float")

    def relu_n(self, v):
        """``clip(x + c, 0, d)`` (or with maximum/minimum) -> (x, c, d, nodes) or None."""
        if not self.single(v):
            return None
        nodes = [v]
        if v.op == "relax.clip":
            lo, hi, inner = _scalar(v.args[1]), _scalar(v.args[2]), v.args[0]
        elif v.op in ("relax.minimum", "relax.maximum"):
            got = _node_and_const(v)
            if got is None or not self.single(got[0]):
                return None
            inner, c1 = got
            other = "relax.maximum" if v.op == "relax.minimum" else "relax.minimum"
            if inner.op != other:
                return None
            got = _node_and_const(inner)
            if got is None:
                return None
            nodes.append(inner)
            inner, c2 = got
            lo, hi = (c2, c1) if v.op == "relax.minimum" else (c1, c2)
        else:
            return None
        if lo != 0 or hi is None or not hi > 0 or not self.single(inner) or inner.op != "relax.add":
            return None
        got = _node_and_const(inner)
        if got is None:
            return None
        nodes.append(inner)
        return got[0], got[1], hi, nodes[::-1]

    def scaled(self, v):
        """``r / d`` or ``r * (1/d)`` -> (r, d) or None."""
        if not isinstance(v, Node) or v.op not in ("relax.divide", "relax.multiply"):
            return None
        got = _node_and_const(v)
        if got is None or not got[1]:
            return None
        return got[0], (got[1] if v.op == "relax.divide" else 1.0 / got[1])

    def gate(self, v):
        """A hard-sigmoid ending at ``v`` -> (x, alpha, beta, nodes) or None."""
        if not isinstance(v, Node) or not v.dtype.startswith("float"):
            return None
        if v.op == "relax.clip" and _scalar(v.args[1]) == 0 and _scalar(v.args[2]) == 1:
            add = v.args[0]
            if self.single(add) and add.op == "relax.add" and _node_and_const(add):
                mul, beta = _node_and_const(add)
                if self.single(mul) and mul.op == "relax.multiply" and _node_and_const(mul):
                    x, alpha = _node_and_const(mul)
                    if alpha > 0:
                        return x, alpha, beta, [mul, add, v]
            return None
        got = self.scaled(v)
        if got is None:
            return None
        r = self.relu_n(got[0])
        if r is None or abs(r[2] - got[1]) > 1e-6 * got[1]:
            return None
        x, c, d, nodes = r
        return x, 1.0 / d, c / d, nodes + [v]

    def swish(self, v):
        """A hard-swish ending at ``v`` -> (x, alpha, beta, nodes) or None."""
        if not isinstance(v, Node) or not v.dtype.startswith("float"):
            return None
        got = self.scaled(v)
        if got is not None and self.single(got[0]) and got[0].op == "relax.multiply":
            m = got[0]                                  # (x * relu6(x + 3)) / 6
            for x, r in ((m.args[0], m.args[1]), (m.args[1], m.args[0])):
                rr = self.relu_n(r) if isinstance(x, Node) else None
                if rr is not None and rr[0] is x and abs(rr[2] - got[1]) <= 1e-6 * got[1]:
                    return x, 1.0 / rr[2], rr[1] / rr[2], rr[3] + [m, v]
        if v.op != "relax.multiply":
            return None
        for x, gte in ((v.args[0], v.args[1]), (v.args[1], v.args[0])):     # x * hard_sigmoid(x)
            if not isinstance(x, Node) or not self.single(gte):
                continue
            g = self.gate(gte)
            if g is not None and g[0] is x:
                return x, g[1], g[2], g[3] + [v]
        return None

    def multiply(self, v):
        if v.op != "relax.multiply" or len(v.shape) != 4 or not v.dtype.startswith("float"):
            return None
        a, b = v.args[:2]
        if not (isinstance(a, Node) and isinstance(b, Node)) or a is b:
            return None
        if tuple(a.shape) != tuple(v.shape):
            a, b = b, a
        if tuple(a.shape) != tuple(v.shape) or tuple(b.shape) not in (tuple(v.shape), tuple(v.shape[:2]) + (1, 1)):
            return None
        if not (a.dtype.startswith("float") and b.dtype.startswith("float")):
            return None
        return a, b


def find_int8_activations(g: Graph, skip: set[int] | frozenset = frozenset(), reads_int8=None,
                          exclude: set[int] | frozenset = frozenset()) -> dict[int, Int8Activation]:
    """The activations of a prepared float graph that quantize can keep in int8, by the id of their output node.
    Each input must be int8 already: a quantized layer's output (not one of ``skip``, the layers kept in float) or
    another such activation's; one that reads a float operator's output stays float (quantizing that output
    would add a rounding the float path does not have). Likewise each reader of the output must take it in
    int8: a quantized layer, another such activation, a host operator for which ``reads_int8(node)`` is true (the
    quantizer's operators on int8 values) or the network's output (dequantized as a layer's is). An activation
    that a float operator reads stays float: PP-OCRv4's recogniser scales every hard-swish by a learnable affine
    in float, and rounding each one's output to int8 cost it 19 points of lines read. An activation with a node or
    an input in ``exclude`` (ids: the quantizer's per-channel tensors) stays float, and its neighbours with it as
    these rules say."""
    f = _Finder(g)
    found: dict[int, Int8Activation] = {}
    taken: set[int] = set()

    def add(act: Int8Activation):
        if len(act.nodes[-1].shape) != 4 or any(id(m) in taken for m in act.nodes) or \
                any(m.attrs.get("act") for m in act.nodes[:-1]):
            return
        found[id(act.nodes[-1])] = act
        taken.update(id(m) for m in act.nodes)
    for finder, kind in ((f.swish, "hard_swish"), (f.gate, "hard_sigmoid")):
        for n in reversed(g.nodes):
            got = finder(n)
            if got is not None and tuple(got[0].shape) == tuple(n.shape) and got[0].dtype.startswith("float"):
                add(Int8Activation(kind, [got[0]], got[3], got[1], got[2]))
    for n in g.nodes:
        got = f.multiply(n)
        if got is not None and id(n) not in taken:
            add(Int8Activation("multiply", list(got), [n]))
    users = g.users()
    out = {k: a for k, a in found.items() if not any(id(m) in exclude for m in a.nodes + a.inputs)}
    while True:     # until stable: dropping one activation can leave a neighbour reading or feeding float
        kept: dict[int, Int8Activation] = {}
        for n in g.nodes:       # in graph order: an activation's int8 input may be an earlier activation's output
            act = out.get(id(n))
            if act is not None and all((a.op in LAYERS and id(a) not in skip) or id(a) in kept for a in act.inputs):
                kept[id(n)] = act
        readers = {id(m) for a in kept.values() for m in a.nodes}
        kept = {k: a for k, a in kept.items() if all(_reads_int8(u, skip, readers, reads_int8) for u in users[k])}
        if kept.keys() == out.keys():
            return kept
        out = kept


def _reads_int8(u: Node | None, skip, readers: set[int], reads_int8) -> bool:
    """True if reader ``u`` of an int8 activation takes int8 values (None: a network output, dequantized as the
    output of a layer is)."""
    if u is None:
        return True
    return (u.op in LAYERS and id(u) not in skip) or id(u) in readers or (reads_int8 is not None and reads_int8(u))


def chain_nodes(acts: dict[int, Int8Activation]) -> set[int]:
    """Ids of every node of the activations and of their inputs (they keep one exponent per tensor)."""
    return {id(m) for a in acts.values() for m in a.nodes + a.inputs}
