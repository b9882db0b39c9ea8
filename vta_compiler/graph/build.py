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

The host code's Relax pipeline is TVM's default one with operator fusion added after legalization
(``FuseOps``/``FuseTIR``, which ``tvm.compile``'s default pipeline on the CPU leaves out): a chain of
element-wise host operators (a hard-swish with its requantization, a layout change with the ops around it)
becomes one compiled function with one output allocation instead of one per operator; where a part of its
expression is a function of one int8 value through a libm call or a division (a SiLU or hard-swish with its
dequantization and requantization, a GELU under a max), that part's 256 possible results are computed first, by
the same expression, and then looked up (``_lookup_table``). Each fused operator
computes what it computed alone, in the same order and type, so results stay equal bit for bit to the
quantized module's CPU build (``tvm.compile(qmod, "llvm")``, one function per operator), which the tests
check on every network; with one exception, which decides: TVM's LLVM back end contracts a multiply and
an add into a fused multiply-add where the CPU has one (x86 with FMA, AArch64), which rounds once instead
of twice. So host operators are fused only for a host target whose code has no fused multiply-add (the
simulators' default x86-64 target, ARMv7 without VFPv4): ``_contracts`` compiles ``a * b + c`` for the
target and looks for one.

Relax's ``StaticPlanBlockMemory`` shares storage between tensors by size and dtype only, not by
device, so it could hand a CPU op's output ext_dev storage; it is disabled and the VM's pooled
allocator of each device recycles the buffers instead.
"""

from __future__ import annotations

import math
import os
import platform
import tempfile

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import TensorLoad

from ..build_module import PIPELINE, _host_mismatch, build_config
from ..environment import SIMULATED_TARGETS, TARGET_HOSTS, Environment, get_env
from .ir import GraphError
from .kernels import is_vta_kernel

GRAPH_PIPELINE = "vta.graph"


#: fused multiply-add mnemonics: x86 (FMA3/FMA4), AArch64, ARMv7 VFPv4/NEON
_FMA = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub", "fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub", "vfma",
        "vfms", "vfnma", "vfnms")


_contraction: dict[str, bool] = {}
#: x86-64 micro-architecture levels by the /proc/cpuinfo flags they need (v3 without its FMA, see _contracts)
_X86_LEVELS = (("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
               ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}))


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_ops_target(env: Environment) -> tvm.target.Target:
    """The target the host operators are compiled for: the configuration's host CPU (``env.target_host``), and for
    the simulators, whose host is this machine, this x86-64 CPU's vector extensions (x86-64-v3 or -v2) without
    fused multiply-add. Vector instructions compute what scalar ones do; only a fused multiply-add rounds
    differently."""
    if env.TARGET in SIMULATED_TARGETS and platform.machine() in ("x86_64", "AMD64"):
        flags = _cpu_flags()
        for level, needs in _X86_LEVELS:
            if needs <= flags:
                return tvm.target.Target({**TARGET_HOSTS[env.TARGET], "mcpu": level, "mattr": ["-fma"]})
    return env.target_host


def _contracts(target: tvm.target.Target) -> bool:
    """Whether TVM's LLVM code for this host target turns ``a * b + c`` into a fused multiply-add."""
    key = str(target)
    if key not in _contraction:
        from tvm import te
        a, b, c = (te.placeholder((64,), "float32", name=n) for n in "abc")
        out = te.compute((64,), lambda i: a[i] * b[i] + c[i], name="out")
        lib = tvm.tirx.build(te.create_prim_func([a, b, c, out]), target=target)
        mnemonics = (line.split()[0] for line in lib.inspect_source("s").lower().splitlines()
                     if line.strip() and line[0] in "\t ")
        _contraction[key] = any(m.startswith(_FMA) for m in mnemonics)
    return _contraction[key]


TENSOR_COPY = "vta.runtime.TensorCopy"


@relax.expr_functor.mutator
class _PooledCopies(relax.PyExprMutator):
    """``R.to_vdevice`` (a layout change's copy between the CPU and device memory) becomes a call of the
    runtime's TensorCopy into a tensor the VM allocates: the VM's lowering of to_vdevice allocates a new
    device tensor on every call (through Python), the VM's own allocations come from its pooled allocator,
    so a tensor keeps its address from one inference to the next and the command-stream cache replays the
    streams of the layers that read it."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.to_vdevice":
            x = call.args[0]
            ty = x.ty
            out = relax.TensorType(ty.shape, ty.dtype, vdevice=call.attrs.dst_vdevice)
            return relax.call_dps_packed(relax.ExternFunc(TENSOR_COPY), [x], out_ty=out)
        return call


def _pooled_copies():
    @tvm.transform.module_pass(opt_level=0, name="vta.graph.PooledCopies")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, f in list(mod.functions.items()):
            if isinstance(f, relax.Function):
                mod[gv] = _PooledCopies().visit_expr(f)
        return mod
    return _pass


def _called_targets(mod: tvm.IRModule, f: relax.Function) -> dict:
    """The targets (by their text) of the PrimFuncs that ``f`` calls."""
    found = {}

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.call_tir":
            callee = mod[e.args[0]]
            t = callee.attrs.get("target") if callee.attrs else None
            found[str(t)] = t
    relax.analysis.post_order_visit(f.body, visit)
    return found


def _fusion() -> list:
    """FuseOps and FuseTIR, keeping the target of the fused operators: a host operator on tensors in device
    memory is legalized for the ext_dev target (its host code checks that its tensors are on ext_dev), and
    FuseTIR's function would lose that."""
    from tvm.relax import transform
    targets: dict[str, object] = {}

    @tvm.transform.module_pass(opt_level=0, name="vta.graph.NoteFusedTargets")
    def note(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, f in mod.functions.items():
            if not isinstance(f, relax.Function) or not f.attrs or "Primitive" not in f.attrs:
                continue
            found = _called_targets(mod, f)
            explicit = {k: t for k, t in found.items() if t is not None}
            if "None" in found and len(explicit) == 1 and "cpu" in [str(k) for k in next(iter(explicit.values())).keys]:
                found = explicit        # an operator without a target is built for the host's: the same one
            if len(found) > 1:
                raise GraphError(f"graph.build: the host operators fused into {gv.name_hint} are built for "
                                 f"different targets ({', '.join(found)}), which one function cannot be")
            targets[gv.name_hint] = next(iter(found.values()), None)
        return mod

    @tvm.transform.module_pass(opt_level=0, name="vta.graph.SetFusedTargets")
    def restore(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, f in list(mod.functions.items()):
            t = targets.get(gv.name_hint)
            if isinstance(f, tirx.PrimFunc) and t is not None and (not f.attrs or "target" not in f.attrs):
                mod[gv] = f.with_attr("target", t)
        return mod

    return [transform.AnnotateTIROpPattern(), transform.FuseOps(), note, transform.FuseTIR(), restore, _inline()]


def _inline_producers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A fused function with its intermediate blocks inlined into their consumers: one loop nest that keeps
    every intermediate value in a register instead of one pass over memory per operator (LLVM then
    vectorizes it). Inlining substitutes each value's expression where it is used, so every operation and
    its float32 rounding stay as they were."""
    from tvm import s_tir
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:       # not one root block of blocks (a function TVM did not make by legalization)
        return func
    for b in reversed(blocks[:-1]):
        try:
            sch.compute_inline(b)
        except Exception:   # a reduction, or a block whose result is a function output: it stays a loop nest
            pass
    return sch.mod["main"]


#: calls that make a value worth a table: a libm call or a division per value costs more than one table load
_COSTLY_OPS = ("tirx.exp", "tirx.sigmoid", "tirx.tanh", "tirx.erf", "tirx.log", "tirx.sqrt", "tirx.rsqrt", "tirx.pow",
               "tirx.exp2", "tirx.log1p")
#: a table (256 values) pays for itself on tensors of at least this many values
LOOKUP_MIN_VALUES = 4096


def _costly(expr) -> bool:
    found = []

    def visit(e):
        if isinstance(e, tirx.Div) or (isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op)
                                       and e.op.name in _COSTLY_OPS):
            found.append(e)
        return e
    tvm_ffi.structural_map(expr, visit)
    return bool(found)


def _one_int8_value(expr):
    """The int8 (or uint8) load that ``expr`` is a function of, if it reads one value and nothing else (every load
    the same element, no loop variable outside it), else None."""
    loads = []

    def collect(e):
        if isinstance(e, TensorLoad):
            loads.append(e)
            return tirx.const(0, str(e.ty))     # the load's indices are not free variables of expr
        return e
    rest = tvm_ffi.structural_map(expr, collect, order="pre")
    if not loads or str(loads[0].ty) not in ("int8", "uint8"):
        return None
    x = loads[0]
    if any(not (a.source.same_as(x.source) and tvm_ffi.structural_equal(a.indices, x.indices)) for a in loads[1:]):
        return None
    free = []

    def variables(e):
        if isinstance(e, tirx.Var):
            free.append(e)
        return e
    tvm_ffi.structural_map(rest, variables)
    return None if free else x


def _tabled_nest(nest, tables: list, fills: list):
    """One loop nest of a fused function with its costly one-int8-value parts read from tables (appended to
    ``tables``, with the loops that fill them to ``fills``), or ``nest`` itself."""
    from tvm import s_tir
    loops, node = [], nest
    while isinstance(node, tirx.For):
        loops.append(node)
        node = node.body
    if not loops or not isinstance(node, s_tir.SBlockRealize) or \
            not all(isinstance(f.extent, tirx.IntImm) for f in loops) or \
            math.prod(int(f.extent) for f in loops) < LOOKUP_MIN_VALUES:
        return nest
    block = node.block
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not _costly(store.value):     # no part of it can be costly
        return nest
    i64 = "int64"
    mine = []

    def table_for(e):
        if isinstance(e, (TensorLoad, tirx.Var, tirx.IntImm, tirx.FloatImm)) or not _costly(e):
            return e
        x = _one_int8_value(e)
        if x is None:
            return e
        dtype = str(x.ty)
        offset = 128 if dtype == "int8" else 0
        lut = tirx.decl_buffer([tirx.IntImm(i64, 256)], str(e.ty),
                               name=f"{block.name_hint}_table{len(tables) + len(mine)}")
        i, vi = tirx.Var("i", i64), tirx.Var("vi", i64)
        code = tirx.Cast(dtype, vi - tirx.IntImm(i64, offset))
        value = tvm_ffi.structural_map(e, (TensorLoad, lambda a: code if a.source.same_as(x.source) else a),
                                       order="pre")
        fill = s_tir.SBlock([tirx.IterVar(tvm.ir.Range(0, tirx.IntImm(i64, 256)), vi, tirx.IterVar.DataPar)], [],
                            [tirx.BufferRegion(lut, [tvm.ir.Range.from_min_extent(vi, 1)])], lut.name,
                            tirx.BufferStore(lut, value, [vi]))
        fills.append(tirx.For(i, tirx.IntImm(i64, 0), tirx.IntImm(i64, 256), tirx.ForKind.SERIAL,
                              s_tir.SBlockRealize([i], True, fill)))
        mine.append(lut)
        return tirx.BufferLoad(lut, [tirx.Cast(i64, x) + tirx.IntImm(i64, offset)])

    value = tvm_ffi.structural_map(store.value, (tvm.ir.expr.Expr, table_for), order="pre")
    if not mine:
        return nest
    tables.extend(mine)
    reads = [*block.reads, *[tirx.BufferRegion(t, [tvm.ir.Range(0, tirx.IntImm(i64, 256))]) for t in mine]]
    new_block = s_tir.SBlock(block.iter_vars, reads, block.writes, block.name_hint,
                             tirx.BufferStore(store.buffer, value, store.indices), block.init,
                             block.alloc_buffers, block.match_buffers, block.annotations)
    out = s_tir.SBlockRealize(node.iter_values, node.predicate, new_block)
    for f in reversed(loops):
        out = tirx.For(f.loop_var, f.min, f.extent, f.kind, out, f.thread_binding, f.annotations)
    return out


def _lookup_table(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A fused host function, its loop nests (one per output: a split has several) with each of their costly parts
    that is a function of one int8 (or uint8) value (through a libm call or a division: a dequantized sigmoid,
    SiLU, hard-swish or GELU, with its requantization) read from a table of its 256 possible results, computed
    first by the same expression: every value is what the expression gives, bit for bit. A reduction keeps its
    order and reads the table inside."""
    from tvm import s_tir
    root = func.body.block if isinstance(func.body, s_tir.SBlockRealize) else None
    if root is None or root.init is not None:
        return func
    nests = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    tables, fills = [], []
    nests = [_tabled_nest(n, tables, fills) for n in nests]
    if not tables:
        return func
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, tirx.SeqStmt([*fills, *nests]),
                            None, [*root.alloc_buffers, *tables], root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(func.body.iter_values, func.body.predicate, new_root))


def _inline():
    @tvm.transform.module_pass(opt_level=0, name="vta.graph.InlineFusedProducers")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, f in list(mod.functions.items()):
            if isinstance(f, tirx.PrimFunc) and gv.name_hint.startswith("fused_") and not is_vta_kernel(f):
                mod[gv] = _lookup_table(_inline_producers(f))
        return mod
    return _pass


def _host_pipeline(fuse: bool):
    """TVM's default Relax build pipeline (``relax.pipeline.default_build_pipeline``), with the copies between
    the CPU and device memory pooled (``_PooledCopies``) and, if ``fuse``, fusion after ``LegalizeOps``."""
    from tvm.relax import backend, transform
    fusion = _fusion() if fuse else []

    @tvm.transform.module_pass(opt_level=0, name="vta.graph.HostPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tvm.transform.Sequential([
            _pooled_copies(),
            backend.DispatchSampling(),
            backend.DispatchSortScan(),
            transform.LegalizeOps(),
            *fusion,
            transform.RewriteDataflowReshape(),
            transform.ToNonDataflow(),
            transform.RemovePurityChecking(),
            transform.CallTIRRewrite(),
            transform.StaticPlanBlockMemory(),
            transform.RewriteCUDAGraph(),
            transform.LowerAllocTensor(),
            transform.KillAfterLastUse(),
            transform.LowerRuntimeBuiltin(),
            transform.ComputePrimValue(),
            transform.VMShapeLower(),
            transform.AttachGlobalSymbol(),
        ])(mod)
    return _pipeline


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
        target = host_ops_target(env)
        fuse = not _contracts(target)
        if not fuse:
            target = env.target_host
        ex = tvm.compile(host, target=target, relax_pipeline=_host_pipeline(fuse))
    if env.TARGET not in SIMULATED_TARGETS and platform.machine() not in ("armv7l", "aarch64"):
        target, source = env.TARGET, env.config.source

        def jit(*_args, **_kwargs):      # relax.VirtualMachine(ex, ...) here: say what to do instead
            raise _host_mismatch(target, source)
        ex.__dict__["jit"] = jit
    return ex
