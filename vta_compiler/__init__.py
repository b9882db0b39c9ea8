"""VTA compiler on TVM 0.27: ``import vta_compiler as vta``.

``vta.get_env()``, ``vta.Environment``, ``vta.build_config``, ``vta.lower``, ``vta.build``,
``vta.top`` (packed conv2d / dense with schedules), ``vta.testing``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import ext_dev
from .build_module import build, build_config, lower
from .environment import DevContext, Environment, get_env
from .transform import VTACompileError

_ext_dev_error: Exception | None = None
try:
    ext_dev.load()
except Exception as exc:   # noqa: BLE001 - reported when a device tensor is needed
    _ext_dev_error = exc

from . import top, testing  # noqa: E402,I001

__all__ = ["DevContext", "Environment", "VTACompileError", "build", "build_config", "ext_dev", "get_env", "lower",
           "testing", "top"]
