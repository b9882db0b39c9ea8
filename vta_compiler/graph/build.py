"""``graph.build``: one executable with the VTA kernels and the host code, and ``placement``.

``graph.build`` compiles the VTA kernels (PrimFuncs marked ``vta.kernel``) with the "vta" TIR
pipeline into one object file, with the host side at LLVM -O0 (a kernel's host code is a sequence
of runtime calls: -O3 tripled the build time for nothing, and LLVM's JIT took 30 s on ResNet-18's
kernels), rewrites their ``call_tir`` sites to ``call_dps_packed`` of the compiled functions, and
builds the rest (host operators, including those legalized for tensors in device memory) with
TVM's default pipeline, the kernels imported as a static library. ``relax.VirtualMachine(ex, ...)``
links the executable into a shared library on first use (``ex.jit()``), as ``export_library`` does.
The registered TIR pipeline ``"vta.graph"`` also compiles a packed module in one go
(``tvm.compile(pmod, "llvm", tir_pipeline="vta.graph")``): it sends the kernels through the "vta"
pipeline and every other PrimFunc through the default one.

Relax's ``StaticPlanBlockMemory`` shares storage between tensors by size and dtype only, not by
device, so it could hand a CPU op's output ext_dev storage; it is disabled and the VM's pooled
allocator of each device recycles the buffers instead.
"""

from __future__ import annotations

import os
import platform
import tempfile

import tvm
from tvm import relax, tirx

from ..build_module import PIPELINE, _host_mismatch, build_config
from ..environment import SIMULATED_TARGETS, Environment, get_env
from .ir import GraphError
from .kernels import is_vta_kernel

GRAPH_PIPELINE = "vta.graph"


def _graph_pipeline_factory():
    vta_passes, finalize_host, finalize_device = tirx.get_tir_pipeline(PIPELINE)

    @tvm.transform.module_pass(opt_level=0, name="vta.graph.RoutePrimFuncs")
    def route(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        vta = tvm.IRModule({gv: f for gv, f in mod.functions.items() if is_vta_kernel(f)})
        host = tvm.IRModule({gv: f for gv, f in mod.functions.items() if not is_vta_kernel(f)})
        if vta.functions:
            with build_config():
                vta = vta_passes(vta)
        if host.functions:
            default, _, _ = tirx.get_default_tir_pipeline(tvm.target.Target("llvm"))
            host = default(host)
        vta.update(host)
        return vta

    return route, finalize_host, finalize_device


tirx.register_tir_pipeline(GRAPH_PIPELINE, _graph_pipeline_factory)


@relax.expr_functor.mutator
class _KernelCalls(relax.PyExprMutator):
    """``call_tir`` of a separately compiled kernel becomes ``call_dps_packed`` of its symbol."""

    def __init__(self, names: set[str]):
        super().__init__()
        self.names = names

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" and \
                isinstance(call.args[0], relax.GlobalVar) and call.args[0].name_hint in self.names:
            return relax.call_dps_packed(relax.ExternFunc(call.args[0].name_hint), call.args[1],
                                         out_ty=call.ty_args[0])
        return call


def build(pmod: tvm.IRModule, env: Environment | None = None) -> relax.VMExecutable:
    """Compile a packed network (``graph_pack``'s result) into one executable.

    The host code is built for the configuration's host CPU (``env.target_host``: the local CPU for
    sim/tsim, ARM for the boards, so export it with a cross compiler there: ``export_library(path,
    fcompile=tvm.contrib.cc.cross_compiler("arm-linux-gnueabihf-g++"))``; a ``relax.VirtualMachine`` made
    here from a board's executable raises ``vta.HostMismatchError`` with that advice). The executable
    survives ``export_library`` / ``tvm.runtime.load_module`` and runs on fsim, tsim or a board (over RPC).
    """
    env = env or get_env()
    if "vdevice" not in pmod.global_infos:
        raise GraphError("graph.build expects the result of graph.graph_pack (it declares the cpu and ext_dev "
                         "VDevices); for a CPU-only module use tvm.compile(mod, 'llvm')")
    kernels = {gv: f for gv, f in pmod.functions.items() if is_vta_kernel(f)}
    host = tvm.IRModule({gv: f for gv, f in pmod.functions.items() if gv not in kernels},
                        global_infos=pmod.global_infos)
    if kernels:
        quick_host = dict(env.target_host.export(), **{"opt-level": 0})
        with build_config():
            lib = tirx.build(tvm.IRModule(kernels), target=tvm.target.Target(env.target.export(), host=quick_host),
                             pipeline=PIPELINE)
        names = [gv.name_hint for gv in kernels]
        with tempfile.TemporaryDirectory() as tmp:      # an object file: LLVM's JIT took 30 s on ResNet-18
            obj = os.path.join(tmp, "vta_kernels.o")
            lib.write_to_file(obj)
            static = tvm.runtime.load_static_library(obj, names)
        host["main"] = _KernelCalls(set(names)).visit_expr(pmod["main"])
        host = host.with_attr("external_mods", [static])
    with tvm.transform.PassContext(opt_level=3, disabled_pass=["StaticPlanBlockMemory"]):
        ex = tvm.compile(host, target=env.target_host)
    if env.TARGET not in SIMULATED_TARGETS and platform.machine() not in ("armv7l", "aarch64"):
        target, source = env.TARGET, env.config.source

        def jit(*_args, **_kwargs):      # relax.VirtualMachine(ex, ...) here: say what to do instead
            raise _host_mismatch(target, source)
        ex.__dict__["jit"] = jit
    return ex
