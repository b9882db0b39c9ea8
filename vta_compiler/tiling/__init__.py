"""The machinery below the operators: the operator interface and registry, tiling spaces, tasks, the
tuning records and which of them builds use.

* ``operator``: :class:`Operator`, everything about one operator kind (``vta_compiler.top`` has one per
  file), and :class:`Offload`, how graph_pack runs a Relax layer with it;
* ``registry``: ``register(op)``, ``get(kind)``, ``of(workload)``: the operators, found by kind or by
  workload type;
* ``space``: knobs, what a tiling needs of the on-chip buffers, a measurement's data;
* ``task``: one workload of one operator to tune;
* ``records``: measured tilings as JSON lines, keyed by the hardware configuration's hash;
* ``dispatch``: ``apply_history_best``, ``cost_model_only`` and the records shipped with the package
  (``shipped/*.jsonl``), which an operator's ``tiling`` consults first.

Nothing here imports an operator: operators register themselves when ``vta_compiler.top`` is imported.
"""

from __future__ import annotations

from . import registry
from .dispatch import apply_history_best, cost_model_only, default_history, default_record_files
from .operator import WORKLOAD_ATTR, Offload, Operator, recorded_workload, with_workload
from .records import History, Record, RecordsError, config_hash, load_history, read_records
from .registry import register
from .space import BufferNeeds, Knob, LayerData
from .task import Task, task_key

__all__ = ["WORKLOAD_ATTR", "BufferNeeds", "History", "Knob", "LayerData", "Offload", "Operator", "Record",
           "RecordsError", "Task", "apply_history_best", "config_hash", "cost_model_only", "default_history",
           "default_record_files", "load_history", "read_records", "recorded_workload", "register", "registry",
           "task_key", "with_workload"]
