"""VTA compiler on TVM 0.27: ``import vta_compiler as vta``.

``vta.get_env()``, ``vta.Environment``, ``vta.build_config``, ``vta.lower``, ``vta.build``,
``vta.top`` (the operators: packed conv2d / dense / ... with schedules), ``vta.graph`` (whole networks),
``vta.testing``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import ext_dev
from .bitstream import download_bitstream, get_bitstream_path, install_bitstream
from .build_module import HostMismatchError, build, build_config, lower
from .environment import DevContext, Environment, get_env
from .transform import VTACompileError

ext_dev.install()   # the C++ plugin is built when TVM first needs the ext_dev device

from . import top, testing  # noqa: E402,I001
from . import graph  # noqa: E402
from . import autotvm  # noqa: E402  (the original's vta.autotvm.module_loader)
from .rpc_client import program_fpga, reconfig_runtime  # noqa: E402

# the original's users look for graph_pack in vta.top; it lives in graph, which sits above top
top.graph_pack = graph.graph_pack

__all__ = ["DevContext", "Environment", "HostMismatchError", "VTACompileError", "build", "build_config",
           "download_bitstream", "ext_dev", "get_bitstream_path", "get_env", "install_bitstream", "lower",
           "autotvm", "graph", "program_fpga", "reconfig_runtime", "testing", "top"]
