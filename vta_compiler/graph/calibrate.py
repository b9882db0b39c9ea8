"""Calibration: what each tensor of the float network reaches on sample inputs, and its int8 exponent.

``collect`` runs the float graph on the calibration batches (numpy, ``evaluate``) and keeps, per
node, the largest magnitude, the largest magnitude per channel (for the nodes asked for: the
inputs of depthwise layers) and, for the methods that need them, the given percentile of
magnitudes and a fixed-seed sample of the values. ``exponent`` turns that into a power-of-two
exponent ``e`` (``real = q * 2**-e``) by one of ``METHODS``:

- ``"max"``: the largest ``e`` with ``max|x| * 2**e <= 127`` (nothing clips);
- ``"percentile"``: the same for the given percentile of ``|x|`` (outliers clip);
- ``"mse"``: of ``e_max .. e_max + SEARCH``, the one with the smallest mean squared error of
  round-and-clip on the sampled values;
- ``"entropy"``: of the same candidates, the smallest KL divergence between the histogram of ``|x|``
  and its 128-level quantized form (TensorRT's criterion, on power-of-two thresholds).

Scales are powers of two (VTA requantizes with shifts), so every method chooses among a few
exponents, and the finer ones trade clipping of the largest values for resolution of the others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .evaluate import evaluate
from .ir import Const, Graph, describe

#: exponents are kept in this range (a tensor that is all zeros gets the top one)
EXP_MIN, EXP_MAX = -24, 24
METHODS = ("max", "percentile", "mse", "entropy")
#: the mse and entropy methods try e_max .. e_max + SEARCH
SEARCH = 6
#: values sampled per node and batch, and kept per node in all (mse, entropy)
SAMPLE, KEEP = 4096, 65536
#: the fewest sampled values the entropy method needs (fewer: the maximum's exponent)
ENTROPY_MIN = 4096
#: the default percentile of calibrate="percentile"
PERCENTILE = 99.99


class CalibrationError(ValueError):
    """Bad calibration data (raised as ``QuantizationError`` by ``quantize``)."""


def exponent_for(amax: float) -> int:
    """The largest exponent e with ``amax * 2**e <= 127``."""
    if not amax > 0 or not math.isfinite(amax):
        return EXP_MAX
    return int(min(EXP_MAX, max(EXP_MIN, math.floor(math.log2(127.0 / amax)))))


@dataclass
class NodeStats:
    amax: float = 0.0
    pct: float = 0.0                                  # the largest per-batch percentile (method "percentile")
    channel_amax: np.ndarray | None = None            # per channel (axis 1), for the nodes asked for
    samples: list = field(default_factory=list)       # sampled values (methods "mse", "entropy")

    def sample(self) -> np.ndarray:
        return np.concatenate(self.samples) if self.samples else np.zeros(1)


def _non_finite_origin(n, vals: dict) -> str:
    """Where a node's first non-finite values come from: computed from finite inputs, or carried from a constant
    of the model (an exporter's -inf for a masked maximum, say)."""
    for a in n.tensor_args:
        v = a.value if isinstance(a, Const) else vals.get(id(a))
        if v is not None and np.issubdtype(np.asarray(v).dtype, np.floating) and not np.isfinite(v).all():
            what = "a constant of the model" if isinstance(a, Const) else describe(a)
            return f"holds NaN or infinite values carried from {what}"
    return "computes NaN or infinite values from finite inputs"


def collect(g: Graph, batches: Iterable[list[np.ndarray]], *, channel_nodes: set[int] = frozenset(),
            method: str = "max", percentile: float | None = None) -> dict[int, NodeStats]:
    """Run the float graph on every batch; the statistics of each (tensor) node."""
    stats: dict[int, NodeStats] = {id(n): NodeStats() for n in g.nodes if not n.is_tuple}
    rng = np.random.default_rng(0)
    sampled = method in ("mse", "entropy")
    for k, feeds in enumerate(batches):
        vals = evaluate(g, feeds)
        for n in g.nodes:
            if n.is_tuple:
                continue
            v = vals[id(n)]
            a = np.abs(v.astype(np.float64, copy=False))
            if not np.isfinite(a).all():
                raise CalibrationError(f"calibration item {k}: {describe(n)} ({n.op}) " + _non_finite_origin(n, vals)
                                       + ", which no int8 scale can represent")
            s = stats[id(n)]
            s.amax = max(s.amax, float(a.max(initial=0)))
            if percentile is not None and a.size:
                s.pct = max(s.pct, float(np.percentile(a, percentile)))
            if id(n) in channel_nodes:
                c = a.max(axis=tuple(i for i in range(a.ndim) if i != 1))
                s.channel_amax = c if s.channel_amax is None else np.maximum(s.channel_amax, c)
            if sampled and v.size and n.dtype.startswith("float"):
                flat = v.reshape(-1)
                s.samples.append(flat if flat.size <= SAMPLE else flat[rng.choice(flat.size, SAMPLE, replace=False)])
                if sum(x.size for x in s.samples) > 2 * KEEP:
                    allv = np.concatenate(s.samples)
                    s.samples = [allv[rng.choice(allv.size, KEEP, replace=False)]]
    return stats


def _mse(x: np.ndarray, e: int) -> float:
    q = np.clip(np.round(x * 2.0 ** e), -128, 127) * 2.0 ** -e
    return float(np.mean((x - q) ** 2))


def _kl_all(x: np.ndarray, e_max: int, cands: list[int]) -> list[float]:
    """KL(P || Q) per candidate exponent (TensorRT's entropy calibration on power-of-two thresholds).

    One fine histogram of |x| up to the threshold of ``e_max``; for exponent ``e`` its first bins up to
    ``127.5 * 2**-e`` are P (what lies beyond is added to the last bin), and Q is those bins without
    the clipped values, merged into 128 levels and spread back over the bins they do not leave empty.
    """
    fine = 128 * 2 ** (cands[-1] - e_max) * 4
    hist, _ = np.histogram(np.abs(x), bins=fine, range=(0, 127.5 * 2.0 ** -e_max))
    hist = hist.astype(np.float64)
    out = []
    for e in cands:
        nb = fine >> (e - e_max)
        p = hist[:nb].copy()
        p[-1] += hist[nb:].sum()            # P keeps the clipped values (in its last bin), Q does not
        levels = hist[:nb].reshape(128, -1)
        nz = levels > 0
        q = np.where(nz, levels.sum(axis=1, keepdims=True) / np.maximum(nz.sum(axis=1, keepdims=True), 1), 0)
        p, q = p / p.sum(), q.reshape(-1) / max(q.sum(), 1.0)
        m = p > 0
        out.append(float(np.sum(p[m] * np.log(p[m] / np.maximum(q[m], 1e-12)))))
    return out


def exponent(s: NodeStats, method: str = "max") -> int:
    """The node's exponent by ``method`` (see the module docstring)."""
    e_max = exponent_for(s.amax)
    if method == "max" or s.amax == 0:
        return e_max
    if method == "percentile":
        return exponent_for(s.pct) if s.pct > 0 else e_max
    x = s.sample().astype(np.float64)
    if method == "entropy" and x.size < ENTROPY_MIN:      # too few values for a histogram to say anything
        return e_max
    cands = [e for e in range(e_max, min(EXP_MAX, e_max + SEARCH) + 1)]
    errs = [_mse(x, e) for e in cands] if method == "mse" else _kl_all(x, e_max, cands)
    return cands[int(np.argmin(errs))]


__all__ = ["EXP_MAX", "EXP_MIN", "METHODS", "CalibrationError", "NodeStats", "collect", "exponent", "exponent_for"]
