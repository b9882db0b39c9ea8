"""A DCGAN-style generator as ONNX with seeded random weights.

Built node by node with ``onnx.helper`` (no download), as in the DCGAN paper: the latent vector
``(batch, latent, 1, 1)`` goes through a 4x4 transposed convolution to a 4x4 map, then stride-2
transposed convolutions (kernel 4, padding 1) double the size while halving the channels, each
followed by batch normalization and ReLU; the last one makes the image's channels and ends in
``tanh`` (a float operator, which runs on the CPU).
"""

from __future__ import annotations

import math

import numpy as np

from .resnet import _Builder


def dcgan_generator_onnx(batch: int = 1, latent: int = 100, features: int = 64, image: int = 64, channels: int = 3,
                         seed: int = 0):
    """An ONNX generator for float32 input ``z`` ``(batch, latent, 1, 1)`` -> image ``(batch, channels, image,
    image)`` in (-1, 1). ``features``: channels of the last hidden layer (DCGAN's ``ngf``); the 4x4 layer has
    ``features * image / 8`` channels."""
    from onnx import TensorProto, helper
    ups = int(math.log2(image // 4))
    if image < 8 or 4 << ups != image:
        raise ValueError(f"image must be 4 times a power of two, at least 8; got {image}")
    b = _Builder(seed)
    r = b.rng

    def conv_t(x, cin, cout, k, stride, pad, bias=False):
        w = r.normal(0.0, np.sqrt(2.0 / (cin * k * k / stride ** 2)), (cin, cout, k, k))    # (CI, CO, KH, KW)
        ins = [x, b.init("w", w)] + ([b.init("bias", r.normal(0.0, 0.05, cout))] if bias else [])
        return b.node("ConvTranspose", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def bn_relu(x, c):
        y = b.node("BatchNormalization", [x, b.init("gamma", r.uniform(0.6, 1.2, c)),
                                          b.init("beta", r.normal(0.3, 0.2, c)), b.init("mean", r.normal(0.0, 0.1, c)),
                                          b.init("var", r.uniform(0.8, 1.6, c))], epsilon=1e-5)
        return b.node("Relu", [y])

    c = features << (ups - 1)
    x = bn_relu(conv_t("z", latent, c, 4, 1, 0), c)                  # 1x1 -> 4x4
    for _ in range(ups - 1):
        x = bn_relu(conv_t(x, c, c // 2, 4, 2, 1), c // 2)          # doubles the size, halves the channels
        c //= 2
    x = b.node("Tanh", [conv_t(x, c, channels, 4, 2, 1, bias=True)])
    graph = helper.make_graph(b.nodes, "dcgan_generator",
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, latent, 1, 1])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, channels, image, image])],
                              b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="vta-py")
    model.ir_version = 8
    return model


def latent_like(batch: int = 1, latent: int = 100, seed: int = 0) -> np.ndarray:
    """A latent batch ``(batch, latent, 1, 1)`` drawn from N(0, 1), as a DCGAN samples it."""
    return np.random.default_rng(seed).normal(0.0, 1.0, (batch, latent, 1, 1)).astype(np.float32)
