"""Small VTA programs written with TE + s_tir, as in the original unit tests (test_vta_insn)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te, topi

import vta_compiler as vta


def on_device(*arrays):
    return [tvm.runtime.tensor(np.ascontiguousarray(a), device=tvm.ext_dev(0)) for a in arrays]


def run(mod, inputs, out_shape, out_dtype="int8"):
    args = on_device(*inputs)
    out = tvm.runtime.empty(out_shape, out_dtype, device=tvm.ext_dev(0))
    mod(*args, out)
    return out.numpy()


def _root_loop(sch, name):
    return sch.get_loops(sch.get_sblock(name))[0]


def _copy(a):
    return lambda *i: a(*i)


def elementwise(env, shape, stages, n_inputs=1, pad=None, copy_in=True):
    """An ALU program: load ``n_inputs`` int32 tensors into the accumulators, apply ``stages``, store int8.

    ``stages``: functions ``f(prev, inputs) -> lambda *i: expr`` giving one element-wise stage each.
    ``pad``: (pad_before, pad_after) lists for ``topi.nn.pad`` of the first input while loading.
    Returns (schedule, output shape).
    """
    ins = [te.placeholder(shape, env.acc_dtype, name=f"a{k}") for k in range(n_inputs)]
    bufs = []
    for k, a in enumerate(ins):
        if k == 0 and pad is not None:
            bufs.append(topi.nn.pad(a, pad[0], pad[1], name=f"a{k}_buf"))
        elif copy_in:
            bufs.append(te.compute(a.shape, _copy(a), name=f"a{k}_buf"))
        else:
            bufs.append(a)
    cur = bufs[0]
    names = []
    for n, f in enumerate(stages):
        cur = te.compute(cur.shape, f(cur, bufs), name=f"s{n}")
        names.append(f"s{n}")
    res = te.compute(cur.shape, lambda *i: cur(*i).astype(env.out_dtype), name="res")
    sch = s_tir.Schedule(te.create_prim_func(ins + [res]))
    for k in range(n_inputs if copy_in or pad is not None else 0):
        b = sch.get_sblock(f"a{k}_buf")
        sch.set_scope(b, 0, env.acc_scope)
        sch.annotate(_root_loop(sch, f"a{k}_buf"), "pragma_" + env.dma_copy, 1)
    for name in names:
        sch.set_scope(sch.get_sblock(name), 0, env.acc_scope)
        sch.annotate(_root_loop(sch, name), "pragma_" + env.alu, 1)
    sch.annotate(_root_loop(sch, "res"), "pragma_" + env.dma_copy, 1)
    return sch, tuple(int(x) for x in res.shape)


def build(sch, **kwargs):
    with vta.build_config(**kwargs):
        return vta.build(sch)
