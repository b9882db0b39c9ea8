"""Tasks: one workload of one operator to tune, with what its epilogue keeps in ACC."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import registry


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

    def __post_init__(self):
        object.__setattr__(self, "workload", registry.get(self.kind).workload(self.workload))

    @staticmethod
    def of(workload, acc_operands: int = 1, name: str = "", uses: int = 1) -> Task:
        """The task of a workload, its operator found by the workload's type."""
        return Task(registry.of(workload).kind, workload, acc_operands, name, uses)

    @property
    def op(self):
        """The operator of this task (its tuning space, cost model, data and schedule)."""
        return registry.get(self.kind)

    space = op

    def workload_json(self) -> dict:
        return self.op.workload_to_json(self.workload)

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
        op = registry.get(d["kind"])
        return Task(d["kind"], op.workload_from_json(d["workload"]), int(d.get("acc_operands", 1)), d.get("name", ""))

    def describe(self) -> str:
        s = self.op.describe(self.workload)
        return s + (" +shift[c]" if self.acc_operands >= 2 else "")

    @property
    def label(self) -> str:
        return self.name or self.describe()


def task_key(kind: str, workload_json: dict, acc_operands: int) -> str:
    return f"{kind}|{json.dumps(workload_json, sort_keys=True, separators=(',', ':'))}|{acc_operands}"
