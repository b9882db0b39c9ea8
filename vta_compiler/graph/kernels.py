"""VTA kernels of a network: one scheduled PrimFunc per distinct layer workload and epilogue.

A layer is offloaded as ``call_tir`` of a kernel from ``vta.top`` (``conv2d_layer``,
``group_conv2d_layer``, ``conv2d_transpose_layer`` or ``dense_layer`` with their automatic tiling);
layers with the same shapes, epilogue and shift
share one kernel. The kernels carry ``env.target`` (ext_dev), so ``graph.build`` sends them, and
only them, through the "vta" TIR pipeline.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import tvm
from tvm import relax

from ..environment import Environment
from ..top import conv2d as C
from ..top import conv2d_transpose as CT
from ..top import dense as D
from ..top import group_conv2d as G

#: PrimFunc attribute that marks a VTA kernel (compiled with the "vta" TIR pipeline)
KERNEL_ATTR = "vta.kernel"
#: PrimFunc attribute with the kernel's tuning task as JSON (kind, workload, acc_operands; see vta_compiler.autotune)
TASK_ATTR = "vta.task"
#: operator kinds with a tuning space (vta_compiler.autotune): every kind of kernel graph_pack makes
TUNED_KINDS = ("conv2d", "group_conv2d", "conv2d_transpose", "dense")


@dataclass(frozen=True)
class KernelKey:
    kind: str                       # "conv2d" | "group_conv2d" | "conv2d_transpose" | "dense"
    workload: object                # Conv2DWorkload | GroupConv2DWorkload | Conv2DTransposeWorkload | (batch, in, out)
    bias: bool
    shift: int | None               # immediate shift, or None with channel_shift
    channel_shift: bool
    clip: tuple[int, int] | None


class KernelCache:
    """Adds each distinct kernel once to the module being built."""

    def __init__(self, bb: relax.BlockBuilder, env: Environment):
        self.bb, self.env = bb, env
        self.kernels: dict[KernelKey, tuple[relax.GlobalVar, object]] = {}

    def get(self, key: KernelKey) -> tuple[relax.GlobalVar, object]:
        """(GlobalVar of the kernel, its tiling)."""
        if key not in self.kernels:
            self.kernels[key] = self._make(key)
        return self.kernels[key]

    def _make(self, key: KernelKey):
        from .pack import tiling_for
        env = self.env
        ops = 1 + int(key.channel_shift)
        shift = key.shift or 0
        label = key.kind
        if key.kind in ("conv2d", "group_conv2d", "conv2d_transpose"):
            wkl = key.workload
            tiling = tiling_for(key.kind, wkl, env, ops)
            layer, schedule = {"conv2d": (C.conv2d_layer, C.schedule_conv2d_packed),
                               "group_conv2d": (G.group_conv2d_layer, G.schedule_group_conv2d_packed),
                               "conv2d_transpose": (CT.conv2d_transpose_layer,
                                                    CT.schedule_conv2d_transpose_packed)}[key.kind]
            func = layer(wkl, env, shift=shift, bias=key.bias, clip=key.clip, channel_shift=key.channel_shift)
            sch = schedule(func, tiling, env=env)
            desc = (f"{wkl.height}x{wkl.width}_{wkl.in_filter}to{wkl.out_filter}_k{wkl.hkernel}x{wkl.wkernel}"
                    f"_s{wkl.hstride}")
            if key.kind == "group_conv2d":
                label = "depthwise_conv2d" if wkl.is_depthwise else "group_conv2d"
                desc += "" if wkl.is_depthwise else f"_g{wkl.groups}"
        else:
            batch, cin, cout = key.workload
            tiling = tiling_for("dense", key.workload, env, ops)
            func = D.dense_layer(batch, cin, cout, env, shift=shift, bias=key.bias, clip=key.clip,
                                 channel_shift=key.channel_shift)
            sch = D.schedule_dense_packed(func, tiling, env=env)
            desc = f"{batch}x{cin}to{cout}"
        name = f"vta_{label}_{desc}_{len(self.kernels)}"
        prim = sch.mod["main"].with_attr("global_symbol", name).with_attr("target", env.target)
        prim = prim.with_attr("vta.workload", str(key.workload)).with_attr(KERNEL_ATTR, 1)
        if key.kind in TUNED_KINDS:       # autotune.extract_tasks finds the tunable kernels by this attribute
            wkl = dict(zip(("batch", "in_features", "out_features"), (int(x) for x in key.workload))) \
                if key.kind == "dense" else dataclasses.asdict(key.workload)
            prim = prim.with_attr(TASK_ATTR, json.dumps({"kind": key.kind, "workload": wkl, "acc_operands": ops}))
        gv = self.bb.add_func(prim, name)
        return gv, tiling


def is_vta_kernel(func) -> bool:
    """True for a VTA kernel made by graph_pack (host ops on device memory are not kernels)."""
    return isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and KERNEL_ATTR in func.attrs
