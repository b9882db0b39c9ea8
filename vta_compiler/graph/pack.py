"""``graph_pack``: offload every layer VTA can compute, in packed layouts, by pattern.

A layer is found by a Relax dataflow pattern (``relax.dpl``): an int8 ``conv2d`` (one group, or
grouped and depthwise), ``conv2d_transpose`` or ``matmul`` with a constant weight, then VTA's
epilogue (``+ bias``, ``>> shift``, ``clip``, ``astype int8``, each but the cast optional). A match
that VTA can run becomes ``call_tir`` of a ``vta.top`` kernel (``conv2d``, ``group_conv2d``,
``conv2d_transpose``, ``dense``) on ``ext_dev``; one that it cannot keeps its ops on the CPU and the
placement report says why (for group and transposed convolutions, the operator's ``*_supported``
reason). Depthwise layers go to VTA as block-diagonal group convolutions unless
``graph_pack(..., depthwise="cpu")`` (see ``DEPTHWISE_NOTE``).

Tensors live in one of two forms: *plain* (the network's own layout, on the CPU) or *packed*
(``(N/B, C/BLOCK, H, W, B, BLOCK)`` or ``(N/B, C/BLOCK, B, BLOCK)``, channels zero-padded to the
block, in VTA's device memory). VTA layers read and write packed tensors, so consecutive layers
pass them on with no copy and no layout change. A host operator whose input is packed runs on the
packed tensor itself, in place in device memory, when it has a packed form (element-wise
arithmetic, pooling, sums over H and W, concat along whole channel blocks, the (N, C, 1, 1) <->
(N, C) reshape); anything else gets the plain form, and the layout changes only there.

A first layer with few input channels (ResNet's 7x7 conv on 3 channels uses 3 of 16 input lanes)
is *folded*: the kernel's columns move into the channels (``C x KW`` channels, a ``KH x 1`` kernel
with stride 1 along W), which is computed by one host transform of the input image.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ..environment import Environment, get_env
from ..top import conv2d_transpose as CT
from ..top import group_conv2d as G
from ..top import packing as P
from ..top.conv2d import Conv2DWorkload, conv2d_tiling
from ..top.dense import dense_tiling
from ..top.tuned import records_key
from ..transform.common import VTACompileError
from .ir import Const, Graph, GraphError, Node, const
from .kernels import KernelCache, KernelKey

DEVICE_CONSTANT = "vta.runtime.DeviceConstant"

ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
               "relax.right_shift", "relax.left_shift", "relax.clip", "relax.astype", "relax.nn.relu", "relax.round"}
POOLS = {"relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
VIEWS = {"relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims"}


def _epilogue(core):
    """VTA's epilogue after a GEMM: (+ const) (>> const) (clip) astype."""
    biased = is_op("relax.add")(core, is_const()) | core
    shifted = is_op("relax.right_shift")(biased, is_const()) | biased
    clipped = is_op("relax.clip")(shifted, wildcard(), wildcard()) | shifted
    return is_op("relax.astype")(clipped)


#: (kind, pattern) of every layer graph_pack offloads; the first that matches decides the kind
PATTERNS = [
    ("conv2d", _epilogue(is_op("relax.nn.conv2d")(wildcard(), is_const()).has_attr({"groups": 1}))),
    ("group_conv2d", _epilogue(is_op("relax.nn.conv2d")(wildcard(), is_const()))),    # groups > 1, depthwise
    ("conv2d_transpose", _epilogue(is_op("relax.nn.conv2d_transpose")(wildcard(), is_const()))),
    ("dense", _epilogue(is_op("relax.matmul")(wildcard(), is_const()))),
]
#: where depthwise layers go: graph_pack(..., depthwise=...). On VTA by default: the data stays packed (no
#: layout change around the layer) and, measured on MobileNet v1 (224x224, `python -m bench --only depthwise
#: --tsim`), its 13 depthwise layers take 21 ms on VTA at 100 MHz (6 ms at 333 MHz) against 16.5 ms of a
#: server CPU for the CPU path (TVM's default lowering plus 26 layout changes); a board's Cortex-A9 is
#: several times slower than that CPU.
DEPTHWISE_PLACES = ("vta", "cpu")
#: placement note of a depthwise layer on VTA / kept on the CPU
DEPTHWISE_NOTE = {
    "vta": "block-diagonal weight tiles (1/16 of the issued MACs are useful), the data stays packed; "
           "graph_pack(depthwise='cpu') runs it on the CPU",
    "cpu": "depthwise convolution kept on the CPU by graph_pack(depthwise='cpu') (with a layout change before "
           "and after it)",
}


