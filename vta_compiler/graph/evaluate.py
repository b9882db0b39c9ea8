"""Run a float graph on numpy (for calibration): every node's output, fast.

Convolutions and dense layers run as BLAS matrix products (im2col; transposed convolutions scatter
one matrix product per kernel tap), the common element-wise and
pooling operators in numpy. Any other operator runs as itself: a one-operator Relax function
compiled for the CPU (cached), so an operator this file does not know still gets its real values.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .ir import TUPLE_ITEM, Const, Graph, Node

_compiled: dict[str, relax.VirtualMachine] = {}


def conv2d_nchw(x: np.ndarray, w: np.ndarray, strides, padding, dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """Float convolution, NCHW x OIHW (padding: top, left, bottom, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.empty((n, o, oh, ow), np.float32)
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        cols = np.empty((n, oh, ow, cg, kh, kw), np.float32)
        for i in range(kh):
            for j in range(kw):
                cols[..., i, j] = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                     j * dw:j * dw + sw * (ow - 1) + 1:sw].transpose(0, 2, 3, 1)
        wg = w[g * og:(g + 1) * og].reshape(og, -1).astype(np.float32)
        y = cols.reshape(n * oh * ow, -1) @ wg.T
        out[:, g * og:(g + 1) * og] = y.reshape(n, oh, ow, og).transpose(0, 3, 1, 2)
    return out


def conv2d_transpose_nchw(x: np.ndarray, w: np.ndarray, strides, padding, output_padding=(0, 0), dilation=(1, 1),
                          groups: int = 1) -> np.ndarray:
    """Float transposed convolution, NCHW x IOHW ``(CI, CO/groups, KH, KW)``, by scattering.

    Input pixel ``(y, x)`` adds ``x * w[.., ky, kx]`` to output pixel ``(y*sh - pt + ky*dh, x*sw - pl + kx*dw)``;
    ``output_padding`` adds rows and columns at the bottom and right (padding: top, left, bottom, right).
    """
    n, c, h, wd = x.shape
    ci, cog, kh, kw = w.shape
    (sh, sw), (dh, dw), (oph, opw) = strides, dilation, output_padding
    pt, pl, pb, pr = padding
    oh = (h - 1) * sh - pt - pb + dh * (kh - 1) + 1 + oph
    ow = (wd - 1) * sw - pl - pr + dw * (kw - 1) + 1 + opw
    full_h = max((h - 1) * sh + dh * (kh - 1) + 1, pt + oh)
    full_w = max((wd - 1) * sw + dw * (kw - 1) + 1, pl + ow)
    cig = c // groups
    full = np.zeros((n, groups * cog, full_h, full_w), np.float32)
    for g in range(groups):
        xs = x[:, g * cig:(g + 1) * cig].transpose(0, 2, 3, 1).reshape(n * h * wd, cig).astype(np.float32)
        for i in range(kh):
            for j in range(kw):
                y = (xs @ w[g * cig:(g + 1) * cig, :, i, j].astype(np.float32)).reshape(n, h, wd, cog)
                full[:, g * cog:(g + 1) * cog, i * dh:i * dh + sh * (h - 1) + 1:sh,
                     j * dw:j * dw + sw * (wd - 1) + 1:sw] += y.transpose(0, 3, 1, 2)
    return full[:, :, pt:pt + oh, pl:pl + ow]


def _act(y: np.ndarray, act) -> np.ndarray:
    if act is None:
        return y
    _, lo, hi = act
    return np.clip(y, lo, hi) if hi is not None else np.maximum(y, lo)


