"""Canonical float layers: convolutions and dense layers with their weights, folded bias and activation.

``canonicalize(graph)`` turns ``conv2d(x, W)`` (any groups), ``conv2d_transpose(x, W)`` and
``matmul(x, W)`` with constant weights (and ``conv1d(x, W)``, as a conv2d over an image one row high between
two views) into ``conv2d`` / ``conv2d_transpose`` / ``dense`` nodes (named
``conv2d_0``, ``conv2d_1``, ..., ``conv2d_transpose_0``, ``dense_0`` in graph order) that carry
``weight`` and ``bias`` (float64 numpy arrays) and fold
what follows them while it is per-output-channel arithmetic with a constant and the layer is its
only reader: ``+ c``, ``- c``, ``* c``, ``/ c`` (batch norm after ``DecomposeOpsForInference``, a
bias add) and a final ``relu`` or ``clip`` (the layer's ``act``), then a multiply or divide by a
positive scalar (which scales the layer and its clip: PyTorch's hard-sigmoid ``relu6(x + 3) / 6``). Such
arithmetic after a view that drops a unit axis of a conv2d's output (a 1-D convolution's ``(N, O, L)``) folds
too, and a ``strided_slice`` that copies its input whole goes first.

Weights keep their operator's layout: OIHW (``conv2d``, ``I`` = input channels per group), IOHW
(``conv2d_transpose``: ``(CI, CO/groups, KH, KW)``, the output channel axis is 1) and OI (``dense``).
``out_channel_rows`` and ``scale_out_channels`` see every layer's weight by output channel.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from .ir import TUPLE_ITEM, Const, Graph, GraphError, Node
from .qdq import carry

AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")
#: the canonical layer ops
LAYERS = ("conv2d", "conv2d_transpose", "dense")


def out_channel_rows(op: str, weight: np.ndarray, groups: int = 1) -> np.ndarray:
    """The weight as an (output channels, fan-in) matrix: row ``o`` holds every weight feeding channel ``o``."""
    if op == "conv2d_transpose":
        ci, cog = weight.shape[:2]
        return weight.reshape(groups, ci // groups, cog, -1).transpose(0, 2, 1, 3).reshape(groups * cog, -1)
    return weight.reshape(weight.shape[0], -1)


def scale_out_channels(op: str, weight: np.ndarray, vec: np.ndarray, groups: int = 1) -> np.ndarray:
    """``weight`` with output channel ``o`` multiplied by ``vec[o]``."""
    if op == "conv2d_transpose":
        ci, cog = weight.shape[:2]
        v = np.asarray(vec).reshape(groups, 1, cog, 1, 1)
        return (weight.reshape((groups, ci // groups) + weight.shape[1:]) * v).reshape(weight.shape)
    return weight * np.asarray(vec).reshape((-1,) + (1,) * (weight.ndim - 1))


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
    tuples: dict[int, list[np.ndarray]] = {}        # folded tuple nodes' field values
    for n in list(g.nodes):
        if n.op == TUPLE_ITEM and id(n.args[0]) in tuples:
            g.replace_uses(n, Const(tuples[id(n.args[0])][n.attrs["index"]]))
            g.nodes.remove(n)
        elif n.op != "input" and not n.inputs and n.op not in LAYERS and n.tensor_args:
            value = evaluate_node(n, [a.value for a in n.tensor_args])
            if n.is_tuple:
                tuples[id(n)] = value
            else:
                g.replace_uses(n, Const(value))
            g.nodes.remove(n)
    return g


def _ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _require_layouts(node: Node, what: str, data: str, kernel: str) -> None:
    a = node.call.attrs
    if str(a.data_layout) != data or str(a.kernel_layout) != kernel or str(a.out_layout) not in (data, ""):
        raise GraphError(f"{node.name}: {what} in layout {a.data_layout}/{a.kernel_layout}; import the network "
                         f"in {data}/{kernel}")


def _conv_from(node: Node) -> Node | None:
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)):
        return None
    _require_layouts(node, "conv2d", "NCHW", "OIHW")
    a = node.call.attrs
    pad = _ints(a.padding)
    if len(pad) == 2:
        pad = (pad[0], pad[1], pad[0], pad[1])
    attrs = {"weight": w.value.astype(np.float64), "bias": np.zeros(w.shape[0]), "strides": _ints(a.strides),
             "padding": pad, "dilation": _ints(a.dilation), "groups": int(a.groups), "act": None}
    return Node(node.name, "conv2d", [x], node.shape, node.dtype, None, attrs)


def _conv_transpose_from(node: Node) -> Node | None:
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)):
        return None
    _require_layouts(node, "conv2d_transpose", "NCHW", "IOHW")
    a = node.call.attrs
    pad = _ints(a.padding)
    if len(pad) == 2:
        pad = (pad[0], pad[1], pad[0], pad[1])
    groups = int(a.groups)
    attrs = {"weight": w.value.astype(np.float64), "bias": np.zeros(w.shape[1] * groups),
             "strides": _ints(a.strides), "padding": pad, "output_padding": _ints(a.output_padding),
             "dilation": _ints(a.dilation), "groups": groups, "act": None}
    return Node(node.name, "conv2d_transpose", [x], node.shape, node.dtype, None, attrs)


def _dense_from(node: Node) -> Node | None:
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)) or len(x.shape) != 2 or w.value.ndim != 2:
        return None
    attrs = {"weight": w.value.T.astype(np.float64), "bias": np.zeros(w.shape[1]), "act": None}
    return Node(node.name, "dense", [x], node.shape, node.dtype, None, attrs)


def _conv1d_from(node: Node) -> list[Node] | None:
    """``conv1d(x, W)`` (NCW/OIW, a constant ``W``) as ``reshape(conv2d(reshape(x, (N, C, 1, W)), W'), (N, O, OW))``:
    a 1-D convolution is a 2-D one over an image one row high (silero-vad's STFT and encoder)."""
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)) or len(x.shape) != 3:
        return None
    _require_layouts(node, "conv1d", "NCW", "OIW")
    a = node.call.attrs
    pad = _ints(a.padding)
    pad = pad * 2 if len(pad) == 1 else pad
    n, c, width = x.shape
    image = _reshape_node(f"{node.name}_image", x, (n, c, 1, width))
    attrs = {"weight": w.value[:, :, None, :].astype(np.float64), "bias": np.zeros(w.shape[0]),
             "strides": (1, *_ints(a.strides)), "padding": (0, pad[0], 0, pad[1]),
             "dilation": (1, *_ints(a.dilation)), "groups": int(a.groups), "act": None}
    conv = Node(node.name, "conv2d", [image], (n, node.shape[1], 1, node.shape[2]), node.dtype, None, attrs)
    return [image, conv, _reshape_node(f"{node.name}_row", conv, node.shape)]


def _reshape_node(name: str, x: Node, shape: tuple[int, ...]) -> Node:
    v = relax.Var("x", relax.TensorType(x.shape, x.dtype))
    return Node(name, "relax.reshape", [x, relax.ShapeExpr(list(shape))], shape, x.dtype,
                relax.op.reshape(v, relax.ShapeExpr(list(shape))))


def _flat_dense_from(node: Node) -> list[Node] | None:
    """``matmul(x, W)`` with ``x`` of rank > 2 (tokens of a sequence: magika's byte embedding, a transformer's
    projections) and a constant 2-D ``W``, as ``reshape(dense(reshape(x, (rows, K))), (..., N))``: the rows of
    every leading axis are one dense layer's batch."""
    x, w = node.args[:2]
    if not (isinstance(x, Node) and isinstance(w, Const)) or len(x.shape) <= 2 or w.value.ndim != 2 or \
            node.shape[:-1] != x.shape[:-1]:
        return None
    rows = int(np.prod(x.shape[:-1]))
    flat = _reshape_node(f"{node.name}_rows", x, (rows, x.shape[-1]))
    dense = _dense_from(Node(node.name, node.op, [flat, w], (rows, node.shape[-1]), node.dtype, node.call))
    return [flat, dense, _reshape_node(f"{node.name}_unflat", dense, node.shape)]


def _unflattens(view: Node, layer: Node) -> bool:
    """Whether ``view`` reshapes a dense layer's (rows, N) output to (..., N): the rows of a sequence again (as
    ``_flat_dense_from`` and TVM's importer write a rank-3 matmul); or a conv2d's (N, O, 1, L) or (N, O, L, 1)
    output to the (N, O, L) of a 1-D convolution (``_unit_axis``)."""
    if view.op not in ("relax.reshape", "relax.squeeze"):
        return False
    if layer.op == "conv2d":
        return _unit_axis(view, layer) is not None
    return layer.op == "dense" and len(view.shape) > 2 and \
        view.shape[-1] == layer.shape[1] and int(np.prod(view.shape[:-1])) == layer.shape[0]


def _unit_axis(view: Node, layer: Node) -> int | None:
    """The axis of height (2) or width (3) one that ``view`` drops from a conv2d's (N, O, H, W) output, giving the
    (N, O, L) of a 1-D convolution (``_conv1d_from``, or an exported convolution with a kernel one wide)."""
    s = tuple(layer.shape)
    if len(s) != 4:
        return None
    for axis in (2, 3):
        if s[axis] == 1 and tuple(view.shape) == s[:axis] + s[axis + 1:]:
            return axis
    return None


def _on_rows(nxt: Node, unflat: Node, layer: Node) -> Node | None:
    """``nxt`` (elementwise on a flattened dense layer's ``unflat`` view) as the same operator on the layer's
    rows, if its constant varies along the last axis only; None otherwise."""
    if layer.op == "conv2d":
        return _on_image(nxt, unflat, layer)
    n_out = layer.shape[1]
    args = []
    for a in nxt.args:
        if a is unflat:
            args.append(layer)
        elif isinstance(a, Const) and a.value.ndim <= len(unflat.shape) and \
                (a.value.size == 1 or (a.value.shape[-1] == n_out and a.value.size == n_out)):
            args.append(Const(a.value.reshape((1, -1) if a.value.size > 1 else a.value.shape)))
        elif isinstance(a, Node) or isinstance(a, Const):
            return None
        else:
            args.append(a)
    if tuple(nxt.shape) != tuple(unflat.shape):
        return None
    return Node(nxt.name, nxt.op, args, layer.shape, nxt.dtype, nxt.call)


def _on_image(nxt: Node, row: Node, layer: Node) -> Node | None:
    """``nxt`` (elementwise on the (N, O, L) view of a conv2d's (N, O, 1, L) or (N, O, L, 1) output) as the same
    operator on the layer's output, its constants given the image's axis of size 1."""
    if tuple(nxt.shape) != tuple(row.shape):
        return None
    axis = _unit_axis(row, layer)
    args = []
    for a in nxt.args:
        if a is row:
            args.append(layer)
        elif isinstance(a, Const) and a.value.ndim <= 3:
            v = a.value.reshape((1,) * (3 - a.value.ndim) + a.value.shape)
            args.append(Const(v.reshape(v.shape[:axis] + (1,) + v.shape[axis:])))
        elif isinstance(a, (Node, Const)):
            return None
        else:
            args.append(a)
    return Node(nxt.name, nxt.op, args, layer.shape, nxt.dtype, nxt.call)


def _drop_identity_slices(g: Graph) -> None:
    """A ``strided_slice`` with unit strides whose output is its input's shape copies its input (magika's
    ``x[:, :, :, 0:1]`` of a convolution one wide): it goes, so what follows it can fold into the layer."""
    for node in list(g.nodes):
        if node.op != "relax.strided_slice" or not isinstance(node.args[0], Node) or \
                tuple(node.args[0].shape) != tuple(node.shape):
            continue
        strides = node.call.args[4] if len(node.call.args) > 4 else None     # absent: unit strides
        if strides is not None and not (isinstance(strides, relax.Tuple) and all(
                isinstance(v, tvm.tirx.IntImm) and int(v) == 1 for v in strides.fields)):
            continue
        g.replace_uses(node, node.args[0])
        g.nodes.remove(node)


def _drop_round_trip_views(g: Graph) -> None:
    """``reshape(reshape(x, s), x.shape)`` is ``x``: between two 1-D convolutions made 2-D (``_conv1d_from``) the
    (N, C, 1, W) image stays one, so the packed layout does not change between them."""
    for node in list(g.nodes):
        inner = node.args[0] if node.op == "relax.reshape" else None
        if not (isinstance(inner, Node) and inner.op == "relax.reshape" and isinstance(inner.args[0], Node) and
                tuple(inner.args[0].shape) == tuple(node.shape)):
            continue
        g.replace_uses(node, inner.args[0])
        g.nodes.remove(node)
        if not g.users()[id(inner)]:
            g.nodes.remove(inner)


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


def _scalar(c) -> float | None:
    return float(c.value.reshape(-1)[0]) if isinstance(c, Const) and c.value.size == 1 else None


def _clip_act(layer: Node, nxt: Node):
    """The layer's activation after ``nxt`` (relu, relu6, clip, maximum/minimum with a scalar), or None.

    Activations are clip intervals, so one after another is their intersection; ``minimum`` alone
    (no lower bound yet) is not an activation VTA's clip can take here.
    """
    act = layer.attrs["act"]
    lo, hi = (act[1], act[2]) if act is not None else (None, None)
    if not nxt.args or nxt.args[0] is not layer:
        return None
    if nxt.op == "relax.nn.relu":
        new_lo, new_hi = 0.0, None
    elif nxt.op == "relax.nn.relu6":
        new_lo, new_hi = 0.0, 6.0
    elif nxt.op == "relax.clip":
        new_lo, new_hi = (float(v.value) for v in nxt.args[1:3])
    elif nxt.op == "relax.maximum" and len(nxt.args) == 2 and _scalar(nxt.args[1]) is not None:
        new_lo, new_hi = _scalar(nxt.args[1]), None
    elif nxt.op == "relax.minimum" and len(nxt.args) == 2 and _scalar(nxt.args[1]) is not None and lo is not None:
        new_lo, new_hi = None, _scalar(nxt.args[1])
    else:
        return None
    if tuple(nxt.shape) != tuple(layer.shape):
        return None
    lo = new_lo if lo is None else (lo if new_lo is None else max(lo, new_lo))
    hi = new_hi if hi is None else (hi if new_hi is None else min(hi, new_hi))
    if hi is not None and hi < lo:
        return None
    return ("clip", lo, hi)


def _scale_clipped(layer: Node, nxt: Node) -> bool:
    """``clip(y, lo, hi) * k`` (or ``/ k``) with a scalar ``k > 0`` is ``clip(y * k, lo * k, hi * k)``: the layer
    takes it (PyTorch's hard-sigmoid ``relu6(x + 3) / 6`` after a layer becomes that layer's epilogue)."""
    if nxt.op not in ("relax.multiply", "relax.divide") or len(nxt.args) != 2 or \
            tuple(nxt.shape) != tuple(layer.shape):
        return False
    a, b = nxt.args
    k = _scalar(b) if a is layer else _scalar(a) if b is layer and nxt.op == "relax.multiply" else None
    if k is None or not (math.isfinite(k) and k > 0):
        return False
    k = 1.0 / k if nxt.op == "relax.divide" else k
    at = layer.attrs
    at["weight"] = (at["weight"] * k).astype(at["weight"].dtype)
    at["bias"] = (at["bias"] * k).astype(at["bias"].dtype)
    _, lo, hi = at["act"]
    at["act"] = ("clip", lo * k, None if hi is None else hi * k)
    return True


def _fold_next(layer: Node, nxt: Node) -> bool:
    """Fold ``nxt`` (the layer's only reader) into the layer; False if it is not foldable."""
    at = layer.attrs
    act = _clip_act(layer, nxt)
    if act is not None:
        at["act"] = act
        return True
    if at["act"] is not None:
        return _scale_clipped(layer, nxt)
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
        groups = at.get("groups", 1)
        if nxt.op == "relax.add":
            at["bias"] = at["bias"] + vec
        elif nxt.op == "relax.subtract" and layer_first:
            at["bias"] = at["bias"] - vec
        elif nxt.op == "relax.multiply":
            at["weight"] = scale_out_channels(layer.op, at["weight"], vec, groups)
            at["bias"] = at["bias"] * vec
        elif nxt.op == "relax.divide" and layer_first:
            at["weight"] = scale_out_channels(layer.op, at["weight"], 1.0 / vec, groups)
            at["bias"] = at["bias"] / vec
        else:
            return False
        return True
    if nxt.op == "relax.nn.batch_norm" and nxt.args[0] is layer:
        aff = _bn_affine(nxt)
        if aff is None:
            return False
        scale, shift = aff
        at["weight"] = scale_out_channels(layer.op, at["weight"], scale, at.get("groups", 1))
        at["bias"] = at["bias"] * scale + shift
        return True
    return False


def canonicalize(g: Graph) -> Graph:
    """Replace constant-weight conv2d/conv2d_transpose/matmul (and what folds into them) by canonical layers."""
    fold_constants(g)
    _drop_identity_slices(g)
    for node in list(g.nodes):
        new = None
        if node.op == "relax.nn.conv2d":
            new = _conv_from(node)
        elif node.op == "relax.nn.conv2d_transpose":
            new = _conv_transpose_from(node)
        elif node.op == "relax.nn.conv1d":
            new = _conv1d_from(node)
        elif node.op == "relax.matmul":
            new = _dense_from(node) or _flat_dense_from(node)
        if isinstance(new, list):
            for n in new:
                n.source = node.source
            k = g.nodes.index(node)
            g.nodes[k:k + 1] = new
            carry(node, new[1])          # the layer; the view after it keeps its exponent
            g.replace_uses(node, new[-1])
        elif new is not None:
            new.source = node.source
            carry(node, new)             # a QDQ pair on the operator's output is the layer's
            g.nodes[g.nodes.index(node)] = new
            g.replace_uses(node, new)
    changed = True
    while changed:
        changed = False
        users = g.users()
        for layer in g.nodes:
            if layer.op not in LAYERS:
                continue
            us = users[id(layer)]
            if len(us) != 1 or us[0] is None:
                continue
            nxt = us[0]
            if _fold_next(layer, nxt):
                carry(nxt, layer)
                g.replace_uses(nxt, layer)
                g.nodes.remove(nxt)
                changed = True
                break
            # a dense layer over a sequence's rows: fold what follows the view that unflattens them
            if _unflattens(nxt, layer) and len(users[id(nxt)]) == 1 and users[id(nxt)][0] is not None:
                after = users[id(nxt)][0]
                rows = _on_rows(after, nxt, layer)
                if rows is not None and _fold_next(layer, rows):
                    carry(after, layer)
                    g.replace_uses(after, nxt)
                    g.nodes.remove(after)
                    changed = True
                    break
    _drop_round_trip_views(g)
    for n in list(g.nodes):        # a batch norm that follows no layer: per-channel arithmetic
        if n.op == "relax.nn.batch_norm" and (aff := _bn_affine(n)) is not None:
            mul, add = _affine_nodes(n, *aff)
            k = g.nodes.index(n)
            g.nodes[k:k + 1] = [mul, add]
            g.replace_uses(n, add)
            mul.args[0] = n.args[0]
    count = dict.fromkeys(LAYERS, 0)
    for n in g.nodes:
        if n.op in count:
            n.attrs["relax_name"] = n.name
            n.name = f"{n.op}_{count[n.op]}"
            count[n.op] += 1
    return g
