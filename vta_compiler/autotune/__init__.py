"""Autotuning: measured schedule search on tsim and on boards, spread over TVM's RPC tracker.

Example::

    from vta_compiler import autotune
    tasks = autotune.extract_tasks(pmod)      # a packed or quantized network, {name: workload}, or a list
    autotune.tune(tasks, log="resnet18.json", measure=autotune.TsimMeasure(n_parallel=2), trials=32)
    autotune.tune(tasks, log="resnet18.json", measure=autotune.RPCMeasure(tracker=("127.0.0.1", 9190), key="tsim"))
    with autotune.apply_history_best("resnet18.json"):
        mod = vta.build(...)                  # and graph.graph_pack / graph.build: each layer uses its best record

* the search spaces are the operators' own (``vta_compiler.top``: every knob of a schedule, infeasible
  candidates filtered out, the rest ranked by the cost model); ``get_space(kind)`` is the operator;
* ``measure``: build here, run on a server (tsim or a board) through TVM's RPC tracker, count cycles,
  check the output against numpy; failures are recorded with their reason;
* records (JSON lines keyed by the hardware configuration's hash, resumable and append-safe) and
  ``apply_history_best`` live in ``vta_compiler.tiling``, below the operators, and are re-exported here.
"""

from __future__ import annotations

from ..tiling import (
    History,
    Knob,
    LayerData,
    Operator,
    Record,
    RecordsError,
    Task,
    apply_history_best,
    config_hash,
    cost_model_only,
    default_history,
    default_record_files,
    load_history,
    read_records,
    registry,
)
from ..tiling import dispatch as dispatch
from ..tiling import records as records
from .measure import MeasureError, MeasureResult, RPCMeasure, TsimMeasure, default_module_loader
from .task import extract_tasks
from .tuner import TuneResult, tune

get_space = registry.get
kinds = registry.kinds

__all__ = ["History", "Knob", "LayerData", "MeasureError", "MeasureResult", "Operator", "RPCMeasure", "Record",
           "RecordsError", "Task", "TsimMeasure", "TuneResult", "apply_history_best", "config_hash",
           "cost_model_only", "default_history", "default_module_loader", "default_record_files", "extract_tasks",
           "get_space", "kinds", "load_history", "read_records", "tune"]
