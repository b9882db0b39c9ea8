"""ONNX models as other tools export them, made ready for TVM's importer.

``prepare_onnx`` takes a ``ModelProto``, a path or the file's bytes and returns a model that TVM 0.27's
ONNX importer converts:

* ``outputs=[...]`` keeps only the part of the graph that computes these tensors (any node's output
  may be named): how a label or post-processing output (skl2onnx's ``ZipMap`` and
  ``ArrayFeatureExtractor``), or an operator the importer does not convert (an ``LSTM``), is left to
  the CPU outside the compiled network;
* ``constants={name: value}`` fixes inputs that select a mode (silero-vad's sample rate), so the
  branch they choose is folded away;
* ``shape_dict`` fixes the inputs' dynamic dimensions (VTA compiles static shapes); an input left
  dynamic is refused with the ``shape_dict`` to pass;
* onnxscript's optimizer and onnxsim then infer shapes and fold constants, which turns the shape arithmetic
  exporters write (Paddle2ONNX's ``Shape -> Cast -> Slice -> Cast -> Concat -> Reshape``, PyTorch's
  ``Shape -> Gather -> Unsqueeze -> Concat``) into constants, and folds ``If`` on a constant condition;
* ``Max`` / ``Min`` operands that are constant -inf / +inf (no int8 scale holds them; jax2tf's softmax
  writes ``max(-inf, reduce_max(x))``) are dropped: ``max(-inf, y)`` is ``y``.

An operator the importer has no converter for, or whose converter fails, is refused with the ONNX
node's name, type and input shapes, and what to do (TVM's own errors come from C++ and name no node).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .ir import GraphError

#: operators TVM's importer handles itself rather than through its converter map
_DIRECT = {"Constant"}
#: ONNX domains TVM's converters implement (its map is keyed by op_type alone)
_DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(model) -> Any:
    """A ``ModelProto`` from a ``ModelProto``, a path (str or ``os.PathLike``) or the file's bytes."""
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(model))
        except Exception as exc:
            raise GraphError(f"from_onnx: the {len(model)} bytes given are not an ONNX model ({exc})") from None
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise GraphError(f"from_onnx: no ONNX file at {os.fspath(model)!r}")
        return onnx.load(os.fspath(model))
    raise GraphError(f"from_onnx expects an onnx.ModelProto, a path or bytes, not {type(model).__name__}")


def _dtype_name(elem_type: int) -> str:
    import onnx
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def graph_inputs(model) -> list:
    """The graph's real inputs (old exporters list the initializers among the inputs too)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dims(value_info) -> list[int | str] | None:
    """The declared shape: ints, and a name (or ``"?"``) for each dynamic dimension; None if unranked."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    named = [d.dim_param if d.dim_param not in ("", "?") else f"dim {k}" for k, d in enumerate(t.shape.dim)]
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else name
            for d, name in zip(t.shape.dim, named)]


def _shape_text(dims) -> str:
    if dims is None:
        return "unranked"
    return "[" + ", ".join(str(d) if isinstance(d, int) else f"<{d}>" for d in dims) + "]"


def _extract(model, outputs: Sequence[str], original):
    """The sub-model that computes ``outputs`` from the graph inputs (onnx's own extractor)."""
    import onnx
    names = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    missing = [o for o in outputs if o not in names]
    if missing:
        before = {o for n in original.graph.node for o in n.output}
        folded = [o for o in missing if o in before]
        if folded:
            raise GraphError(f"from_onnx(outputs=...): {', '.join(map(repr, folded))} is computed from constants "
                             "only and was folded away; name a tensor computed from the inputs")
        shown = ", ".join(repr(o.name) for o in model.graph.output)
        raise GraphError(f"from_onnx(outputs=...): {', '.join(map(repr, missing))} is not a tensor of the model "
                         f"(its outputs are {shown}; any node's output may be named)")
    inferred = onnx.shape_inference.infer_shapes(model)
    inputs = [i.name for i in graph_inputs(model)]
    sub = onnx.utils.Extractor(inferred).extract_model(inputs, list(outputs))
    # keep the inputs the kept part reads, in the model's order (the extractor keeps all of them)
    used = {i for n in sub.graph.node for i in n.input} | set(outputs)
    for i in [i for i in sub.graph.input if i.name not in used]:
        sub.graph.input.remove(i)
    sub.producer_name, sub.producer_version = model.producer_name, model.producer_version
    return sub


