"""A small real classifier: a CNN trained on scikit-learn's bundled digits data set (8x8 images).

``python -m vta_compiler.graph.models.digits`` trains it from scratch with numpy (plain SGD with
momentum, about half a minute) and writes ``digits_weights.npz`` beside this file; the trained
weights are committed, so using the model needs no training. The network:

    conv 3x3, 1 -> 16, pad 1, ReLU  ->  conv 3x3 stride 2, 16 -> 32, pad 1, ReLU  ->  flatten (512)  ->  dense 10

The split is scikit-learn's ``train_test_split(test_size=0.2, random_state=0, stratify=y)``:
1,437 training images, 360 held-out test images.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

WEIGHTS = Path(__file__).with_name("digits_weights.npz")
SHAPES = {"w1": (16, 1, 3, 3), "b1": (16,), "w2": (32, 16, 3, 3), "b2": (32,), "w3": (10, 512), "b3": (10,)}


def load_split():
    """(x_train, y_train, x_test, y_test); images as float32 (N, 1, 8, 8) in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.2, random_state=0, stratify=d.target)
    return xtr, ytr, xte, yte


def load_weights(path: Path | str = WEIGHTS) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in SHAPES}


def digits_onnx(weights: dict[str, np.ndarray] | None = None, batch: int = 1):
    """The trained classifier as an ONNX model with float32 input ``image`` (batch, 1, 8, 8) -> logits (batch, 10)."""
    from onnx import TensorProto, helper, numpy_helper
    w = weights or load_weights()
    inits = [numpy_helper.from_array(w[k].astype(np.float32), k) for k in SHAPES]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="vta-py")
    model.ir_version = 8
    return model


# ------------------------------------------------------------------------------------------ training
def _im2col(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[np.ndarray, int, int]:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, oh, ow), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * oh * ow, c * k * k), oh, ow


def _col2im(cols: np.ndarray, shape, k: int, stride: int, pad: int, oh: int, ow: int) -> np.ndarray:
    n, c, h, w = shape
    cols = cols.reshape(n, oh, ow, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


def _conv(x, w, b, stride):
    cols, oh, ow = _im2col(x, 3, stride, 1)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(x.shape[0], oh, ow, -1).transpose(0, 3, 1, 2), (cols, oh, ow)


def _conv_back(dy, x, w, cache, stride):
    cols, oh, ow = cache
    d = dy.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dx = _col2im(d @ w.reshape(w.shape[0], -1), x.shape, 3, stride, 1, oh, ow)
    return dx, dw, db


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Float logits of the network (numpy; the reference the CPU and VTA runs are compared with)."""
    r1 = np.maximum(_conv(x, p["w1"], p["b1"], 1)[0], 0)
    r2 = np.maximum(_conv(r1, p["w2"], p["b2"], 2)[0], 0)
    return r2.reshape(len(x), -1) @ p["w3"].T + p["b3"]


def train(epochs: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    xtr, ytr, xte, yte = load_split()
    rng = np.random.default_rng(seed)
    p = {k: (rng.normal(0, np.sqrt(2.0 / np.prod(s[1:])), s) if k.startswith("w") else np.zeros(s))
         .astype(np.float32) for k, s in SHAPES.items()}
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    lr, mom, decay, bs = 0.05, 0.9, 1e-4, 32
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        rate = lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs))
        for s in range(0, len(order), bs):
            idx = order[s:s + bs]
            x, y = xtr[idx], ytr[idx]
            c1, k1 = _conv(x, p["w1"], p["b1"], 1)
            r1 = np.maximum(c1, 0)
            c2, k2 = _conv(r1, p["w2"], p["b2"], 2)
            r2 = np.maximum(c2, 0)
            f = r2.reshape(len(x), -1)
            z = f @ p["w3"].T + p["b3"]
            e = np.exp(z - z.max(axis=1, keepdims=True))
            prob = e / e.sum(axis=1, keepdims=True)
            dz = prob
            dz[np.arange(len(y)), y] -= 1
            dz /= len(y)
            g = {"w3": dz.T @ f, "b3": dz.sum(axis=0)}
            dr2 = (dz @ p["w3"]).reshape(r2.shape) * (c2 > 0)
            dr1, g["w2"], g["b2"] = _conv_back(dr2, r1, p["w2"], k2, 2)
            _, g["w1"], g["b1"] = _conv_back(dr1 * (c1 > 0), x, p["w1"], k1, 1)
            for k in p:
                vel[k] = mom * vel[k] - rate * (g[k] + decay * p[k])
                p[k] += vel[k].astype(np.float32)
        acc = (forward(p, xte).argmax(axis=1) == yte).mean()
        print(f"epoch {epoch + 1:2d}: test accuracy {100 * acc:.2f}%")
    return {k: v.astype(np.float32) for k, v in p.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vta_compiler.graph.models.digits", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(WEIGHTS))
    args = ap.parse_args(argv)
    p = train(args.epochs, args.seed)
    np.savez(args.out, **p)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
