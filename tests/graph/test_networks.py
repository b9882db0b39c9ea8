"""Whole networks on VTA: each VTA run equals the CPU run of the same quantized module, bit for bit.

ResNet-18 (ImageNet shape) on fsim; a small ResNet on tsim and on a non-default configuration;
the YOLO-tiny-style detector (relax.frontend.nn); the digits classifier's accuracy in int8 on VTA
against float; export/load and RPC round trips; refusals of bad input.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from graph_helpers import inside_fractions, run_cpu, run_vta

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

import vta_compiler as vta  # noqa: E402
import vta_runtime  # noqa: E402
from sim.fsim import FsimDevice  # noqa: E402
from vta_compiler import graph  # noqa: E402
from vta_compiler.graph.models import digits, imagenet_like, resnet_onnx, yolo_tiny_nn  # noqa: E402

SMALL = {"image": 64, "widths": (16, 32, 32, 64), "num_classes": 16}


def quantized_resnet(depth=18, batch=1, seed=0, **kw):
    image = kw.get("image", 224)
    mod, params = graph.from_onnx(resnet_onnx(depth, batch=batch, seed=seed, **kw))
    cal = [imagenet_like(batch, image, seed=s) for s in (11, 12)]
    return graph.quantize(mod, params, calibration=cal), imagenet_like(batch, image, seed=13)


def check_informative(qmod, x, minimum=0.3):
    fr = inside_fractions(qmod, x)
    low = {k: round(v, 3) for k, v in fr.items() if v < minimum}
    assert not low, f"layers with fewer than {minimum:.0%} of outputs strictly inside the clip range: {low}"
    return fr


@pytest.fixture(scope="module")
def resnet18():
    qmod, x = quantized_resnet(18)
    pmod = graph.graph_pack(qmod)
    return qmod, pmod, x


def test_resnet18_on_fsim_equals_the_cpu_run(resnet18, fsim):
    qmod, pmod, x = resnet18
    want = run_cpu(qmod, x)[0]
    got = run_vta(graph.build(pmod), x)[0]
    np.testing.assert_array_equal(got, want)
    assert fsim.stats()["gemm_counter"] > 0
    assert len(np.unique(want)) > 100, "the logits should be informative"


def test_resnet18_layers_are_informative(resnet18):
    qmod, _, x = resnet18
    fr = check_informative(qmod, x)
    assert len(fr) == 21          # 20 convolutions and the dense layer


def test_resnet18_placement(resnet18):
    qmod, pmod, _ = resnet18
    pl = graph.placement(pmod)
    vta_rows = pl.vta_rows
    assert len(vta_rows) == 21 and pl.vta_share >= 0.99
    assert [r["name"] for r in vta_rows][-1] == "dense_0"
    first = vta_rows[0]
    assert first["fold"], "the 3-channel 7x7 stem should be folded"
    assert first["macs"] / first["issued_macs"] >= 0.5, "the stem should use at least half of the MACs it issues"
    for r in pl.rows:
        if r["device"] == "CPU":
            assert r["note"], f"{r['name']} runs on the CPU without a reason"
    text = str(pl)
    assert "conv2d_0" in text and "VTA" in text and "why not VTA" in text
    # packed tensors flow from layer to layer: layouts change only at the input and the output
    script = pmod["main"].script()
    assert script.count("R.to_vdevice(") == 2, "a layout change or copy sits between VTA layers"
    # one kernel per distinct workload
    kernels = [gv.name_hint for gv, f in pmod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) < len(vta_rows)


def test_resnet34_packs_with_every_layer_on_vta():
    mod, params = graph.from_onnx(resnet_onnx(34))
    pl = graph.placement(graph.graph_pack(graph.quantize(mod, params, global_scale=8.0)))
    assert len(pl.vta_rows) == 37 and pl.vta_share >= 0.99


def _resnet50_macs_by_hand(image: int, stride_in_3x3: bool) -> tuple[int, int]:
    """(convolutions, MACs) of ResNet-50 counted from the paper's table, layer by layer."""
    size = image // 2                                  # 7x7/2 stem
    macs, convs = size * size * 64 * 3 * 49, 1
    size //= 2                                         # 3x3/2 max pool
    cin = 64
    for n, width in zip((3, 4, 6, 3), (64, 128, 256, 512)):
        for k in range(n):
            stride = 2 if width != 64 and k == 0 else 1
            out = size // stride
            mid = size if stride_in_3x3 else out       # where the reduce 1x1 leaves the map
            macs += mid * mid * cin * width            # 1x1 reduce
            macs += out * out * width * width * 9      # 3x3
            macs += out * out * width * 4 * width      # 1x1 expand
            convs += 3
            if k == 0:
                macs += out * out * cin * 4 * width    # projection shortcut
                convs += 1
            cin, size = 4 * width, out
    return convs, macs + 2048 * 1000                   # the classifier


