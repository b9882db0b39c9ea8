"""Whole networks in the demo: the digits classifier and ResNet-18, quantized, packed, built and run on fsim."""

from __future__ import annotations

import time

import numpy as np


def _vm(ex, devices):
    from tvm import relax
    return relax.VirtualMachine(ex, devices)


def _ascii(img: np.ndarray) -> list[str]:
    shades = " .:-=+*#%@"
    return ["".join(shades[min(9, int(v * 9.99))] * 2 for v in row) for row in img]


def digits_demo(batch: int = 40) -> bool:
    """The CNN trained on scikit-learn's digits: float accuracy on the CPU beside int8 accuracy on VTA."""
    import tvm

    from vta_compiler import graph
    from vta_compiler.graph.models import digits

    xtr, _, xte, yte = digits.load_split()
    w = digits.load_weights()
    t0 = time.perf_counter()
    mod, params = graph.from_onnx(digits.digits_onnx(w, batch=batch))
    qmod = graph.quantize(mod, params, calibration=[xtr[k:k + batch] for k in range(0, 400, batch)])
    pmod = graph.graph_pack(qmod)
    ex = graph.build(pmod)
    build_s = time.perf_counter() - t0
    vm = _vm(ex, [tvm.cpu(), tvm.ext_dev(0)])
    cpu = _vm(tvm.compile(qmod, "llvm"), tvm.cpu())
    pred, exact = [], True
    t0 = time.perf_counter()
    for k in range(0, len(xte), batch):
        x = tvm.runtime.tensor(xte[k:k + batch])
        y = vm["main"](x).numpy()
        exact &= bool(np.array_equal(y, cpu["main"](x).numpy()))
        pred.append(y.argmax(1))
    run_s = time.perf_counter() - t0
    pred = np.concatenate(pred)
    acc_vta = (pred == yte).mean()
    acc_float = (digits.forward(w, xte).argmax(1) == yte).mean()
    print(f"[network] digits CNN (scikit-learn digits, {len(xte)} held-out images), int8 on VTA (fsim)")
    print(f"          quantize + graph_pack + build: {build_s:.1f} s; {len(xte)} images in {run_s:.1f} s")
    print(f"          {graph.placement(pmod).summary()}")
    print(f"          accuracy: float on the CPU {100 * acc_float:.2f}%, int8 on VTA {100 * acc_vta:.2f}%")
    print(f"          VTA equals the CPU run of the quantized model, bit for bit: {'yes' if exact else 'NO'}")
    shown = [0, 1, 2, 3, 4, 5]
    rows = [_ascii(xte[k, 0]) for k in shown]
    for r in range(8):
        print("          " + "  ".join(img[r] for img in rows))
    print("          " + "  ".join(f"true {yte[k]} VTA {pred[k]}".ljust(16) for k in shown))
    return exact and acc_vta >= acc_float - 0.01


def resnet_demo() -> bool:
    """ResNet-18 (ImageNet shape, seeded random weights) end to end on fsim, exact against the CPU run."""
    import tvm

    from vta_compiler import graph
    from vta_compiler.graph.models import imagenet_like, resnet_onnx

    mod, params = graph.from_onnx(resnet_onnx(18))
    x = imagenet_like(1, seed=13)
    t0 = time.perf_counter()
    qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, seed=s) for s in (11, 12)])
    q_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pmod = graph.graph_pack(qmod)
    ex = graph.build(pmod)
    vm = _vm(ex, [tvm.cpu(), tvm.ext_dev(0)])
    build_s = time.perf_counter() - t0
    vm["main"](tvm.runtime.tensor(x))            # first run: uop kernels generated, weights copied to the device
    t0 = time.perf_counter()
    y = vm["main"](tvm.runtime.tensor(x)).numpy()
    run_s = time.perf_counter() - t0
    want = _vm(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    exact = bool(np.array_equal(y, want))
    pl = graph.placement(pmod)
    print("[network] ResNet-18 (224x224, seeded random weights): ONNX -> quantize -> graph_pack -> build -> fsim")
    print(f"          quantize (2 calibration images) {q_s:.1f} s, graph_pack + build {build_s:.1f} s, "
          f"one inference on fsim {run_s:.1f} s")
    print(f"          {pl.summary()}")
    first = pl.vta_rows[0]
    useful = 100 * first["macs"] / first["issued_macs"]
    print(f"          first layer folded (7 kernel columns into channels): {useful:.0f}% of its issued MACs are useful")
    print(f"          top-5 classes {[int(k) for k in np.argsort(-y[0])[:5]]}; exact against the CPU run: "
          f"{'yes' if exact else 'NO'}")
    return exact
