"""``build_config``, ``lower``, ``build`` and the registered "vta" TIR pipeline (spec 5.3).

The "vta" pipeline is TVM's s_tir lowering with the VTA passes (``vta_compiler.transform``)
after buffer flattening, and it honours the ``tirx.add_lower_pass`` config (which TVM's own
pipeline ignores) at four phases: 0 before lowering, 1 after LowerOpaqueBlock (loop nests with
pragmas, N-d buffers), 2 after the VTA passes, 3 before host/device splitting. It is registered
by name, so ``tvm.tirx.build(mod, target, pipeline="vta")`` and ``tvm.compile(mod, target,
tir_pipeline="vta")`` use it.

Gotcha G11 avoided: ``lower``/``build`` look for the ``tirx.add_lower_pass`` key of the active
PassContext (the original looked for the wrong key and always replaced the user's config), and
``build_config(config={...})`` merges the given config instead of failing.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import pipeline as s_pipeline

from . import transform
from .environment import TARGET_HOSTS, get_env

ADD_LOWER_PASS = "tirx.add_lower_pass"
PIPELINE = "vta"


def build_config(debug_flag: int = 0, **kwargs: Any) -> tvm.transform.PassContext:
    """A PassContext for VTA builds; ``kwargs`` (opt_level, disabled_pass, config, instruments ...) pass through.

    ``debug_flag`` (``env.DEBUG_DUMP_INSN`` | ...) adds a prologue that sets the runtime's debug mode
    while the kernel runs. ``config`` is merged with the VTA settings, not replaced, and its
    ``tirx.add_lower_pass`` entries (``(phase, pass)`` pairs, phases 0-3) run inside the "vta" pipeline.

    Raises:
        tvm.error.TVMError: a keyword the PassContext does not take, or an unknown ``config`` key.

    Example:
        >>> env = vta.get_env()
        >>> with vta.build_config(debug_flag=env.DEBUG_DUMP_INSN, disabled_pass=["tirx.UnrollLoop"]):
        ...     mod = vta.build(sch)          # the kernel prints its instruction stream when it runs
    """
    config = dict(kwargs.pop("config", None) or {})
    passes = [[tirx.IntImm("int32", int(ph)), p] for ph, p in config.get(ADD_LOWER_PASS, [])]
    if debug_flag:
        passes.append([tirx.IntImm("int32", 2), transform.DebugPrologue(int(debug_flag))])
    config[ADD_LOWER_PASS] = passes
    return tvm.transform.PassContext(config=config, **kwargs)


def _user_passes(phase: int) -> list:
    cfg = tvm.transform.PassContext.current().config
    return [p for ph, p in cfg.get(ADD_LOWER_PASS, []) if int(ph) == phase]


def lowering_passes() -> list:
    """Every pass of the "vta" pipeline up to (not including) host/device splitting."""
    P = _user_passes
    cfg = tvm.transform.PassContext.current().config
    passes = P(0) + [
        s_tir.transform.CanonicalizeLoop(),
        s_tir.transform.LowerCrossThreadReduction(),
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.StmtSimplify(),
        s_tir.transform.LowerOpaqueBlock(),     # loop annotations pragma_* -> AttrStmt
    ] + P(1) + [
        tirx.transform.FlattenBuffer(),
    ] + transform.vta_passes() + P(2) + [
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(not bool(cfg.get("tirx.disable_vectorize", False))),
    ]
    if not bool(cfg.get("tirx.disable_storage_rewrite", False)):
        passes.append(tirx.transform.StorageRewrite())
    passes += [
        tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
    ] + P(3)
    return passes


def _pipeline_factory():
    @tvm.transform.module_pass(opt_level=0, name="vta.Pipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = lowering_passes() + [
            tirx.transform.VerifyMemory(),
            tirx.transform.AnnotateEntryFunc(),
            tirx.transform.SplitHostDevice(),
            tirx.transform.MakePackedAPI(),
        ]
        return tvm.transform.Sequential(passes)(mod)
    return _pipeline, s_pipeline.finalize_host_passes, s_pipeline.finalize_device_passes


tirx.register_tir_pipeline(PIPELINE, _pipeline_factory)


def _to_module(inputs: Any, name: str | None = None) -> tvm.IRModule:
    if isinstance(inputs, s_tir.Schedule):
        inputs = inputs.mod
    if isinstance(inputs, tirx.PrimFunc):
        f = inputs
        if name is not None:
            f = f.with_attr("global_symbol", name)
        return tvm.IRModule({name or "main": f})
    if isinstance(inputs, tvm.IRModule):
        if name is not None and len(inputs.functions) == 1:
            (gv, f), = inputs.functions.items()
            return tvm.IRModule({name: f.with_attr("global_symbol", name)})
        return inputs
    raise TypeError(f"expected an s_tir.Schedule, a PrimFunc or an IRModule, got {type(inputs).__name__}")


class HostMismatchError(RuntimeError):
    """A module compiled for a board's CPU was called on a machine with another CPU."""