def _pool(x: np.ndarray, a, kind: str) -> np.ndarray:
    kh, kw = (int(v) for v in a.pool_size)
    sh, sw = (int(v) for v in a.strides)
    pad = [int(v) for v in a.padding]
    pt, pl, pb, pr = pad if len(pad) == 4 else pad * 2
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    n, c, h, w = x.shape
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    if kind == "max":
        return win.max(axis=(-2, -1))
    if bool(a.count_include_pad) or not any(pad):
        return win.mean(axis=(-2, -1))
    ones = np.pad(np.ones((1, 1, h, w)), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    cnt = np.lib.stride_tricks.sliding_window_view(ones, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    return win.sum(axis=(-2, -1)) / cnt.sum(axis=(-2, -1))


def _axes(a, ndim: int):
    if a.axis is None:
        return None
    return tuple(int(v) % ndim for v in a.axis)


def _numpy_op(node: Node, vals: list[np.ndarray]) -> np.ndarray | None:
    op, a = node.op, (node.call.attrs if node.call is not None else None)
    binary = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
              "relax.divide": np.divide, "relax.maximum": np.maximum, "relax.minimum": np.minimum}
    if op in binary and len(vals) == 2:
        return binary[op](vals[0], vals[1])
    if op == "relax.nn.relu":
        return np.maximum(vals[0], 0)
    if op == "relax.clip":
        lo, hi = (float(v.value) for v in node.args[1:3])
        return np.clip(vals[0], lo, hi)
    if op == "relax.nn.max_pool2d" and str(a.layout) == "NCHW" and not bool(a.ceil_mode) and \
            all(int(d) == 1 for d in a.dilation):
        return _pool(vals[0], a, "max")
    if op == "relax.nn.avg_pool2d" and str(a.layout) == "NCHW" and not bool(a.ceil_mode) and \
            all(int(d) == 1 for d in a.dilation):
        return _pool(vals[0], a, "avg")
    if op in ("relax.mean", "relax.sum"):
        f = np.mean if op == "relax.mean" else np.sum
        return f(vals[0], axis=_axes(a, vals[0].ndim), keepdims=bool(a.keepdims))
    if op in ("relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims"):
        return vals[0].reshape(node.shape)
    if op == "relax.permute_dims":
        axes = None if a.axes is None else [int(v) for v in a.axes]
        return np.transpose(vals[0], axes)
    if op == "relax.concat":
        return np.concatenate(vals, axis=int(a.axis))
    if op == "relax.split":
        ind = a.indices_or_sections
        where = int(ind) if isinstance(ind, (int, tvm.tirx.IntImm)) else [int(v) for v in ind]
        return np.split(vals[0], where, axis=int(a.axis))
    if op == "relax.nn.softmax":
        z = vals[0] - vals[0].max(axis=int(a.axis), keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=int(a.axis), keepdims=True)
    return None


def _relax_op(node: Node, vals: list[np.ndarray]) -> np.ndarray:
    """Run one operator as a compiled Relax function (any operator Relax can legalize for the CPU)."""
    params = [relax.Var(f"a{i}", relax.TensorType(v.shape, str(v.dtype))) for i, v in enumerate(vals)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(Graph.emit_call(bb, node, params, "out"))
        bb.emit_func_output(out)
    mod = bb.get()
    key = mod.script()
    vm = _compiled.get(key)
    if vm is None:
        vm = _compiled[key] = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(np.asarray(v, order="C")) for v in vals])
    if node.is_tuple:
        return [r.numpy() for r in res]
    return res.numpy()   # 0-d stays 0-d


def evaluate_node(n: Node, args: list[np.ndarray]) -> np.ndarray:
    """One node's value from its tensor arguments' values (a tuple node's: a list, one array per field)."""
    if n.op == TUPLE_ITEM:
        return args[0][n.attrs["index"]]
    if n.op == "conv2d":
        at = n.attrs
        y = conv2d_nchw(args[0], at["weight"], at["strides"], at["padding"], at["dilation"], at["groups"])
        y = _act(y + at["bias"].reshape(1, -1, 1, 1).astype(np.float32), at["act"])
    elif n.op == "conv2d_transpose":
        at = n.attrs
        y = conv2d_transpose_nchw(args[0], at["weight"], at["strides"], at["padding"], at["output_padding"],
                                  at["dilation"], at["groups"])
        y = _act(y + at["bias"].reshape(1, -1, 1, 1).astype(np.float32), at["act"])
    elif n.op == "dense":
        at = n.attrs
        y = _act(args[0] @ at["weight"].T.astype(np.float32) + at["bias"].astype(np.float32), at["act"])
    else:
        y = _numpy_op(n, args)
        if y is None:
            y = _relax_op(n, args)
        elif n.attrs.get("act") is not None:
            y = _act(y, n.attrs["act"])
    if n.is_tuple:
        return [np.asarray(v).astype(d, copy=False).reshape(s) for v, (s, d) in zip(y, n.fields)]
    return np.asarray(y).astype(n.dtype, copy=False).reshape(n.shape)


def evaluate(g: Graph, feeds: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every node's value (keyed by ``id(node)``) for the given inputs, in float32 (int ops keep their dtype)."""
    vals: dict[int, np.ndarray] = {}
    for n, x in zip(g.inputs, feeds):
        vals[id(n)] = np.asarray(x, dtype=n.dtype)
    for n in g.nodes:
        if n.op == "input":
            continue
        vals[id(n)] = evaluate_node(n, [vals[id(a)] if isinstance(a, Node) else a.value for a in n.tensor_args])
    return vals


__all__ = ["Const", "conv2d_nchw", "conv2d_transpose_nchw", "evaluate", "evaluate_node"]
