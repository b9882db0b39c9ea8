"""The VTA TIR passes (spec 5.4, rewritten for tirx). Each factory returns a ``tvm.transform.Pass``.

In pipeline order (after FlattenBuffer):

=========================  ================================================================
``LiftUopScope``           a uop push's scope grows over its loop nest (one kernel per nest)
``InjectVirtualThread``    interleave virtual threads, private on-chip buffers per thread
``InjectSkip``             mock mode: ``skip_dma_copy`` / ``skip_alu`` nests and mock GEMMs do nothing
``HoistAllocations``       on-chip allocations move to the start of the kernel
``PlanMemory``             SRAM element index for every on-chip buffer; refuse what does not fit
``InjectDepTokens``        dependency tokens between load, compute and store
``InjectDMA``              ``dma_copy`` nests -> 2-D loads and stores
``InjectALU``              ``alu`` nests -> ALU uop kernels
``FoldUopLoop``            GEMM uop nests -> cached uop kernels with up to two hardware loops
``LowerStorage``           drop on-chip allocations; refuse host access to on-chip buffers
``InjectSync``             run the stream at the end of the kernel (``Synchronize``)
``InjectStreamCache``      replay the kernel's streams while its buffers do not change
=========================  ================================================================

``DebugPrologue(flag)`` is added by ``build_config(debug_flag=...)``.
"""

from __future__ import annotations

from tvm import tirx

from ..environment import get_env
from .alu import inject_alu
from .common import VTACompileError
from .deps import inject_dep_tokens
from .dma import inject_dma
from .memory import hoist_allocations, lower_storage, plan_memory
from .sync import debug_prologue, inject_skip, inject_stream_cache, inject_sync
from .uop import fold_uop_loop, lift_uop_scope
from .vthread import inject_virtual_threads


def _make(name: str, fn):
    def factory():
        @tirx.transform.prim_func_pass(opt_level=0, name=name)
        def _pass(func, mod, ctx):
            return fn(func, get_env())
        return _pass
    factory.__name__ = name.split(".")[-1]
    factory.__doc__ = fn.__doc__
    return factory


InjectSkip = _make("vta.InjectSkip", inject_skip)
LiftUopScope = _make("vta.LiftUopScope", lift_uop_scope)
InjectVirtualThread = _make("vta.InjectVirtualThread", inject_virtual_threads)
HoistAllocations = _make("vta.HoistAllocations", hoist_allocations)
PlanMemory = _make("vta.PlanMemory", plan_memory)
InjectDepTokens = _make("vta.InjectDepTokens", inject_dep_tokens)
InjectDMA = _make("vta.InjectDMA", inject_dma)
InjectALU = _make("vta.InjectALU", inject_alu)
FoldUopLoop = _make("vta.FoldUopLoop", fold_uop_loop)
LowerStorage = _make("vta.LowerStorage", lower_storage)
InjectSync = _make("vta.InjectSync", inject_sync)
InjectStreamCache = _make("vta.InjectStreamCache", inject_stream_cache)


def DebugPrologue(flag: int):
    @tirx.transform.prim_func_pass(opt_level=0, name="vta.DebugPrologue")
    def _pass(func, mod, ctx):
        return debug_prologue(func, flag)
    return _pass


def vta_passes() -> list:
    """The VTA passes in pipeline order."""
    return [LiftUopScope(), InjectVirtualThread(), InjectSkip(), HoistAllocations(), PlanMemory(),
            InjectDepTokens(), InjectDMA(), InjectALU(), FoldUopLoop(), LowerStorage(), InjectSync(),
            InjectStreamCache()]


__all__ = ["VTACompileError", "InjectSkip", "LiftUopScope", "InjectVirtualThread", "HoistAllocations", "PlanMemory",
           "InjectDepTokens", "InjectDMA", "InjectALU", "FoldUopLoop", "LowerStorage", "InjectSync",
           "InjectStreamCache", "DebugPrologue", "vta_passes"]
