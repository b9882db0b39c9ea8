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


def _map_network(channels: int, then_conv: bool):
    """conv 20->channels 3x3, a sigmoid, then the network output (a detector's probability map) or a conv
    channels->8 1x1."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (channels, 20, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0.1, 0.1, channels).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, channels, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["a"], ["s" if then_conv else "y"])]
    if then_conv:
        nodes.append(helper.make_node("Conv", ["s", "w2"], ["y"]))
    out = [1, 8 if then_conv else channels, 8, 8]
    g = helper.make_graph(nodes, "map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    mod, params = graph.from_onnx(model)
    qmod = graph.quantize(mod, params, calibration=[rng.normal(0, 1, (1, 20, 8, 8)).astype(np.float32)
                                                    for _ in range(2)])
    return qmod, graph.graph_pack(qmod), rng.normal(0, 1, (1, 20, 8, 8)).astype(np.float32)


def _after_last_layer(pl):
    last = max(k for k, r in enumerate(pl.rows) if r["device"] == "VTA")
    return {r["op"]: r["layout"] for r in pl.rows[last + 1:]}


def test_a_padded_output_map_is_unpacked_before_its_activation(fsim):
    """A one-channel map is 16 lanes per pixel packed: its dequantization and sigmoid run on the plain form, after
    the one layout change that was there anyway, and compute 1 lane instead of 16."""
    qmod, pmod, x = _map_network(1, then_conv=False)
    pl = graph.placement(pmod)
    after = _after_last_layer(pl)
    assert after.get("sigmoid") == "plain" and set(after.values()) == {"plain"}, after
    assert pl.layout_changes == {"packed": 1, "unpacked": 1}
    got, want = run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0]
    assert 0.1 < float(np.std(want)) and np.array_equal(got, want)


def test_an_unpadded_map_is_unpacked_as_int8_before_its_dequantization(fsim):
    """16 channels have no padding, but the dequantization widens int8 to float32: the layout change copies the
    int8 tensor, a quarter of the bytes."""
    qmod, pmod, x = _map_network(16, then_conv=False)
    pl = graph.placement(pmod)
    after = _after_last_layer(pl)
    assert set(after.values()) == {"plain"}, after
    assert pl.layout_changes == {"packed": 1, "unpacked": 1}
    unpack = [line for line in pmod["main"].script().splitlines() if "R.to_vdevice(" in line and "llvm" in line]
    assert len(unpack) == 1 and '"int8"' in unpack[0], unpack
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0])


def test_an_activation_a_vta_layer_reads_stays_packed(fsim):
    """Negative control: an activation a VTA layer reads stays packed however padded it is (unpacking it would
    cost two layout changes)."""
    qmod, pmod, x = _map_network(2, then_conv=True)
    pl = graph.placement(pmod)
    sig = next(r for r in pl.rows if r["op"] == "sigmoid")
    assert sig["layout"] == "packed" and pl.layout_changes == {"packed": 1, "unpacked": 1}
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0])
