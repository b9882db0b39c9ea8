"""batch_matmul (the worked example of the guide "Adding an operator"): a matmul of 3-D data by one constant 2-D
weight runs on VTA as dense on the (B*S, K) view, exactly as the CPU runs the same integer graph; two in a row
pass the packed tensor on without a layout change."""

from __future__ import annotations

import numpy as np
from graph_helpers import run_cpu, run_vta
from tvm import relax

from vta_compiler import graph

B, S, K, N, M = 2, 5, 40, 24, 12        # odd sizes: K, N and M are padded to the 16-channel block


def _layer(bb, x, w, bias, shift, name):
    """int8(clip((x @ w + bias) >> shift, 0, 127)) with x int8 (.., K), w int8 (K, N), as quantize emits it."""
    acc = bb.emit(relax.op.matmul(x, relax.const(w), out_dtype="int32"), f"{name}_acc")
    acc = bb.emit(relax.op.add(acc, relax.const(bias)), f"{name}_bias")
    acc = bb.emit(relax.op.right_shift(acc, relax.const(shift)), f"{name}_shift")
    acc = bb.emit(relax.op.clip(acc, 0, 127), f"{name}_clip")
    return bb.emit(relax.op.astype(acc, "int8"), name)


def sequence_model(seed: int = 0):
    """x (B, S, K) -> two batched matmuls with per-channel shifts -> (B, S, M), and its random int8 input."""
    rng = np.random.default_rng(seed)
    w1 = rng.integers(-128, 128, (K, N), dtype=np.int8)
    w2 = rng.integers(-128, 128, (N, M), dtype=np.int8)
    b1 = rng.integers(-(1 << 12), 1 << 12, (N,), dtype=np.int32)
    b2 = rng.integers(-(1 << 12), 1 << 12, (M,), dtype=np.int32)
    s1 = rng.integers(7, 10, (N,), dtype=np.int32)          # one shift per output channel (a tensor operand)
    s2 = np.int32(8)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((B, S, K), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = _layer(bb, x, w1, b1, s1, "bmm_0")
            y = _layer(bb, h, w2, b2, s2, "bmm_1")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), rng.integers(-128, 128, (B, S, K), dtype=np.int8)


def test_batched_matmuls_run_on_vta_as_dense(fsim):
    qmod, x = sequence_model()
    want = run_cpu(qmod, x)[0]
    assert want.shape == (B, S, M) and 0.2 < float(np.mean((want > 0) & (want < 127))), "informative outputs"
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    vta = pl.vta_rows
    assert [r["name"] for r in vta] == ["bmm_0", "bmm_1"] and pl.vta_share == 1.0
    assert vta[0]["op"].startswith("batch_matmul +bias+>>shift[c]") and "(10, 40) view" in vta[0]["note"]
    assert vta[0]["macs"] == B * S * K * N and vta[0]["issued_macs"] == B * S * 48 * 32
    # the first layer's packed output is the second's packed input: no unpack or pack between them
    text = pmod["main"].script()
    assert "bmm_0_host" not in text and "bmm_0_view_packed" not in text
    got = run_vta(graph.build(pmod), x)[0]
    np.testing.assert_array_equal(got, want)


def test_a_batched_matmul_refused_says_why(fsim):
    """A matmul by a batched (3-D) weight is not one 2-D weight for every row: it stays on the CPU, with why."""
    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((B, S, K), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = _layer(bb, x, rng.integers(-128, 128, (B, K, N), dtype=np.int8),
                       np.zeros(N, np.int32), np.int32(8), "bmm_0")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    qmod = bb.get()
    pmod = graph.graph_pack(qmod)
    row = next(r for r in graph.placement(pmod).rows if r["op"] == "matmul")
    assert row["device"] == "CPU" and "a 3-D weight (2, 40, 24): VTA runs one 2-D weight for every row" in row["note"]
    xin = rng.integers(-128, 128, (B, S, K), dtype=np.int8)
    np.testing.assert_array_equal(run_vta(graph.build(pmod), xin)[0], run_cpu(qmod, xin)[0])
