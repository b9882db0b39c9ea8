"""Fixtures of the compiler tests: a fresh device behind the runtime for each test."""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

import vta_runtime  # noqa: E402
from sim.fsim import FsimDevice  # noqa: E402

from .racy import RacyFsim  # noqa: E402


def _use(device):
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(device))
    return device


@pytest.fixture
def fsim():
    """The runtime's command queue on a fresh fsim (ext_dev tensors are allocated on it)."""
    dev = _use(FsimDevice())
    yield dev
    vta_runtime.set_command_queue(None)


@pytest.fixture
def racy():
    """A factory: the runtime's command queue on a fresh randomly-interleaving fsim."""
    def make(seed: int):
        return _use(RacyFsim(seed=seed))
    yield make
    vta_runtime.set_command_queue(None)
