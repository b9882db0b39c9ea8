"""VTA compiler on TVM 0.27: ``import vta_compiler as vta``.

``vta.get_env()``, ``vta.Environment``, ``vta.build_config``, ``vta.lower``, ``vta.build``,
``vta.top`` (packed conv2d / dense with schedules), ``vta.testing``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import ext_dev
from .bitstream import download_bitstream, get_bitstream_path, install_bitstream
from .build_module import build, build_config, lower
from .environment import DevContext, Environment, get_env
from .transform import VTACompileError

try:
    ext_dev.load()
except Exception as exc:   # noqa: BLE001 - compiling still works; running needs the plugin
    import warnings
    warnings.warn(f"the VTA ext_dev plugin is unavailable, so compiled kernels cannot get device tensors: {exc}",
                  RuntimeWarning, stacklevel=2)

from . import top, testing  # noqa: E402,I001
from .rpc_client import program_fpga, reconfig_runtime  # noqa: E402

__all__ = ["DevContext", "Environment", "VTACompileError", "build", "build_config", "download_bitstream", "ext_dev",
           "get_bitstream_path", "get_env", "install_bitstream", "lower", "program_fpga", "reconfig_runtime", "testing",
           "top"]