def _bind_constants(model, constants: Mapping[str, Any]) -> None:
    from onnx import numpy_helper
    by_name = {i.name: i for i in graph_inputs(model)}
    for name, value in constants.items():
        if name not in by_name:
            raise GraphError(f"from_onnx(constants=...): {name!r} is not an input of the model "
                             f"(inputs: {', '.join(sorted(by_name))})")
        arr = np.asarray(value, dtype=_dtype_name(by_name[name].type.tensor_type.elem_type))
        model.graph.input.remove(by_name[name])
        model.graph.initializer.append(numpy_helper.from_array(arr, name))


def _fix_shapes(model, shape_dict: Mapping[str, Sequence[int]]) -> None:
    """Write ``shape_dict`` into the inputs' declared shapes; refuse what stays dynamic, with the fix."""
    inputs = graph_inputs(model)
    by_name = {i.name: i for i in inputs}
    for name, shape in shape_dict.items():
        if name not in by_name:
            raise GraphError(f"from_onnx(shape_dict=...): {name!r} is not an input of the model "
                             f"(inputs: {', '.join(i.name for i in inputs)})")
        declared = _dims(by_name[name])
        if declared is not None and len(declared) != len(shape):
            raise GraphError(f"from_onnx(shape_dict=...): input {name!r} has rank {len(declared)} "
                             f"{_shape_text(declared)}, but shape_dict gives {list(shape)}")
        for k, v in enumerate(shape):
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise GraphError(f"from_onnx(shape_dict=...): input {name!r} dimension {k} is {v!r}; "
                                 "give positive integers")
            if declared is not None and isinstance(declared[k], int) and declared[k] != v:
                raise GraphError(f"from_onnx(shape_dict=...): input {name!r} dimension {k} is {declared[k]} "
                                 f"in the model, shape_dict gives {v}")
        dims = by_name[name].type.tensor_type.shape
        dims.Clear()
        for v in shape:
            dims.dim.add().dim_value = int(v)
    dynamic = [(i.name, _dims(i), _dtype_name(i.type.tensor_type.elem_type)) for i in inputs
               if _dims(i) is None or any(not isinstance(d, int) for d in _dims(i))]
    if dynamic:
        lines = [f"  {n}: {_shape_text(d)} ({t})" for n, d, t in dynamic]
        example = ", ".join(f'"{n}": ' + ("[...]" if d is None else
                                          "[" + ", ".join(str(x) if isinstance(x, int) else f"<{x}>" for x in d) + "]")
                            for n, d, _ in dynamic)
        raise GraphError("the model has inputs with dynamic dimensions; VTA compiles static shapes, so give "
                         "their sizes with shape_dict:\n" + "\n".join(lines) +
                         f"\n  graph.from_onnx(model, shape_dict={{{example}}})  (each <name> replaced by its size)")


def _optimize(model):
    """Shape inference and constant folding: onnxscript's optimizer (it also folds an ``If`` whose condition
    is constant), then onnxsim (it folds what depends on inferred shapes through several operators, such as
    the padding silero-vad computes from its input's length; onnxscript alone leaves it). A model either
    cannot read is passed on as it is, with a warning (TVM's importer may still take it)."""
    try:
        import onnxsim
        from onnxscript import optimizer
    except ImportError as exc:     # pragma: no cover - dependencies
        raise ImportError("graph.from_onnx needs onnxscript and onnxsim (they fold the shape arithmetic "
                          "exporters write): pip install onnxscript onnxsim") from exc
    import onnx
    # shape inference between the two: onnxsim refuses value_info entries without a shape
    for name, step in (("onnxscript's optimizer", optimizer.optimize),
                       ("onnx's shape inference", onnx.shape_inference.infer_shapes),
                       ("onnxsim", lambda m: onnxsim.simplify(m, check_n=0)[0])):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                model = step(model)
        except Exception as exc:
            warnings.warn(f"from_onnx: {name} failed ({type(exc).__name__}: {str(exc)[:200]}); "
                          "importing without it", stacklevel=3)
    return model


def _tensor_names(model) -> set[str]:
    return {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}


def _check_post_processing(model) -> None:
    """Label and post-processing outputs (skl2onnx's ZipMap, ArrayFeatureExtractor; any ``ai.onnx.ml``
    operator), and outputs that are no tensors: refused before anything else reads the model."""
    ml = [n for n in model.graph.node if n.domain not in _DEFAULT_DOMAINS]
    non_tensor = [o.name for o in model.graph.output if not o.type.HasField("tensor_type")]
    if not ml and not non_tensor:
        return
    shapes = _value_shapes(model)
    lines = "\n".join(f"  {describe_node(n, shapes)}" for n in ml[:12])
    what = f" (and outputs that are no tensors: {', '.join(map(repr, non_tensor))})" if non_tensor else ""
    raise GraphError(f"the model's label or post-processing operators{what} are not converted by TVM's ONNX "
                     f"importer:\n{lines}\nThey run on the CPU outside the compiled network: "
                     f"{_cut_advice(model, ml)}.")