@pytest.mark.parametrize("v15", [False, True])
def test_resnet50_has_the_papers_layers_and_macs(v15):
    from onnx import shape_inference
    model = shape_inference.infer_shapes(resnet_onnx(50, stride_in_3x3=v15))
    dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in [*model.graph.value_info, *model.graph.output]}
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    macs = sum(int(np.prod(dims[n.output[0]])) * int(np.prod(weights[n.input[1]][1:])) for n in convs)
    macs += int(np.prod(weights[next(n for n in model.graph.node if n.op_type == "Gemm").input[1]]))
    assert (len(convs), macs) == _resnet50_macs_by_hand(224, v15)
    assert macs == (4_089_184_256 if v15 else 3_857_973_248)   # 4.09 G for torchvision's v1.5
    assert dims[model.graph.output[0].name] == [1, 1000]


def test_small_resnet50_on_fsim_equals_the_cpu_run(fsim):
    """Bottleneck blocks (1x1 reduce, 3x3, 1x1 expand, projection shortcuts) on VTA, exactly."""
    qmod, x = quantized_resnet(50, image=32, widths=(8, 16, 16, 32), num_classes=16)
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    assert len(pl.vta_rows) == 54 and pl.vta_share >= 0.99      # 53 convolutions and the classifier
    want = run_cpu(qmod, x)[0]
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], want)
    assert len(np.unique(want)) >= 12, "the logits should be informative"


def test_export_and_load(resnet18, fsim, tmp_path):
    qmod, x = quantized_resnet(18, **SMALL)
    ex = graph.build(graph.graph_pack(qmod))
    path = tmp_path / "net.so"
    ex.export_library(str(path))
    loaded = tvm.runtime.load_module(str(path))
    np.testing.assert_array_equal(run_vta(loaded, x)[0], run_cpu(qmod, x)[0])


def test_yolo_tiny_from_relax_nn(fsim):
    mod, params = yolo_tiny_nn(image=64)
    cal = [imagenet_like(1, 64, seed=s) for s in (1, 2)]
    qmod = graph.quantize(mod, params, calibration=cal)
    x = imagenet_like(1, 64, seed=3)
    pmod = graph.graph_pack(qmod)
    pl = graph.placement(pmod)
    assert pl.vta_share >= 0.99
    ops = {r["op"]: r for r in pl.rows if r["device"] == "CPU"}
    assert ops["image.resize2d"]["layout"] == "packed" and ops["concat"]["layout"] == "packed"
    assert ops["sigmoid"]["note"] == "float arithmetic (VTA computes integers)"
    got, want = run_vta(graph.build(pmod), x), run_cpu(qmod, x)
    assert len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    check_informative(qmod, x)


