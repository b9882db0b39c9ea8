"""Longer sweeps (``nox -s sweeps``; skipped in the default suite): every ResNet-18 layer under random
interleavings, and many tilings per layer."""

from __future__ import annotations

import itertools
import os
import random

import pytest

import vta_compiler as vta
from vta_compiler.testing.layers import run_conv2d, run_dense
from vta_compiler.top import RESNET18, Conv2DTiling, DenseTiling
from vta_compiler.top.common import divisors
from vta_compiler.top.conv2d import fits, padded_channels

from .checks import assert_exact

pytestmark = pytest.mark.skipif(not os.environ.get("VTA_SWEEPS"),
                                reason="slow sweep: run `nox -s sweeps` (or set VTA_SWEEPS=1)")


@pytest.mark.parametrize("name", list(RESNET18))
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_resnet18_random_interleaving(racy, name, seed):
    racy(seed)
    assert_exact(run_conv2d(RESNET18[name], name=name, seed=seed))


def _tilings(wkl, n, seed):
    env = vta.get_env()
    cib = padded_channels(wkl.in_filter, env.BLOCK_IN) // env.BLOCK_IN
    cob = wkl.out_filter // env.BLOCK_OUT
    every = [Conv2DTiling(co, th, tw, ci, on, hn, w, kn)
             for co, th, tw, ci, on, hn, w, kn in itertools.product(
                 divisors(cob), divisors(wkl.out_height), divisors(wkl.out_width), divisors(cib), (1, 2), (1, 2),
                 ("ko", "co"), (1, 2))
             if co % on == 0 and th % hn == 0 and (cib // ci) % kn == 0]
    ok = [t for t in every if fits(wkl, t, env)]
    return random.Random(seed).sample(ok, min(n, len(ok)))


@pytest.mark.parametrize("name", ["C3", "C5", "C7", "C9", "C11"])
def test_many_tilings(fsim, racy, name):
    wkl = RESNET18[name]
    for k, t in enumerate(_tilings(wkl, 8, 0)):
        racy(k)
        r = run_conv2d(wkl, t, name=name, seed=k)
        assert_exact(r, t)
        assert r.uop_ratio == 1.0, t


@pytest.mark.parametrize("shape", [(1, 512, 1008), (16, 512, 1008), (64, 256, 256), (8, 1024, 64)])
def test_dense_tilings(racy, shape):
    env = vta.get_env()
    nb, cib, cob = shape[0] // env.BATCH, shape[1] // env.BLOCK_IN, shape[2] // env.BLOCK_OUT
    choices = [DenseTiling(b, c, i, o, h, k) for b, c, i, o, h, k in itertools.product(
        divisors(nb), divisors(cob), divisors(cib), (1, 2), (1, 2), (1, 2)) if b % h == 0 and c % o == 0
        and (cib // i) % k == 0 and b * i * k <= env.INP_BUFF_DEPTH and c * i * k <= env.WGT_BUFF_DEPTH
        and 2 * b * c <= env.ACC_BUFF_DEPTH]
    for k, t in enumerate(random.Random(1).sample(choices, min(6, len(choices)))):
        racy(k)
        assert_exact(run_dense(shape, tiling=t, seed=k), t)
