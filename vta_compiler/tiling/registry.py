"""The operator registry: one object per operator kind, found by its kind or by its workload's type.

Operators register themselves (``vta_compiler.top`` registers conv2d, group_conv2d, conv2d_transpose and
dense when it is imported; an operator of your own calls :func:`register` once). Everything else asks
here which operator a workload belongs to, never branching on a kind string.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_BY_KIND: dict[str, Any] = {}


def register(op) -> Any:
    """Add operator object ``op`` under ``op.kind`` (replacing an earlier one of the same kind); returns it."""
    if not getattr(op, "kind", ""):
        raise ValueError(f"{type(op).__name__}: an operator needs a non-empty kind to be registered")
    _BY_KIND[op.kind] = op
    return op


def get(kind: str):
    """The operator registered under ``kind``."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"no tuning space for operator kind {kind!r}: no operator of that kind is registered; known "
                       f"kinds: {', '.join(sorted(_BY_KIND))}") from None


def of(workload):
    """The operator whose workload ``workload`` is (by type; an operator may also accept other forms of its
    workload, such as dense's ``(batch, in_features, out_features)`` tuple)."""
    for op in _BY_KIND.values():
        if type(workload) is op.workload_type:
            return op
    for op in _BY_KIND.values():
        if op.accepts(workload):
            return op
    raise TypeError(f"cannot tell which operator {workload!r} is a workload of; the registered operators take "
                    + ", ".join(f"{op.kind}: {op.workload_type.__name__}" for op in _BY_KIND.values()))


def kinds() -> list[str]:
    return sorted(_BY_KIND)


def operators() -> Iterator:
    """The registered operators in registration order (graph_pack tries their patterns in this order)."""
    return iter(list(_BY_KIND.values()))