def _host_mismatch(target: str, config_source: str) -> HostMismatchError:
    host = TARGET_HOSTS.get(target, {}).get("mtriple", "another CPU")
    return HostMismatchError(
        f"this module was compiled for TARGET {target!r}, whose host CPU is {host}, so it cannot run on this "
        f"machine. Run it on the board over RPC: vta.testing.run(fn) gives fn a session on a {target} board "
        "(then export_library, remote.upload, remote.load_module and remote.ext_dev(0); see the README, "
        "\"Boards\"). Or set TARGET to \"sim\" (fsim) or \"tsim\" (the Verilated core) in the configuration "
        f"({config_source}) to compile for this machine and run on a simulator here.")


def _explain_host_mismatch(mod, env):
    """Make ``mod`` (and ``mod(...)``, ``mod["f"]``, ``mod.f``) raise HostMismatchError instead of TVM's
    "Cannot run module, architecture mismatch" when it is called on a machine its CPU code cannot run on."""
    if not isinstance(mod, tvm.runtime.Module):
        return mod
    plain = type(mod).get_function
    target, source = env.TARGET, env.config.source

    def get_function(name: str, query_imports: bool = False):
        try:
            return plain(mod, name, query_imports)
        except Exception as exc:
            if "architecture mismatch" in str(exc):
                raise _host_mismatch(target, source) from None
            raise
    mod.__dict__["get_function"] = get_function    # the lookups of Module.__call__/__getitem__/__getattr__
    return mod


def _active() -> bool:
    return ADD_LOWER_PASS in tvm.transform.PassContext.current().config


def lower(inputs: Any, name: str | None = None) -> tvm.IRModule:
    """The module after the VTA lowering passes, for inspection: host code calling the runtime.

    Args:
        inputs: an ``s_tir.Schedule``, a ``PrimFunc`` or an ``IRModule``.
        name: the function's name (default ``main``).

    Uses the active :func:`build_config`, or a default one.

    Raises:
        vta_compiler.VTACompileError: the schedule cannot run on VTA; the message names the buffer, the
            loop or the operation and says what to change (tiles that do not fit the SRAMs, a copy that
            is not one 2-D DMA, an ALU operation VTA does not have, a CPU access to an on-chip buffer).
        TypeError: ``inputs`` is none of the three.

    Example:
        >>> print(vta.lower(sch)["main"].script())    # LoadBuffer2D, UopKernelBegin, PushGEMMOp, DepPush ...
    """
    mod = _to_module(inputs, name)
    if not _active():
        with build_config():
            return lower(mod)
    return tvm.transform.Sequential(lowering_passes())(mod)


def build(inputs: Any, target: Any = None, name: str | None = None, target_host: Any = None):
    """Compile for VTA: returns a runtime module whose functions take ``ext_dev`` tensors.

    ``target`` defaults to ``env.target`` (ext_dev with the host CPU of env.TARGET). The module
    calls the runtime (``vta.runtime.*``) at run time, so the same module runs on fsim, tsim or a
    board, whichever device the runtime's command queue is on.

    Raises:
        vta_compiler.VTACompileError: the schedule cannot run on VTA (see :func:`lower`).
        vta_compiler.HostMismatchError: raised later, when a module built for a board's CPU (TARGET
            ``pynq`` or ``ultra96``) is called on another machine; the message says how to run it.

    Example:
        >>> from vta_compiler.top import RESNET18, conv2d_layer, schedule_conv2d_packed
        >>> sch = schedule_conv2d_packed(conv2d_layer(RESNET18["C5"]), wkl=RESNET18["C5"])
        >>> mod = vta.build(sch)
        >>> mod(data, kernel, bias, out)      # tvm.runtime tensors on tvm.ext_dev(0)
    """
    env = get_env()
    if target is None:
        target = env.target
    elif target_host is not None:
        target = tvm.target.Target(target, host=target_host)
    mod = _to_module(inputs, name)
    if not _active():
        with build_config():
            return _explain_host_mismatch(tvm.tirx.build(mod, target=target, pipeline=PIPELINE), env)
    return _explain_host_mismatch(tvm.tirx.build(mod, target=target, pipeline=PIPELINE), env)