def _value_shapes(model) -> dict[str, str]:
    """Tensor name -> a printable ``dtype[shape]`` from ONNX shape inference."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:       # shapes are for messages only
        inferred = model
    out = {}
    for t in inferred.graph.initializer:
        out[t.name] = f"{_dtype_name(t.data_type)}{list(t.dims)} (constant)"
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        if v.type.HasField("tensor_type") and v.name not in out:
            out[v.name] = f"{_dtype_name(v.type.tensor_type.elem_type)}{_shape_text(_dims(v))}"
        elif v.name not in out:
            out[v.name] = v.type.WhichOneof("value")
    return out


def describe_node(node, shapes: Mapping[str, str]) -> str:
    """``'name' (op_type, inputs: x float32[1, 3, 48, 192], ...)`` for error messages."""
    domain = f" of domain {node.domain}" if node.domain not in _DEFAULT_DOMAINS else ""
    ins = ", ".join(f"{i} {shapes.get(i, '?')}" for i in node.input if i) or "none"
    return f"{node.name or '(unnamed)'!r} ({node.op_type}{domain}; inputs: {ins})"


def _producers(model) -> dict[str, Any]:
    return {o: n for n in model.graph.node for o in n.output}


def _cut_advice(model, nodes: Sequence) -> str:
    """The ``outputs=[...]`` that keeps everything before ``nodes`` (their computed inputs, and the model's
    outputs that do not depend on them)."""
    inits = {t.name for t in model.graph.initializer}
    bad_outputs = {o for n in nodes for o in n.output}
    tainted = set(bad_outputs)
    for n in model.graph.node:                 # topological order
        if any(i in tainted for i in n.input):
            tainted.update(n.output)
    keep = [o.name for o in model.graph.output if o.name not in tainted]
    for n in nodes:
        for i in n.input:
            if i and i not in inits and i not in tainted and i not in keep and \
                    i not in {g.name for g in graph_inputs(model)}:
                keep.append(i)
    if not keep:
        return "the model computes nothing before it that VTA could run"
    return (f"keep the part before {'it' if len(nodes) == 1 else 'them'} with graph.from_onnx(model, "
            f"outputs={keep!r}) and run the rest on the CPU (for example in ONNX Runtime)")


def _check_convertible(model) -> None:
    """Refuse the nodes TVM's importer has no converter for, naming each one, before TVM says less."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map
    known = set(_get_convert_map()) | _DIRECT
    bad = [n for n in model.graph.node if n.op_type not in known or n.domain not in _DEFAULT_DOMAINS]
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    if ifs:
        inputs = {i.name for i in graph_inputs(model)}
        prod = _producers(model)

        def sources(name: str) -> set[str]:
            """The graph inputs a tensor depends on."""
            found, seen, stack = set(), set(), [name]
            while stack:
                t = stack.pop()
                if t in seen:
                    continue
                seen.add(t)
                if t in inputs:
                    found.add(t)
                elif t in prod:
                    stack.extend(i for i in prod[t].input if i)
            return found
        n = ifs[0]
        src = sorted(sources(n.input[0]))
        fix = f"fix the inputs it depends on with constants={{{', '.join(repr(s) + ': ...' for s in src)}}}" \
            if src else "its condition could not be folded"
        raise GraphError(f"ONNX node {n.name!r} (If) branches on a value computed at run time (from "
                         f"{', '.join(map(repr, src)) or 'no input'}); the VTA flow compiles graphs without control "
                         f"flow: {fix}")
    if bad:
        shapes = _value_shapes(model)
        lines = "\n".join(f"  {describe_node(n, shapes)}" for n in bad[:12])
        more = f"\n  ... and {len(bad) - 12} more" if len(bad) > 12 else ""
        kinds = sorted({n.op_type for n in bad})
        raise GraphError(f"TVM's ONNX importer cannot convert {', '.join(kinds)}: {len(bad)} node(s)\n{lines}{more}\n"
                         f"To compile the rest, {_cut_advice(model, bad)}.")


def _tvm_import(model, opset, shape_dict, dtype_dict):
    from tvm.relax.frontend.onnx import from_onnx as _from_onnx
    with contextlib.redirect_stdout(io.StringIO()):     # TVM prints the failing op's Relax inputs
        return _from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict, opset=opset,
                          keep_params_in_input=True)


