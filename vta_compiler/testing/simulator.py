"""Statistics of the simulated device behind the runtime's command queue (spec 4.5).

``stats()`` returns the device counters (fsim: inp/wgt/acc/uop_load_nbytes, out_store_nbytes,
gemm_counter, alu_counter; tsim adds cycle_count); ``clear_stats()`` resets them.
"""

from __future__ import annotations

import vta_runtime

from ..environment import SIMULATED_TARGETS, get_env


def enabled() -> bool:
    return get_env().TARGET in SIMULATED_TARGETS


def device():
    return vta_runtime.command_handle().device


def stats() -> dict[str, int]:
    return dict(device().stats())


def clear_stats() -> None:
    device().clear_stats()


def debug_mode(flag: int) -> None:
    """Runtime debug flags for the following kernels (DEBUG_DUMP_INSN, DEBUG_DUMP_UOP, DEBUG_FORCE_SERIAL)."""
    vta_runtime.command_handle().set_debug_mode(flag)
