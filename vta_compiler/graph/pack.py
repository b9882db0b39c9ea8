"""``graph_pack``: offload every layer VTA can compute, in packed layouts, by pattern.

The steps, one module each: :mod:`.match` finds the layers (a registered operator's core op and VTA's
epilogue), :mod:`.legalize` decides whether VTA can run each and as which workload (the operator says),
:mod:`.emit` writes the packed network (VTA layers as ``call_tir`` of kernels on ``ext_dev``, host operators
on packed tensors where they have a packed form, see :mod:`.layout`), and :mod:`.report` the placement
table. A match that VTA cannot run keeps its ops on the CPU and the placement report says why.
"""

from __future__ import annotations

import json

import tvm

from ..environment import Environment, get_env
from ..tiling import registry
from .emit import Packer
from .ir import Graph, GraphError
from .legalize import check_batch
from .match import match_layers
from .report import PLACEMENT_ATTR


def _check_options(options: dict) -> None:
    allowed = {}
    for op in registry.operators():
        allowed.update(op.options)
    for name, value in options.items():
        if name not in allowed:
            raise GraphError(f"graph_pack: unknown option {name!r}; the operators read "
                             + (", ".join(sorted(allowed)) or "none"))
        if value not in allowed[name]:
            raise GraphError(f"graph_pack: {name}={value!r}; choose one of {', '.join(allowed[name])}")


def graph_pack(qmod: tvm.IRModule, env: Environment | None = None, **options) -> tvm.IRModule:
    """Offload every layer VTA can run (packed layouts, ``ext_dev``); the rest stays on the CPU.

    Layers: conv2d, grouped and depthwise conv2d, conv2d_transpose and dense (every registered operator), each
    with its epilogue. ``qmod``: a quantized network (``graph.quantize``). ``options`` are read by the operators:
    ``depthwise="vta"`` (block-diagonal group convolutions; the data stays packed) or ``"cpu"`` (see
    ``vta_compiler.top.group_conv2d.DEPTHWISE_NOTE``); ``residual="auto"`` (the default: with the ISA extension
    ``acc_8bit``, the quantizer's residual add after a conv2d is fused into that layer's epilogue where VTA can run
    it), ``"vta"`` (fuse every one, or a GraphError naming the add and why not) or ``"cpu"`` (keep them on the
    host); ``pool="auto"`` (the default: with ``acc_8bit``, the quantizer's int8 max pool of a non-negative input
    and, with ``alu_mul`` too, its global average pool run on VTA where the cost model at the configuration's
    clock beats the board host's estimate; both figures in the note), ``"vta"`` (every one, or a GraphError) or
    ``"cpu"``; ``activation="auto"`` (the default: with ``alu_mul`` and ``acc_8bit``, the quantizer's int8
    hard-sigmoid, hard-swish, squeeze-excite channel multiply and elementwise multiply, see
    ``graph.activations``, run on VTA's ALU where the cost model beats the board host's estimate), ``"vta"``
    (every one, or a GraphError; refused on a configuration without the extensions) or ``"cpu"``. Returns a Relax
    module whose ``main`` calls VTA kernels
    (one per distinct workload) and host operators, with the VDevices ``[cpu, ext_dev]`` declared;
    ``graph.placement(pmod)`` reports where each op runs and why, ``graph.build`` compiles it.
    """
    env = env or get_env()
    _check_options(options)
    if options.get("activation") == "vta":
        from ..top.activation import activation_refusal
        reason = activation_refusal(env)
        if reason:
            raise GraphError(f"graph_pack(activation='vta'): {reason}")
    func = qmod["main"]
    g = Graph.from_relax(func)
    layers, reasons = match_layers(func, g, env, options)
    check_batch(layers, env)
    packer = Packer(g, env, layers, reasons)
    main = packer.run("main")
    main = main.with_attr(PLACEMENT_ATTR, json.dumps({"model": env.MODEL, "rows": packer.rows,
                                                      "layout_changes": packer.layout_changes}))
    mod = packer.bb.get()
    mod["main"] = main
    mod.update_global_info("vdevice", [packer.cpu, packer.vta])
    return mod
