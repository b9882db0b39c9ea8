"""The GEMM tensor intrinsic (update and reset forms), registered with ``s_tir.TensorIntrin``.

One GEMM uop computes ``acc[b, o] += sum_k inp[b, k] * wgt[o, k]`` on one ACC element
(BATCH x BLOCK_OUT int32), one INP element (BATCH x BLOCK_IN) and one WGT element
(BLOCK_OUT x BLOCK_IN); the reset form zeroes one ACC element. Their implementations are a uop
marker (``VTAUopPush`` inside ``coproc_uop_scope``) that the VTA passes turn into uop kernels;
the mock forms (``env.mock``) carry the same marker, which InjectSkip drops.

With BATCH = 1 the descriptions have no batch loop: s_tir's tensorize does not match a unit loop,
so schedules tensorize at the loop below the (unit) batch loop.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.script import tirx as T

#: attribute that marks a uop push (its value names the runtime op that runs the kernel)
UOP_SCOPE = "coproc_uop_scope"
UOP_PUSH = "VTAUopPush"
#: value of the uop scope attribute in mock mode: the kernel is dropped (InjectSkip)
SKIP_GEMM = "VTASkipGEMMOp"

_registered: dict[tuple, tuple[str, str]] = {}


def gemm_intrin_names(env) -> tuple[str, str]:
    """(update, reset) intrinsic names for ``env``, registering them on first use."""
    key = (env.BATCH, env.BLOCK_IN, env.BLOCK_OUT, env.inp_dtype, env.wgt_dtype, env.acc_dtype, env.mock_mode)
    if key not in _registered:
        _registered[key] = _register(env)
    return _registered[key]


def _register(env) -> tuple[str, str]:
    bb, bi, bo = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    it, wt, at = env.inp_dtype, env.wgt_dtype, env.acc_dtype
    isc, wsc, asc = env.inp_scope, env.wgt_scope, env.acc_scope
    il, wl, al = env.inp_lanes, env.wgt_lanes, env.acc_lanes
    mock = env.mock_mode
    # the mock forms keep the uop marker (so virtual threads see the same work) and InjectSkip drops them
    op = SKIP_GEMM if mock else "VTAPushGEMMOp"

    if bb == 1:
        @T.prim_func(s_tir=True)
        def gemm_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (1, bi), it, offset_factor=il, scope=isc)
            B = T.match_buffer(b, (bo, bi), wt, offset_factor=wl, scope=wsc)
            C = T.match_buffer(c, (1, bo), at, offset_factor=al, scope=asc)
            with T.sblock("root"):
                T.reads(C[0:1, 0:bo], A[0:1, 0:bi], B[0:bo, 0:bi])
                T.writes(C[0:1, 0:bo])
                for j, k in T.grid(bo, bi):
                    with T.sblock("update"):
                        vj, vk = T.axis.remap("SR", [j, k])
                        C[0, vj] = C[0, vj] + T.cast(A[0, vk], at) * T.cast(B[vj, vk], at)

        @T.prim_func(s_tir=True)
        def reset_desc(c: T.handle) -> None:
            C = T.match_buffer(c, (1, bo), at, offset_factor=al, scope=asc)
            with T.sblock("root"):
                T.reads()
                T.writes(C[0:1, 0:bo])
                for j in T.serial(bo):
                    with T.sblock("init"):
                        vj = T.axis.remap("S", [j])
                        C[0, vj] = T.int32(0)
    else:
        @T.prim_func(s_tir=True)
        def gemm_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (bb, bi), it, offset_factor=il, scope=isc)
            B = T.match_buffer(b, (bo, bi), wt, offset_factor=wl, scope=wsc)
            C = T.match_buffer(c, (bb, bo), at, offset_factor=al, scope=asc)
            with T.sblock("root"):
                T.reads(C[0:bb, 0:bo], A[0:bb, 0:bi], B[0:bo, 0:bi])
                T.writes(C[0:bb, 0:bo])
                for i, j, k in T.grid(bb, bo, bi):
                    with T.sblock("update"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], at) * T.cast(B[vj, vk], at)

        @T.prim_func(s_tir=True)
        def reset_desc(c: T.handle) -> None:
            C = T.match_buffer(c, (bb, bo), at, offset_factor=al, scope=asc)
            with T.sblock("root"):
                T.reads()
                T.writes(C[0:bb, 0:bo])
                for i, j in T.grid(bb, bo):
                    with T.sblock("init"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = T.int32(0)

    @T.prim_func(s_tir=True)
    def gemm_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (bb, bi), it, offset_factor=il, scope=isc)
        B = T.match_buffer(b, (bo, bi), wt, offset_factor=wl, scope=wsc)
        C = T.match_buffer(c, (bb, bo), at, offset_factor=al, scope=asc)
        with T.sblock("root"):
            T.reads(C[0:bb, 0:bo], A[0:bb, 0:bi], B[0:bo, 0:bi])
            T.writes(C[0:bb, 0:bo])
            T.attr(0, UOP_SCOPE, op)
            T.evaluate(T.call_extern("int32", UOP_PUSH, 0, 0, C.access_ptr("rw"), A.access_ptr("r"),
                                     B.access_ptr("r")))

    @T.prim_func(s_tir=True)
    def reset_impl(c: T.handle) -> None:
        C = T.match_buffer(c, (bb, bo), at, offset_factor=al, scope=asc)
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:bb, 0:bo])
            T.attr(0, UOP_SCOPE, op)
            T.evaluate(T.call_extern("int32", UOP_PUSH, 0, 1, C.access_ptr("w"), 0, 0))

    suffix = f"{bb}x{bi}x{bo}_{it}_{wt}_{at}" + ("_mock" if mock else "")
    names = (f"vta.gemm_{suffix}", f"vta.gemm_reset_{suffix}")
    s_tir.TensorIntrin.register(names[0], gemm_desc, gemm_impl, override=True)
    s_tir.TensorIntrin.register(names[1], reset_desc, reset_impl, override=True)
    return names
