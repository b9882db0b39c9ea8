"""Testing utilities: ``run`` (choose the device from env.TARGET), ``simulator`` statistics, references."""

from __future__ import annotations

from . import simulator
from .reference import conv2d_reference, dense_reference
from .utils import run

__all__ = ["conv2d_reference", "dense_reference", "run", "simulator"]
