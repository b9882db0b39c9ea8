"""Canonical float layers: convolutions and dense layers with their weights, folded bias and activation.

``canonicalize(graph)`` turns ``conv2d(x, W)`` and ``matmul(x, W)`` with constant weights into
``conv2d`` / ``dense`` nodes (named ``conv2d_0``, ``conv2d_1``, ..., ``dense_0`` in graph order) that carry
``weight`` and ``bias`` (float64 numpy arrays) and fold
what follows them while it is per-output-channel arithmetic with a constant and the layer is its
only reader: ``+ c``, ``- c``, ``* c``, ``/ c`` (batch norm after ``DecomposeOpsForInference``, a
bias add) and a final ``relu`` or ``clip`` (the layer's ``act``).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .ir import Const, Graph, GraphError, Node

AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _bn_affine(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Inference batch norm as (scale, shift) per channel, or None if its statistics are not constant."""
    _, gamma, beta, mean, var = bn.args[:5]
    if not all(isinstance(c, Const) for c in (gamma, beta, mean, var)) or int(bn.call.attrs.axis) % len(bn.shape) != 1:
        return None
    a = bn.call.attrs
    scale = 1.0 / np.sqrt(var.value.astype(np.float64) + float(a.epsilon))
    if bool(a.scale):
        scale = scale * gamma.value
    shift = -mean.value * scale
    if bool(a.center):
        shift = shift + beta.value
    return scale, shift


def _affine_nodes(bn: Node, scale: np.ndarray, shift: np.ndarray) -> tuple[Node, Node]:
    """A batch norm that follows no layer, as ``x * scale + shift`` with per-channel constants."""
    shape = (1, -1) + (1,) * (len(bn.shape) - 2)
    x = relax.Var("x", relax.TensorType(bn.shape, bn.dtype))
    mul = Node(f"{bn.name}_scale", "relax.multiply", [bn.args[0], Const(scale.reshape(shape).astype(bn.dtype))],
               bn.shape, bn.dtype, relax.op.multiply(x, x))
    add = Node(bn.name, "relax.add", [mul, Const(shift.reshape(shape).astype(bn.dtype))], bn.shape, bn.dtype,
               relax.op.add(x, x))
    return mul, add


def fold_constants(g: Graph) -> Graph:
    """Replace every operator whose inputs are all constants by its value (computed in numpy)."""
    from .evaluate import evaluate_node
    for n in list(g.nodes):
        if n.op != "input" and not n.inputs and n.op not in ("conv2d", "dense") and n.tensor_args:
            value = evaluate_node(n, [a.value for a in n.tensor_args])
            g.replace_uses(n, Const(value))
            g.nodes.remove(n)
    return g


def _ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _conv_from(node: Node) -> Node | None:
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)):
        return None
    a = node.call.attrs
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or str(a.out_layout) not in ("NCHW", ""):
        raise GraphError(f"{node.name}: conv2d in layout {a.data_layout}/{a.kernel_layout}; import the network "
                         "in NCHW/OIHW")
    pad = _ints(a.padding)
    if len(pad) == 2:
        pad = (pad[0], pad[1], pad[0], pad[1])
    attrs = {"weight": w.value.astype(np.float64), "bias": np.zeros(w.shape[0]), "strides": _ints(a.strides),
             "padding": pad, "dilation": _ints(a.dilation), "groups": int(a.groups), "act": None}
    return Node(node.name, "conv2d", [x], node.shape, node.dtype, None, attrs)


def _dense_from(node: Node) -> Node | None:
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)) or len(x.shape) != 2 or w.value.ndim != 2:
        return None
    attrs = {"weight": w.value.T.astype(np.float64), "bias": np.zeros(w.shape[1]), "act": None}
    return Node(node.name, "dense", [x], node.shape, node.dtype, None, attrs)


