"""Which records builds use: ``apply_history_best`` contexts, else the records shipped with the package.

``conv2d_tiling`` / ``dense_tiling`` / ``group_conv2d_tiling`` / ``conv2d_transpose_tiling`` (and
``graph_pack`` through them) ask :func:`lookup` first:
the innermost ``apply_history_best`` context that has a record for the workload wins, then the
shipped records (``vta_compiler/tiling/shipped/*.jsonl``, like the original's TopHub: tuned
ResNet-18 layers for the default configuration), then the cost model. Records apply only to the
hardware configuration they were measured on (``records.config_hash``).
``VTA_AUTOTUNE_DEFAULT_RECORDS=0`` turns the shipped records off; ``cost_model_only()`` turns every
record off inside a block.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path

from . import registry
from .records import History, Record, config_hash, load_history, read_records

#: the records shipped with the package (TopHub)
DEFAULT_RECORDS_DIR = Path(__file__).resolve().parent / "shipped"
#: set to ``0`` to make builds ignore the shipped records
DEFAULT_RECORDS_ENV = "VTA_AUTOTUNE_DEFAULT_RECORDS"

_serial = itertools.count(1)
_lock = threading.RLock()
_stack: list[tuple[int, History | None]] = []     # (serial, history); None: the cost model only
_default: tuple[tuple, dict[str, History]] | None = None


def default_record_files() -> list[Path]:
    """The record files shipped with the package (``vta_compiler/tiling/shipped/*.jsonl``)."""
    return sorted(DEFAULT_RECORDS_DIR.glob("*.jsonl"))


def _default_enabled() -> bool:
    return os.environ.get(DEFAULT_RECORDS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _default_histories() -> dict[str, History]:
    """The shipped records, per configuration hash (reloaded when a file changes)."""
    global _default
    files = default_record_files()
    stamp = tuple((str(f), f.stat().st_mtime_ns) for f in files)
    if _default is None or _default[0] != stamp:
        by_config: dict[str, History] = {}
        for f in files:
            records, _ = read_records(f)
            for r in records:
                by_config.setdefault(r.config, History(config=r.config, source=str(f))).add(r)
        _default = (stamp, by_config)
    return _default[1]


def default_history(config) -> History:
    """The shipped records for ``config``'s hardware (empty if there are none)."""
    h = config_hash(config)
    return _default_histories().get(h) or History(config=h)


def lookup(kind: str, workload, env, acc_operands: int):
    """The best recorded tiling for a workload under the active records, or None."""
    try:
        space = registry.get(kind)
    except KeyError:
        return None
    wjson = space.workload_to_json(workload)
    want = config_hash(env.config)
    with _lock:
        stack = list(_stack)
    for _, hist in reversed(stack):
        if hist is None:
            return None
        if hist.config == want:
            t = hist.best_tiling(kind, wjson, acc_operands, env)
            if t is not None:
                return t
    if not _default_enabled():
        return None
    hist = _default_histories().get(want)
    return hist.best_tiling(kind, wjson, acc_operands, env) if hist else None


def context_key() -> tuple:
    """Identifies the records ``lookup`` consults now (caches of chosen tilings include it)."""
    with _lock:
        serials = tuple(s for s, _ in _stack)
    stamp = tuple((str(f), f.stat().st_mtime_ns) for f in default_record_files()) if _default_enabled() else ()
    return serials, stamp


@contextlib.contextmanager
def _push(hist: History | None):
    serial = next(_serial)
    with _lock:
        _stack.append((serial, hist))
    try:
        yield hist
    finally:
        with _lock:
            _stack.remove((serial, hist))


def apply_history_best(records, env=None):
    """``with apply_history_best("resnet18.jsonl"):`` builds inside use the best record of each workload.

    Inside the ``with`` block, :func:`vta_compiler.top.conv2d_tiling`, ``dense_tiling``,
    ``group_conv2d_tiling`` and ``conv2d_transpose_tiling`` (hence
    ``schedule_conv2d_packed``, ``graph.graph_pack`` and ``graph.build``) take the fastest correct tiling
    recorded for the layer's workload. Workloads without a record fall back to the shipped records
    (``vta_compiler/tiling/shipped/``), then to the cost model. Contexts nest; the innermost wins.

    Args:
        records: a log path, a list of paths, a ``History`` or a list of ``Record``.
        env: whose hardware configuration selects the records (default: :func:`vta_compiler.get_env`).
            Only records measured on the same hardware parameters are used (sim, tsim and a board of
            the same parameters share them).

    Raises:
        RecordsError: a log has records but every one of them was measured on another hardware
            configuration; the message names both configuration hashes.

    Example:
        >>> with autotune.apply_history_best("resnet18.jsonl"):
        ...     mod = vta.build(schedule_conv2d_packed(func, wkl=RESNET18["C5"]))
    """
    from ..environment import get_env
    env = env or get_env()
    if isinstance(records, History):
        hist = records
    elif isinstance(records, (str, os.PathLike)):
        hist = load_history(records, env.config)
    else:
        items = list(records)
        if items and all(isinstance(r, Record) for r in items):
            hist = History(items, config_hash(env.config), "records")
        else:
            hist = History(config=config_hash(env.config), source=", ".join(str(p) for p in items))
            for p in items:
                for r in load_history(p, env.config).by_task.values():
                    for rec in r:
                        hist.add(rec)
    return _push(hist)


def cost_model_only():
    """``with cost_model_only():`` builds inside ignore every record (the cost model alone picks tilings).

    Example:
        >>> with autotune.cost_model_only():
        ...     untuned = conv2d_tiling(env, RESNET18["C5"])
    """
    return _push(None)
