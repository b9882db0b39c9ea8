"""graph.sensitivity (each layer quantized alone) and quantize(float_budget=...) (the fewest layers kept in
float), on a small MLP built so that two layers lose accuracy in int8 and one does not."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import run_cpu

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vta_compiler import graph  # noqa: E402

BATCH = 64


def mlp(rng):
    """dense_0's output channel 0 is 300x the others (and dense_1 ignores it): the int8 tensor between
    dense_0 and dense_1 resolves the other channels coarsely, whichever of the two is quantized."""
    w0 = rng.normal(0, 0.4, (16, 24))
    w0[0] *= 300
    w1 = rng.normal(0, 0.4, (16, 16))
    w1[:, 0] = 0
    w2 = rng.normal(0, 0.4, (10, 16))
    inits = {f"w{k}": w.astype(np.float32) for k, w in enumerate((w0, w1, w2))}
    nodes = [helper.make_node("Gemm", ["x", "w0"], ["a"], transB=1),
             helper.make_node("Gemm", ["a", "w1"], ["b"], transB=1),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Gemm", ["br", "w2"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, inits


def float_logits(inits, x):
    a = x.astype(np.float64) @ inits["w0"].T.astype(np.float64)
    b = np.maximum(a @ inits["w1"].T, 0)
    return b @ inits["w2"].T


def test_sensitivity_report_and_fewest_float_layers():
    rng = np.random.default_rng(0)
    model, inits = mlp(rng)
    mod, params = graph.from_onnx(model)
    cal = [rng.normal(0, 1, (BATCH, 24)).astype(np.float32) for _ in range(2)]
    data = [rng.normal(0, 1, (BATCH, 24)).astype(np.float32) for _ in range(2)]
    want = np.concatenate([float_logits(inits, x) for x in data]).argmax(1)

    def agreement_of(qmod):      # the report's default metric, computed here independently
        return float((np.concatenate([run_cpu(qmod, x)[0] for x in data]).argmax(1) == want).mean())

    rep = graph.sensitivity(mod, params, cal, data)
    assert rep.float_score == 1.0
    names = ["dense_0", "dense_1", "dense_2"]
    assert [r["name"] for r in rep.rows] == names
    for r in rep.rows:
        alone = graph.quantize(mod, params, calibration=cal, skip_layers=[k for k in names if k != r["name"]])
        assert r["score"] == pytest.approx(agreement_of(alone))
        assert r["loss"] == pytest.approx(1.0 - r["score"])
    loss = {r["name"]: r["loss"] for r in rep.rows}
    assert min(loss["dense_0"], loss["dense_1"]) > 0.1 > loss["dense_2"], loss
    assert set(rep.ranked()[:2]) == {"dense_0", "dense_1"}
    assert rep.int8_score == pytest.approx(agreement_of(graph.quantize(mod, params, calibration=cal)))
    assert "dense_0" in str(rep) and "all layers int8" in str(rep)

    # within 5 points: both layers around the coarse tensor stay in float (either alone does not help)
    q = graph.quantize(mod, params, calibration=cal, float_budget=0.05, eval_data=data)
    kept = [str(s) for s in q["main"].attrs["vta.float_layers"]]
    assert sorted(kept) == ["dense_0", "dense_1"]
    assert graph.layer_outputs(q) == ["dense_2"]
    assert agreement_of(q) >= 0.95
    # a budget the int8 network meets keeps nothing in float
    loose = graph.quantize(mod, params, calibration=cal, float_budget=1.0, eval_data=data)
    assert list(loose["main"].attrs["vta.float_layers"]) == [] and len(graph.layer_outputs(loose)) == 3
    with pytest.raises(graph.QuantizationError, match="float_budget must be a number >= 0"):
        graph.quantize(mod, params, calibration=cal, float_budget=-1)