def _channel_vector(c: Const, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """The constant as one value per output channel (axis 1), or None if it varies along another axis."""
    v = c.value.astype(np.float64)
    if v.ndim > len(out_shape):
        return None
    v = v.reshape((1,) * (len(out_shape) - v.ndim) + v.shape)
    for ax, (n, m) in enumerate(zip(v.shape, out_shape)):
        if n != 1 and (ax != 1 or n != m):
            return None
    return np.broadcast_to(v.reshape(-1) if v.shape[1] > 1 else v.reshape(-1)[:1], (out_shape[1],)).copy()


def _fold_next(layer: Node, nxt: Node) -> bool:
    """Fold ``nxt`` (the layer's only reader) into the layer; False if it is not foldable."""
    at = layer.attrs
    if at["act"] is not None:
        return False
    if nxt.op in AFFINE and len(nxt.args) == 2:
        a, b = nxt.args
        if a is layer and isinstance(b, Const):
            c, layer_first = b, True
        elif b is layer and isinstance(a, Const) and nxt.op in ("relax.add", "relax.multiply"):
            c, layer_first = a, False
        else:
            return False
        vec = _channel_vector(c, layer.shape)
        if vec is None or tuple(nxt.shape) != tuple(layer.shape):
            return False
        wshape = (-1,) + (1,) * (at["weight"].ndim - 1)
        if nxt.op == "relax.add":
            at["bias"] = at["bias"] + vec
        elif nxt.op == "relax.subtract" and layer_first:
            at["bias"] = at["bias"] - vec
        elif nxt.op == "relax.multiply":
            at["weight"] = at["weight"] * vec.reshape(wshape)
            at["bias"] = at["bias"] * vec
        elif nxt.op == "relax.divide" and layer_first:
            at["weight"] = at["weight"] / vec.reshape(wshape)
            at["bias"] = at["bias"] / vec
        else:
            return False
        return True
    if nxt.op == "relax.nn.batch_norm" and nxt.args[0] is layer:
        aff = _bn_affine(nxt)
        if aff is None:
            return False
        scale, shift = aff
        at["weight"] = at["weight"] * scale.reshape((-1,) + (1,) * (at["weight"].ndim - 1))
        at["bias"] = at["bias"] * scale + shift
        return True
    if nxt.op == "relax.nn.relu" and nxt.args[0] is layer:
        at["act"] = ("clip", 0.0, None)
        return True
    if nxt.op == "relax.clip" and nxt.args[0] is layer:
        lo, hi = (float(v.value) for v in nxt.args[1:3])
        at["act"] = ("clip", lo, hi)
        return True
    return False


def canonicalize(g: Graph) -> Graph:
    """Replace constant-weight conv2d/matmul (and what folds into them) by ``conv2d``/``dense`` nodes."""
    fold_constants(g)
    for node in list(g.nodes):
        new = None
        if node.op == "relax.nn.conv2d":
            new = _conv_from(node)
        elif node.op == "relax.matmul":
            new = _dense_from(node)
        if new is not None:
            g.nodes[g.nodes.index(node)] = new
            g.replace_uses(node, new)
    changed = True
    while changed:
        changed = False
        users = g.users()
        for layer in g.nodes:
            if layer.op not in ("conv2d", "dense"):
                continue
            us = users[id(layer)]
            if len(us) != 1 or us[0] is None:
                continue
            nxt = us[0]
            if _fold_next(layer, nxt):
                g.replace_uses(nxt, layer)
                g.nodes.remove(nxt)
                changed = True
                break
    for n in list(g.nodes):        # a batch norm that follows no layer: per-channel arithmetic
        if n.op == "relax.nn.batch_norm" and (aff := _bn_affine(n)) is not None:
            mul, add = _affine_nodes(n, *aff)
            k = g.nodes.index(n)
            g.nodes[k:k + 1] = [mul, add]
            g.replace_uses(n, add)
            mul.args[0] = n.args[0]
    count = {"conv2d": 0, "dense": 0}
    for n in g.nodes:
        if n.op in count:
            n.attrs["relax_name"] = n.name
            n.name = f"{n.op}_{count[n.op]}"
            count[n.op] += 1
    return g
