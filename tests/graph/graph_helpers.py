"""Helpers for the whole-network tests: CPU and VTA runs, clip statistics."""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from vta_compiler import graph
from vta_compiler.graph.ir import Graph


def outputs(res) -> list[np.ndarray]:
    items = list(res) if isinstance(res, (tvm.ir.Array, list, tuple)) or hasattr(res, "__len__") and \
        not hasattr(res, "numpy") else [res]
    return [r.numpy() for r in items]


#: CPU virtual machines by the module's structural hash: (module, vm); compiling and JIT-loading a module
#: costs seconds, and tests run the same module on many inputs
_CPU_VMS: dict[int, tuple] = {}


def cpu_vm(qmod) -> relax.VirtualMachine:
    """The quantized module alone, compiled for the CPU once (structurally equal modules share it)."""
    key = tvm_ffi.structural_hash(qmod)
    hit = _CPU_VMS.get(key)
    if hit is None or not tvm_ffi.structural_equal(hit[0], qmod):
        if len(_CPU_VMS) >= 64:           # the oldest go: a session builds hundreds of small modules
            del _CPU_VMS[next(iter(_CPU_VMS))]
        hit = _CPU_VMS[key] = (qmod, relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu()))
    return hit[1]


def run_cpu(qmod, *inputs) -> list[np.ndarray]:
    """The quantized module alone, run on the CPU (the reference the VTA run must equal)."""
    return outputs(cpu_vm(qmod)["main"](*[tvm.runtime.tensor(x) for x in inputs]))


def run_vta(ex, *inputs) -> list[np.ndarray]:
    vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
    return outputs(vm["main"](*[tvm.runtime.tensor(x) for x in inputs]))


def clip_ranges(qmod) -> dict[str, tuple[int, int]]:
    """Each quantized layer's clip bounds, read from the module itself."""
    g = Graph.from_relax(qmod["main"])
    by_name = {n.name: n for n in g.nodes}
    out = {}
    for name in graph.layer_outputs(qmod):
        clip = by_name[name].args[0]
        assert clip.op == "relax.clip", f"{name} is not produced by a clip"
        out[name] = tuple(int(v.value) for v in clip.args[1:3])
    return out


def inside_fractions(qmod, *inputs) -> dict[str, float]:
    """Fraction of each layer's int8 outputs strictly inside its clip range, on these inputs."""
    names = graph.layer_outputs(qmod)
    res = run_cpu(graph.probe(qmod, names), *inputs)
    vals = res[-len(names):]
    fr = {}
    for name, v in zip(names, vals):
        lo, hi = clip_ranges(qmod)[name]
        fr[name] = float(((v > lo) & (v < hi)).mean())
    return fr