@dataclass
class VtaLayer:
    kind: str                               # "conv2d" | "group_conv2d" | "conv2d_transpose" | "dense"
    name: str
    out: Node
    nodes: list[Node]
    x: Node
    weight: np.ndarray                      # int8, unpadded: OIHW (I per group), IOHW (conv2d_transpose) or OI
    bias: np.ndarray | None                 # int32 per output channel
    shift: int | np.ndarray | None          # immediate or int32 per output channel
    clip: tuple[int, int] | None
    conv: dict = field(default_factory=dict)   # strides, padding (t, l, b, r), groups, output_padding
    fold: bool = False

    @property
    def depthwise(self) -> bool:
        """A grouped convolution with one input channel per group."""
        return self.kind == "group_conv2d" and self.conv["groups"] == self.x.shape[1]

    @property
    def label(self) -> str:
        return "depthwise_conv2d" if self.depthwise else self.kind

    @property
    def macs(self) -> int:
        if self.kind == "dense":
            return int(self.x.shape[0] * self.weight.shape[0] * self.weight.shape[1])
        if self.kind == "conv2d_transpose":          # every input pixel times every tap
            return int(np.prod(self.x.shape) * np.prod(self.weight.shape[1:]))
        n, o, oh, ow = self.out.shape
        return int(n * o * oh * ow * int(np.prod(self.weight.shape[1:])))


def _channel_vector(c: Const, nout: int, what: str) -> np.ndarray | str:
    v = c.value
    if v.size == 1:
        return np.full(nout, v.reshape(-1)[0], v.dtype)
    squeezed = [d for d in v.shape if d != 1]
    if squeezed != [nout] or v.ndim < 1 or (v.ndim >= 2 and v.shape[1] != nout):
        return f"the {what} {v.shape} is not one value per output channel"
    return v.reshape(-1)


def _chain(out: Node) -> dict[str, Node]:
    """The nodes of a matched layer, by role, walking up from the cast."""
    parts = {"astype": out}
    cur = out.args[0]
    for role, op in (("clip", "relax.clip"), ("shift", "relax.right_shift"), ("bias", "relax.add")):
        if cur.op == op:
            parts[role] = cur
            cur = cur.args[0]
    parts["core"] = cur
    return parts


def _pads(a) -> tuple[int, int, int, int]:
    pad = tuple(int(p) for p in a.padding)
    return pad * 2 if len(pad) == 2 else pad


