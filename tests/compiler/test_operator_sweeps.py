"""Longer sweeps of the group, depthwise and transposed convolutions (``nox -s sweeps``; skipped in the
default suite): every D1-D9, DW1-DW9, G1-G4, CT1-CT3 and U-Net workload under random load/compute/store
interleavings, and random tilings of a few."""

from __future__ import annotations

import os
import random

import pytest

from vta_compiler.testing.layers_extra import run_conv2d_transpose, run_group_conv2d
from vta_compiler.top import DCGAN, MOBILENET_DEPTHWISE, MOBILENET_GROUP, UNET_DECODER, WIDE_GROUP
from vta_compiler.top import conv2d_transpose as CT
from vta_compiler.top import group_conv2d as G

pytestmark = pytest.mark.skipif(not os.environ.get("VTA_SWEEPS"),
                                reason="slow sweep: run `nox -s sweeps` (or set VTA_SWEEPS=1)")

GROUPS = {**MOBILENET_GROUP, **MOBILENET_DEPTHWISE, **WIDE_GROUP}
TRANSPOSED = {**DCGAN, **UNET_DECODER}


def _ok(r):
    assert r.inside_fraction >= 0.3, r.name
    assert r.correct, r.name
    return r


@pytest.mark.parametrize("name", list(GROUPS))
def test_group_workload(racy, name):
    racy(len(name))
    r = _ok(run_group_conv2d(GROUPS[name], name=name, seed=3))
    lanes = 16 // min(GROUPS[name].in_per_group, 16)
    assert r.stats["gemm_counter"] == lanes * r.ideal_uops


@pytest.mark.parametrize("name", list(TRANSPOSED))
def test_transposed_workload(racy, name):
    racy(len(name))
    r = _ok(run_conv2d_transpose(TRANSPOSED[name], name=name, seed=3))
    assert r.stats["gemm_counter"] == r.ideal_uops <= 0.30 * r.dilated_uops


@pytest.mark.parametrize("name", ["D4", "D7", "G3", "DW6"])
def test_group_tilings(racy, name):
    wkl = GROUPS[name]
    every = list(G.candidate_tilings(wkl))
    for k, t in enumerate(random.Random(0).sample(every, min(5, len(every)))):
        racy(k)
        _ok(run_group_conv2d(wkl, t, name=name, seed=k))


@pytest.mark.parametrize("name", ["CT2", "UP1"])
def test_transposed_tilings(racy, name):
    wkl = TRANSPOSED[name]
    every = list(CT.candidate_tilings(wkl))
    for k, t in enumerate(random.Random(0).sample(every, min(5, len(every)))):
        racy(k)
        _ok(run_conv2d_transpose(wkl, t, name=name, seed=k))
