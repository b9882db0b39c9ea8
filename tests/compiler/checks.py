"""The check every layer test makes: exact int8 results on data that make them informative."""

from __future__ import annotations

import numpy as np

#: at least this fraction of the expected outputs must lie strictly inside the clip range
MIN_INSIDE = 0.3


def assert_exact(r, what: object = "") -> None:
    """``r`` (a LayerRun) is exact, and its expected outputs are not mostly saturated."""
    label = f"{r.name} {what}".strip()
    assert r.inside_fraction >= MIN_INSIDE, (
        f"{label}: only {r.inside_fraction:.0%} of the expected outputs lie strictly inside the clip range "
        f"{r.clip} at >>{r.shift}: the data check little more than signs")
    assert r.correct, f"{label}: {np.count_nonzero(r.output != r.expected)} of {r.expected.size} outputs wrong"