def test_unknown_op_falls_back_to_the_cpu(fsim):
    """A leaky ReLU (which the quantizer does not know) between two layers: the model still runs, exactly."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, s).astype(np.float32), k)
             for k, s in (("w1", (32, 16, 3, 3)), ("w2", (32, 32, 3, 3)), ("w3", (16, 32, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.1),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1], dilations=[2, 2]),
             helper.make_node("Conv", ["c", "w3"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = graph.from_onnx(model)
    x = rng.normal(0, 1, (1, 16, 12, 12)).astype(np.float32)
    qmod = graph.quantize(mod, params, calibration=[x])
    pmod = graph.graph_pack(qmod)
    rows = {r["name"]: r for r in graph.placement(pmod).rows}
    assert rows["conv2d_0"]["device"] == rows["conv2d_2"]["device"] == "VTA"
    dilated = next(r for r in rows.values() if r["op"] == "nn.conv2d")
    assert dilated["device"] == "CPU" and "dilated convolution (dilation=(2, 2))" in dilated["note"]
    assert any(r["op"] == "nn.leakyrelu" and r["device"] == "CPU" for r in rows.values())
    np.testing.assert_array_equal(run_vta(graph.build(pmod), x)[0], run_cpu(qmod, x)[0])


def test_digits_accuracy_on_vta_within_one_point_of_float(fsim):
    xtr, _, xte, yte = digits.load_split()
    w = digits.load_weights()
    batch = 40
    mod, params = graph.from_onnx(digits.digits_onnx(w, batch=batch))
    qmod = graph.quantize(mod, params, calibration=[xtr[k:k + batch] for k in range(0, 400, batch)])
    vm = relax.VirtualMachine(graph.build(graph.graph_pack(qmod)), [tvm.cpu(), tvm.ext_dev(0)])
    pred = np.concatenate([vm["main"](tvm.runtime.tensor(xte[k:k + batch])).numpy().argmax(1)
                           for k in range(0, len(xte), batch)])
    acc_vta = (pred == yte).mean()
    acc_float = (digits.forward(w, xte).argmax(1) == yte).mean()
    assert acc_float > 0.95, "the committed weights should be a trained classifier"
    assert acc_vta >= acc_float - 0.01, (acc_vta, acc_float)
    check_informative(qmod, xte[:batch])


def test_small_resnet_on_tsim():
    from sim.tsim import TsimDevice, verilator_available
    if not verilator_available():
        pytest.skip("Verilator is not installed (tsim)")
    qmod, x = quantized_resnet(18, image=32, widths=(16, 16, 32, 32), num_classes=16)
    ex = graph.build(graph.graph_pack(qmod))
    dev = TsimDevice()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
    try:
        got = run_vta(ex, x)[0]
        stats = dev.stats()
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    np.testing.assert_array_equal(got, run_cpu(qmod, x)[0])
    assert stats["cycle_count"] > 0 and stats["gemm_counter"] > 0


def test_non_default_configuration():
    """2x8x8 (BATCH 2, BLOCK 8): a batch of 2 through a small ResNet; a batch of 3 is refused."""
    env0 = vta.get_env()
    cfg = env0.config.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16)
    with vta.Environment(cfg):
        qmod, x = quantized_resnet(18, batch=2, image=32, widths=(8, 16, 16, 24), num_classes=8)
        pmod = graph.graph_pack(qmod)
        assert graph.placement(pmod).vta_share >= 0.99
        ex = graph.build(pmod)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(FsimDevice(cfg)))
        try:
            got = run_vta(ex, x)[0]
        finally:
            vta_runtime.set_command_queue(None)
        np.testing.assert_array_equal(got, run_cpu(qmod, x)[0])
        check_informative(qmod, x)
        q3, _ = quantized_resnet(18, batch=3, image=32, widths=(8, 16, 16, 24), num_classes=8)
        with pytest.raises(graph.GraphError, match=r"layer conv2d_0: the batch is 3, not a multiple of BATCH=2 .* "
                                                   r"build the network for a batch of 4"):
            graph.graph_pack(q3)


def test_wrong_input_is_refused(fsim):
    qmod, x = quantized_resnet(18, image=32, widths=(16, 16, 32, 32), num_classes=16)
    vm = relax.VirtualMachine(graph.build(graph.graph_pack(qmod)), [tvm.cpu(), tvm.ext_dev(0)])
    with pytest.raises(RuntimeError, match=r"param=data, annotation=R.Tensor\(\(1, 3, 32, 32\), dtype=\"float32\"\)"
                                           r".*shape\[2\] mismatch"):
        vm["main"](tvm.runtime.tensor(np.zeros((1, 3, 16, 16), np.float32)))
    with pytest.raises(ValueError, match="param=data.*expect Tensor with dtype float32 but get float64"):
        vm["main"](tvm.runtime.tensor(x.astype(np.float64)))


def test_rpc_on_loopback(tmp_path):
    from rpc_helpers import Server
    qmod, x = quantized_resnet(18, image=32, widths=(16, 16, 32, 32), num_classes=16)
    path = tmp_path / "net.so"
    graph.build(graph.graph_pack(qmod)).export_library(str(path))
    server = Server(tmp_path)

    def run(remote):
        remote.upload(str(path))
        vm = relax.VirtualMachine(remote.load_module(path.name), [remote.cpu(), remote.ext_dev(0)])
        out = vm["main"](tvm.runtime.tensor(x, device=remote.cpu())).numpy()
        del vm
        gc.collect()
        return out

    try:
        got = server.call(run)
    finally:
        server.stop()
    np.testing.assert_array_equal(got, run_cpu(qmod, x)[0])


def test_board_target_executable_called_here_says_what_to_do():
    import platform
    if platform.machine() in ("armv7l", "aarch64"):
        pytest.skip("this machine may run board code itself")
    env0 = vta.get_env()
    with vta.Environment(env0.config.replace(TARGET="pynq")):
        qmod, _ = quantized_resnet(18, image=32, widths=(16, 16, 32, 32), num_classes=16)
        ex = graph.build(graph.graph_pack(qmod))
    with pytest.raises(vta.HostMismatchError, match=r"compiled for TARGET 'pynq'.*vta.testing.run"):
        relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
