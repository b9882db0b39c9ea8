"""ONNX Runtime (float32, CPU): the engine a user would run instead of a simulated VTA, on the same shapes.

``conv2d_model`` / ``dense_model`` build a one-node ONNX model with ``onnx.helper`` (float32 weights
and bias as initializers); ``OrtRunner`` wraps any model (a ``ModelProto``, serialized bytes or a
path) in an ``InferenceSession`` with ONNX Runtime's default CPU settings and runs it on fixed
inputs, so callers can time it side by side with something else (``bench.common.interleaved_best``).
Needs the ``bench`` extra (``pip install -e .[bench]``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

OPSET = 17


def available() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _model(node, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray], name: str):
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = min(model.ir_version, 8)   # readable by older onnxruntime releases too
    return model


def conv2d_model(wkl, seed: int = 0, bias: bool = True):
    """(model, inputs): Conv(x, W[, B]) in NCHW for a ``vta_compiler.top.Conv2DWorkload``, random int8-valued data."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width)).astype(np.float32)
    init = {"W": rng.integers(-128, 128, (wkl.out_filter, wkl.in_filter, wkl.hkernel, wkl.wkernel)).astype(np.float32)}
    if bias:
        init["B"] = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,)).astype(np.float32)
    node = helper.make_node("Conv", ["x", *init], ["y"], kernel_shape=[wkl.hkernel, wkl.wkernel],
                            strides=[wkl.hstride, wkl.wstride], pads=[wkl.hpad, wkl.wpad, wkl.hpad, wkl.wpad])
    return _model(node, {"x": x}, init, "conv2d"), {"x": x}


def dense_model(batch: int, in_features: int, out_features: int, seed: int = 0, bias: bool = True):
    """(model, inputs): Gemm(x, W^T[, B]) for (batch, in) x (out, in), random int8-valued data."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (batch, in_features)).astype(np.float32)
    init = {"W": rng.integers(-128, 128, (out_features, in_features)).astype(np.float32)}
    if bias:
        init["B"] = rng.integers(-(1 << 14), 1 << 14, (out_features,)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", *init], ["y"], transB=1)
    return _model(node, {"x": x}, init, "dense"), {"x": x}


class OrtRunner:
    """One ONNX Runtime CPU session (default settings unless ``threads`` is given) on fixed inputs."""

    def __init__(self, model: Any, inputs: dict[str, np.ndarray], threads: int | None = None):
        import onnxruntime as ort
        if hasattr(model, "SerializeToString"):
            model = model.SerializeToString()
        elif isinstance(model, (str, os.PathLike)):
            model = os.fspath(model)
        opts = ort.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.inputs = inputs
        self.threads = threads
        self.version = ort.__version__

    def __call__(self) -> np.ndarray:
        return self.session.run(None, self.inputs)[0]


def conv2d_reference_f64(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride, pad) -> np.ndarray:
    """float64 NCHW convolution (a check that the ONNX model computes the layer it claims to)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw], w[:, :, i, j])
    return y if b is None else y + b.reshape(1, o, 1, 1)