def _failing_node(model, opset, shape_dict, dtype_dict):
    """The first node whose conversion fails: TVM converts nodes in order, so a prefix of the graph up to
    that node fails and a shorter one imports; bisect on the prefix length."""
    import onnx
    from onnx import helper
    nodes = list(model.graph.node)

    def fails(k: int) -> bool:
        g = onnx.GraphProto()
        g.CopyFrom(model.graph)
        del g.node[:]
        g.node.extend(nodes[:k])
        del g.output[:]
        g.output.extend(helper.make_empty_tensor_value_info(o) for o in nodes[k - 1].output if o)
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.CopyFrom(g)
        try:
            with warnings.catch_warnings():     # the prefix's outputs have no declared types
                warnings.simplefilter("ignore")
                _tvm_import(m, opset, shape_dict, dtype_dict)
            return False
        except Exception:
            return True
    lo, hi = 1, len(nodes)          # fails(hi) holds: the whole graph failed
    if not fails(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    return nodes[lo - 1]


def simplify_onnx(model, shape_dict: Mapping[str, Sequence[int]] | None = None,
                  constants: Mapping[str, Any] | None = None):
    """The model with ``constants`` bound, ``shape_dict`` fixed, shapes inferred and constants folded (a
    ``ModelProto``, whatever operators it holds: also what to hand ONNX Runtime for the part left out)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(load_model(model))
    if constants:
        _bind_constants(m, constants)
    _fix_shapes(m, shape_dict or {})
    m = _optimize(m)
    _drop_identity_operands(m)
    return m


#: elementwise operators and the constant that leaves every other operand as it is (their identity element)
_IDENTITY_OPERANDS = {"Max": -np.inf, "Min": np.inf}


def _drop_identity_operands(model) -> None:
    """Remove constant operands of ``Max`` / ``Min`` that hold only their identity (-inf / +inf) and do not
    widen the result by broadcasting: ``max(-inf, y)`` is ``y``. Exporters write it (jax2tf's stable softmax
    subtracts ``max(-inf, reduce_max(x))``), and no int8 scale can represent an infinity. A node left with one
    operand becomes an ``Identity``."""
    import onnx
    from onnx import numpy_helper
    consts = {t.name: t for t in model.graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: _dims(v) for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    shapes.update({name: list(t.dims) for name, t in consts.items()})
    dropped: set[str] = set()
    for node in model.graph.node:
        ident = _IDENTITY_OPERANDS.get(node.op_type)
        if ident is None or node.domain not in _DEFAULT_DOMAINS or len(node.input) < 2:
            continue
        values = {i: numpy_helper.to_array(consts[i]) for i in node.input if i in consts}
        drop = [i for i, v in values.items() if v.dtype.kind == "f" and v.size and np.all(v == ident)]
        keep = [i for i in node.input if i not in drop]
        if not drop or not keep:
            continue
        kept_shapes = [shapes.get(i) for i in keep]
        if any(s is None or any(not isinstance(d, int) for d in s) for s in kept_shapes):
            continue
        try:
            full = np.broadcast_shapes(*[tuple(s) for s in kept_shapes], *[values[i].shape for i in drop])
        except ValueError:
            continue
        if full != np.broadcast_shapes(*[tuple(s) for s in kept_shapes]):
            continue           # the constant widens the result: keep it
        del node.input[:]
        node.input.extend(keep)
        if len(keep) == 1:
            node.op_type = "Identity"
        dropped.update(drop)
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output} | \
        {i.name for i in model.graph.input}
    for t in [t for t in model.graph.initializer if t.name in dropped and t.name not in used]:
        model.graph.initializer.remove(t)


def prepare_onnx(model, shape_dict: Mapping[str, Sequence[int]] | None = None,
                 outputs: Sequence[str] | None = None, constants: Mapping[str, Any] | None = None):
    """The model ready for TVM's importer (see the module's docstring), and its inputs' shapes and dtypes."""
    import onnx
    src = load_model(model)
    m = onnx.ModelProto()
    m.CopyFrom(src)
    outputs = [outputs] if isinstance(outputs, str) else None if outputs is None else list(outputs)
    early = outputs is not None and all(o in _tensor_names(m) for o in outputs)
    if early:                    # cut first: the optimizers cannot read some label operators (ZipMap's maps)
        m = _extract(m, outputs, src)
    elif outputs is None:
        _check_post_processing(m)
    m = simplify_onnx(m, shape_dict, constants)
    if outputs is not None and not early:     # names inside an inlined If branch exist only after folding
        m = _extract(m, outputs, src)
    _check_convertible(m)
    shapes = {i.name: [int(d) for d in _dims(i)] for i in graph_inputs(m)}
    dtypes = {i.name: _dtype_name(i.type.tensor_type.elem_type) for i in graph_inputs(m)}
    return m, shapes, dtypes


