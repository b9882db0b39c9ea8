"""Importing networks: ONNX and ``relax.frontend.nn``, parameters bound, batch norm folded.

``from_onnx`` takes models as other tools export them (``onnx_import`` prepares them for TVM's importer:
outputs chosen, shapes fixed and inferred, constants folded, unconvertible nodes named).

``from_onnx(model)`` returns ``(mod, params)`` like TVM's importer with ``keep_params_in_input``:
the weights are parameters of ``main`` and ``params`` maps their names to numpy arrays. A module
exported from ``relax.frontend.nn`` (``model.export_tvm(spec)``) comes with a list of
``(name, Parameter)``; ``bind_params`` accepts both. ``normalize`` binds the weights as constants; ``canon`` then folds
constant arithmetic and batch norm into the convolutions' weights and biases. TVM's ONNX importer
writes ``Clip`` (ReLU6) as TE functions (``call_tir`` of an element-wise max or min with a bound);
``bind_params`` turns them back into ``relax.maximum`` / ``relax.minimum``, which fold into the
layer before them as its activation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from .ir import GraphError


def from_onnx(model, shape_dict: dict[str, list[int]] | None = None, opset: int | None = None, *,
              outputs: list[str] | None = None, constants: dict[str, Any] | None = None):
    """Import an ONNX model as exported: ``(mod, params)`` with the weights as ``main``'s trailing parameters.

    ``model``: an ``onnx.ModelProto``, a path or the file's bytes. ``shape_dict`` fixes the inputs'
    dynamic dimensions (VTA compiles static shapes; an input left dynamic is refused with the
    ``shape_dict`` to pass). ``outputs`` keeps the part of the graph that computes these tensors (any
    node's output), to leave label or post-processing outputs (``ZipMap``, ``ArrayFeatureExtractor``) or
    an operator the importer cannot convert (``LSTM``) to the CPU. ``constants`` fixes inputs that
    select a mode (a sample rate an ``If`` branches on). Shapes are inferred and constants folded
    (onnxscript's optimizer, then onnxsim) before TVM's importer; a node it cannot convert is named in the error.
    See ``onnx_import``.
    """
    try:
        import onnx  # noqa: F401
    except ImportError as exc:   # pragma: no cover - onnx is a dependency
        raise ImportError("graph.from_onnx needs the onnx package: pip install onnx") from exc
    from .onnx_import import import_onnx
    mod = import_onnx(model, shape_dict, opset, outputs, constants)
    func = mod["main"]
    names = [p.name for p in func.params[_num_inputs(func):]]
    values = func.attrs["params"] if func.attrs is not None and "params" in func.attrs else []
    params = {n: v.numpy() for n, v in zip(names, values)}
    mod["main"] = func.without_attr("params")
    return mod, params


def _num_inputs(func: relax.Function) -> int:
    if func.attrs is not None and "num_input" in func.attrs:
        return int(func.attrs["num_input"])
    return len(func.params)


def entry_function(mod: tvm.IRModule) -> str:
    """The name of the network's function: ``main``, else the module's only Relax function."""
    funcs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function)]
    if "main" in funcs:
        return "main"
    if len(funcs) == 1:
        return funcs[0]
    raise GraphError(f"the module has no 'main' and several Relax functions ({', '.join(sorted(funcs))}); "
                     "keep only the network's")


def _array(v: Any) -> np.ndarray:
    data = getattr(v, "data", v)          # an nn.Parameter holds its value in .data
    if data is None:
        raise GraphError(f"parameter {getattr(v, 'name', v)!r} has no value; set it (param.data = ...) "
                         "or pass a dict of arrays")
    if isinstance(data, tvm.runtime.Tensor):
        return data.numpy()
    return np.asarray(data)


def _max_min_of_bound(func) -> str | None:
    """``"maximum"`` / ``"minimum"`` if the PrimFunc is ``out = max/min(tensor, 0-d bound)`` element-wise."""
    if not isinstance(func, tirx.PrimFunc) or len(func.params) != 3:
        return None
    data, bound, _ = func.params               # buffers (a TensorLoad's source is the parameter itself)
    if len(getattr(bound.ty, "shape", (0,))) != 0:
        return None
    stores = []
    tvm_ffi.structural_map(func.body, (tirx.BufferStore, lambda s: stores.append(s) or s), order="post")
    if len(stores) != 1:
        return None
    v = stores[0].value
    kind = "maximum" if isinstance(v, tirx.Max) else "minimum" if isinstance(v, tirx.Min) else None
    if kind and isinstance(v.a, tvm.ir.TensorLoad) and isinstance(v.b, tvm.ir.TensorLoad) and \
            v.a.source.same_as(data) and v.b.source.same_as(bound):
        return kind
    return None


@relax.expr_functor.mutator
class _BoundCalls(relax.PyExprMutator):
    """``call_tir`` of a TE max/min with a 0-d bound (TVM's ONNX ``Clip``) becomes ``relax.maximum/minimum``."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" and \
                isinstance(call.args[0], relax.GlobalVar) and isinstance(call.args[1], relax.Tuple) and \
                len(call.args[1].fields) == 2:
            kind = _max_min_of_bound(self.mod[call.args[0]])
            if kind:
                return getattr(relax.op, kind)(*call.args[1].fields)
        return call


def _refuse_te_calls(mod: tvm.IRModule, func: relax.Function) -> None:
    """The function is taken out of its module from here on, so a ``call_tir`` of one of the module's
    PrimFuncs (a TE function an importer wrote, such as TVM's ONNX ``Flip`` or ``Tile``) has nothing to call."""
    names = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.call_tir" and \
                isinstance(e.args[0], relax.GlobalVar) and e.args[0].name_hint not in names:
            names.append(e.args[0].name_hint)
    relax.analysis.post_order_visit(func, visit)
    if names:
        raise GraphError(f"the network calls TE functions of its module ({', '.join(names)}: TVM's importer wrote "
                         "these operators as TIR, not as Relax operators); the VTA flow reads Relax operators "
                         "only: cut the model before them (graph.from_onnx(..., outputs=[...])) and run the rest "
                         "on the CPU")


def bind_params(mod: tvm.IRModule, params: Any) -> relax.Function:
    """``main`` with its weight parameters replaced by constants; only the network inputs remain.

    ``params``: a dict (keys: the function's parameter names, or the names a ``relax.frontend.nn``
    export gives, such as ``conv1.weight``) or the ``[(name, Parameter or array), ...]`` list of
    ``export_tvm``, in the function's parameter order.
    """
    name = entry_function(mod)
    func = mod[name]
    if any(isinstance(f, tirx.PrimFunc) for f in mod.functions.values()):
        func = _BoundCalls(mod).visit_expr(func)
        _refuse_te_calls(mod, func)
    n_in = _num_inputs(func)
    weights = func.params[n_in:]
    if params is None:
        params = {}
    if isinstance(params, dict):
        by_name = dict(params)
        ordered = []
        for p in weights:
            key = p.name if p.name in by_name else p.name.replace("_", ".")
            if key not in by_name:
                alt = [k for k in by_name if k.replace(".", "_") == p.name]
                if not alt:
                    raise GraphError(f"no value for the weight parameter {p.name!r} of {name}")
                key = alt[0]
            ordered.append(by_name[key])
    else:
        ordered = [v for _, v in params]
        if len(ordered) != len(weights):
            raise GraphError(f"{name} has {len(weights)} weight parameters but {len(ordered)} values were given")
    binding = {}
    for p, v in zip(weights, ordered):
        arr = _array(v)
        want = tuple(int(s) for s in p.ty.shape)
        if arr.shape != want:
            raise GraphError(f"weight {p.name!r}: value of shape {arr.shape}, the function expects {want}")
        binding[p] = np.asarray(arr.astype(str(p.ty.dtype)), order="C")    # 0-d stays 0-d
    # BindParams finds the function by its global symbol (an nn export's is "forward")
    m = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    if binding:
        m = relax.transform.BindParams("main", binding)(m)
    return m["main"]


def normalize(mod: tvm.IRModule, params: Any = None) -> relax.Function:
    """Bind the weights: a function of the network inputs only (constants are folded later, in numpy:
    Relax's FoldConstant compiles every folded operator and takes minutes on a ResNet)."""
    return bind_params(mod, params)