def _layer_from(kind: str, parts: dict[str, Node], env: Environment, depthwise: str = "vta") -> VtaLayer | str:
    """The layer VTA runs for a matched chain, or why it cannot."""
    core, out = parts["core"], parts["astype"]
    x, w = core.args[0], core.args[1]
    a = core.call.attrs
    if out.dtype != "int8":
        return f"the result is cast to {out.dtype}; VTA stores int8"
    if x.dtype != "int8" or w.dtype != "int8":
        return f"{x.dtype} data times {w.dtype} weights; VTA multiplies int8 by int8"
    if str(a.out_dtype) != "int32":
        return f"accumulates in {a.out_dtype}; VTA accumulates in int32"
    if kind in ("conv2d", "group_conv2d", "conv2d_transpose"):
        layouts = (str(a.data_layout), str(a.kernel_layout))
        want = ("NCHW", "IOHW") if kind == "conv2d_transpose" else ("NCHW", "OIHW")
        if layouts != want:
            return f"layout {layouts[0]}/{layouts[1]} (graph_pack reads {want[0]}/{want[1]})"
        groups = int(a.groups)
        if kind == "conv2d_transpose" and groups != 1:
            return f"grouped transposed convolution (groups={groups}); VTA's conv2d_transpose_packed has one group"
        if kind == "group_conv2d" and depthwise == "cpu" and groups == x.shape[1]:
            return DEPTHWISE_NOTE["cpu"]
        if any(int(d) != 1 for d in a.dilation):
            return f"dilated convolution (dilation={tuple(int(d) for d in a.dilation)})"
        pad = _pads(a)
        if pad[0] != pad[2] or pad[1] != pad[3]:
            return f"asymmetric padding {pad} (VTA pads symmetrically while loading)"
        weight = w.value
    else:
        if len(x.shape) != 2 or w.value.ndim != 2:
            return f"batched matmul of {x.shape} by {w.shape} (VTA's dense is 2-D)"
        weight = np.ascontiguousarray(w.value.T)
    nout = weight.shape[1] if kind == "conv2d_transpose" else weight.shape[0]
    bias = shift = None
    if "bias" in parts:
        b = parts["bias"].args[1]
        if b.dtype != "int32":
            return f"the bias is {b.dtype}; VTA adds int32"
        bias = _channel_vector(b, nout, "bias")
        if isinstance(bias, str):
            return bias
    if "shift" in parts:
        s = parts["shift"].args[1]
        v = _channel_vector(s, nout, "shift")
        if isinstance(v, str):
            return v
        if v.min() < 0 or v.max() > 31:
            return f"shift amounts {v.min()}..{v.max()} (VTA's SHR shifts right by 0..31)"
        shift = int(v[0]) if (v == v[0]).all() else v.astype(np.int32)
    clip = None
    if "clip" in parts:
        lo, hi = (int(p.value) for p in parts["clip"].args[1:3])
        clip = (max(lo, -(1 << 31)), min(hi, (1 << 31) - 1))
    layer = VtaLayer(kind, out.name, out, list(parts.values()), x, weight, bias, shift, clip)
    if kind != "dense":
        layer.conv = {"strides": tuple(int(s) for s in a.strides), "padding": pad, "groups": groups}
    if kind == "conv2d_transpose":
        layer.conv["output_padding"] = tuple(int(p) for p in a.output_padding)
    reason = _fit(layer, env)
    return reason if reason else layer