_PAD_FUNCS = ("pad", "mirror_pad", "replicate_pad", "circular_pad")


def _pad_specs(model) -> list[tuple[list[int], str, float] | None]:
    """Per ``Pad`` node in graph order: (pad widths as ``relax.nn.pad`` takes them, mode, value), or None
    where the pads are not constant or the mode has no Relax form."""
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    ranks = {}
    for v in list(model.graph.value_info) + list(model.graph.input):
        if v.type.tensor_type.HasField("shape"):
            ranks[v.name] = len(v.type.tensor_type.shape.dim)
    specs = []
    for n in model.graph.node:
        if n.op_type != "Pad":
            continue
        attrs = {a.name: a for a in n.attribute}
        mode = attrs["mode"].s.decode() if "mode" in attrs else "constant"
        if "pads" in attrs:                                      # opset < 11
            pads, value, axes = list(attrs["pads"].ints), attrs["value"].f if "value" in attrs else 0.0, None
        else:
            ins = list(n.input) + [""] * (4 - len(n.input))
            if ins[1] not in inits or (ins[2] and ins[2] not in inits) or (ins[3] and ins[3] not in inits):
                specs.append(None)
                continue
            pads = [int(v) for v in inits[ins[1]]]
            value = float(inits[ins[2]].ravel()[0]) if ins[2] else 0.0
            axes = [int(v) for v in inits[ins[3]]] if ins[3] else None
        rank = ranks.get(n.input[0], len(pads) // 2 if axes is None else None)
        if rank is None or mode not in ("constant", "reflect"):   # relax.nn.pad's "edge" is not ONNX's edge
            specs.append(None)
            continue
        axes = list(range(rank)) if axes is None else [a % rank for a in axes]
        before, after = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            before[a], after[a] = pads[k], pads[k + len(axes)]
        specs.append(([v for pair in zip(before, after) for v in pair], mode, value))
    return specs


def _relax_pads(mod, model):
    """TVM's Pad converter writes a TE function (``call_tir`` of ``pad`` / ``mirror_pad``), which the VTA flow
    cannot carry (its passes rebuild ``main`` alone); each becomes ``relax.nn.pad``, from the ONNX node's
    constant pads (TVM converts the nodes in order, so the k-th pad call is the k-th Pad node)."""
    import tvm
    from tvm import relax
    specs = _pad_specs(model)
    if not specs:
        return mod

    @relax.expr_functor.mutator
    class PadCalls(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            self.k = 0

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" and \
                    isinstance(call.args[0], relax.GlobalVar) and \
                    call.args[0].name_hint.rstrip("0123456789_") in _PAD_FUNCS:
                spec = specs[self.k] if self.k < len(specs) else None
                self.k += 1
                if spec is not None and len(call.args[1].fields) == 1:
                    width, mode, value = spec
                    return relax.op.nn.pad(call.args[1].fields[0], width, pad_mode=mode, pad_value=value)
            return call
    mutator = PadCalls()
    func = mutator.visit_expr(mod["main"])
    if mutator.k != len(specs):          # not the one-to-one order assumed: leave the module as TVM wrote it
        return mod
    out = mod.__class__({"main": func}, global_infos=mod.global_infos)
    for gv, f in mod.functions.items():
        if gv.name_hint != "main":
            out[gv] = f
    return relax.transform.DeadCodeElimination(["main"])(out)


def import_onnx(model, shape_dict=None, opset: int | None = None, outputs=None, constants=None):
    """TVM's importer on the prepared model; a converter failure names the ONNX node."""
    m, shapes, dtypes = prepare_onnx(model, shape_dict, outputs, constants)
    try:
        return _relax_pads(_tvm_import(m, opset, shapes, dtypes), m)
    except Exception as exc:
        node = _failing_node(m, opset, shapes, dtypes)
        if node is None:
            raise
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise GraphError(f"TVM's ONNX importer failed on node {describe_node(node, _value_shapes(m))}: "
                         f"{type(exc).__name__}: {first}\nTo compile the rest, {_cut_advice(m, [node])}; "
                         "or fix the input shapes with shape_dict if the node depends on them.") from exc
