"""Legalization: whether VTA can run a matched layer (a GEMM op and VTA's epilogue after it), and as what.

The epilogue's checks are the same for every operator (int8 result, int8 operands, an int32 bias and
shift per channel, shifts 0..31); the core op's are the operator's own (``Operator.from_relax``: layouts,
groups, dilation, padding, the workload it maps to, and ``placement_refusal``: whether a tiling fits).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..environment import Environment
from ..tiling import Offload, Operator
from ..top.common import MUL_MAX, MUL_MIN, Requant, Residual
from .ir import Const, GraphError, Node


@dataclass
class VtaLayer:
    """A layer graph_pack runs on VTA: its nodes, input, operator and workload, and its epilogue."""
    name: str
    out: Node
    nodes: list[Node]
    x: Node
    offload: Offload
    bias: np.ndarray | None                 # int32 per output channel
    shift: int | np.ndarray | None          # immediate or int32 per output channel
    clip: tuple[int, int] | None
    residual: Residual | None = None        # a residual add fused into the epilogue (``fuse_residual``)
    shortcut: Node | None = None            # its int8 shortcut
    residual_why: str = ""                  # why it was fused (graph_pack's cost comparison)
    requant: Requant | None = None          # a fixed-point multiply after the shift (ALU MUL, ``alu_mul``)
    multiplier: np.ndarray | None = None    # its int16 multipliers per output channel (requant.multiplier None)

    @property
    def op(self) -> Operator:
        return self.offload.op

    @property
    def workload(self):
        return self.offload.workload

    @property
    def acc_operands(self) -> int:
        """Per-channel tensors in ACC beside the accumulators: the bias (always reserved), a shift tensor and a
        multiplier tensor."""
        return 1 + int(isinstance(self.shift, np.ndarray)) + int(self.multiplier is not None)

    @property
    def label(self) -> str:
        return self.op.label(self.workload)

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates of the layer as the network has it (no padding, no folding)."""
        core = self.nodes[-1]
        return self.op.host_macs(core.shape, [a.shape for a in core.tensor_args])


def channel_vector(c: Const, nout: int, what: str, axis: int = 1, rank: int | None = None) -> np.ndarray | str:
    """A constant as one value per output channel along ``axis`` of a rank-``rank`` tensor (a scalar is
    broadcast), or why it is not one."""
    v = c.value
    if v.size == 1:
        return np.full(nout, v.reshape(-1)[0], v.dtype)
    squeezed = [d for d in v.shape if d != 1]
    if rank is not None and axis < 0:       # right-aligned broadcasting: the constant's own axis
        axis = v.ndim + axis
    if squeezed != [nout] or v.ndim < 1 or (v.ndim >= 2 and v.shape[axis] != nout):
        return f"the {what} {v.shape} is not one value per output channel"
    return v.reshape(-1)


def _multiply_chain(cur: Node) -> dict[str, Node] | None:
    """The fixed-point multiply ``clip16(x) * M + round >> post`` ending at ``cur``, by role, or None."""
    got = {}
    for role, op in (("post_shift", "relax.right_shift"), ("round", "relax.add"), ("multiply", "relax.multiply"),
                     ("clip16", "relax.clip")):
        if not isinstance(cur, Node) or cur.op != op or (role != "clip16" and not isinstance(cur.args[1], Const)):
            return None
        got[role] = cur
        cur = cur.args[0]
    return got


def chain(out: Node) -> dict[str, Node]:
    """The nodes of a matched layer, by role, walking up from the cast."""
    parts = {"astype": out}
    cur = out.args[0]
    if cur.op == "relax.clip":
        parts["clip"] = cur
        cur = cur.args[0]
    mul = _multiply_chain(cur)
    if mul is not None:
        parts.update(mul)
        cur = mul["clip16"].args[0]
    for role, op in (("shift", "relax.right_shift"), ("bias", "relax.add")):
        if cur.op == op:
            parts[role] = cur
            cur = cur.args[0]
    parts["core"] = cur
    return parts


