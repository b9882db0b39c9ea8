"""Which layers lose accuracy in int8: a per-layer sensitivity report, and the fewest layers to keep in float.

``sensitivity(mod, params, calibration, data)`` quantizes each conv2d/conv2d_transpose/dense layer
alone (every other layer kept in float), runs the module on the CPU (the bits VTA computes) and
scores its outputs against the float network's on ``data``. The score is ``metric(float_outputs,
quantized_outputs)`` (higher is better): by default ``agreement``, the top-1 agreement of
(N, classes) outputs and the correlation of any other output, averaged over the outputs. A layer's
*loss* is the float network's score (1.0 with the default metric) minus its own.

The functions here take the quantizer as their first argument (this module sits below ``quantize``, which
passes itself; ``graph.sensitivity`` and ``graph.fewest_float_layers`` are ``quantize``'s wrappers).
``fewest_float_layers`` (``quantize(..., float_budget=...)``) then keeps the most sensitive layers
in float, as few as it can, until the whole int8 network's score is within the budget of the float
network's: it tries the top ``k`` layers by loss for a growing, then bisected, ``k``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from .evaluate import evaluate
from .prepare import batches, prepare

Metric = Callable[[list[np.ndarray], list[np.ndarray]], float]


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    if a.std() == 0 or b.std() == 0:
        return float(np.array_equal(a, b))
    return float(np.corrcoef(a, b)[0, 1])


def agreement(float_outputs: list[np.ndarray], quantized_outputs: list[np.ndarray]) -> float:
    """Mean over the outputs of top-1 agreement ((N, classes) float outputs) or correlation (any other)."""
    scores = []
    for f, q in zip(float_outputs, quantized_outputs):
        if f.ndim == 2 and f.shape[1] > 1 and np.issubdtype(f.dtype, np.floating):
            scores.append(float((f.argmax(1) == q.argmax(1)).mean()))
        elif not np.issubdtype(f.dtype, np.floating):
            scores.append(float((f == q).mean()))
        else:
            scores.append(_correlation(f, q))
    return float(np.mean(scores))


@dataclass
class Sensitivity:
    """The report: ``rows`` (one per layer: name, source, op, macs, score, loss), best first by loss."""
    float_score: float
    int8_score: float
    rows: list[dict]

    def ranked(self) -> list[str]:
        """Layer names, the most sensitive first."""
        return [r["name"] for r in sorted(self.rows, key=lambda r: -r["loss"])]

    def __str__(self) -> str:
        lines = [f"{'layer':<22}{'op':<18}{'MACs':>14}{'score':>9}{'loss':>9}  source"]
        for r in sorted(self.rows, key=lambda r: -r["loss"]):
            lines.append(f"{r['name']:<22}{r['op']:<18}{r['macs']:>14,}{r['score']:>9.4f}{r['loss']:>9.4f}  "
                         f"{r['source'] or ''}")
        lines.append(f"float {self.float_score:.4f}, all layers int8 {self.int8_score:.4f} "
                     f"(loss {self.float_score - self.int8_score:.4f})")
        return "\n".join(lines)


class _Scorer:
    """Runs quantized modules on the evaluation data and scores them against the float network."""

    def __init__(self, quantize, mod, params, calibration, data, metric: Metric | None, quantize_kw: dict):
        self.quantize_fn = quantize
        self.mod, self.params, self.kw = mod, params, quantize_kw
        self.calibration = list(calibration)
        self.g = prepare(mod, params)
        self.data = batches(self.g, data if data is not None else self.calibration)
        self.metric = metric or agreement
        self.reference = [[np.asarray(evaluate(self.g, feeds)[id(o)]) for o in self.g.outputs] for feeds in self.data]
        self.float_score = self.score_outputs(self.reference)
        self.layers = [n for n in self.g.nodes if n.op in ("conv2d", "conv2d_transpose", "dense")]

    def score_outputs(self, outs: list[list[np.ndarray]]) -> float:
        flat_f = [np.concatenate([r[k] for r in self.reference]) for k in range(len(self.g.outputs))]
        flat_q = [np.concatenate([o[k] for o in outs]) for k in range(len(self.g.outputs))]
        return float(self.metric(flat_f, flat_q))

    def quantize(self, skip: Sequence[str]):
        return self.quantize_fn(self.mod, self.params, calibration=self.calibration, skip_layers=list(skip), **self.kw)

    def score(self, qmod) -> float:
        vm = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())
        outs = []
        for feeds in self.data:
            res = vm["main"](*[tvm.runtime.tensor(x) for x in feeds])
            items = [res] if hasattr(res, "numpy") else list(res)
            outs.append([r.numpy() for r in items])
        return self.score_outputs(outs)


def _macs(n) -> int:
    w = n.attrs["weight"]
    if n.op == "dense":
        return int(n.shape[0] * w.size)
    if n.op == "conv2d_transpose":
        return int(np.prod(n.inputs[0].shape) * np.prod(w.shape[1:]))
    return int(np.prod(n.shape) * np.prod(w.shape[1:]))


def sensitivity(quantize, mod: tvm.IRModule, params: Any, calibration: Iterable, data: Iterable | None = None, *,
                metric: Metric | None = None, layers: Sequence[str] | None = None, **quantize_kw) -> Sensitivity:
    """Per-layer sensitivity: the score lost by quantizing each layer alone (the others in float).

    ``calibration``: as for ``quantize``. ``data``: the batches to score on (default: the calibration
    batches). ``metric(float_outputs, quantized_outputs) -> float``, higher is better (default
    ``agreement``; for accuracy against labels, a metric that ignores the float outputs). ``layers``:
    the names to test (default: every layer). Other keywords go to ``quantize``. Costs one quantization
    and one CPU compilation per layer.
    """
    sc = _Scorer(quantize, mod, params, calibration, data, metric, quantize_kw)
    names = [n.name for n in sc.layers]
    rows = []
    for n in sc.layers:
        if layers is not None and n.name not in layers:
            continue
        s = sc.score(sc.quantize([k for k in names if k != n.name]))
        rows.append({"name": n.name, "source": n.source or n.attrs.get("relax_name"), "op": n.op,
                     "macs": _macs(n), "score": s, "loss": sc.float_score - s})
    int8 = sc.score(sc.quantize([]))
    return Sensitivity(sc.float_score, int8, rows)


def fewest_float_layers(quantize, mod: tvm.IRModule, params: Any, calibration: Iterable, budget: float,
                        data: Iterable | None = None, *, metric: Metric | None = None,
                        report: Sensitivity | None = None, **quantize_kw) -> tuple[list[str], float, Sensitivity]:
    """The fewest most-sensitive layers to keep in float for a score within ``budget`` of float's.

    Returns ``(layers kept in float, the network's score, the sensitivity report)``. ``report``: a
    ``sensitivity`` result to reuse (computed here otherwise).
    """
    sc = _Scorer(quantize, mod, params, calibration, data, metric, quantize_kw)
    target = sc.float_score - budget
    all_int8 = sc.score(sc.quantize([]))
    if all_int8 >= target:
        rep = report or Sensitivity(sc.float_score, all_int8, [])
        return [], all_int8, rep
    rep = report or sensitivity(quantize, mod, params, sc.calibration, data, metric=metric, **quantize_kw)
    order = rep.ranked()
    scores: dict[int, float] = {0: all_int8}

    def score_top(k: int) -> float:
        if k not in scores:
            scores[k] = sc.score(sc.quantize(order[:k]))
        return scores[k]
    lo, hi = 0, 1                       # score_top(lo) misses the target; find hi that meets it
    while hi < len(order) and score_top(hi) < target:
        lo, hi = hi, min(len(order), hi * 2)
    if score_top(hi) < target:
        return order, score_top(hi), rep
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if score_top(mid) >= target:
            hi = mid
        else:
            lo = mid
    return order[:hi], score_top(hi), rep


__all__ = ["Sensitivity", "agreement", "fewest_float_layers", "sensitivity"]
