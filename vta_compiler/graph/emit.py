"""Emission: the packed network as Relax, VTA layers as ``call_tir`` of their kernels on ``ext_dev``.

Each tensor is emitted in the form its consumers need (see :mod:`.layout`), converted between plain and
packed only where a consumer needs the other form. A VTA layer's weights and per-channel operands are
packed by its operator and become device constants (copied to device memory once per device).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ..environment import Environment
from .ir import Const, Graph, Node, const
from .kernels import KernelCache, KernelKey
from .layout import ELEMENTWISE, POOLS, VIEWS, nearest_factor, packable, packed_shape
from .legalize import VtaLayer, channel_vector
from .report import host_row, vta_row

DEVICE_CONSTANT = "vta.runtime.DeviceConstant"


def _ceil(n: int, k: int) -> int:
    return -(-n // k) * k


class Packer:
    """Emits one packed Relax function for a graph whose VTA layers are known."""

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
        self.packed_as: dict[int, tuple[int, ...]] = {}    # a packed tensor that is a reshape of its node
        self.rows: list[dict] = []
        self.layout_changes = {"packed": 0, "unpacked": 0}     # plain -> packed, packed -> plain
        self.unpack_early = self._unpack_early()

    def _unpack_early(self) -> set[int]:
        """Element-wise host ops to run on the plain form although their input is packed: those that no VTA layer
        or other packed op reads (transitively), on a tensor whose channel padding at least doubles it (a
        detector's one-channel probability map is 16 lanes per pixel packed), or a cast that widens (the
        dequantization of an int8 layer output). Unpacking their input, instead of their output, is the same one
        layout change, of fewer bytes, and the op then computes only the real channels."""
        users = self.g.users()
        bl = self.env.BLOCK_OUT
        wanted: set[int] = set()        # a reader needs, or can use, the packed form
        early: set[int] = set()
        for n in reversed(self.g.nodes):
            for r in users.get(id(n), []):
                if r is None:
                    continue
                if id(r) in self.layers or id(r) in self.inner or \
                        (packable(r, self.env) and (r.op not in ELEMENTWISE or id(r) in wanted)):
                    wanted.add(id(n))
                    break
            if n.op not in ELEMENTWISE or id(n) in wanted or len(n.shape) not in (2, 4):
                continue
            widens = n.op == "relax.astype" and np.dtype(n.dtype).itemsize > np.dtype(n.inputs[0].dtype).itemsize
            if widens or _ceil(n.shape[1], bl) >= 2 * n.shape[1]:
                early.add(id(n))
        return early

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
        self.layout_changes["packed"] += 1
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
        self.layout_changes["unpacked"] += 1
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
            shape = self.packed_as.get(id(n), tuple(n.shape))
            x = self.unpack(self.packed[id(n)], shape, n.name)
            if shape != tuple(n.shape):
                x = self.emit(relax.op.reshape(x, n.shape), f"{n.name}_view")
            self.plain[id(n)] = x
        return self.plain[id(n)]

    def get_packed(self, n: Node, shape: tuple[int, ...] | None = None):
        """``n`` packed, as the reshape of it to ``shape`` (2-D or 4-D; default its own shape)."""
        shape = tuple(n.shape) if shape is None else tuple(shape)
        if id(n) in self.packed and self.packed_as.get(id(n), tuple(n.shape)) == shape:
            return self.packed[id(n)]
        x = self.get_plain(n)
        if shape != tuple(n.shape):
            return self.pack(self.emit(relax.op.reshape(x, shape), f"{n.name}_view"), shape, f"{n.name}_view")
        self.packed[id(n)] = self.pack(x, shape, n.name)
        return self.packed[id(n)]

    def packed_const(self, c: Const, out: Node):
        """A constant operand of a packed host op: a scalar, or one value per channel, blocked."""
        if c.value.size == 1:     # a scalar: an immediate of the legalized op, as in the quantized module
            return const(c.value.reshape(()))
        vec = channel_vector(c, out.shape[1], "constant")
        bl = self.env.BLOCK_OUT
        cp = _ceil(out.shape[1], bl)
        vec = np.pad(vec, (0, cp - vec.size))
        shape = (1, cp // bl, 1, 1, 1, bl) if len(out.shape) == 4 else (1, cp // bl, 1, bl)
        return self.devconst(vec.reshape(shape), f"{out.name}_k")

    # ------------------------------------------------------------------ nodes
    def layer_input(self, layer: VtaLayer):
        """The packed input of a VTA layer: the layer's input (or a view of it), or its operator's host
        transform of it."""
        off = layer.offload
        if off.prepare is None:
            return self.get_packed(layer.x, off.input_shape)
        name = f"{layer.name}_fold"
        x = off.prepare(self.get_plain(layer.x), self.emit, name, tuple(layer.x.shape))
        return self.pack(x, off.input_shape, name)

    def vta_layer(self, layer: VtaLayer) -> None:
        env, op, wkl = self.env, layer.op, layer.workload
        channel_shift = isinstance(layer.shift, np.ndarray)
        key = KernelKey(wkl, layer.bias is not None, None if channel_shift else layer.shift, channel_shift,
                        layer.clip, layer.residual, layer.requant)
        gv, tiling = self.kernels.get(key)
        args = [self.layer_input(layer)]
        if layer.offload.weight is not None:         # a pool has none
            args.append(self.devconst(op.pack_weights(layer.offload.weight, wkl, env), f"{layer.name}_w"))
        if layer.bias is not None:
            args.append(self.devconst(op.pack_channels(layer.bias, wkl, env), f"{layer.name}_b"))
        if channel_shift:
            args.append(self.devconst(op.pack_channels(layer.shift, wkl, env), f"{layer.name}_s"))
        if layer.multiplier is not None:     # the fixed-point multipliers per channel (ALU MUL's register operand)
            args.append(self.devconst(op.pack_channels(layer.multiplier, wkl, env), f"{layer.name}_m"))
        if layer.residual is not None:       # the int8 shortcut, packed like the result (ACC_8BIT-loaded)
            args.append(self.get_packed(layer.shortcut))
        args += [self.get_packed(o) for o in layer.offload.operands]      # e.g. a multiply's second operand
        out_shape = tuple(layer.offload.output_shape or layer.out.shape)
        out_ty = relax.TensorType(packed_shape(out_shape, env), "int8", vdevice=self.vta)
        self.packed[id(layer.out)] = self.emit(relax.call_tir(gv, args, out_ty=out_ty), layer.name)
        if out_shape != tuple(layer.out.shape):
            self.packed_as[id(layer.out)] = out_shape
        self.rows.append(vta_row(layer, env, gv.name_hint, tiling))

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
                fh, fw = nearest_factor(n)
                v = self.emit(relax.op.repeat(args[0], fh, axis=2), f"{n.name}_rows") if fh > 1 else args[0]
                v = self.emit(relax.op.repeat(v, fw, axis=3), n.name) if fw > 1 else v
            else:
                v = Graph.emit_call(self.bb, n, args)
            self.packed[id(n)] = v
        else:
            self.plain[id(n)] = Graph.emit_call(self.bb, n, args)
        self.rows.append(host_row(n, packed, self.reasons.get(id(n)), self.env.config.isa.has("acc_8bit")))

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
                        self.host(n, packable(n, self.env) and any(id(a) in self.packed for a in n.inputs)
                              and id(n) not in self.unpack_early)
                outs = [self.get_plain(o) for o in g.outputs]
                out = self.bb.emit_output(relax.Tuple(outs) if getattr(g, "tuple_output", False) else outs[0])
            self.bb.emit_func_output(out)
        return self.bb.get()[name]
