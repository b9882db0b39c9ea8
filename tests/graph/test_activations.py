"""Activations in int8 and on VTA's ALU (``graph.activations``, ``vta_compiler.top.activation``, ISA extensions
alu_mul and acc_8bit): a small network conv -> hard-swish -> squeeze-excite -> conv -> elementwise multiply ->
hard-sigmoid -> conv, in ONNX's forms and in PyTorch's relu6 forms, equals its CPU int8 run bit for bit on fsim;
the int8 activations are as accurate as the float ones; the placement says where each runs and why; a
configuration without the extensions refuses activation='vta' and quantizes as before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graph_helpers import run_cpu, run_vta
from onnx import TensorProto, helper, numpy_helper

tvm = pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")

from tvm import relax  # noqa: E402

import vta_compiler as vta  # noqa: E402
from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.ir import GraphError  # noqa: E402

C, H, W = 16, 8, 8
ACTS = ["hard_swish", "channel_multiply", "multiply", "hard_sigmoid"]


def se_net(form: str, seed: int = 0) -> onnx.ModelProto:
    """conv -> hard-swish -> SE (global pool, conv, relu, conv, hard-sigmoid folded into it, channel multiply) ->
    conv -> multiply by the SE output -> hard-sigmoid -> conv. ``form``: "onnx" (HardSwish, HardSigmoid) or
    "pytorch" (x * relu6(x + 3) / 6 and relu6(x + 3) / 6, the clip as Clip)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, np.float32), name))
        return name

    def conv(x, out, cin, cout, k, name):
        w = rng.standard_normal((cout, cin, k, k)) * 1.5 / np.sqrt(cin * k * k)
        nodes.append(helper.make_node("Conv", [x, const(f"{name}_w", w), const(f"{name}_b",
                                                                                rng.standard_normal(cout) * 0.3)],
                                      [out], pads=[k // 2] * 4))

    def relu6_plus3(x, out):
        nodes.extend([helper.make_node("Add", [x, "three"], [f"{out}_a"]),
                      helper.make_node("Clip", [f"{out}_a", "zero", "six"], [out])])
    const("three", 3.0), const("zero", 0.0), const("six", 6.0)
    conv("x", "c0", 3, C, 3, "conv0")
    if form == "onnx":
        nodes.append(helper.make_node("HardSwish", ["c0"], ["hs"]))
    else:
        relu6_plus3("c0", "r0")
        nodes += [helper.make_node("Mul", ["c0", "r0"], ["m0"]), helper.make_node("Div", ["m0", "six"], ["hs"])]
    nodes.append(helper.make_node("GlobalAveragePool", ["hs"], ["gap"]))
    conv("gap", "s1", C, C // 4, 1, "se1")
    nodes.append(helper.make_node("Relu", ["s1"], ["s1r"]))
    conv("s1r", "s2", C // 4, C, 1, "se2")
    nodes += [helper.make_node("HardSigmoid", ["s2"], ["gate"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", ["hs", "gate"], ["se"])]
    conv("se", "c3", C, C, 1, "conv3")
    nodes.append(helper.make_node("Mul", ["c3", "se"], ["sq"]))
    if form == "onnx":
        nodes.append(helper.make_node("HardSigmoid", ["sq"], ["hsig"], alpha=1 / 6, beta=0.5))
    else:
        relu6_plus3("sq", "r1")
        nodes.append(helper.make_node("Div", ["r1", "six"], ["hsig"]))
    conv("hsig", "y", C, 8, 3, "conv4")
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, H, W])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _data(seed):
    return np.random.default_rng(seed).standard_normal((1, 3, H, W)).astype(np.float32)


@pytest.fixture(scope="module", params=["onnx", "pytorch"])
def net(request):
    model = se_net(request.param)
    mod, params = graph.from_onnx(model)
    cal = [_data(s) for s in range(4)]
    xs = [_data(s) for s in (10, 11, 12)]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = {"form": request.param, "int8": graph.quantize(mod, params, calibration=cal, int8_activations=True),
           "float": graph.quantize(mod, params, calibration=cal, int8_activations=False), "xs": xs,
           "want": [ref.run(None, {"x": x})[0] for x in xs]}
    for kind in ("int8", "float"):      # each module's CPU run on the inputs, compiled once
        vm = relax.VirtualMachine(tvm.compile(out[kind], "llvm"), tvm.cpu())
        out[f"{kind}_cpu"] = [vm["main"](tvm.runtime.tensor(x)).numpy() for x in xs]
    return out


def _rows(pl, device):
    return [r for r in pl.rows if r["device"] == device and r["op"].split()[0] in ACTS]


def test_activations_on_vta_equal_the_cpu_int8_run(net, ext_fsim):
    env, dev = ext_fsim("alu_mul", "acc_8bit")
    pmod = graph.graph_pack(net["int8"], env, activation="vta")
    pl = graph.placement(pmod)
    assert [r["op"] for r in _rows(pl, "VTA")] == ACTS
    assert all("Cortex-A9" in r["note"] and "µs at 100 MHz" in r["note"] for r in _rows(pl, "VTA"))
    # nothing of the activations' int8 chains is left on the host (the quantizer's names for their nodes)
    on_host = [r["name"] for r in pl.rows if r["device"] == "CPU"]
    assert on_host and not [n for n in on_host if n.endswith(("_gate", "_gate_in", "_product", "_mul", "_post"))]
    ex = graph.build(pmod)
    for x, want, other in zip(net["xs"], net["int8_cpu"], net["float_cpu"]):
        got = run_vta(ex, x)[0]
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(want)) > 100, "the output should be informative"
        # negative control: the float activations' quantized network computes other bits
        assert (other != want).mean() > 0.1
    assert dev.stats()["alu_counter"] > 0


def test_int8_activations_are_as_accurate_as_float_ones(net):
    """Against ONNX Runtime's float run: the int8 activations' error is within 25% of the float activations'
    (each adds an int8 rounding where the float path rounds once at the next layer's input)."""
    def err(kind):
        return np.mean([np.abs(y - w).mean() / np.abs(w).mean() for y, w in zip(net[f"{kind}_cpu"], net["want"])])
    e_int8, e_float = err("int8"), err("float")
    assert e_int8 < 0.05 and e_int8 < 1.25 * e_float, (e_int8, e_float)


def test_hard_swish_integer_form_against_float(net):
    """The int8 hard-swish's output against the float hard-swish of its dequantized int8 input (exponents read
    back from its constants: T = 3 * 2**e_x, M * 2**-k = 2**(e_y - 2 e_x) / 6): within one output step (the gate's
    bounds and the multiplier are rounded), on values spread over the range."""
    from vta_compiler.graph.ir import Graph
    q = net["int8"]
    by_name = {n.name: n for n in Graph.from_relax(q["main"]).nodes}
    base = next(k[:-len("_product")] for k in by_name if k.endswith("_product") and k[:-8] + "_gate" in by_name)
    t = float(by_name[base + "_gate_in"].args[1].value)
    m = float(by_name[base + "_mul"].args[1].value)
    k = float(by_name[base + "_post"].args[1].value)
    e_x = np.log2(t / 3)
    e_y = np.log2(m * 2.0 ** -k * 6) + 2 * e_x
    xq, yq = run_cpu(graph.probe(q, [by_name[base + "_x"].args[0].name, base]), net["xs"][0])[1:]
    x = xq.astype(np.float64) * 2.0 ** -e_x
    want = x * np.clip(x + 3, 0, 6) / 6 * 2.0 ** e_y
    assert np.ptp(yq) > 100 and (x < -3).any() and ((x > -3) & (x < 3)).mean() > 0.3
    assert np.abs(yq - want).max() <= 1.0, np.abs(yq - want).max()


def test_activation_placement_options(net, ext_fsim):
    env, _ = ext_fsim("alu_mul", "acc_8bit")
    host = graph.placement(graph.graph_pack(net["int8"], env, activation="cpu"))
    assert not _rows(host, "VTA")
    kept = [r for r in host.rows if "graph_pack(activation='cpu') keeps activations on the CPU" in r["note"]]
    assert len(kept) >= 4 * 5
    auto = graph.placement(graph.graph_pack(net["int8"], env))
    for r in _rows(auto, "VTA"):
        assert "(estimate), on VTA about" in r["note"]
    decided = [r for r in auto.rows if r["device"] == "CPU" and "the host is faster" in r["note"]
               and "activation='vta'" in r["note"]]
    assert len(_rows(auto, "VTA")) + len({r["note"] for r in decided}) >= 1
    with pytest.raises(GraphError, match=r"activation='fast'; choose one of auto, vta, cpu"):
        graph.graph_pack(net["int8"], env, activation="fast")


def test_without_the_extensions(net):
    env = vta.get_env()
    assert not env.config.isa.has("alu_mul")
    with pytest.raises(GraphError, match=r"activation='vta'.*lacks ISA extension alu_mul and acc_8bit "
                                         r"\(config key ISA_EXTENSIONS\)"):
        graph.graph_pack(net["int8"], env, activation="vta")
    with vta.Environment(env.config.replace(ISA_EXTENSIONS=("alu_mul",))) as mul_only:
        with pytest.raises(GraphError, match=r"lacks ISA extension acc_8bit"):
            graph.graph_pack(net["int8"], mul_only, activation="vta")
    # auto on the plain config: the int8 chains stay on the host, with no note about VTA
    pl = graph.placement(graph.graph_pack(net["int8"], env))
    assert not _rows(pl, "VTA") and not [r for r in pl.rows if "activation=" in r["note"]]
    # quantize's default follows the configuration: float activations here, as before
    model = se_net(net["form"])
    mod, params = graph.from_onnx(model)
    cal = [_data(s) for s in range(4)]
    plain = graph.quantize(mod, params, calibration=cal)
    assert plain["main"].script() == net["float"]["main"].script() != net["int8"]["main"].script()
    with vta.Environment(env.config.replace(ISA_EXTENSIONS=("alu_mul",))):
        assert graph.quantize(mod, params, calibration=cal)["main"].script() == net["int8"]["main"].script()


def test_with_fixed_point_requantization(ext_fsim):
    """With requant="multiply" the activations' tensors have any scale (not powers of two): still exact on VTA."""
    env, _ = ext_fsim("alu_mul", "acc_8bit")
    mod, params = graph.from_onnx(se_net("onnx", seed=1))
    qmod = graph.quantize(mod, params, calibration=[_data(s) for s in range(4)], requant="multiply")
    pmod = graph.graph_pack(qmod, env, activation="vta")
    assert [r["op"] for r in _rows(graph.placement(pmod), "VTA")] == ACTS
    x = _data(20)
    want = run_cpu(qmod, x)[0]
    assert len(np.unique(want)) > 100
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], want)


def test_depthwise_input_scales_per_channel_win():
    """A hard-swish between a convolution and a depthwise one stays float when the depthwise input takes one scale
    per channel (the default); with depthwise_channels=False it is int8."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
             for n, s in (("w0", (C, 3, 3, 3)), ("b0", (C,)), ("w1", (C, 1, 3, 3)), ("b1", (C,)))]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4),
             helper.make_node("HardSwish", ["c0"], ["hs"]),
             helper.make_node("Conv", ["hs", "w1", "b1"], ["y"], pads=[1] * 4, group=C)]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, W])], inits)
    mod, params = graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]))
    cal = [_data(s) for s in range(2)]
    for channels, int8 in ((True, False), (False, True)):
        text = graph.quantize(mod, params, calibration=cal, int8_activations=True,
                              depthwise_channels=channels)["main"].script()
        assert ("_gate_in" in text) == int8, channels


def test_an_activation_a_float_operator_reads_stays_float():
    """A hard-swish whose output a float operator reads (PP-OCRv4's learnable affine, ``x * a + b``, before the next
    convolution) stays float with int8_activations: its int8 output would be rounded twice, once by the
    activation and once at the next layer's input, which cost the recogniser 19 points of lines read. Without the
    affine (the negative control) the same hard-swish is int8, and so is one that ends the network."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
             for n, s in (("w0", (C, 3, 3, 3)), ("b0", (C,)), ("w1", (C, C, 1, 1)), ("b1", (C,)))]
    inits += [numpy_helper.from_array(np.float32(v), n) for n, v in (("scale", 1.3), ("shift", -0.2))]

    def model(affine: bool, tail: bool):
        nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4),
                 helper.make_node("HardSwish", ["c0"], ["hs"])]
        src = "hs"
        if affine:
            nodes += [helper.make_node("Mul", ["hs", "scale"], ["ms"]),
                      helper.make_node("Add", ["ms", "shift"], ["af"])]
            src = "af"
        if tail:
            nodes.append(helper.make_node("Conv", [src, "w1", "b1"], ["y"]))
        else:
            nodes[-1].output[0] = "y"
        g = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, W])], inits)
        return graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]))
    cal = [_data(s) for s in range(2)]
    for affine, tail, int8 in ((True, True, False), (False, True, True), (False, False, True)):
        mod, params = model(affine, tail)
        text = graph.quantize(mod, params, calibration=cal, int8_activations=True)["main"].script()
        assert ("_gate_in" in text) == int8, (affine, tail)
