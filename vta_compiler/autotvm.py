"""The original VTA's ``vta.autotvm`` names, so that a tuning script written for it finds them.

``module_loader(bitstream=None)`` made the function AutoTVM's RPC runner called before each measurement:
push the configuration and program the FPGA. Here it is a thin face over
``vta_compiler.autotune.default_module_loader``, for ``autotune.RPCMeasure(module_loader=...)``.
"""

from __future__ import annotations

from .autotune.measure import default_module_loader
from .rpc_client import program_fpga, reconfig_runtime


def module_loader(bitstream: str | None = None):
    """A module loader for ``autotune.RPCMeasure``: before each measurement, push the configuration to the server
    and program its FPGA with ``bitstream`` (a path), or, without one, with the configuration's own bitstream
    unless the board already holds it (nothing to program on tsim).

    Example:
        >>> measure = autotune.RPCMeasure(tracker=("10.0.0.2", 9190), key="pynq",
        ...                               module_loader=vta.autotvm.module_loader())
    """
    if bitstream is None:
        return default_module_loader

    def load(remote, env) -> None:
        reconfig_runtime(remote, env)
        program_fpga(remote, bitstream, env=env)
    return load
