"""The cost model ranks tilings as tsim does: on the records shipped with the package (tsim measurements of
every layer's candidates), the Spearman rank correlation between the model's estimate and the measured cycles
reaches a floor per layer kind, and the model's own choice (what a build uses without records) is measured
there and is within a few percent of the best measured tiling.

The floor is the issue's goal, 0.9 for every kind: below the worst layer of each kind today (conv2d 0.97,
depthwise 0.96, group 0.99, transposed 0.97, dense 0.99; the records are deterministic tsim runs, so the margin
is for a model change, not for noise), and far above the model this one replaced (the estimates the ResNet-18
records were measured with rank them at -0.58 to 0.75: the negative control). The default's factor 1.05 is above
the worst layer today (DW8, 1.034).
"""

from __future__ import annotations

import numpy as np
import pytest

import vta_compiler as vta
from vta_compiler import autotune

#: minimum Spearman correlation per layer, by the operator's label of the layer
FLOORS = {"conv2d": 0.9, "depthwise_conv2d": 0.9, "group_conv2d": 0.9, "conv2d_transpose": 0.9, "dense": 0.9}
#: the untuned default may take this much longer than the best measured tiling
DEFAULT_FACTOR = 1.05
MIN_CANDIDATES = 8


def spearman(a, b) -> float:
    """Spearman's rho with ties at their mean rank (numpy only)."""
    def ranks(x):
        x = np.asarray(x, dtype=np.float64)
        _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return (first + (counts - 1) / 2)[inverse]
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def shipped_layers():
    """(task, its correct records) per shipped task with enough candidates, for this configuration."""
    env = vta.get_env()
    hist = autotune.default_history(env.config)
    if not len(hist):
        pytest.skip(f"no shipped records for this configuration ({env.MODEL})")
    out = []
    for task in hist.tasks():
        recs = [r for r in hist.records(task) if r.ok]
        if len(recs) >= MIN_CANDIDATES:
            out.append((task, recs))
    return env, out


def test_spearman_reference():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [5, 6, 7, 8]) == pytest.approx(np.corrcoef([0.5, 0.5, 2, 3], [0, 1, 2, 3])[0, 1])


def test_the_model_ranks_the_shipped_records_as_tsim_does():
    env, layers = shipped_layers()
    kinds = set()
    failing = []
    for task, recs in layers:
        op, kind = task.op, task.op.label(task.workload)
        kinds.add(kind)
        rho = spearman([op.estimate(task.workload, r.tiling(), env) for r in recs], [r.cycles for r in recs])
        if rho < FLOORS[kind]:
            failing.append(f"{task.label} ({kind}): {rho:.3f} < {FLOORS[kind]}")
    assert not failing, "the cost model misranks: " + "; ".join(failing)
    assert kinds == set(FLOORS)          # every kind has shipped records
    # negative control: the estimates the ResNet-18 records were measured with (the model before this one) fail
    old = [spearman([r.estimate for r in recs], [r.cycles for r in recs]) for task, recs in layers
           if task.name in {f"C{i}" for i in range(1, 12)} and all(r.estimate for r in recs)]
    assert old and min(old) < FLOORS["conv2d"]


def test_the_untuned_default_is_close_to_the_best_measured_tiling():
    env, layers = shipped_layers()
    slow = []
    for task, recs in layers:
        choice = task.op.model_choice(task.workload, env, task.acc_operands)
        mine = [r for r in recs if r.tiling() == choice]     # records from before a knob existed have its default
        assert mine, f"{task.label}: the cost model's choice {choice} was not measured"
        ratio = mine[0].cycles / min(r.cycles for r in recs)
        if ratio > DEFAULT_FACTOR:
            slow.append(f"{task.label}: {ratio:.3f}")
    assert not slow, f"the untuned default takes more than {DEFAULT_FACTOR}x the best: " + "; ".join(slow)