def legal_requant(parts: dict[str, Node], nout: int, axis: int, rank: int,
                  env: Environment) -> tuple[Requant, np.ndarray | None] | str:
    """The :class:`Requant` of a matched fixed-point multiply (and its per-channel multipliers, or None), or why
    VTA cannot run it (a placement note)."""
    lo, hi = (int(p.value) for p in parts["clip16"].args[1:3])
    if (lo, hi) != (MUL_MIN, MUL_MAX):
        return f"the value multiplied is clipped to {(lo, hi)}, not to int16 as VTA's MUL needs"
    m = channel_vector(parts["multiply"].args[1], nout, "multiplier", axis, rank)
    if isinstance(m, str):
        return m
    if m.dtype != np.int32 or m.min() < MUL_MIN or m.max() > MUL_MAX:
        return f"the multipliers ({m.dtype}, {m.min()}..{m.max()}) are not int16 values (VTA's MUL multiplies int16)"
    post = _scalar(parts["post_shift"].args[1], "post-shift")
    rnd = _scalar(parts["round"].args[1], "rounding constant")
    if isinstance(post, str) or isinstance(rnd, str):
        return post if isinstance(post, str) else rnd
    if post < 1 or rnd != 1 << (post - 1):
        return f"the product is rounded by {rnd} before >> {post}, not by 2**(post-1) as VTA's epilogue does"
    uniform = bool((m == m[0]).all())
    r = Requant(int(m[0]) if uniform else None, post)
    reason = r.refusal(env)
    if reason:
        return reason
    return r, (None if uniform else m.astype(np.int32))


def legalize(op: Operator, parts: dict[str, Node], env: Environment, options: dict) -> VtaLayer | str | None:
    """The layer VTA runs for a matched chain, why it cannot (a placement note), or None if the chain is not
    ``op``'s to take."""
    core, out = parts["core"], parts["astype"]
    x, w = core.args[0], core.args[1]
    a = core.call.attrs
    if out.dtype != "int8":
        return f"the result is cast to {out.dtype}; VTA stores int8"
    if x.dtype != "int8" or w.dtype != "int8":
        return f"{x.dtype} data times {w.dtype} weights; VTA multiplies int8 by int8"
    if str(a.out_dtype) != "int32":
        return f"accumulates in {a.out_dtype}; VTA accumulates in int32"
    off = op.from_relax(a, tuple(x.shape), w.value, tuple(out.shape), env, options)
    if off is None or isinstance(off, str):
        return off
    axis, rank = off.channel_axis, len(out.shape)
    nout = out.shape[axis]
    bias = shift = None
    if "bias" in parts:
        b = parts["bias"].args[1]
        if b.dtype != "int32":
            return f"the bias is {b.dtype}; VTA adds int32"
        bias = channel_vector(b, nout, "bias", axis, rank)
        if isinstance(bias, str):
            return bias
    if "shift" in parts:
        v = channel_vector(parts["shift"].args[1], nout, "shift", axis, rank)
        if isinstance(v, str):
            return v
        if v.min() < 0 or v.max() > 31:
            return f"shift amounts {v.min()}..{v.max()} (VTA's SHR shifts right by 0..31)"
        shift = int(v[0]) if (v == v[0]).all() else v.astype(np.int32)
    clip = None
    if "clip" in parts:
        lo, hi = (int(p.value) for p in parts["clip"].args[1:3])
        clip = (max(lo, -(1 << 31)), min(hi, (1 << 31) - 1))
    requant = multiplier = None
    if "multiply" in parts:
        if not getattr(op, "takes_requant", False):
            return f"a fixed-point requantization (ALU MUL) is not implemented for {op.kind} layers"
        got = legal_requant(parts, nout, axis, rank, env)
        if isinstance(got, str):
            return got
        requant, multiplier = got
    layer = VtaLayer(out.name, out, list(parts.values()), x, off, bias, shift, clip, requant=requant,
                     multiplier=multiplier)
    if x.shape[0] % env.BATCH:
        return layer            # no tiling question: graph_pack refuses the whole network (check_batch)
    return op.placement_refusal(off, env, layer.acc_operands) or layer


def _scalar(c, what: str) -> int | str:
    if not isinstance(c, Const) or c.value.size != 1:
        return f"the {what} is not one constant"
    return int(c.value.reshape(-1)[0])


