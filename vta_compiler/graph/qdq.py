"""Pre-quantized (QDQ) models: ``QuantizeLinear -> DequantizeLinear`` pairs carry the model's own scales.

An exporter that quantized the model itself (onnxruntime's static quantization in QDQ format, a PyTorch or
Brevitas export) writes each quantized tensor ``t`` as ``DequantizeLinear(QuantizeLinear(t, s, z), s, z)``
and each weight as ``DequantizeLinear(w_int8, s_w, z_w)``. ``strip_qdq`` removes the activation pairs from
the float graph and notes each tensor's exponent (``s = 2**-e``) on the node that computes it
(``QDQ_EXP``); the weights' ``DequantizeLinear`` are constants and fold to float weights with the rest
(``canon.fold_constants``), which the quantizer takes back to the same int8 values exactly when their scales
are powers of two. ``graph.quantize`` then uses these exponents instead of calibrated ones.

By default VTA requantizes by shifts, so only power-of-two scales are exact: a pair with another scale is
refused naming the tensor and its scale, unless ``quantize(..., qdq_scales="nearest")`` rounds it to the nearest
power of two (in log2). With ``quantize(..., requant="multiply")`` (fixed-point multipliers, the ISA extension
``alu_mul``; chosen by itself for such a model when the configuration has it) every tensor that a layer computes
or that is quantized from float takes the model's scale as it is; only those a shift-rescaling host operator
reads (residual add, concat, global pooling) still need powers of two. Zero points must be 0 (int8) or 128
(uint8, the same grid shifted): VTA's int8 is symmetric.
"""

from __future__ import annotations

import math

import numpy as np

from .ir import Const, Graph, Node

#: node attribute: the exponent the model's QDQ pair gives the node's output
QDQ_EXP = "qdq_exp"
#: node attribute: (scale, zero point, dtype) of a pair whose scale is not a power of two
QDQ_SCALE = "qdq_scale"
SCALE_MODES = ("exact", "nearest")


class QdqError(ValueError):
    """A QDQ pair VTA cannot take as the model wrote it (the message names the tensor)."""


def _scalar(a) -> float | None:
    return float(np.asarray(a.value).reshape(-1)[0]) if isinstance(a, Const) and np.asarray(a.value).size == 1 \
        else None


def _same_params(q: Node, dq: Node) -> bool:
    return all(isinstance(a, Const) and isinstance(b, Const) and np.array_equal(a.value, b.value)
               for a, b in zip(q.args[1:3], dq.args[1:3]))


def strip_qdq(g: Graph) -> int:
    """Remove every ``dequantize(quantize(x, s, z), s, z)`` on an activation; note its exponent on ``x``. Returns
    the number of pairs removed."""
    users = g.users()
    removed = 0
    for dq in [n for n in g.nodes if n.op == "relax.dequantize"]:
        q = dq.args[0]
        if not (isinstance(q, Node) and q.op == "relax.quantize" and isinstance(q.args[0], Node)) or \
                not _same_params(q, dq):
            continue
        x = q.args[0]
        scale, zp = _scalar(q.args[1]), _scalar(q.args[2])
        if scale is None or zp is None:
            raise QdqError(f"{x.name}: its QuantizeLinear has a scale or zero point per channel; VTA takes one "
                           "scale per activation tensor")
        dtype = q.dtype
        if not ((dtype == "int8" and zp == 0) or (dtype == "uint8" and zp == 128)):
            raise QdqError(f"{x.name}: QuantizeLinear to {dtype} with zero point {zp:g}; VTA's int8 is symmetric "
                           "(zero point 0 for int8, 128 for uint8): quantize the model with symmetric activations")
        if not (scale > 0 and math.isfinite(scale)):
            raise QdqError(f"{x.name}: QuantizeLinear scale {scale!r} is not a finite positive number")
        e = -math.log2(scale)
        if e == round(e):
            x.attrs[QDQ_EXP] = int(round(e))
        else:
            x.attrs[QDQ_SCALE] = scale
            x.attrs[QDQ_EXP] = int(round(e))          # the nearest power of two, if asked for
        g.replace_uses(dq, x)
        g.nodes.remove(dq)
        if len(users[id(q)]) == 1:
            g.nodes.remove(q)
        removed += 1
    return removed


def carry(old: Node, new: Node) -> None:
    """``old`` folds into ``new`` (a relu into its convolution): the QDQ exponent of ``old``'s output is now
    ``new``'s."""
    for k in (QDQ_EXP, QDQ_SCALE):
        if k in old.attrs:
            new.attrs[k] = old.attrs[k]
        elif k == QDQ_SCALE and QDQ_EXP in old.attrs:
            new.attrs.pop(k, None)


def exponents(g: Graph, scales: str = "exact", any_scale: set[int] | frozenset = frozenset()) -> dict[int, float]:
    """``{id(node): exponent}`` of every node a QDQ pair annotated; a scale that is not a power of two is refused
    (``scales="exact"``) or rounded (``"nearest"``), except on the nodes of ``any_scale`` (``requant="multiply"``),
    which keep it as it is (a real exponent ``-log2(scale)``)."""
    if scales not in SCALE_MODES:
        raise QdqError(f"qdq_scales={scales!r}: choose one of {', '.join(map(repr, SCALE_MODES))}")
    out = {}
    bad = []
    for n in g.nodes:
        if QDQ_EXP not in n.attrs:
            continue
        if QDQ_SCALE in n.attrs and id(n) in any_scale:
            out[id(n)] = -math.log2(n.attrs[QDQ_SCALE])
            continue
        if QDQ_SCALE in n.attrs and scales == "exact":
            bad.append(f"{n.name} (scale {n.attrs[QDQ_SCALE]:.6g} = 2^{-math.log2(n.attrs[QDQ_SCALE]):.3f})")
        out[id(n)] = n.attrs[QDQ_EXP]
    if bad:
        raise QdqError(f"{len(bad)} QDQ scale(s) are not powers of two, and VTA requantizes by shifts: "
                       f"{', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''}. Export with power-of-two scales "
                       "(Brevitas: a power-of-two scaling; onnxruntime: round the scales), or pass "
                       "qdq_scales='nearest' to round each to the nearest power of two (not the model's own numbers); "
                       "a configuration with the ISA extension alu_mul (config key ISA_EXTENSIONS) runs them as they "
                       "are by fixed-point multipliers (quantize's requant='multiply', its default there)")
    return out
