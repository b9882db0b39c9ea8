"""A MobileNet-v1-style network as ONNX with seeded random weights.

Built node by node with ``onnx.helper`` (no download): a 3x3/2 stem, then depthwise-separable
blocks (a 3x3 depthwise convolution and a 1x1 pointwise convolution, each followed by batch
normalization and ReLU6, written as ONNX ``Clip(0, 6)``), global average pooling and a fully
connected classifier. ``width`` is MobileNet's width multiplier (channels rounded to multiples of
8, as the reference implementation does), ``image`` the input size.
"""

from __future__ import annotations

import numpy as np

from .resnet import _Builder

#: (output channels at width 1, stride) of the depthwise-separable blocks of MobileNet v1
BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1),
          (512, 1), (1024, 2), (1024, 1))
STEM = 32


def scaled_channels(c: int, width: float) -> int:
    """``c * width`` rounded to a multiple of 8 (at least 8), never 10% below ``c * width``."""
    v = max(8, int(c * width + 4) // 8 * 8)
    return v + 8 if v < 0.9 * c * width else v


class _MobileNetBuilder(_Builder):
    def conv_bn_relu6(self, x: str, cin: int, cout: int, k: int, stride: int, groups: int = 1) -> str:
        r = self.rng
        w = r.normal(0.0, np.sqrt(2.0 / (cin // groups * k * k)), (cout, cin // groups, k, k))
        y = self.node("Conv", [x, self.init("w", w)], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, group=groups)
        y = self.node("BatchNormalization", [y, self.init("gamma", r.uniform(0.5, 1.0, cout)),
                                             self.init("beta", r.normal(0.3, 0.2, cout)),
                                             self.init("mean", r.normal(0.0, 0.1, cout)),
                                             self.init("var", r.uniform(0.8, 1.6, cout))], epsilon=1e-5)
        return self.node("Clip", [y, self.lo, self.hi])


def mobilenet_v1_onnx(batch: int = 1, image: int = 224, width: float = 1.0, num_classes: int = 1000, seed: int = 0,
                      blocks: tuple[tuple[int, int], ...] = BLOCKS):
    """An ONNX MobileNet v1 for ``(batch, 3, image, image)`` float32 input ``data`` -> logits ``(batch, num_classes)``.

    ``width``: the width multiplier (1.0, 0.75, 0.5, 0.25); ``blocks``: (channels at width 1, stride) of
    each depthwise-separable block."""
    from onnx import TensorProto, helper
    b = _MobileNetBuilder(seed)
    b.lo, b.hi = b.init("relu6_lo", np.array(0.0)), b.init("relu6_hi", np.array(6.0))
    cin = scaled_channels(STEM, width)
    x = b.conv_bn_relu6("data", 3, cin, 3, 2)
    for c, stride in blocks:
        cout = scaled_channels(c, width)
        x = b.conv_bn_relu6(x, cin, cin, 3, stride, groups=cin)        # depthwise
        x = b.conv_bn_relu6(x, cin, cout, 1, 1)                         # pointwise
        cin = cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    fc_w = b.init("fc_w", b.rng.normal(0.0, np.sqrt(1.0 / cin), (num_classes, cin)))
    fc_b = b.init("fc_b", b.rng.normal(0.0, 0.01, num_classes))
    logits = b.node("Gemm", [x, fc_w, fc_b], transB=1)
    graph = helper.make_graph(b.nodes, "mobilenet_v1",
                              [helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, image, image])],
                              [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [batch, num_classes])],
                              b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="vta-py")
    model.ir_version = 8
    return model
