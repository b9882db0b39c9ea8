"""VTA kernels of a network: one scheduled PrimFunc per distinct layer workload and epilogue.

A layer is offloaded as ``call_tir`` of its operator's layer (``Operator.compute``) with its tiling
(``Operator.tiling``: the best record, else the cost model's choice); layers with the same workload,
epilogue and shift share one kernel. The kernels carry ``env.target`` (ext_dev), so ``graph.build``
sends them, and only them, through the "vta" TIR pipeline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import tvm
from tvm import relax

from ..environment import Environment
from ..tiling import Task, registry
from ..top.common import Requant, Residual

#: PrimFunc attribute that marks a VTA kernel (compiled with the "vta" TIR pipeline)
KERNEL_ATTR = "vta.kernel"
#: PrimFunc attribute with the kernel's tuning task as JSON (kind, workload, acc_operands; see vta_compiler.autotune)
TASK_ATTR = "vta.task"


@dataclass(frozen=True)
class KernelKey:
    workload: object                # a registered operator's workload (the operator is found by its type)
    bias: bool
    shift: int | None               # immediate shift, or None with channel_shift
    channel_shift: bool
    clip: tuple[int, int] | None
    residual: Residual | None = None     # a fused residual add (the kernel reads an int8 shortcut after its operands)
    requant: Requant | None = None       # a fixed-point multiply (multiplier None: a per-channel tensor)


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
        env, wkl = self.env, key.workload
        op = registry.of(wkl)
        ops = 1 + int(key.channel_shift) + int(key.requant is not None and key.requant.multiplier is None)
        tiling = op.tiling(wkl, env, ops)
        fused = {"residual": key.residual} if key.residual is not None else {}
        if key.requant is not None:
            fused["requant"] = key.requant
        func = op.compute(wkl, env, shift=key.shift or 0, bias=key.bias, clip=key.clip,
                          channel_shift=key.channel_shift, **fused)
        sch = op.schedule(func, tiling, env=env)
        name = f"vta_{op.label(wkl)}_{op.kernel_name(wkl)}_{len(self.kernels)}"
        prim = sch.mod["main"].with_attr("global_symbol", name).with_attr("target", env.target)
        # autotune.extract_tasks finds the tunable kernels by this attribute
        prim = prim.with_attr(KERNEL_ATTR, 1).with_attr(TASK_ATTR, json.dumps(Task(op.kind, wkl, ops).to_json()))
        gv = self.bb.add_func(prim, name)
        return gv, tiling


def is_vta_kernel(func) -> bool:
    """True for a VTA kernel made by graph_pack (host ops on device memory are not kernels)."""
    return isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and KERNEL_ATTR in func.attrs
