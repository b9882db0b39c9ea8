"""Autotuning: measured schedule search on tsim and on boards, spread over TVM's RPC tracker.

Example::

    from vta_compiler import autotune
    tasks = autotune.extract_tasks(pmod)      # a packed or quantized network, {name: workload}, or a list
    autotune.tune(tasks, log="resnet18.json", measure=autotune.TsimMeasure(n_parallel=2), trials=32)
    autotune.tune(tasks, log="resnet18.json", measure=autotune.RPCMeasure(tracker=("127.0.0.1", 9190), key="tsim"))
    with autotune.apply_history_best("resnet18.json"):
        mod = vta.build(...)                  # and graph.graph_pack / graph.build: each layer uses its best record

* ``space``: every knob of a schedule, infeasible candidates filtered out, the rest ranked by the cost
  model; operators register their space by kind (``register_space``).
* ``measure``: build here, run on a server (tsim or a board) through TVM's RPC tracker, count cycles,
  check the output against numpy; failures are recorded with their reason.
* ``records``: JSON lines keyed by the hardware configuration's hash; resumable and append-safe.
* ``dispatch``: ``apply_history_best``, and the records shipped in ``records/`` that builds use by default.
"""

from __future__ import annotations

from .dispatch import apply_history_best, cost_model_only, default_history, default_record_files
from .measure import MeasureError, MeasureResult, RPCMeasure, TsimMeasure, default_module_loader
from .records import History, Record, RecordsError, config_hash, load_history, read_records
from .space import (
    Conv2DSpace,
    Conv2DTransposeSpace,
    DenseSpace,
    GroupConv2DSpace,
    Knob,
    LayerData,
    Space,
    get_space,
    register_space,
)
from .task import Task, extract_tasks
from .tuner import TuneResult, tune

__all__ = ["Conv2DSpace", "Conv2DTransposeSpace", "DenseSpace", "GroupConv2DSpace", "History", "Knob", "LayerData",
           "MeasureError", "MeasureResult",
           "RPCMeasure", "Record", "RecordsError", "Space", "Task", "TsimMeasure", "TuneResult",
           "apply_history_best", "config_hash", "cost_model_only", "default_history", "default_module_loader",
           "default_record_files", "extract_tasks", "get_space", "load_history", "read_records",
           "register_space", "tune"]
