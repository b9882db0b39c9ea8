"""A fused host function whose values each depend on one int8 value through a libm call (a dequantized SiLU and
its requantization between two VTA layers) reads them from a 256-entry table its own expression fills: equal bit
for bit to the operators built one by one, as the CPU reference is."""

from __future__ import annotations

import importlib
import re

import numpy as np
import tvm
from tvm import relax

build_module = importlib.import_module("vta_compiler.graph.build")
SHAPE = (1, 4, 40, 40, 1, 16)      # a packed tensor: 102,400 values


def _module(chain: str, shape=SHAPE) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "int8"))
    y = relax.Var("y", relax.TensorType(shape, "int8"))
    params = [x, y] if chain == "two_inputs" else [x]
    with bb.function("main", params):
        with bb.dataflow():
            a = bb.emit(relax.op.multiply(relax.op.astype(x, "float32"), relax.const(0.0625, "float32")))
            if chain == "cheap":
                h = a
            elif chain == "two_inputs":
                h = bb.emit(relax.op.sigmoid(relax.op.add(a, relax.op.astype(y, "float32"))))
            else:
                h = bb.emit(relax.op.multiply(a, relax.op.sigmoid(a)))
            q = relax.op.clip(relax.op.round(relax.op.multiply(h, relax.const(16.0, "float32"))), -128, 127)
            if chain == "split":        # nudenet's C2f blocks: the SiLU fused with the split after it
                parts = bb.emit(relax.op.split(h, 2, axis=1))
                out = bb.emit_output(relax.Tuple([relax.TupleGetItem(parts, 0), relax.TupleGetItem(parts, 1)]))
            else:
                out = bb.emit_output(relax.op.astype(q, "int8"))
        bb.emit_func_output(out)
    return relax.transform.LegalizeOps()(bb.get())


def _fused(mod: tvm.IRModule) -> tvm.IRModule:
    return tvm.transform.Sequential(build_module._fusion())(mod)


def _tables(mod: tvm.IRModule) -> int:
    return sum(len(re.findall(r"_table\d+ = T.sblock_alloc_buffer", f.script())) for f in mod.functions.values()
               if isinstance(f, tvm.tirx.PrimFunc))


def _run(mod: tvm.IRModule, *xs) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(x) for x in xs])
    return res.numpy() if hasattr(res, "numpy") else np.concatenate([r.numpy().ravel() for r in res])


def test_a_silu_on_int8_reads_a_table_equal_bit_for_bit():
    mod = _module("silu")
    fused = _fused(mod)
    assert _tables(fused) == 1, [f.script() for f in fused.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    x = np.random.default_rng(0).integers(-128, 128, SHAPE).astype(np.int8)
    x.reshape(-1)[:256] = np.arange(-128, 128)          # every int8 value at least once
    got, want = _run(fused, x), _run(mod, x)
    assert len(np.unique(want)) > 100, "the outputs are informative, not clipped to a few values"
    np.testing.assert_array_equal(got, want)


def test_each_output_of_a_split_reads_its_table():
    mod = _module("split")
    fused = _fused(mod)
    assert _tables(fused) == 2
    x = np.random.default_rng(2).integers(-128, 128, SHAPE).astype(np.int8)
    got, want = _run(fused, x), _run(mod, x)
    assert len(np.unique(want)) > 100
    np.testing.assert_array_equal(got, want)


def test_a_reduction_reads_its_gelu_from_a_table_in_order():
    """A GELU (tanh form) fused into the max over positions that follows it (magika's pooling): the max reads the
    table, and keeps its order."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 256, 64, 4), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.multiply(relax.op.astype(x, "float32"), relax.const(0.03, "float32")))
            inner = relax.op.multiply(relax.const(0.7978846, "float32"), relax.op.add(
                a, relax.op.multiply(relax.const(0.044715, "float32"), relax.op.multiply(a, relax.op.multiply(a, a)))))
            g = bb.emit(relax.op.multiply(relax.op.multiply(relax.const(0.5, "float32"), a),
                                          relax.op.add(relax.const(1.0, "float32"), relax.op.tanh(inner))))
            out = bb.emit_output(relax.op.max(g, axis=[3]))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    fused = _fused(mod)
    assert _tables(fused) == 1
    x = np.random.default_rng(1).integers(-128, 128, (1, 256, 64, 4)).astype(np.int8)
    got, want = _run(fused, x), _run(mod, x)
    assert len(np.unique(want)) > 100
    np.testing.assert_array_equal(got, want)


def test_a_table_is_made_only_where_it_is_exact_and_pays():
    """Negative controls: a sigmoid of the sum of two tensors (no one-input table exists), a chain without a libm
    call or a division (a table would cost as much as the arithmetic), and a tensor smaller than 256 * 16 values."""
    assert _tables(_fused(_module("two_inputs"))) == 0
    assert _tables(_fused(_module("cheap"))) == 0
    assert _tables(_fused(_module("silu", (1, 1, 8, 8, 1, 16)))) == 0
