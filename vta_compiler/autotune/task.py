"""``extract_tasks``: the distinct workloads of a network (or of a list) to tune."""

from __future__ import annotations

import json

import tvm

from ..environment import Environment, get_env
from ..graph.ir import Graph
from ..graph.kernels import TASK_ATTR, is_vta_kernel
from ..graph.match import match_layers
from ..graph.report import PLACEMENT_ATTR
from ..tiling import Task


def _from_workloads(items, acc_operands: int) -> list[Task]:
    out = []
    for name, wkl in items:
        if isinstance(wkl, Task):
            out.append(wkl if wkl.name or not name else Task(wkl.kind, wkl.workload, wkl.acc_operands, name))
        else:
            out.append(Task.of(wkl, acc_operands, name))
    return out


def _from_packed(mod) -> list[Task]:
    layers: dict[str, list[str]] = {}          # kernel -> the layers that call it, in graph order
    order: dict[str, int] = {}
    main = mod["main"] if "main" in [gv.name_hint for gv in mod.functions] else None
    if main is not None and main.attrs is not None and PLACEMENT_ATTR in main.attrs:
        for row in json.loads(str(main.attrs[PLACEMENT_ATTR]))["rows"]:
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
    func = mod["main"]
    layers, _ = match_layers(func, Graph.from_relax(func), env)
    return [Task(ly.op.kind, ly.workload, ly.acc_operands, ly.name) for ly in layers]


def extract_tasks(network, env: Environment | None = None, acc_operands: int = 1) -> list[Task]:
    """The distinct workloads to tune, in order of first use.

    Args:
        network: a packed network (``graph.graph_pack``), a quantized one (``graph.quantize``; its layers
            that VTA would run), a dict ``{name: workload}`` (``vta.top.RESNET18``), or a list of workloads
            of registered operators (``Conv2DWorkload``, ``GroupConv2DWorkload`` for group and depthwise
            convolutions, ``Conv2DTransposeWorkload``, ``DenseWorkload`` or ``(batch, in_features,
            out_features)`` for dense) or ``Task`` objects.
        env: the environment whose tilings are searched (default: :func:`vta_compiler.get_env`).
        acc_operands: for workloads given directly, what their epilogue keeps in ACC (1: a bias; 2: a
            bias and a per-channel shift); a network says it itself.

    Returns:
        list[Task]: one per distinct workload and epilogue; layers that share one are one task
        (``task.uses`` counts them). Every registered operator has a tuning space: ``conv2d``,
        ``group_conv2d`` (which covers depthwise), ``conv2d_transpose`` and ``dense``.

    Raises:
        TypeError: an item is neither a workload of a registered operator nor a ``Task`` (the message
            says which types are accepted).

    Example:
        >>> from vta_compiler import autotune, graph
        >>> pmod = graph.graph_pack(qmod)                 # the digits classifier of graph.models
        >>> [(t.label, t.describe()) for t in autotune.extract_tasks(pmod)]
        [('conv2d_0', 'conv2d 8x8 3->16 3x1 s1 +shift[c]'), ('conv2d_1', 'conv2d 8x8 16->32 3x3 s2 +shift[c]'),
         ('dense_0', 'dense 40x512->16 +shift[c]')]
    """
    env = env or get_env()
    if isinstance(network, tvm.IRModule):
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
