"""Tasks: the distinct workloads to tune, and ``extract_tasks`` from a network or a list."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..environment import Environment, get_env
from .space import DenseWorkload, get_space


@dataclass(frozen=True)
class Task:
    """One workload to tune. Its identity is what changes the schedule's cost or feasibility: the operator
    kind, the workload and ``acc_operands``, the per-channel epilogue tensors that share the ACC buffer
    with the accumulators (1: a bias; 2: a bias and a per-channel shift, as quantized networks have)."""
    kind: str
    workload: Any
    acc_operands: int = 1
    name: str = field(default="", compare=False)
    uses: int = field(default=1, compare=False)     # layers of the network with this workload

    @property
    def space(self):
        return get_space(self.kind)

    def workload_json(self) -> dict:
        return self.space.workload_to_json(self.workload)

    @property
    def key(self) -> str:
        """A stable string identity (records are matched on it)."""
        return task_key(self.kind, self.workload_json(), self.acc_operands)

    def to_json(self) -> dict:
        d = {"kind": self.kind, "workload": self.workload_json(), "acc_operands": self.acc_operands}
        if self.name:
            d["name"] = self.name
        return d

    @staticmethod
    def from_json(d: dict) -> Task:
        space = get_space(d["kind"])
        return Task(d["kind"], space.workload_from_json(d["workload"]), int(d.get("acc_operands", 1)),
                    d.get("name", ""))

    def describe(self) -> str:
        s = self.space.describe(self.workload)
        return s + (" +shift[c]" if self.acc_operands >= 2 else "")

    @property
    def label(self) -> str:
        return self.name or self.describe()


def task_key(kind: str, workload_json: dict, acc_operands: int) -> str:
    return f"{kind}|{json.dumps(workload_json, sort_keys=True, separators=(',', ':'))}|{acc_operands}"


def _kind_of(wkl) -> str:
    from ..top.conv2d import Conv2DWorkload
    from ..top.conv2d_transpose import Conv2DTransposeWorkload
    from ..top.group_conv2d import GroupConv2DWorkload
    if isinstance(wkl, Conv2DWorkload):
        return "conv2d"
    if isinstance(wkl, GroupConv2DWorkload):
        return "group_conv2d"
    if isinstance(wkl, Conv2DTransposeWorkload):
        return "conv2d_transpose"
    if isinstance(wkl, DenseWorkload) or (isinstance(wkl, tuple) and len(wkl) == 3):
        return "dense"
    kind = getattr(wkl, "kind", None)      # workloads of other operators may say what they are
    if isinstance(kind, str):
        return kind
    raise TypeError(f"extract_tasks: cannot tell which operator {wkl!r} is a workload of (conv2d: a "
                    "Conv2DWorkload, group_conv2d: a GroupConv2DWorkload, conv2d_transpose: a "
                    "Conv2DTransposeWorkload, dense: (batch, in_features, out_features), or give Task objects)")


def _from_workloads(items, acc_operands: int) -> list[Task]:
    out = []
    for name, wkl in items:
        if isinstance(wkl, Task):
            out.append(wkl if wkl.name or not name else Task(wkl.kind, wkl.workload, wkl.acc_operands, name))
            continue
        kind = _kind_of(wkl)
        if kind == "dense":
            wkl = tuple(int(x) for x in (wkl.batch, wkl.in_features, wkl.out_features)) \
                if isinstance(wkl, DenseWorkload) else tuple(int(x) for x in wkl)
        out.append(Task(kind, wkl, acc_operands, name))
    return out


def _from_packed(mod) -> list[Task]:
    from ..graph.kernels import TASK_ATTR, is_vta_kernel
    layers: dict[str, list[str]] = {}          # kernel -> the layers that call it, in graph order
    order: dict[str, int] = {}
    main = mod["main"] if "main" in [gv.name_hint for gv in mod.functions] else None
    if main is not None and main.attrs is not None and "vta.placement" in main.attrs:
        for row in json.loads(str(main.attrs["vta.placement"]))["rows"]:
            if row.get("device") == "VTA":
                layers.setdefault(row["kernel"], []).append(row["name"])
                order.setdefault(row["name"], len(order))
    out = []
    for gv, func in mod.functions.items():
        if is_vta_kernel(func) and TASK_ATTR in func.attrs:
            t = Task.from_json(json.loads(str(func.attrs[TASK_ATTR])))
            names = layers.get(gv.name_hint, [])
            out.append((names[0] if names else gv.name_hint, len(names) or 1, t))
    out.sort(key=lambda x: order.get(x[0], len(order)))
    return [Task(t.kind, t.workload, t.acc_operands, name, uses) for name, uses, t in out]


def _from_quantized(mod, env: Environment) -> list[Task]:
    import numpy as np

    from ..graph.ir import Graph
    from ..graph.kernels import TUNED_KINDS
    from ..graph.pack import match_layers, workload
    func = mod["main"]
    layers, _ = match_layers(func, Graph.from_relax(func), env)
    out = []
    for ly in layers:
        if ly.kind not in TUNED_KINDS:
            continue
        wkl = workload(ly, env)
        out.append(Task(ly.kind, tuple(int(x) for x in wkl) if ly.kind == "dense" else wkl,
                        1 + int(isinstance(ly.shift, np.ndarray)), ly.name))
    return out


def extract_tasks(network, env: Environment | None = None, acc_operands: int = 1) -> list[Task]:
    """The distinct workloads to tune, in order of first use.

    Args:
        network: a packed network (``graph.graph_pack``), a quantized one (``graph.quantize``; its layers
            that VTA would run), a dict ``{name: workload}`` (``vta.top.RESNET18``), or a list of workloads
            (``Conv2DWorkload``, ``GroupConv2DWorkload`` for group and depthwise convolutions,
            ``Conv2DTransposeWorkload``, ``(batch, in_features, out_features)`` for dense) or ``Task``
            objects.
        env: the environment whose tilings are searched (default: :func:`vta_compiler.get_env`).
        acc_operands: for workloads given directly, what their epilogue keeps in ACC (1: a bias; 2: a
            bias and a per-channel shift); a network says it itself.

    Returns:
        list[Task]: one per distinct workload and epilogue; layers that share one are one task
        (``task.uses`` counts them). Only operators with a tuning space are tasks: ``conv2d``,
        ``group_conv2d`` (which covers depthwise), ``conv2d_transpose`` and ``dense``.

    Raises:
        TypeError: an item is neither a known workload nor a ``Task`` (the message says which types
            are accepted).

    Example:
        >>> from vta_compiler import autotune, graph
        >>> pmod = graph.graph_pack(qmod)                 # the digits classifier of graph.models
        >>> [(t.label, t.describe()) for t in autotune.extract_tasks(pmod)]
        [('conv2d_0', 'conv2d 8x8 3->16 3x1 s1 +shift[c]'), ('conv2d_1', 'conv2d 8x8 16->32 3x3 s2 +shift[c]'),
         ('dense_0', 'dense 40x512->16 +shift[c]')]
    """
    env = env or get_env()
    import tvm
    if isinstance(network, tvm.IRModule):
        from ..graph.kernels import is_vta_kernel
        packed = any(is_vta_kernel(f) for f in network.functions.values())
        tasks = _from_packed(network) if packed else _from_quantized(network, env)
    elif isinstance(network, dict):
        tasks = _from_workloads(network.items(), acc_operands)
    else:
        tasks = _from_workloads([("", w) for w in network], acc_operands)
    unique: dict[str, Task] = {}
    for t in tasks:
        if t.key in unique:
            u = unique[t.key]
            unique[t.key] = Task(u.kind, u.workload, u.acc_operands, u.name, u.uses + t.uses)
        else:
            unique[t.key] = t
    return list(unique.values())
