"""Post-training quantization to VTA's integer form.

Every activation is int8 with a power-of-two scale (``real = q * 2**-e``; ``e`` is the tensor's
*exponent*), weights are int8 with a power-of-two scale per output channel (or one per layer), and
a convolution (also grouped, depthwise or transposed) or dense layer is requantized exactly as VTA's
ALU does it::

    acc = conv2d(x_q, w_q) (int32);  y_q = int8(clip((acc + bias_q) >> shift, lo, hi))

with ``shift = e_in + e_w - e_out`` and ``bias_q = round(bias * 2**(e_in + e_w)) + 2**(shift-1)``
(the added half makes the shift round to nearest, for free). A per-channel ``shift`` is a tensor
(on VTA: ALU SHR with a register operand). ``lo, hi`` are (-128, 127), or (0, 127) with a fused
ReLU. Exponents come from calibration data (the largest magnitude a tensor reaches maps to at most
127, or another method of ``calibrate.py``) or from one ``global_scale`` for every activation, as
``relay.quantize`` had. A tensor on the way to a depthwise layer may have one exponent per channel
(``channel_scaled``).

The host operators between layers stay integer (max pooling, residual add with rescaling shifts,
global average pooling as a sum and a fixed-point multiply, concat, reshape), so the quantized
graph is exact integer arithmetic from the input's quantization to the output's dequantization:
any layout or device the graph is later split over computes the same bits. An operator the
quantizer does not know runs in float on dequantized inputs and its output is quantized again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ..reference import fixed_point
from ..top.common import MUL_MAX, MUL_MIN
from . import calibrate as cal
from . import qdq
from . import sensitivity as sens
from .activations import chain_nodes, find_int8_activations
from .calibrate import EXP_MAX, METHODS, exponent_for
from .canon import LAYERS, out_channel_rows, scale_out_channels
from .evaluate import evaluate_node
from .ir import TUPLE_ITEM, Const, Graph, GraphError, Node, const, describe
from .prepare import QuantizationError, layer_index, prepare
from .prepare import batches as calibration_batches

#: fixed-point bits of the global-average-pool multiplier
GAP_BITS = 23
#: int ops that pass int8 values through with the input's exponent
PASSTHROUGH = ("relax.nn.max_pool2d", "relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims",
               "relax.permute_dims")
INT8 = (-128, 127)


def calibrate(g: Graph, calibration: Iterable, percentile: float | None = None) -> dict[int, float]:
    """The largest magnitude (or the given percentile of magnitudes) each node reaches over the batches."""
    try:
        stats = cal.collect(g, calibration_batches(g, calibration), percentile=percentile)
    except cal.CalibrationError as exc:
        raise QuantizationError(str(exc)) from None
    return {k: (s.pct if percentile is not None else s.amax) for k, s in stats.items()}


def _int_capable(n: Node) -> bool:
    """True if ``host`` may run ``n`` on int8 values (then its inputs need one exponent per tensor)."""
    if n.op == "relax.add":
        return len(n.inputs) == 2
    if n.op == "relax.image.resize2d":
        return str(n.call.attrs.method) == "nearest_neighbor"
    return n.op in PASSTHROUGH or n.op in ("relax.mean", "relax.concat", "relax.split", "relax.nn.relu", "relax.clip",
                                           TUPLE_ITEM)


def _depthwise_reader(u: Node, n: Node, skip: set[int]) -> bool:
    return u.op == "conv2d" and id(u) not in skip and u.attrs["groups"] == n.shape[1] > 1 and u.inputs[0] is n


def channel_scaled(g: Graph, skip: set[int], exclude: frozenset | set = frozenset()) -> dict[int, list[Node]]:
    """The tensors that can take one exponent per channel (axis 1), with the depthwise layers that read them.

    Such a tensor's int8 values are read only by depthwise layers (which fold each channel's exponent into
    their per-channel weight scale and shift) or dequantized for float operators on the host (a per-channel
    multiply), and at least one depthwise layer reads it, directly or through float operators that work
    channel by channel (hard-swish between a convolution and a depthwise one). Its producer then requantizes
    each channel with its own shift (a VTA layer) or scale (a float operator). The nodes in ``exclude`` (int8
    activations and their inputs, see ``graph.activations``) keep one exponent per tensor.
    """
    users = g.users()
    ok: dict[int, list[Node]] = {}
    for n in g.nodes:
        if len(n.shape) < 2 or not n.dtype.startswith("float") or n.is_tuple or id(n) in exclude:
            continue
        us = users[id(n)]
        if us and all(u is None or _depthwise_reader(u, n, skip) or (u.op not in LAYERS and not _int_capable(u))
                      for u in us):
            ok[id(n)] = [u for u in us if u is not None and u.op in LAYERS]
    # keep those that reach a depthwise layer through float operators that keep the (N, C) axes
    reach: set[int] = set()
    for n in reversed(g.nodes):
        if id(n) in ok and (ok[id(n)] or any(
                u is not None and u.op not in LAYERS and id(u) in reach and tuple(u.shape[:2]) == tuple(n.shape[:2])
                for u in users[id(n)])):
            reach.add(id(n))
    return {k: v for k, v in ok.items() if k in reach}


def channel_exponents(e_tensor: int, channel_amax: np.ndarray, layers: list[Node], spread: int = 8) -> np.ndarray:
    """Per-channel exponents of a depthwise input: finer than the tensor's where a channel's range allows, by
    at most ``spread`` bits, and never so fine that a reading layer's bias overflows int32 at the finest weight
    scale of its channel."""
    e = np.array([exponent_for(a) for a in channel_amax], np.int64)
    e = np.clip(e, e_tensor, e_tensor + spread)
    for ly in layers:
        rows = out_channel_rows("conv2d", ly.attrs["weight"], ly.attrs["groups"])
        mult = rows.shape[0] // e.size
        ew = np.array([exponent_for(a) for a in np.abs(rows).max(axis=1)], np.int64)
        b = np.abs(ly.attrs["bias"])
        limit = 2 ** 31 - 1 - 128 * 127 * rows.shape[1]
        room = np.full(b.shape, EXP_MAX, np.int64)
        room[b > 0] = np.floor(np.log2(limit / 2) - np.log2(b[b > 0])) - ew[b > 0]
        room = room.reshape(e.size, mult).min(axis=1)
        e = np.maximum(np.minimum(e, room), e_tensor)
    return e


#: graph.quantize's ``requant``: how a layer's accumulators become its int8 output
REQUANT_MODES = ("shift", "multiply")
#: the host operators that rescale their int8 inputs by shifts (their inputs need power-of-two scales)
_SHIFT_RESCALING = ("relax.add", "relax.concat", "relax.mean")


def _real_exponent(s: cal.NodeStats, method: str) -> float:
    """A tensor's exponent without rounding to an integer (``requant="multiply"``): 127 is the calibrated
    magnitude (the largest, or the percentile); methods that search over integers keep their integer."""
    a = s.pct if method == "percentile" and s.pct > 0 else s.amax
    if method not in ("max", "percentile") or not a > 0 or not math.isfinite(a):
        return float(cal.exponent(s, method))
    return float(min(EXP_MAX, max(cal.EXP_MIN, math.log2(127.0 / a))))


def power_of_two_needed(g: Graph) -> set[int]:
    """The nodes whose int8 values reach a host operator that rescales by shifts (residual add, concat, global
    pooling), directly or through operators that pass values through: their scales stay powers of two."""
    need: set[int] = set()
    for n in reversed(g.nodes):
        if _int_capable(n) and (n.op in _SHIFT_RESCALING or id(n) in need):
            need.update(id(a) for a in n.inputs)
    return need


def any_scale_nodes(g: Graph, skip_layers: Sequence, depthwise_channels: bool,
                    exclude: frozenset | set = frozenset()) -> set[int]:
    """The nodes whose output may have any scale with ``requant="multiply"``: those the integer host operators
    do not compute (layers, inputs, float operators), unless a shift-rescaling host operator reads them or they
    take one scale per channel (``channel_scaled``)."""
    skip = _skipped(g, skip_layers)
    keep = power_of_two_needed(g) | (set(channel_scaled(g, skip, exclude)) if depthwise_channels else set())
    return {id(n) for n in g.nodes if id(n) not in keep and (n.op in LAYERS or not _int_capable(n))}


def _skipped(g: Graph, skip_layers: Sequence) -> set[int]:
    layers = layer_index(g)
    names = {n.name: n for n in layers}
    out = set()
    for s in skip_layers:
        if isinstance(s, (int, np.integer)):
            if not -len(layers) <= s < len(layers):
                raise QuantizationError(f"skip_layers: index {s} is out of range; the network has {len(layers)} "
                                        "conv2d/conv2d_transpose/dense layers")
            out.add(id(layers[s]))
        elif s in names:
            out.add(id(names[s]))
        else:
            raise QuantizationError(f"skip_layers: no layer named {s!r}; the layers are "
                                    f"{', '.join(names) or 'none'}")
    return out


class _Emitter:
    """Writes the integer network with a BlockBuilder, node by node."""

    def __init__(self, g: Graph, exps: dict[int, int], skip: set[int], per_channel: bool | str,
                 requant: str = "shift", acts: dict | None = None):
        self.g, self.exps, self.skip, self.per_channel = g, exps, skip, per_channel
        self.acts = acts or {}          # the int8 activations (graph.activations), by output node
        self.act_inner = {id(m) for a in self.acts.values() for m in a.nodes[:-1]}
        self.multiply = requant == "multiply"
        self.bb = relax.BlockBuilder()
        self.q: dict[int, tuple[Any, int]] = {}      # id(node) -> (int8 var, exponent)
        self.f: dict[int, Any] = {}                  # id(node) -> float var
        self.layers: list[dict] = []
        self.problems: list[tuple[Node, str]] = []   # layers that cannot be quantized (reported together)

    # -------------------------------------------------------------- values
    def emit(self, expr, name: str):
        return self.bb.emit(expr, name_hint=name)

    def qval(self, n: Node) -> tuple[Any, int]:
        if id(n) not in self.q:
            if not n.dtype.startswith("float"):
                raise QuantizationError(f"{describe(n)} ({n.op}) computes {n.dtype} values, which a quantized "
                                        "layer cannot read; cast them to float first")
            x = self.f[id(n)]
            e = self.exps[id(n)]
            y = self.emit(relax.op.round(relax.op.multiply(x, self.power_of_two(e, n))), f"{n.name}_scaled")
            y = self.emit(relax.op.clip(y, -128, 127), f"{n.name}_clipped")
            self.q[id(n)] = (self.emit(relax.op.astype(y, "int8"), f"{n.name}_q"), e)
        return self.q[id(n)]

    def fval(self, n: Node):
        if id(n) not in self.f:
            x, e = self.q[id(n)]
            self.f[id(n)] = self.emit(relax.op.multiply(relax.op.astype(x, "float32"), self.power_of_two(-e, n)),
                                      f"{n.name}_dq")
        return self.f[id(n)]

    @staticmethod
    def power_of_two(e, n: Node):
        """``2**e`` as a float32 constant: a scalar, or one per channel (axis 1) of ``n``."""
        if np.ndim(e) == 0:
            return const(2.0 ** float(e), "float32")
        shape = (1, -1) + (1,) * (len(n.shape) - 2)
        return const((2.0 ** np.asarray(e, np.float64)).astype(np.float32).reshape(shape))

    def scalar_exp(self, n: Node) -> int:
        """The node's exponent for an operator that needs one per tensor (the finest that fits every channel)."""
        e = self.exps[id(n)]
        return int(np.min(e))

    def is_int(self, n: Node) -> bool:
        return id(n) in self.q

    # -------------------------------------------------------------- requantization helpers
    def requant(self, acc, shift, bias, lo: int, hi: int, name: str):
        """``int8(clip((acc + bias) >> shift, lo, hi))``; bias/shift None, an int or an array."""
        if bias is not None:
            acc = self.emit(relax.op.add(acc, bias), f"{name}_bias")
        if shift is not None:
            acc = self.emit(relax.op.right_shift(acc, shift), f"{name}_shift")
        acc = self.emit(relax.op.clip(acc, lo, hi), f"{name}_clip")
        return self.emit(relax.op.astype(acc, "int8"), name)

    def requant_multiply(self, acc, pre, mult, post: int, bias, lo: int, hi: int, name: str):
        """``int8(clip((clip16((acc + bias) >> pre) * mult + 2**(post-1)) >> post, lo, hi))`` (ALU MUL's form:
        the int16 clip keeps the product exact); pre None, an int or an array; mult an int or an array."""
        if bias is not None:
            acc = self.emit(relax.op.add(acc, bias), f"{name}_bias")
        if pre is not None:
            acc = self.emit(relax.op.right_shift(acc, pre), f"{name}_shift")
        acc = self.emit(relax.op.clip(acc, MUL_MIN, MUL_MAX), f"{name}_clip16")
        acc = self.emit(relax.op.multiply(acc, mult), f"{name}_mul")
        acc = self.emit(relax.op.add(acc, const(1 << (post - 1), "int32")), f"{name}_round")
        acc = self.emit(relax.op.right_shift(acc, const(post, "int32")), f"{name}_post")
        acc = self.emit(relax.op.clip(acc, lo, hi), f"{name}_clip")
        return self.emit(relax.op.astype(acc, "int8"), name)

    def clip_bounds(self, act, e: int) -> tuple[int, int]:
        if act is None:
            return INT8
        _, lo, hi = act
        qlo = max(INT8[0], math.ceil(lo * 2.0 ** e))
        qhi = INT8[1] if hi is None else min(INT8[1], math.floor(hi * 2.0 ** e))
        return qlo, qhi

    def rescale(self, x, d: int, name: str):
        """int32 ``x * 2**d`` (d >= 0) or rounded ``x * 2**d`` (d < 0)."""
        if d > 0:
            return self.emit(relax.op.left_shift(x, const(d, "int32")), name)
        if d < 0:
            x = self.emit(relax.op.add(x, const(1 << (-d - 1), "int32")), f"{name}_round")
            return self.emit(relax.op.right_shift(x, const(-d, "int32")), name)
        return x

    # -------------------------------------------------------------- layers
    def layer(self, n: Node) -> None:
        at = n.attrs
        x = n.inputs[0]
        xq, e_x = self.qval(x)
        w = at["weight"]
        groups = at.get("groups", 1)
        rows = out_channel_rows(n.op, w, groups)           # (output channels, fan-in)
        nout = rows.shape[0]
        # the input's exponent per output channel: a depthwise layer's input may have one per channel
        # exponents are integers (powers of two), or with requant="multiply" real numbers (any scale)
        et = np.float64 if self.multiply else np.int64
        e_in = np.asarray(e_x, et)[np.arange(nout) // (nout // np.size(e_x))] if np.ndim(e_x) else \
            np.full(nout, e_x, et)
        amax_c = np.abs(rows).max(axis=1)
        # a dead channel's weights round to 0 at every exponent: it outputs its bias, whatever its weight scale
        dead = amax_c * 2.0 ** EXP_MAX < 0.5
        live = ~dead
        if self.multiply:     # the weights use the whole int8 range
            ew = np.minimum(EXP_MAX, np.log2(127.0 / np.maximum(amax_c, 1e-30)))
        else:
            ew = np.array([exponent_for(a) for a in amax_c], np.int64)
        if not self.per_channel:
            ew[:] = ew[live].min() if live.any() else EXP_MAX
        want = self.exps[id(n)]
        e_out = np.full(nout, np.min(want) if self.multiply else int(np.min(want)), et)
        # with multipliers, an output whose exponent is an integer (a shift-rescaling host operator reads it, or
        # one per channel) keeps an integer one
        whole = np.floor if self.multiply and np.all(np.asarray(want) == np.round(want)) else (lambda v: v)
        if live.any():
            e_out[:] = min(e_out[0], whole((e_in + ew)[live].min()))     # shift >= 0 everywhere
        if np.ndim(want):       # one exponent per output channel (read only by depthwise layers)
            per = np.where(live, np.minimum(np.asarray(want, et), whole(e_in + ew)), np.asarray(want, et))
            if len({self.clip_bounds(at["act"], int(e)) for e in per}) == 1:     # VTA clips with immediates
                e_out = per
        ew = np.minimum(ew, 31 + e_out - e_in)              # shift <= 31
        shift = (e_in + ew - e_out).astype(et)
        if dead.any():     # the live channels' shift (so one immediate shift still serves), at most 23
            ref = min(23, shift[live].min()) if live.any() else 0
            ref = ref if self.multiply else int(ref)
            ew[dead] = e_out[dead] - e_in[dead] + ref
            shift[dead] = ref
        if self.multiply and (e_out == np.round(e_out)).all():      # an integer exponent stays an int
            e_out = e_out.astype(np.int64)
        e_out = (float(e_out[0]) if e_out.dtype.kind == "f" else int(e_out[0])) if (e_out == e_out[0]).all() \
            else e_out
        self.exps[id(n)] = e_out
        wq = np.clip(np.round(scale_out_channels(n.op, w, 2.0 ** ew, groups)), -127, 127).astype(np.int8)
        wq = scale_out_channels(n.op, wq, live.astype(np.int8), groups).astype(np.int8)
        fan_in = rows.shape[1]
        if self.multiply:     # 2**-shift as M * 2**-(pre+post); the bias rounds the pre-shift
            pre, mult, post = fixed_point(2.0 ** -shift)
            bias = np.round(at["bias"] * 2.0 ** (e_in + ew)) + np.where(pre > 0, 2.0 ** (pre - 1), 0)
        else:
            bias = np.round(at["bias"] * 2.0 ** (e_in + ew)) + np.where(shift > 0, 2.0 ** (shift - 1), 0)
        limit = 2 ** 31 - 1 - 128 * 127 * fan_in
        # a dead channel's accumulator is its bias alone: beyond +-limit its output saturates all the same
        bias = np.where(dead, np.clip(bias, -limit, limit), bias)
        worst = int(np.abs(bias).argmax())
        if abs(bias[worst]) > limit:
            self.problems.append(
                (n, f"layer {describe(n)}: the bias of output channel {worst} ({at['bias'][worst]:.6g}) scaled by "
                    f"2**{e_in[worst] + ew[worst]} is {bias[worst]:.6g}, which overflows the int32 accumulator "
                    f"(limit +-{limit} with a fan-in of {fan_in})"))
            self.float_layer(n)
            return
        lo, hi = self.clip_bounds(at["act"], np.min(e_out) if self.multiply else int(np.min(e_out)))
        uniform = bool((shift == shift[0]).all())
        if n.op == "conv2d":
            acc = self.emit(relax.op.nn.conv2d(xq, const(wq), strides=at["strides"], padding=at["padding"],
                                               dilation=at["dilation"], groups=at["groups"], out_dtype="int32"),
                            f"{n.name}_acc")
            shape = (1, nout, 1, 1)
        elif n.op == "conv2d_transpose":
            acc = self.emit(relax.op.nn.conv2d_transpose(
                xq, const(wq), strides=at["strides"], padding=at["padding"], output_padding=at["output_padding"],
                dilation=at["dilation"], groups=groups, out_dtype="int32"), f"{n.name}_acc")
            shape = (1, nout, 1, 1)
        else:
            acc = self.emit(relax.op.matmul(xq, const(np.ascontiguousarray(wq.T)), out_dtype="int32"),
                            f"{n.name}_acc")
            shape = (1, nout)
        b = const(bias.astype(np.int32).reshape(shape)) if bias.any() else None
        if self.multiply:
            uniform = bool((pre == pre[0]).all() and (mult == mult[0]).all())
            p = (const(int(pre[0]), "int32") if pre[0] else None) if (pre == pre[0]).all() else \
                const(pre.astype(np.int32).reshape(shape))
            m = const(int(mult[0]), "int32") if (mult == mult[0]).all() else \
                const(mult.astype(np.int32).reshape(shape))
            self.q[id(n)] = (self.requant_multiply(acc, p, m, post, b, lo, hi, n.name), e_out)
        else:
            if uniform:
                s = const(int(shift[0]), "int32") if shift[0] else None
            else:
                s = const(shift.astype(np.int32).reshape(shape))
            self.q[id(n)] = (self.requant(acc, s, b, lo, hi, n.name), e_out)
        self.layers.append({"name": n.name, "op": n.op, "e_in": e_x if np.ndim(e_x) == 0 else list(e_x),
                            "e_out": e_out if np.ndim(e_out) == 0 else list(e_out), "per_channel_shift": not uniform,
                            "input": xq.name})

    def float_layer(self, n: Node) -> None:
        at = n.attrs
        x = self.fval(n.inputs[0])
        w = const(at["weight"].astype(np.float32))
        if n.op == "conv2d":
            y = self.emit(relax.op.nn.conv2d(x, w, strides=at["strides"], padding=at["padding"],
                                             dilation=at["dilation"], groups=at["groups"]), f"{n.name}_float")
            b = const(at["bias"].astype(np.float32).reshape(1, -1, 1, 1))
        elif n.op == "conv2d_transpose":
            y = self.emit(relax.op.nn.conv2d_transpose(x, w, strides=at["strides"], padding=at["padding"],
                                                       output_padding=at["output_padding"], dilation=at["dilation"],
                                                       groups=at["groups"]), f"{n.name}_float")
            b = const(at["bias"].astype(np.float32).reshape(1, -1, 1, 1))
        else:
            y = self.emit(relax.op.matmul(x, relax.op.permute_dims(w)), f"{n.name}_float")
            b = const(at["bias"].astype(np.float32))
        y = self.emit(relax.op.add(y, b), f"{n.name}_biased")
        self.f[id(n)] = self.act_float(y, at["act"], n.name)

    def act_float(self, y, act, name: str):
        if act is None:
            return y
        _, lo, hi = act
        if hi is None:
            return self.emit(relax.op.maximum(y, const(lo, "float32")), name)
        return self.emit(relax.op.clip(y, lo, hi), name)

    # -------------------------------------------------------------- host operators
    def residual_add(self, n: Node) -> None:
        (xa, ea), (xb, eb) = (self.qval(a) for a in n.inputs)
        e = max(ea, eb)
        a32 = self.rescale(self.emit(relax.op.astype(xa, "int32"), f"{n.name}_a"), e - ea, f"{n.name}_a_aligned")
        b32 = self.rescale(self.emit(relax.op.astype(xb, "int32"), f"{n.name}_b"), e - eb, f"{n.name}_b_aligned")
        s = self.emit(relax.op.add(a32, b32), f"{n.name}_sum")
        e_out = self.scalar_exp(n)
        s = self.rescale(s, e_out - e, f"{n.name}_rescaled")
        lo, hi = self.clip_bounds(n.attrs.get("act"), e_out)
        s = self.emit(relax.op.clip(s, lo, hi), f"{n.name}_clip")
        self.q[id(n)] = (self.emit(relax.op.astype(s, "int8"), n.name), e_out)

    def global_pool(self, n: Node) -> None:
        a = n.call.attrs
        x = n.inputs[0]
        xq, ex = self.qval(x)
        axes = [int(v) % len(x.shape) for v in a.axis]
        count = int(np.prod([x.shape[i] for i in axes]))
        e_out = self.scalar_exp(n)
        d = e_out - ex
        k = max(0, min(30, GAP_BITS - d))
        mult = round(2.0 ** (k + d) / count)
        if mult == 0:
            e_out = ex - int(math.floor(math.log2(count)))
            d = e_out - ex
            k = max(0, min(30, GAP_BITS - d))
            mult = round(2.0 ** (k + d) / count)
        self.exps[id(n)] = e_out
        s = self.emit(relax.op.sum(relax.op.astype(xq, "int32"), axis=axes, keepdims=bool(a.keepdims)),
                      f"{n.name}_sum")
        s = self.emit(relax.op.multiply(s, const(mult, "int32")), f"{n.name}_scaled")
        self.q[id(n)] = (self.requant(s, const(k, "int32") if k else None,
                                      const(1 << (k - 1), "int32") if k else None, *INT8, n.name), e_out)

    def concat(self, n: Node) -> None:
        ins = [self.qval(a) for a in n.inputs]
        e = min(ei for _, ei in ins)
        parts = []
        for k, (xq, ei) in enumerate(ins):
            if ei != e:
                v = self.emit(relax.op.astype(xq, "int32"), f"{n.name}_in{k}")
                v = self.rescale(v, e - ei, f"{n.name}_in{k}_rescaled")
                xq = self.emit(relax.op.astype(v, "int8"), f"{n.name}_in{k}_q")
            parts.append(xq)
        self.q[id(n)] = (Graph.emit_call(self.bb, n, parts), e)

    def tuple_item(self, n: Node) -> None:
        t = n.args[0]
        if id(t) in self.q:       # a field of an int8 tuple (split) keeps the tuple's exponent
            tq, e = self.q[id(t)]
            self.q[id(n)] = (Graph.emit_call(self.bb, n, [tq]), e)
        else:
            self.f[id(n)] = Graph.emit_call(self.bb, n, [self.f[id(t)]])

    def int8_activation(self, n: Node, act) -> bool:
        """Emit activation ``act`` (ending at ``n``) in int8 (``top.activation``'s formulation); False when it
        cannot be (a float input, an input with one exponent per channel, a gate bound or scale out of range): then
        it stays float."""
        from ..top.activation import HARD_SWISH_MAX_UPPER, fixed_point15
        if not all(self.is_int(a) for a in act.inputs):        # a float input (a layer kept in float)
            return False
        exps = [self.q[id(a)][1] for a in act.inputs]
        if any(np.ndim(e) for e in exps):
            return False
        e = np.min(self.exps[id(n)])
        e_out = float(e) if self.multiply and e != round(e) else int(round(float(e)))
        ex = exps[0]
        if act.kind == "multiply":
            scale = 2.0 ** (e_out - ex - exps[1])
        else:
            t, u = round(act.beta / act.alpha * 2.0 ** ex), round(2.0 ** ex / act.alpha)
            limit = HARD_SWISH_MAX_UPPER if act.kind == "hard_swish" else MUL_MAX
            if not 1 <= u <= limit or not MUL_MIN <= t <= MUL_MAX:
                return False
            scale = act.alpha * 2.0 ** (e_out - (2 if act.kind == "hard_swish" else 1) * ex)
        try:
            m, k = fixed_point15(scale)
        except ValueError:
            return False
        lo, hi = self.clip_bounds(n.attrs.get("act"), e_out)
        ins = [self.qval(a)[0] for a in act.inputs]
        name = n.name
        x32 = self.emit(relax.op.astype(ins[0], "int32"), f"{name}_x")
        if act.kind == "multiply":
            y32 = self.emit(relax.op.astype(ins[1], "int32"), f"{name}_y")
            p = self.emit(relax.op.multiply(x32, y32), f"{name}_product")
        else:
            gate = self.emit(relax.op.add(x32, const(t, "int32")), f"{name}_gate_in")
            gate = self.emit(relax.op.clip(gate, 0, u), f"{name}_gate")
            p = self.emit(relax.op.multiply(x32, gate), f"{name}_product") if act.kind == "hard_swish" else gate
        v = self.emit(relax.op.multiply(p, const(m, "int32")), f"{name}_mul")
        if k:
            v = self.emit(relax.op.add(v, const(1 << (k - 1), "int32")), f"{name}_round")
            v = self.emit(relax.op.right_shift(v, const(k, "int32")), f"{name}_post")
        v = self.emit(relax.op.clip(v, lo, hi), f"{name}_clip")
        self.exps[id(n)] = e_out
        self.q[id(n)] = (self.emit(relax.op.astype(v, "int8"), name), e_out)
        return True

    def host(self, n: Node) -> None:
        act = self.acts.get(id(n))
        if act is not None:
            if self.int8_activation(n, act):
                return
            for m in act.nodes[:-1]:       # in float after all
                self.host_op(m)
        elif id(n) in self.act_inner:
            return                          # emitted with its activation's output
        self.host_op(n)

    def host_op(self, n: Node) -> None:
        ins = n.inputs
        ints = ins and all(self.is_int(a) or (a.op == "input" and a.dtype.startswith("float")) for a in ins) and \
            all(isinstance(a, Node) for a in n.tensor_args)
        if n.op == TUPLE_ITEM:
            self.tuple_item(n)
        elif n.op in LAYERS:
            if id(n) in self.skip:
                self.float_layer(n)
            else:
                self.layer(n)
        elif ints and n.op == "relax.add" and len(ins) == 2:
            self.residual_add(n)
        elif ints and n.op == "relax.mean" and n.call.attrs.axis is not None and \
                {int(v) % len(ins[0].shape) for v in n.call.attrs.axis} <= {2, 3} and len(ins[0].shape) == 4:
            self.global_pool(n)
        elif ints and n.op == "relax.concat":
            self.concat(n)
        elif ints and (n.op in PASSTHROUGH or n.op == "relax.split" or (n.op == "relax.image.resize2d"
                                                and str(n.call.attrs.method) == "nearest_neighbor")):
            xq, e = self.qval(ins[0])
            self.q[id(n)] = (Graph.emit_call(self.bb, n, [xq]), e)
        elif ints and n.op in ("relax.nn.relu", "relax.clip"):
            xq, e = self.qval(ins[0])
            act = ("clip", 0.0, None) if n.op == "relax.nn.relu" else \
                ("clip", float(n.args[1].value), float(n.args[2].value))
            lo, hi = self.clip_bounds(act, e)
            self.q[id(n)] = (self.emit(relax.op.clip(xq, lo, hi), n.name), e)
        else:       # anything else: in float on dequantized inputs
            args = [self.fval(a) if isinstance(a, Node) else const(a.value) for a in n.tensor_args]
            y = Graph.emit_call(self.bb, n, args, f"{n.name}_float" if n.attrs.get("act") else None)
            self.f[id(n)] = self.act_float(y, n.attrs.get("act"), n.name)

    def run(self) -> relax.Function:
        g = self.g
        params = [relax.Var(n.name, relax.TensorType(n.shape, n.dtype)) for n in g.inputs]
        with self.bb.function("main", params, attrs={"num_input": len(params)}):
            with self.bb.dataflow():
                for n, p in zip(g.inputs, params):
                    # an integer input (token ids, bytes) is computed with as the model writes it, on the host,
                    # until it meets a float operator
                    self.f[id(n)] = p
                for n in g.nodes:
                    if n.op != "input":
                        self.host(n)
                outs = []
                for o in g.outputs:     # a float output is dequantized, any other (ArgMax's int64) is as computed
                    outs.append(self.fval(o) if o.dtype.startswith("float") else self.f[id(o)])
                out = self.bb.emit_output(relax.Tuple(outs) if getattr(g, "tuple_output", False) else outs[0])
            self.bb.emit_func_output(out)
        if self.problems:
            names = [n.name for n, _ in self.problems]
            raise QuantizationError(
                f"{len(names)} layer(s) cannot be quantized:\n" + "\n".join(m for _, m in self.problems) +
                f"\nkeep them in float (skip_layers={names!r}) or use a coarser input scale")
        return self.bb.get()["main"]


def quantize(mod: tvm.IRModule, params: Any = None, calibration: Iterable | None = None, *,
             global_scale: float | None = None, skip_layers: Sequence = (), per_channel: bool = True,
             percentile: float | None = None, calibrate: str = "percentile", depthwise_channels: bool = True,
             bias_correction: bool = False, float_budget: float | None = None, eval_data: Iterable | None = None,
             metric=None, qdq_scales: str = "exact", requant: str | None = None,
             int8_activations: bool | None = None) -> tvm.IRModule:
    """Quantize a float network to VTA's integer form; returns a Relax module that runs on the CPU as is.

    ``mod, params``: from ``from_onnx`` or ``relax.frontend.nn`` (``export_tvm``). ``calibration``: input
    batches (arrays, or tuples of arrays for several inputs) that set every activation's scale; or
    ``global_scale=8.0``: every activation in [-8, 8]. ``skip_layers``: conv2d/conv2d_transpose/dense layers
    (index in graph order, or name ``conv2d_<k>``/``conv2d_transpose_<k>``/``dense_<k>``) kept in float on
    the CPU. ``per_channel``: one weight scale per output channel. ``calibrate``: how a tensor's scale
    follows from the calibration data, one of ``"percentile"`` (the default: the ``percentile`` of magnitudes,
    99.99 by default, so that a few outliers clip and the rest keep their resolution), ``"max"`` (nothing
    clips), ``"mse"`` or ``"entropy"`` (see ``graph.calibrate``). On the zoo's real models the percentile is
    as accurate as the maximum or better: PP-OCR's recogniser reads 96% of 128 bench-size lines right with it
    (float 99%), 88% with the maximum. ``depthwise_channels``: the
    tensors on the way to a depthwise layer (its input, and the output of the layer before it when only
    channel-wise float operators such as hard-swish lie between) get one scale per channel, folded into the
    depthwise weights and shifts (see ``channel_scaled``).
    ``bias_correction``: after a first pass, each layer's bias absorbs the mean error (per channel) that the
    layer adds to its output on the calibration data (against the float layer on its own int8 input).
    ``float_budget``: keep the fewest layers in float (the most sensitive first, see
    ``graph.sensitivity``) for a score within this much of the float network's on ``eval_data``
    (default: the calibration batches), by ``metric`` (default: top-1 agreement of class outputs,
    correlation of others); the module's attribute ``vta.float_layers`` names them.
    A pre-quantized model (QDQ: ``QuantizeLinear -> DequantizeLinear`` pairs, see ``graph.qdq``) keeps its own
    scales: each pair's tensor gets the model's exponent, and neither ``calibration`` nor ``global_scale`` is
    needed (tensors without a pair then take theirs from ``calibration`` if given). Its scales must be powers of
    two (``qdq_scales="exact"``, the default) or are rounded to the nearest (``"nearest"``).
    ``requant``: ``"shift"`` (the default) requantizes every layer by a shift, as above; ``"multiply"`` by a
    fixed-point multiplier (VTA's ALU MUL, the ISA extension ``alu_mul``): a layer's output scale is the
    calibrated one without rounding to a power of two (method "max" or "percentile"; except where a residual
    add, concat or global pooling reads it: those rescale by shifts), its weights use the whole int8 range
    per channel, and ``y = int8(clip((clip16((acc + bias) >> pre) * M + 2**(post-1)) >> post))`` with
    ``M`` in [1024, 2048) per channel or per layer (see ``vta_compiler.reference.fixed_point``). The default
    None: ``"multiply"`` for a QDQ model with a scale that is not a power of two when the current VTA
    configuration (``vta_compiler.get_env()``) has ``alu_mul`` (its own scales then run as they are), else
    ``"shift"``.
    ``int8_activations``: hard-sigmoid, hard-swish, the squeeze-excite channel multiply and the elementwise multiply
    of two activations run on int8 values with a fixed-point multiplier (``graph.activations``; what VTA's ALU runs
    with ``alu_mul``, see ``graph_pack(activation=...)``) instead of in float on dequantized values; the default
    None: when the current VTA configuration (``vta_compiler.get_env()``) has the ISA extension ``alu_mul``. An
    activation whose input or output ``depthwise_channels`` scales per channel stays float (the per-channel scales
    are worth more accuracy; ``depthwise_channels=False`` puts every one in int8).
    The module's ``main`` takes the float inputs and returns float outputs.
    """
    if requant is not None and requant not in REQUANT_MODES:
        raise QuantizationError(f"requant={requant!r}: choose one of {', '.join(map(repr, REQUANT_MODES))}")
    if float_budget is not None:
        if calibration is None:
            raise QuantizationError("float_budget needs calibration data, not global_scale")
        if not (isinstance(float_budget, (int, float, np.floating)) and float_budget >= 0):
            raise QuantizationError(f"float_budget must be a number >= 0, got {float_budget!r}")
        calibration = list(calibration)
        kw = {"per_channel": per_channel, "percentile": percentile, "calibrate": calibrate,
              "depthwise_channels": depthwise_channels, "bias_correction": bias_correction, "requant": requant,
              "int8_activations": int8_activations}
        chosen, _, _ = sens.fewest_float_layers(quantize, mod, params, calibration, float_budget, eval_data,
                                                metric=metric, **kw)
        names = [n.name for n in layer_index(prepare(mod, params))]
        keep = set(chosen) | {names[s] if isinstance(s, (int, np.integer)) else s for s in skip_layers}
        keep = [k for k in names if k in keep]
        out = quantize(mod, params, calibration, skip_layers=keep, **kw)
        return tvm.IRModule({"main": out["main"].with_attr("vta.float_layers", keep)})
    if int8_activations is None:
        from ..environment import get_env
        int8_activations = get_env().config.isa.has("alu_mul")
    try:
        g = prepare(mod, params)
        if requant is None:
            requant = auto_requant(g)
        acts = {}
        if int8_activations:      # per-channel scales of a depthwise input win: such activations stay float
            per_channel_nodes = set(channel_scaled(g, _skipped(g, skip_layers))) if depthwise_channels else set()
            acts = find_int8_activations(g, _skipped(g, skip_layers), _int_capable, per_channel_nodes)
        fixed = qdq.exponents(g, qdq_scales, any_scale_nodes(g, skip_layers, depthwise_channels, chain_nodes(acts))
                              if requant == "multiply" else frozenset())
    except qdq.QdqError as exc:
        raise QuantizationError(str(exc)) from None
    if calibration is not None and global_scale is not None or (calibration is None and global_scale is None
                                                                  and not fixed):
        raise QuantizationError("give either calibration=[batches] or global_scale=..., not both and not neither")
    if calibrate not in METHODS:
        raise QuantizationError(f"calibrate={calibrate!r}: choose one of {', '.join(map(repr, METHODS))}")
    if percentile is not None:
        if not (isinstance(percentile, (int, float, np.floating)) and 0 < percentile <= 100):
            raise QuantizationError(f"percentile must be in (0, 100], got {percentile!r}")
        if calibrate != "percentile":
            raise QuantizationError(f"percentile={percentile!r} is for calibrate='percentile', not "
                                    f"calibrate={calibrate!r}")
    skip = _skipped(g, skip_layers)
    if calibration is None and global_scale is None:          # a QDQ model: its own exponents only
        if bias_correction:
            raise QuantizationError("bias_correction needs calibration data")
        exps: dict = {}
        batches = None
    elif global_scale is not None:
        if isinstance(global_scale, bool) or not (isinstance(global_scale, (int, float, np.floating, np.integer))
                                                  and math.isfinite(global_scale) and global_scale > 0):
            raise QuantizationError(f"global_scale must be a finite positive number, got {global_scale!r}")
        exps = {id(n): exponent_for(float(global_scale)) for n in g.nodes}
        if bias_correction:
            raise QuantizationError("bias_correction needs calibration data, not global_scale")
        batches = None
    else:
        dw = channel_scaled(g, skip, chain_nodes(acts)) if depthwise_channels else {}
        batches = calibration_batches(g, calibration)
        if calibrate == "percentile" and percentile is None:
            percentile = cal.PERCENTILE
        try:
            stats = cal.collect(g, batches, channel_nodes=set(dw), method=calibrate, percentile=percentile)
        except cal.CalibrationError as exc:
            raise QuantizationError(str(exc)) from None
        exps = {k: cal.exponent(s, calibrate) for k, s in stats.items()}
        for k, layers in dw.items():
            exps[k] = channel_exponents(exps[k], stats[k].channel_amax, layers)
        if requant == "multiply":       # the layers' outputs at their calibrated scales
            keep = power_of_two_needed(g) | set(dw)
            for n in g.nodes:
                if n.op in LAYERS and id(n) not in skip and id(n) not in keep and id(n) in stats:
                    exps[id(n)] = _real_exponent(stats[id(n)], calibrate)
    exps.update(fixed)
    em = _Emitter(g, dict(exps), skip, per_channel, requant, acts)
    func = _run_emitter(em, g)
    if bias_correction and em.layers:
        _correct_biases(g, func, em.layers, batches)
        em = _Emitter(g, dict(exps), skip, per_channel, requant, acts)
        func = em.run()
    func = func.with_attr("vta.quantized_layers", [ly["name"] for ly in em.layers])
    out = tvm.IRModule({"main": func})
    return relax.transform.CanonicalizeBindings()(out)


def auto_requant(g: Graph) -> str:
    """``quantize``'s default ``requant``: a QDQ model whose scales are not all powers of two runs them by
    multipliers where the current configuration has ALU MUL (``alu_mul``); everything else by shifts."""
    from ..environment import get_env
    own_scales = any(qdq.QDQ_SCALE in n.attrs for n in g.nodes)
    return "multiply" if own_scales and get_env().config.isa.has("alu_mul") else "shift"


def _run_emitter(em, g: Graph) -> relax.Function:
    try:
        return em.run()
    except KeyError as exc:        # a tensor with no exponent: only a QDQ model quantized without calibration
        node = next((n for n in g.nodes if id(n) == exc.args[0]), None)
        if node is None:
            raise
        raise QuantizationError(f"{describe(node)} has no QuantizeLinear/DequantizeLinear pair to give its scale, "
                                "and there is no calibration data: pass calibration=[batches] for the tensors the "
                                "model left in float") from None


def _correct_biases(g: Graph, func: relax.Function, layers: list[dict], batches: list[list[np.ndarray]]) -> None:
    """Subtract from each quantized layer's bias the mean error (per output channel, over the calibration
    batches) that the layer itself adds: its dequantized int8 output minus the float layer applied to its
    own dequantized int8 input (so an error made upstream is not corrected twice)."""
    names = [ly["name"] for ly in layers]
    inputs = [ly["input"] for ly in layers]
    vm = relax.VirtualMachine(tvm.compile(probe(tvm.IRModule({"main": func}), names + inputs), "llvm"), tvm.cpu())
    by_name = {n.name: n for n in g.nodes}

    def real(q: np.ndarray, e) -> np.ndarray:
        e = np.asarray(e, np.float64)
        return q.astype(np.float64) * 2.0 ** -(e.reshape((1, -1) + (1,) * (q.ndim - 2)) if e.ndim else e)
    err: dict[str, Any] = dict.fromkeys(names, 0.0)
    for feeds in batches:
        res = list(vm["main"](*[tvm.runtime.tensor(x) for x in feeds]))[-2 * len(names):]
        for k, ly in enumerate(layers):
            n = by_name[ly["name"]]
            x = real(res[len(names) + k].numpy(), ly["e_in"]).astype(np.float32)
            d = real(res[k].numpy(), ly["e_out"]) - evaluate_node(n, [x])
            err[ly["name"]] = err[ly["name"]] + d.mean(axis=tuple(i for i in range(d.ndim) if i != 1))
    for k in names:
        n = by_name[k]
        n.attrs["bias"] = n.attrs["bias"] - err[k] / len(batches)


def sensitivity(mod: tvm.IRModule, params: Any, calibration: Iterable, data: Iterable | None = None, **kw):
    """``graph.sensitivity``: the score lost by quantizing each layer alone (see ``graph.sensitivity`` the module:
    ``metric``, ``layers`` and ``quantize``'s keywords)."""
    return sens.sensitivity(quantize, mod, params, calibration, data, **kw)


def fewest_float_layers(mod: tvm.IRModule, params: Any, calibration: Iterable, budget: float,
                        data: Iterable | None = None, **kw):
    """The fewest most-sensitive layers to keep in float for a score within ``budget`` of float's (what
    ``quantize(..., float_budget=...)`` keeps); ``(layers, score, report)``."""
    return sens.fewest_float_layers(quantize, mod, params, calibration, budget, data, **kw)


def layer_outputs(qmod: tvm.IRModule) -> list[str]:
    """Names of the int8 outputs of the quantized layers (conv2d, conv2d_transpose, dense), for probing."""
    f = qmod["main"]
    return [str(s) for s in f.attrs["vta.quantized_layers"]] if f.attrs is not None and \
        "vta.quantized_layers" in f.attrs else []


def probe(mod: tvm.IRModule, names: Sequence[str]) -> tvm.IRModule:
    """``mod`` whose ``main`` also returns the values bound to ``names`` (after its own outputs), on the CPU."""
    g = Graph.from_relax(mod["main"])
    by_name = {n.name: n for n in g.nodes}
    missing = [s for s in names if s not in by_name]
    if missing:
        raise GraphError(f"probe: no value named {', '.join(missing)}")
    keep = list(g.outputs) + [by_name[s] for s in names]
    g.outputs = keep
    g.prune()
    bb = relax.BlockBuilder()
    params = [relax.Var(n.name, relax.TensorType(n.shape, n.dtype)) for n in g.inputs]
    vals = dict(zip((id(n) for n in g.inputs), params))
    with bb.function("main", params):
        with bb.dataflow():
            for n in g.nodes:
                if n.op == "input":
                    continue
                args = [vals[id(a)] if isinstance(a, Node) else const(a.value) for a in n.tensor_args]
                vals[id(n)] = Graph.emit_call(bb, n, args)
            out = bb.emit_output(relax.Tuple([vals[id(n)] for n in keep]))
        bb.emit_func_output(out)
    return bb.get()


__all__ = ["Const", "QuantizationError", "calibrate", "exponent_for", "layer_outputs", "prepare", "probe",
           "quantize"]
