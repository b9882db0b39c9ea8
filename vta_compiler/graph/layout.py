"""Layouts: where a tensor lives between layers, and which host operators run on the packed form.

Tensors live in one of two forms: *plain* (the network's own layout, on the CPU) or *packed*
(``(N/B, C/BLOCK, H, W, B, BLOCK)`` or ``(N/B, C/BLOCK, B, BLOCK)``, channels zero-padded to the
block, in VTA's device memory). VTA layers read and write packed tensors, so consecutive layers
pass them on with no copy and no layout change. A host operator whose input is packed runs on the
packed tensor itself, in place in device memory, when it has a packed form (element-wise
arithmetic, pooling, sums over H and W, concat along whole channel blocks, the (N, C, 1, 1) <->
(N, C) reshape, nearest upsampling by whole factors); anything else gets the plain form, and the
layout changes only there. An element-wise op that nothing packed reads (transitively), on a tensor the
channel padding at least doubles or as a widening cast (an int8 layer output's dequantization), also runs on the
plain form (``Packer._unpack_early``): it is the same one layout change, of fewer bytes, and the op computes
only the real channels.
"""

from __future__ import annotations

import math

from ..environment import Environment
from .ir import TUPLE_ITEM, Const, Node
from .legalize import channel_vector

#: element-wise ops: they compute the same on the packed layout (channel padding only computes lanes that no later
#: op reads: VTA layers multiply them by zero weights, unpacking drops them), integer or float (activations)
ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
               "relax.right_shift", "relax.left_shift", "relax.clip", "relax.astype", "relax.nn.relu", "relax.round",
               "relax.sigmoid", "relax.tanh", "relax.exp", "relax.erf", "relax.sqrt", "relax.rsqrt", "relax.abs",
               "relax.negative", "relax.floor", "relax.ceil", "relax.power", "relax.nn.silu", "relax.nn.gelu",
               "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.nn.softplus"}
POOLS = {"relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
VIEWS = {"relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims"}



def packed_shape(shape: tuple[int, ...], env: Environment) -> tuple[int, ...]:
    b, bl = env.BATCH, env.BLOCK_OUT
    if len(shape) == 4:
        n, c, h, w = shape
        return (n // b, -(-c // bl), h, w, b, bl)
    n, c = shape
    return (n // b, -(-c // bl), b, bl)


def packable(n: Node, env: Environment) -> bool:
    """True if the host op has a packed form (see the module docstring)."""
    shape = n.shape
    if len(shape) not in (2, 4) or shape[0] % env.BATCH:
        return False
    ins = n.inputs
    if not ins or any(len(a.shape) not in (2, 4) or a.shape[0] % env.BATCH for a in ins):
        return False
    op = n.op
    if op in ELEMENTWISE:
        for a in n.tensor_args:
            if isinstance(a, Node) and tuple(a.shape) != tuple(shape):
                return False
            if isinstance(a, Const) and a.value.size != 1 and \
                    isinstance(channel_vector(a, shape[1], "constant"), str):
                return False
        return True
    if op in POOLS:
        return str(n.call.attrs.layout) == "NCHW" and len(shape) == 4
    if op in ("relax.sum", "relax.mean"):
        a = n.call.attrs
        if a.axis is None or len(ins[0].shape) != 4:
            return False
        axes = {int(v) % 4 for v in a.axis}
        return axes == {2, 3} or (axes <= {2, 3} and bool(a.keepdims))
    if op in VIEWS:
        s_in, s_out = tuple(ins[0].shape), tuple(shape)
        return (len(s_in), len(s_out)) in ((4, 2), (2, 4)) and s_in[:2] == s_out[:2] and \
            math.prod(s_in) == math.prod(s_out)
    if op == "relax.concat":
        return int(n.call.attrs.axis) % len(shape) == 1 and all(a.shape[1] % env.BLOCK_OUT == 0 for a in ins)
    if op == "relax.image.resize2d":
        return nearest_factor(n) is not None
    return False


def nearest_factor(n: Node) -> tuple[int, int] | None:
    """The integer (H, W) factors of a nearest-neighbour upsampling that repeats rows and columns, else None."""
    a = n.call.attrs
    if str(a.method) != "nearest_neighbor" or str(a.layout) != "NCHW" or len(n.shape) != 4:
        return None
    mode, rounding = str(a.coordinate_transformation_mode), str(a.rounding_method)
    if (mode, rounding) not in (("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"), ("half_pixel", "")):
        return None
    (h, w), (oh, ow) = n.inputs[0].shape[2:], n.shape[2:]
    if oh % h or ow % w or (mode == "half_pixel" and (oh // h > 2 or ow // w > 2)):
        return None
    return oh // h, ow // w


def host_reason(n: Node, acc_8bit: bool = False) -> str:
    """Why a host operator is not VTA's (``acc_8bit``: the configuration has the ISA extension)."""
    op = n.op
    if op in VIEWS or op in ("relax.permute_dims", "relax.concat", "relax.strided_slice", "relax.image.resize2d",
                             "relax.split", TUPLE_ITEM):
        return "moves data only (a view or a copy on the host)"
    if n.dtype.startswith("float") or any(a.dtype.startswith("float") for a in n.inputs):
        return "float arithmetic (VTA computes integers)"
    if op in POOLS or op in ELEMENTWISE or op in ("relax.sum", "relax.mean"):
        if acc_8bit:
            return ("VTA's ALU runs only a layer's epilogue (and a residual add fused into it), not a standalone "
                    f"{op.removeprefix('relax.')}")
        return "VTA's ALU reads only int32 accumulators, and int8 activations cannot be loaded into them"
    return f"VTA has no {op.removeprefix('relax.')} operator"