def fuse_residual(layer: VtaLayer, parts: dict[str, Node], env: Environment) -> VtaLayer | str:
    """``layer`` with the quantizer's residual add after it (``parts``: the chain found by
    ``match.residual_chain``) fused into its epilogue, or why not (a placement note)."""
    out, sc = parts["out"], parts["shortcut"]
    if layer.clip is None or layer.clip[0] < -128 or layer.clip[1] > 127:
        return f"{layer.name}'s int32 result is not clipped to int8 before the add (the CPU casts it, wrapping)"
    if tuple(sc.shape) != tuple(layer.out.shape) or len(sc.shape) != 4 or \
            tuple(layer.offload.output_shape or layer.out.shape) != tuple(layer.out.shape):
        return f"the shortcut {sc.name} {tuple(sc.shape)} is not shaped like {layer.name}'s result"
    consts = {}
    for role, what in (("layer_shift", "layer's alignment shift"), ("shortcut_shift", "shortcut's alignment shift"),
                       ("round", "rounding constant"), ("out_shift", "output shift"),
                       ("out_left_shift", "output shift")):
        if role in parts:
            v = _scalar(parts[role].args[1], what)
            if isinstance(v, str):
                return v
            consts[role] = v
    k = consts.get("out_shift", -consts.get("out_left_shift", 0))
    if "round" in consts and (k < 1 or consts["round"] != 1 << (k - 1)):
        return f"the sum is rounded by {consts['round']} before >> {k}, not by 2**(k-1) as VTA's epilogue does"
    lo, hi = (int(p.value) for p in parts["clip"].args[1:3])
    if lo < -128 or hi > 127:
        return f"the sum is clipped to {(lo, hi)}, beyond int8"
    r = Residual(consts.get("layer_shift", 0), consts.get("shortcut_shift", 0), k, (lo, hi))
    reason = r.refusal()
    if reason:
        return reason
    wkl = layer.op.residual_workload(layer.workload, env)
    if isinstance(wkl, str):
        return wkl
    off = dataclasses.replace(layer.offload, workload=wkl)
    reason = layer.op.placement_refusal(off, env, layer.acc_operands)
    if reason:
        return f"with its shortcut in the accumulators, {layer.name} {reason}"
    chain = [p for role, p in parts.items() if role != "shortcut"]
    return dataclasses.replace(layer, out=out, nodes=chain + layer.nodes, offload=off, residual=r, shortcut=sc)


def check_batch(layers: list[VtaLayer], env: Environment) -> None:
    """Refuse a network whose VTA layers' batch is not a multiple of the configuration's BATCH."""
    for ly in layers:
        n = ly.x.shape[0]
        if n % env.BATCH:
            raise GraphError(f"layer {ly.name}: the batch is {n}, not a multiple of BATCH={env.BATCH} of the VTA "
                             f"configuration {env.MODEL}; build the network for a batch of "
                             f"{-(-n // env.BATCH) * env.BATCH} (for ONNX: from_onnx(model, shape_dict={{...}}))")


def residual_cost(plain: VtaLayer, fused: VtaLayer, env: Environment) -> tuple[float, float, str]:
    """(host µs, VTA µs, the comparison as a sentence) of the residual add that ``fused`` takes over from the host:
    the board host's estimate (``host_cost``) against the cost model's extra cycles of the fused layer at the
    configuration's clock (both layers with the cost model's own tiling)."""
    from .host_cost import RESIDUAL_ADD_BYTES, RESIDUAL_ADD_OPS, host_of
    cfg = env.config

    def cycles(ly):
        t = ly.op.tiling(ly.workload, env, ly.acc_operands, tuned=False)
        return ly.op.estimate(ly.workload, t, env)
    vta_us = max(0.0, cycles(fused) - cycles(plain)) / cfg.fpga_freq
    host = host_of(cfg)
    elements = int(np.prod(plain.out.shape))
    host_us = host.elementwise_us(elements, RESIDUAL_ADD_OPS, RESIDUAL_ADD_BYTES)
    text = (f"on the {host.name} about {host_us:.0f} µs (estimate), fused on VTA about {vta_us:.0f} µs more "
            f"at {cfg.fpga_freq} MHz")
    return host_us, vta_us, text


def host_chain_cost(layer: VtaLayer, env: Environment) -> tuple[float, float, str]:
    """(host µs, VTA µs, the comparison as a sentence) of a chain of host ops an operator takes over (pooling):
    the board host's estimate of the operator's ``host_work`` against the cost model's cycles of the kernel at the
    configuration's clock."""
    from .host_cost import host_of
    cfg = env.config
    t = layer.op.tiling(layer.workload, env, 1, tuned=False)
    vta_us = layer.op.estimate(layer.workload, t, env) / cfg.fpga_freq
    host = host_of(cfg)
    host_us = host.elementwise_us(*layer.op.host_work(layer.workload))
    text = (f"on the {host.name} about {host_us:.0f} µs (estimate), on VTA about {vta_us:.0f} µs at "
            f"{cfg.fpga_freq} MHz")
    return host_us, vta_us, text
