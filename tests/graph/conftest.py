"""Fixtures for the whole-network tests."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")

import vta_runtime  # noqa: E402
from sim.fsim import FsimDevice  # noqa: E402


@pytest.fixture
def fsim():
    """The process's runtime on a fresh fsim of the default configuration."""
    dev = FsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    yield dev
    vta_runtime.set_command_queue(None)
