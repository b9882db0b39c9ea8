"""The float network as the quantizer reads it: weights bound, canonical layers, batch norm folded; and the
calibration batches, checked against the network's inputs. Below ``quantize`` and ``sensitivity``, which both
read networks this way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import tvm

from .canon import LAYERS, canonicalize
from .frontend import normalize
from .ir import Graph, Node
from .qdq import carry, strip_qdq


class QuantizationError(ValueError):
    """A network or calibration set the quantizer refuses (the message names the layer or input)."""


def fuse_add_relu(g: Graph) -> None:
    users = g.users()
    for n in list(g.nodes):
        if n.op == "relax.add" and len(n.inputs) == 2 and n.attrs.get("act") is None:
            us = users[id(n)]
            if len(us) == 1 and us[0] is not None and us[0].op == "relax.nn.relu":
                relu = us[0]
                n.attrs["act"] = ("clip", 0.0, None)
                carry(relu, n)
                g.replace_uses(relu, n)
                g.nodes.remove(relu)
                users = g.users()


def prepare(mod: tvm.IRModule, params: Any = None) -> Graph:
    """The float network as a graph of canonical layers (weights bound, batch norm folded); a pre-quantized
    model's QDQ pairs are removed, their exponents noted on the tensors (``graph.qdq``)."""
    g = Graph.from_relax(normalize(mod, params))
    strip_qdq(g)
    canonicalize(g)
    fuse_add_relu(g)
    return g


def batches(g: Graph, calibration: Iterable) -> list[list[np.ndarray]]:
    out = []
    for k, item in enumerate(calibration):
        feeds = list(item) if isinstance(item, (tuple, list)) else [item]
        if len(feeds) != len(g.inputs):
            raise QuantizationError(f"calibration item {k} has {len(feeds)} arrays; the network has "
                                    f"{len(g.inputs)} inputs ({', '.join(n.name for n in g.inputs)})")
        arrs = []
        for n, x in zip(g.inputs, feeds):
            x = x.numpy() if isinstance(x, tvm.runtime.Tensor) else np.asarray(x)
            if tuple(x.shape) != tuple(n.shape):
                raise QuantizationError(f"calibration item {k}: input {n.name!r} has shape {tuple(x.shape)}, the "
                                        f"network expects {tuple(n.shape)}")
            if not np.issubdtype(x.dtype, np.number):
                raise QuantizationError(f"calibration item {k}: input {n.name!r} has dtype {x.dtype}")
            x = x.astype(n.dtype)
            bad = ~np.isfinite(x) if np.issubdtype(x.dtype, np.inexact) else np.zeros(x.shape, bool)
            if bad.any():
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                raise QuantizationError(
                    f"calibration item {k}: input {n.name!r} has {int(np.isnan(x).sum())} NaN and "
                    f"{int(np.isinf(x).sum())} infinite values (the first at index {first}: {x[first]}); "
                    "calibrate on finite data")
            arrs.append(x)
        out.append(arrs)
    if not out:
        raise QuantizationError("the calibration set is empty: give at least one input batch, or global_scale=")
    return out


def layer_index(g: Graph) -> list[Node]:
    return [n for n in g.nodes if n.op in LAYERS]