def _ceil(n: int, k: int) -> int:
    return -(-n // k) * k


def workload(layer: VtaLayer, env: Environment):
    """The ``vta.top`` workload VTA computes for a layer (folded, channels padded to the block).

    A block-diagonal group convolution (depthwise) is padded with whole groups of zero weights.
    """
    bi, bo = env.BLOCK_IN, env.BLOCK_OUT
    if layer.kind == "dense":
        return (layer.x.shape[0], _ceil(layer.weight.shape[1], bi), _ceil(layer.weight.shape[0], bo))
    n, c, h, w = layer.x.shape
    kh, kw = layer.weight.shape[2:]
    (sh, sw), (pt, pl, _, _) = layer.conv["strides"], layer.conv["padding"]
    if layer.kind == "conv2d_transpose":
        oph, opw = layer.conv["output_padding"]
        return CT.Conv2DTransposeWorkload(n, h, w, _ceil(c, bi), _ceil(layer.weight.shape[1], bo), kh, kw, pt, pl,
                                          sh, sw, oph, opw)
    if layer.kind == "group_conv2d":
        o, g = layer.out.shape[1], layer.conv["groups"]
        cpg = c // g
        if c % bi and cpg == o // g and bi == bo and bi % cpg == 0:
            c = o = _ceil(c, bi)
            g = c // cpg
        return G.GroupConv2DWorkload(n, h, w, c, o, g, kh, kw, pt, pl, sh, sw)
    o = _ceil(layer.weight.shape[0], bo)
    if layer.fold:
        ow = (w + 2 * pl - kw) // sw + 1
        return Conv2DWorkload(n, h, ow, c * kw, o, kh, 1, pt, 0, sh, 1)
    return Conv2DWorkload(n, h, w, c, o, kh, kw, pt, pl, sh, sw)


def _fold_helps(layer: VtaLayer, env: Environment) -> bool:
    c, kw = layer.weight.shape[1], layer.weight.shape[3]
    bi = env.BLOCK_IN
    return c < bi and kw > 1 and c * kw / _ceil(c * kw, bi) > c / _ceil(c, bi)


_tilings: dict = {}


def tiling_for(kind: str, wkl, env: Environment, acc_operands: int):
    """The tiling of a workload: its best record (``vta_compiler.autotune``), else the cost model's choice
    (searched once per workload, configuration and set of active records)."""
    key = (kind, wkl, env.config.hash(), acc_operands, records_key())
    if key not in _tilings:
        if kind == "conv2d":
            _tilings[key] = conv2d_tiling(wkl, env, acc_operands=acc_operands)
        elif kind == "group_conv2d":
            _tilings[key] = G.group_conv2d_tiling(wkl, env, acc_operands=acc_operands)
        elif kind == "conv2d_transpose":
            _tilings[key] = CT.conv2d_transpose_tiling(wkl, env, acc_operands=acc_operands)
        else:
            _tilings[key] = dense_tiling(*wkl, env, acc_operands=acc_operands)
    return _tilings[key]


def _fit(layer: VtaLayer, env: Environment) -> str | None:
    ops = 1 + int(isinstance(layer.shift, np.ndarray))
    if layer.kind == "conv2d":
        layer.fold = _fold_helps(layer, env)
    wkl = workload(layer, env)
    try:
        tiling_for(layer.kind, wkl, env, ops)
    except VTACompileError as exc:
        if layer.kind == "group_conv2d":
            what = "depthwise" if layer.depthwise else "group"
            return f"VTA cannot run this {what} convolution: {G.group_conv2d_supported(wkl, env, ops) or exc}"
        if layer.kind == "conv2d_transpose":
            return f"VTA cannot run this transposed convolution: {CT.conv2d_transpose_supported(wkl, env, ops) or exc}"
        return f"does not fit VTA's buffers: {exc}"
    return None


def match_layers(func: relax.Function, g: Graph, env: Environment,
                 depthwise: str = "vta") -> tuple[list[VtaLayer], dict[int, str]]:
    """The layers VTA runs, and for every GEMM op left on the CPU the reason."""
    var2val = relax.analysis.get_var2val(func)
    users = g.users()
    layers, reasons, taken = [], {}, set()
    for n in reversed(g.nodes):
        if id(n) in taken or n.op != "relax.astype" or n.call is None:
            continue
        for kind, pat in PATTERNS:
            if not pat.match(n.call, var2val):
                continue
            parts = _chain(n)
            inner = [p for role, p in parts.items() if role != "astype"]
            shared = [p for p in inner if len(users[id(p)]) != 1]
            if shared or any(id(p) in taken for p in inner):
                reasons[id(parts["core"])] = (f"its int32 result {shared[0].name if shared else ''} is also used "
                                              "elsewhere, so it cannot be fused with VTA's epilogue")
                break
            got = _layer_from(kind, parts, env, depthwise)
            if isinstance(got, str):
                reasons[id(parts["core"])] = got
            else:
                layers.append(got)
                taken.update(id(p) for p in parts.values())
            break
    layers.reverse()
    for n in g.nodes:
        if n.op in ("relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul") and id(n) not in taken and \
                id(n) not in reasons:
            reasons[id(n)] = ("a float layer (kept in float or not quantized)" if n.dtype.startswith("float")
                              else "not followed by VTA's int8 epilogue")
    return layers, reasons


# ---------------------------------------------------------------------------------------------- layouts
def packed_shape(shape: tuple[int, ...], env: Environment) -> tuple[int, ...]:
    b, bl = env.BATCH, env.BLOCK_OUT
    if len(shape) == 4:
        n, c, h, w = shape
        return (n // b, -(-c // bl), h, w, b, bl)
    n, c = shape
    return (n // b, -(-c // bl), b, bl)


def _packable(n: Node, env: Environment) -> bool:
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
                    isinstance(_channel_vector(a, shape[1], "constant"), str):
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
        return _nearest_factor(n) is not None
    return False


def _nearest_factor(n: Node) -> tuple[int, int] | None:
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


def _host_reason(n: Node) -> str:
    op = n.op
    if op in VIEWS or op in ("relax.permute_dims", "relax.concat", "relax.strided_slice", "relax.image.resize2d"):
        return "moves data only (a view or a copy on the host)"
    if n.dtype.startswith("float") or any(a.dtype.startswith("float") for a in n.inputs):
        return "float arithmetic (VTA computes integers)"
    if op in POOLS or op in ELEMENTWISE or op in ("relax.sum", "relax.mean"):
        return "VTA's ALU reads only int32 accumulators, and int8 activations cannot be loaded into them"
    return f"VTA has no {op.removeprefix('relax.')} operator"


# ---------------------------------------------------------------------------------------------- emission
class _Packer:
    def __init__(self, g: Graph, env: Environment, layers: list[VtaLayer], reasons: dict[int, str]):
        self.g, self.env = g, env
        self.layers = {id(ly.out): ly for ly in layers}
        self.inner = {id(p) for ly in layers for p in ly.nodes if p is not ly.out}
        self.reasons = reasons
        self.cpu = relax.VDevice(env.target_host, 0, "global")
        self.vta = relax.VDevice(env.target, 0, "global")
        self.bb = relax.BlockBuilder()
        self.kernels = KernelCache(self.bb, env)
        self.plain: dict[int, relax.Expr] = {}
        self.packed: dict[int, relax.Expr] = {}
        self.rows: list[dict] = []

    def emit(self, expr, name: str | None = None):
        return self.bb.emit(expr, name_hint=name) if name else self.bb.emit(expr)

    # ------------------------------------------------------------------ layout conversions
    def devconst(self, arr: np.ndarray, name: str):
        """A constant in device memory (copied there once per device by the runtime)."""
        ty = relax.TensorType(arr.shape, str(arr.dtype), vdevice=self.vta)
        return self.emit(relax.call_pure_packed(DEVICE_CONSTANT, const(np.ascontiguousarray(arr)), ty_args=ty), name)

    def pack(self, x, shape: tuple[int, ...], name: str):
        """Plain (CPU) -> packed (ext_dev): pad channels to the block, block, move to device memory."""
        env = self.env
        b, bl = env.BATCH, env.BLOCK_OUT
        n, c = shape[:2]
        cp = _ceil(c, bl)
        if cp != c:
            width = [0, 0, 0, cp - c] + [0, 0] * (len(shape) - 2)
            x = self.emit(relax.op.nn.pad(x, width), f"{name}_padc")
        if len(shape) == 4:
            h, w = shape[2:]
            x = self.emit(relax.op.reshape(x, (n // b, b, cp // bl, bl, h, w)), f"{name}_split")
            x = self.emit(relax.op.permute_dims(x, [0, 2, 4, 5, 1, 3]), f"{name}_blocked")
        else:
            x = self.emit(relax.op.reshape(x, (n // b, b, cp // bl, bl)), f"{name}_split")
            x = self.emit(relax.op.permute_dims(x, [0, 2, 1, 3]), f"{name}_blocked")
        return self.emit(relax.op.to_vdevice(x, self.vta), f"{name}_packed")

    def unpack(self, x, shape: tuple[int, ...], name: str):
        """Packed (ext_dev) -> plain (CPU)."""
        n, c = shape[:2]
        cp = _ceil(c, self.env.BLOCK_OUT)
        x = self.emit(relax.op.to_vdevice(x, self.cpu), f"{name}_host")
        if len(shape) == 4:
            x = self.emit(relax.op.permute_dims(x, [0, 4, 1, 5, 2, 3]), f"{name}_unblocked")
            x = self.emit(relax.op.reshape(x, (n, cp) + tuple(shape[2:])), f"{name}_merged")
        else:
            x = self.emit(relax.op.permute_dims(x, [0, 2, 1, 3]), f"{name}_unblocked")
            x = self.emit(relax.op.reshape(x, (n, cp)), f"{name}_merged")
        if cp != c:
            x = self.emit(relax.op.strided_slice(x, axes=[1], begin=[0], end=[c]), f"{name}_unpadded")
        return x

    def get_plain(self, n: Node):
        if id(n) not in self.plain:
            self.plain[id(n)] = self.unpack(self.packed[id(n)], n.shape, n.name)
        return self.plain[id(n)]

    def get_packed(self, n: Node):
        if id(n) not in self.packed:
            self.packed[id(n)] = self.pack(self.get_plain(n), n.shape, n.name)
        return self.packed[id(n)]

    def packed_const(self, c: Const, out: Node):
        """A constant operand of a packed host op: a scalar, or one value per channel, blocked."""
        if c.value.size == 1:
            return self.devconst(c.value.reshape((1,)), f"{out.name}_k")   # 0-d constants reach the VM as (1,)
        vec = _channel_vector(c, out.shape[1], "constant")
        bl = self.env.BLOCK_OUT
        cp = _ceil(out.shape[1], bl)
        vec = np.pad(vec, (0, cp - vec.size))
        shape = (1, cp // bl, 1, 1, 1, bl) if len(out.shape) == 4 else (1, cp // bl, 1, bl)
        return self.devconst(vec.reshape(shape), f"{out.name}_k")

    # ------------------------------------------------------------------ nodes
    def fold_input(self, layer: VtaLayer):
        """The folded input of a first layer: kernel columns moved into channels (plain, then packed)."""
        x = self.get_plain(layer.x)
        n, c, h, w = layer.x.shape
        kw = layer.weight.shape[3]
        sw, pl = layer.conv["strides"][1], layer.conv["padding"][1]
        ow = (w + 2 * pl - kw) // sw + 1
        name = f"{layer.name}_fold"
        if pl:
            x = self.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 0, 0, pl, pl]), f"{name}_padw")
        cols = [self.emit(relax.op.expand_dims(relax.op.strided_slice(
            x, axes=[3], begin=[j], end=[j + sw * (ow - 1) + 1], strides=[sw]), 2)) for j in range(kw)]
        x = self.emit(relax.op.concat(cols, axis=2), f"{name}_cols")
        x = self.emit(relax.op.reshape(x, (n, c * kw, h, ow)), name)
        return self.pack(x, (n, c * kw, h, ow), name)

    def vta_layer(self, layer: VtaLayer) -> None:
        env = self.env
        wkl = workload(layer, env)
        channel_shift = isinstance(layer.shift, np.ndarray)
        key = KernelKey(layer.kind, wkl, layer.bias is not None, None if channel_shift else layer.shift,
                        channel_shift, layer.clip)
        gv, tiling = self.kernels.get(key)
        bo, bi, b = env.BLOCK_OUT, env.BLOCK_IN, env.BATCH
        o = layer.out.shape[1]
        op_ = _ceil(o, bo)

        def per_channel(v):
            return P.pack_bias_conv(np.pad(np.asarray(v, np.int32), (0, op_ - o)), wkl.batch, b, bo)
        if layer.kind == "conv2d":
            w = layer.weight
            if layer.fold:
                oo, c, kh, kw = w.shape
                w = np.ascontiguousarray(w.transpose(0, 1, 3, 2)).reshape(oo, c * kw, kh, 1)
                x = self.fold_input(layer)
            else:
                x = self.get_packed(layer.x)
            w = P.pad_channels(P.pad_channels(w, 0, bo), 1, bi)
            wpk = P.pack_oihw(w, bo, bi)
        elif layer.kind == "group_conv2d":          # padded groups have zero weights
            w = np.pad(layer.weight, ((0, wkl.out_filter - o), (0, 0), (0, 0), (0, 0)))
            wpk = G.pack_group_conv2d_kernel(w, wkl.groups, bo, bi)
            x = self.get_packed(layer.x)
        elif layer.kind == "conv2d_transpose":
            ci = layer.weight.shape[0]
            w = np.pad(layer.weight, ((0, wkl.in_filter - ci), (0, wkl.out_filter - o), (0, 0), (0, 0)))
            wpk = CT.pack_conv2d_transpose_kernel(w, wkl, bo, bi)
            x = self.get_packed(layer.x)
        else:
            w = P.pad_channels(P.pad_channels(layer.weight, 0, bo), 1, bi)
            wpk = P.pack_oi(w, bo, bi)
            x = self.get_packed(layer.x)

            def per_channel(v):
                return P.pack_bias_dense(np.pad(np.asarray(v, np.int32), (0, op_ - o)), wkl[0], b, bo)
        args = [x, self.devconst(wpk, f"{layer.name}_w")]
        if layer.bias is not None:
            args.append(self.devconst(per_channel(layer.bias), f"{layer.name}_b"))
        if channel_shift:
            args.append(self.devconst(per_channel(layer.shift), f"{layer.name}_s"))
        oshape = packed_shape(layer.out.shape, env)
        out_ty = relax.TensorType(oshape, "int8", vdevice=self.vta)
        self.packed[id(layer.out)] = self.emit(relax.call_tir(gv, args, out_ty=out_ty), layer.name)
        epi = ["+bias"] if layer.bias is not None else []
        if layer.shift is not None:
            epi.append(">>shift[c]" if channel_shift else f">>{layer.shift}")
        if layer.clip is not None:
            epi.append(f"clip{layer.clip}")
        useful = layer.macs
        if layer.kind == "conv2d":
            issued = wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * \
                _ceil(wkl.in_filter, bi) * wkl.hkernel * wkl.wkernel
        elif layer.kind == "group_conv2d":        # a block-diagonal tile issues a whole block per channel
            issued = wkl.batch * wkl.out_filter * wkl.out_height * wkl.out_width * max(wkl.in_per_group, bi) * \
                wkl.hkernel * wkl.wkernel
        elif layer.kind == "conv2d_transpose":     # the taps of each phase, no zeros of the dilation
            issued = wkl.macs
        else:
            issued = wkl[0] * wkl[1] * wkl[2]
        note = "kernel columns folded into channels" if layer.fold else \
            DEPTHWISE_NOTE["vta"] if layer.depthwise else ""
        self.rows.append({"name": layer.name, "op": f"{layer.label} {'+'.join(epi) or ''}".strip(), "device": "VTA",
                          "layout": "packed", "macs": useful, "issued_macs": int(issued),
                          "kernel": gv.name_hint, "tiling": str(tiling), "fold": layer.fold, "note": note})

    def host(self, n: Node, packed: bool) -> None:
        args = []
        for a in n.tensor_args:
            if isinstance(a, Node):
                args.append(self.get_packed(a) if packed else self.get_plain(a))
            else:
                args.append(self.packed_const(a, n) if packed else const(a.value))
        if packed:
            env = self.env
            layout = f"NCHW{env.BATCH}n{env.BLOCK_OUT}c"
            a = n.call.attrs
            if n.op in POOLS:
                f = relax.op.nn.max_pool2d if n.op == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
                kw = {"count_include_pad": bool(a.count_include_pad)} if n.op == "relax.nn.avg_pool2d" else {}
                v = self.emit(f(args[0], pool_size=a.pool_size, strides=a.strides, padding=a.padding,
                                dilation=a.dilation, ceil_mode=bool(a.ceil_mode), layout=layout, out_layout=layout,
                                **kw), n.name)
            elif n.op in VIEWS:
                v = self.emit(relax.op.reshape(args[0], packed_shape(n.shape, env)), n.name)
            elif n.op == "relax.image.resize2d":        # nearest, integer factors: repeat rows and columns
                fh, fw = _nearest_factor(n)
                v = self.emit(relax.op.repeat(args[0], fh, axis=2), f"{n.name}_rows") if fh > 1 else args[0]
                v = self.emit(relax.op.repeat(v, fw, axis=3), n.name) if fw > 1 else v
            else:
                v = Graph.emit_call(self.bb, n, args)
            self.packed[id(n)] = v
        else:
            self.plain[id(n)] = Graph.emit_call(self.bb, n, args)
        macs = 0
        if n.op == "relax.nn.conv2d":
            macs = int(np.prod(n.shape) * np.prod(n.tensor_args[1].shape[1:]))
        elif n.op == "relax.nn.conv2d_transpose":     # every input pixel times every tap
            macs = int(np.prod(n.tensor_args[0].shape) * np.prod(n.tensor_args[1].shape[1:]))
        elif n.op == "relax.matmul" and len(n.tensor_args) == 2:
            macs = int(np.prod(n.shape) * n.tensor_args[0].shape[-1])
        self.rows.append({"name": n.name, "op": n.op.removeprefix("relax."), "device": "CPU",
                          "layout": "packed" if packed else "plain", "macs": macs,
                          "note": self.reasons.get(id(n)) or _host_reason(n)})

    def run(self, name: str) -> relax.Function:
        g = self.g
        params = [relax.Var(n.name, relax.TensorType(n.shape, n.dtype)) for n in g.inputs]
        for n, p in zip(g.inputs, params):
            self.plain[id(n)] = p
        with self.bb.function(name, params, attrs={"num_input": len(params)}):
            with self.bb.dataflow():
                for n in g.nodes:
                    if n.op == "input" or id(n) in self.inner:
                        continue
                    if id(n) in self.layers:
                        self.vta_layer(self.layers[id(n)])
                    else:
                        packed = _packable(n, self.env) and any(id(a) in self.packed for a in n.inputs)
                        self.host(n, packed)
                outs = [self.get_plain(o) for o in g.outputs]
                out = self.bb.emit_output(relax.Tuple(outs) if getattr(g, "tuple_output", False) else outs[0])
            self.bb.emit_func_output(out)
        return self.bb.get()[name]


def _check_batch(g: Graph, layers: list[VtaLayer], env: Environment) -> None:
    for ly in layers:
        n = ly.x.shape[0]
        if n % env.BATCH:
            raise GraphError(f"layer {ly.name}: the batch is {n}, not a multiple of BATCH={env.BATCH} of the VTA "
                             f"configuration {env.MODEL}; build the network for a batch of "
                             f"{_ceil(n, env.BATCH)} (for ONNX: from_onnx(model, shape_dict={{...}}))")


def graph_pack(qmod: tvm.IRModule, env: Environment | None = None, *, depthwise: str = "vta") -> tvm.IRModule:
    """Offload every layer VTA can run (packed layouts, ``ext_dev``); the rest stays on the CPU.

    Layers: conv2d, grouped and depthwise conv2d, conv2d_transpose and dense, each with its epilogue.
    ``qmod``: a quantized network (``graph.quantize``). ``depthwise``: ``"vta"`` (block-diagonal group
    convolutions; the data stays packed) or ``"cpu"`` (see ``DEPTHWISE_NOTE`` and the README). Returns a
    Relax module whose ``main`` calls VTA kernels (one per distinct workload) and host operators, with the
    VDevices ``[cpu, ext_dev]`` declared; ``graph.placement(pmod)`` reports where each op runs and why,
    ``graph.build`` compiles it.
    """
    env = env or get_env()
    if depthwise not in DEPTHWISE_PLACES:
        raise GraphError(f"graph_pack: depthwise={depthwise!r}; choose one of {', '.join(DEPTHWISE_PLACES)}")
    func = qmod["main"]
    g = Graph.from_relax(func)
    layers, reasons = match_layers(func, g, env, depthwise)
    _check_batch(g, layers, env)
    packer = _Packer(g, env, layers, reasons)
    main = packer.run("main")
    main = main.with_attr("vta.placement", json.dumps({"model": env.MODEL, "rows": packer.rows}))
    mod = packer.bb.get()
    mod["main"] = main
    mod.update_global_info("vdevice", [packer.cpu, packer.vta])
    return mod
