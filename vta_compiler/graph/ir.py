"""A small dataflow graph read from a Relax function, and the way back to Relax.

The whole-network passes (quantize, graph_pack) reason about a network as a list of nodes in
topological order: each node is one Relax call (or a graph input), its inputs are other nodes or
constants (numpy arrays), and it knows its static shape and dtype. ``Graph.from_relax`` reads a
flat Relax function (one dataflow block, static shapes), ``Graph.emit_call`` writes a node back as
the same Relax call on new arguments, which is how any operator the passes do not know keeps
working.

A call that returns a tuple (``split``, ``topk``, ...) is a *tuple node*: its ``fields`` hold each
field's (shape, dtype), its ``shape`` is ``()``, and each field is read by a ``tuple_get_item``
node (op ``TUPLE_ITEM``, ``attrs["index"]``) whose shape and dtype are the field's. A Relax
variable bound to a tuple stands for the list of its item nodes, so ``TupleGetItem``, a tuple
passed to another call (``concat``) and a tuple returned all read the items. ``emit_call`` writes
an item node back as ``TupleGetItem`` of its tuple.

If the function carries the attribute ``vta.source_names`` (a map from a binding's variable name
to the operator it came from, e.g. the ONNX node ``"split_0 (Split)"``), each node keeps that in
``source`` and ``describe(node)`` names both, for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relax


class GraphError(ValueError):
    """A network the whole-network flow cannot read (dynamic shapes, control flow, ...)."""


#: the op of a node that reads one field of a tuple node
TUPLE_ITEM = "tuple_get_item"
#: the function attribute that maps binding names to the operators they came from (an importer sets it)
SOURCE_NAMES = "vta.source_names"


@dataclass(eq=False)
class Const:
    """A constant operand."""
    value: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def dtype(self) -> str:
        return str(self.value.dtype)


@dataclass(eq=False)
class Node:
    """One operator application (``op`` is the Relax op name) or a graph input (``op == "input"``).

    ``args`` holds the call's arguments: ``Node``, ``Const`` or, for non-tensor arguments such as a
    target shape, the original Relax expression. ``call`` is the original Relax call (its op, attrs
    and type arguments are reused when the node is emitted again). Passes add their own facts in
    ``attrs``.
    """
    name: str
    op: str
    args: list = field(default_factory=list)
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    call: Any = None
    attrs: dict = field(default_factory=dict)
    #: a tuple node's fields, [(shape, dtype), ...]; None for a tensor
    fields: list | None = None
    #: the operator of the imported model this node came from (e.g. an ONNX node), if known
    source: str | None = None

    @property
    def is_tuple(self) -> bool:
        return self.fields is not None

    @property
    def inputs(self) -> list[Node]:
        return [a for a in flat_args(self.args) if isinstance(a, Node)]

    @property
    def tensor_args(self) -> list:
        """The tensor arguments (nodes and constants) in order, tuples flattened."""
        return [a for a in flat_args(self.args) if isinstance(a, (Node, Const))]

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.op} {self.shape} {self.dtype})"


class _Unused:
    """A tuple field the flow does not compute (batch norm's running statistics)."""

    def __init__(self, what: str):
        self.what = what


def describe(n: Node) -> str:
    """The node's name, and the imported operator it came from when known (for error messages)."""
    return f"{n.name} (from {n.source})" if n.source else n.name


def flat_args(args: list) -> list:
    out = []
    for a in args:
        out.extend(flat_args(a) if isinstance(a, list) else [a])
    return out


def _static_shape(ty, what: str) -> tuple[int, ...]:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise GraphError(f"{what}: expected a tensor with a known shape, got {ty}")
    try:
        return tuple(int(s) for s in ty.shape)
    except (TypeError, ValueError):
        raise GraphError(f"{what}: the shape {ty.shape} is not static; the VTA flow compiles static shapes "
                         "(bind the dynamic dimensions, e.g. from_onnx(model, shape_dict=...))") from None


def _tuple_node(name: str, call, args: list, ty, where: str, source: str | None, nodes: list[Node]) -> list:
    """A call returning a tuple: the tuple node, then one item node per field (appended to ``nodes``)."""
    fields = []
    for k, f in enumerate(ty.fields):
        if not isinstance(f, relax.TensorType):
            raise GraphError(f"{where}: field {k} of {call.op.name}'s result is {f}, not a tensor")
        fields.append((_static_shape(f, f"{where}[{k}]"), str(f.dtype)))
    dtypes = {d for _, d in fields}
    t = Node(name, call.op.name, args, (), dtypes.pop() if len(dtypes) == 1 else "tuple", call, fields=fields,
             source=source)
    nodes.append(t)
    items = []
    for k, (shape, dtype) in enumerate(fields):
        item = Node(f"{name}_{k}", TUPLE_ITEM, [t], shape, dtype, attrs={"index": k}, source=source)
        nodes.append(item)
        items.append(item)
    return items


class Graph:
    """Nodes in topological order, the graph inputs and outputs."""

    def __init__(self, nodes: list[Node], inputs: list[Node], outputs: list[Node], name: str = "main"):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.name = name

    # ---------------------------------------------------------------- reading Relax
    @classmethod
    def from_relax(cls, func: relax.Function, name: str = "main") -> Graph:
        if not isinstance(func.body, relax.SeqExpr):
            raise GraphError(f"{name}: expected a function body made of binding blocks")
        env: dict[Any, Any] = {}
        nodes: list[Node] = []
        sources = {}
        if func.attrs is not None and SOURCE_NAMES in func.attrs:
            sources = {str(k): str(v) for k, v in func.attrs[SOURCE_NAMES].items()}
        inputs = []
        for p in func.params:
            n = Node(p.name, "input", shape=_static_shape(p.ty, f"input {p.name}"), dtype=str(p.ty.dtype))
            env[p] = n
            inputs.append(n)
            nodes.append(n)

        def value(e, where):
            if isinstance(e, relax.Var):
                if e not in env:
                    raise GraphError(f"{where}: {e.name} is not defined before its use")
                return env[e]
            if isinstance(e, tvm.ir.GenericConst):
                return Const(e.value.numpy())
            if isinstance(e, relax.Tuple):
                return [value(f, where) for f in e.fields]
            return e

        for block in func.body.blocks:
            for b in block.bindings:
                where = f"{name}/{b.var.name}"
                if not isinstance(b, relax.VarBinding):
                    raise GraphError(f"{where}: match_cast and other dynamic bindings are not supported")
                v = b.value
                if isinstance(v, relax.Var) or isinstance(v, tvm.ir.GenericConst):
                    env[b.var] = value(v, where)
                elif isinstance(v, relax.Tuple):
                    env[b.var] = [value(f, where) for f in v.fields]
                elif isinstance(v, relax.TupleGetItem):
                    t = value(v.tuple_value, where)
                    if not isinstance(t, list):
                        raise GraphError(f"{where}: indexing into a value that is not a tuple")
                    env[b.var] = t[int(v.index)]
                elif isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "relax.nn.batch_norm":
                    # inference batch norm: the normalized tensor is field 0 (the others are the statistics)
                    args = [value(a, where) for a in v.args]
                    ty = b.var.ty.fields[0]
                    n = Node(b.var.name, v.op.name, args, _static_shape(ty, where), str(ty.dtype), v)
                    nodes.append(n)
                    env[b.var] = [n] + [_Unused(f"{where}[{k}]") for k in (1, 2)]
                elif isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op):
                    args = [value(a, where) for a in v.args]
                    src = sources.get(b.var.name)
                    if isinstance(b.var.ty, relax.TupleType):
                        env[b.var] = _tuple_node(b.var.name, v, args, b.var.ty, where, src, nodes)
                        continue
                    n = Node(b.var.name, v.op.name, args, _static_shape(b.var.ty, where), str(b.var.ty.dtype), v,
                             source=src)
                    nodes.append(n)
                    env[b.var] = n
                else:
                    raise GraphError(f"{where}: unsupported binding {type(v).__name__} "
                                     "(the VTA flow reads flat dataflow graphs of operator calls)")
        out = value(func.body.body, f"{name}/return")
        outs = out if isinstance(out, list) else [out]
        for n in nodes:
            for a in flat_args(n.args):
                if isinstance(a, _Unused):
                    raise GraphError(f"{n.name} reads {a.what}, batch norm's running statistics, which "
                                     "inference does not compute")
        for o in outs:
            if not isinstance(o, Node):
                raise GraphError(f"{name}: every output must be computed from the inputs")
        g = cls(nodes, inputs, outs, name)
        g.tuple_output = isinstance(out, list)
        return g.prune()

    # ---------------------------------------------------------------- structure
    def prune(self) -> Graph:
        """Drop nodes no output depends on (the graph inputs always stay)."""
        live = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(n.inputs)
        self.nodes = [n for n in self.nodes if id(n) in live or n.op == "input"]
        return self

    def users(self) -> dict[int, list[Node]]:
        """id(node) -> the nodes that read it (an output counts as one extra user, ``None``)."""
        use: dict[int, list] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for a in n.inputs:
                use[id(a)].append(n)
        for o in self.outputs:
            use[id(o)].append(None)
        return use

    def replace_uses(self, old: Node, new: Node) -> None:
        def sub(args):
            return [sub(a) if isinstance(a, list) else (new if a is old else a) for a in args]
        for n in self.nodes:
            n.args = sub(n.args)
        self.outputs = [new if o is old else o for o in self.outputs]

    # ---------------------------------------------------------------- writing Relax
    @staticmethod
    def emit_call(bb: relax.BlockBuilder, node: Node, args: list, name: str | None = None):
        """Emit ``node``'s original call on new arguments (one Relax expression per ``tensor_args`` entry)."""
        if node.op == TUPLE_ITEM:
            return bb.emit(relax.TupleGetItem(args[0], node.attrs["index"]), name_hint=name or node.name)
        it = iter(args)

        def sub(a):
            if isinstance(a, list):
                return relax.Tuple([sub(x) for x in a])
            return next(it) if isinstance(a, (Node, Const)) else a
        new = [sub(a) for a in node.args]
        call = node.call
        return bb.emit(relax.Call(call.op, new, call.attrs, call.ty_args), name_hint=name or node.name)


def const(value: np.ndarray | int | float, dtype: str | None = None):
    """A Relax constant from a numpy array or a scalar."""
    arr = np.asarray(value, dtype=dtype) if dtype else np.asarray(value)
    return relax.const(arr, str(arr.dtype))
