"""Host operators with a packed form run on the packed tensor between VTA layers, activations included (a SiLU
in float between two quantized convolutions), and the placement report counts the layout changes."""

from __future__ import annotations

import numpy as np
from graph_helpers import run_cpu, run_vta

from vta_compiler import graph


def silu_network(between: str = "silu"):
    """conv 20->24 3x3, then x * sigmoid(x) (or a channel softmax, which has no packed form), then conv 24->8 1x1."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (24, 20, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 24, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0.1, 0.1, 24).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0.1, 0.1, 8).astype(np.float32), "b2")]
    act = [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["h"])] \
        if between == "silu" else [helper.make_node("Softmax", ["a"], ["h"], axis=1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]), *act,
             helper.make_node("Conv", ["h", "w2", "b2"], ["y"])]
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, rng


def _packed(between: str):
    model, rng = silu_network(between)
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=[rng.normal(0, 1, (1, 20, 8, 8)).astype(np.float32)
                                                    for _ in range(2)])
    return qmod, graph.graph_pack(qmod), rng.normal(0, 1, (1, 20, 8, 8)).astype(np.float32)


def test_activations_between_vta_layers_stay_packed(fsim):
    qmod, pmod, x = _packed("silu")
    pl = graph.placement(pmod)
    assert [r["name"] for r in pl.vta_rows] == ["conv2d_0", "conv2d_1"]
    first, last = (k for k, r in enumerate(pl.rows) if r["device"] == "VTA")
    between = pl.rows[first + 1:last]
    assert {"sigmoid", "multiply", "round", "astype"} <= {r["op"] for r in between}
    assert all(r["device"] == "CPU" and r["layout"] == "packed" for r in between), \
        [(r["op"], r["layout"]) for r in between]
    assert pl.layout_changes == {"packed": 1, "unpacked": 1}, "the image in, the result out, nothing between"
    assert "2 layout changes" in pl.summary()
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0])


def test_an_op_without_a_packed_form_costs_two_layout_changes(fsim):
    """Negative control: a softmax over the channels has no packed form (it reads across the channel padding)."""
    qmod, pmod, x = _packed("softmax")
    pl = graph.placement(pmod)
    softmax = next(r for r in pl.rows if r["op"] == "nn.softmax")
    assert softmax["layout"] == "plain" and pl.layout_changes == {"packed": 2, "unpacked": 2}
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0])
