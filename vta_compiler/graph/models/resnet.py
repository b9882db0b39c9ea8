"""ResNet-18, -34 and -50 (ImageNet shapes) as ONNX models with seeded random weights.

Built node by node with ``onnx.helper`` (no download): the v1 architecture (7x7/2 stem, 3x3/2 max
pool, basic blocks (18, 34) or bottleneck blocks (50: 1x1 reduce, 3x3, 1x1 expand to four times the
stage width), 1x1 projection shortcuts, global average pool, fully connected), each convolution
followed by BatchNormalization so the importer's batch-norm folding is exercised. ResNet-50 is the
paper's v1 by default: a stage's stride sits in its first block's first 1x1 convolution (3.86 G MACs at
224x224, the Caffe model accelerator figures are usually quoted for); ``stride_in_3x3=True`` gives
v1.5 (torchvision's: the stride in the 3x3, 4.09 G MACs). Weights are He-normal; batch-norm statistics
are random but plausible, so activations neither vanish nor explode over the depth.
"""

from __future__ import annotations

import numpy as np

BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}
#: depths built from bottleneck blocks (output channels: EXPANSION x the stage width)
BOTTLENECK = frozenset({50})
EXPANSION = 4
WIDTHS = (64, 128, 256, 512)


class _Builder:
    def __init__(self, seed: int):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, base: str, value: np.ndarray) -> str:
        n = self.name(base)
        self.inits.append(self.numpy_helper.from_array(value.astype(np.float32), n))
        return n

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        r = self.rng
        w = r.normal(0.0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        y = self.node("Conv", [x, self.init("w", w)], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4)
        gamma = r.uniform(0.6, 1.2, cout)
        beta = r.normal(0.0, 0.2, cout)
        mean = r.normal(0.0, 0.1, cout)
        var = r.uniform(0.8, 1.6, cout)
        y = self.node("BatchNormalization", [y, self.init("gamma", gamma), self.init("beta", beta),
                                             self.init("mean", mean), self.init("var", var)], epsilon=1e-5)
        return self.node("Relu", [y]) if relu else y


def resnet_onnx(depth: int = 18, batch: int = 1, image: int = 224, num_classes: int = 1000, seed: int = 0,
                widths: tuple[int, int, int, int] = WIDTHS, stride_in_3x3: bool = False):
    """An ONNX ResNet-``depth`` (18, 34 or 50) for ``(batch, 3, image, image)`` float32 input ``data``.

    ``widths``: the channels of the four stages (ImageNet ResNets: 64, 128, 256, 512; smaller values
    give small test networks of the same structure; ResNet-50's blocks put out four times as many).
    ``stride_in_3x3``: ResNet-50 v1.5 (see the module docstring)."""
    from onnx import TensorProto, helper
    if depth not in BLOCKS:
        raise ValueError(f"ResNet depth {depth} is not one of {sorted(BLOCKS)}")
    b = _Builder(seed)
    x = b.conv_bn("data", 3, widths[0], 7, 2, relu=True)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = widths[0]
    for stage, (n_blocks, width) in enumerate(zip(BLOCKS[depth], widths)):
        for k in range(n_blocks):
            stride = 2 if stage > 0 and k == 0 else 1
            cout = EXPANSION * width if depth in BOTTLENECK else width
            if depth in BOTTLENECK:
                s1, s3 = (1, stride) if stride_in_3x3 else (stride, 1)
                y = b.conv_bn(x, cin, width, 1, s1, relu=True)
                y = b.conv_bn(y, width, width, 3, s3, relu=True)
                y = b.conv_bn(y, width, cout, 1, 1, relu=False)
            else:
                y = b.conv_bn(x, cin, width, 3, stride, relu=True)
                y = b.conv_bn(y, width, width, 3, 1, relu=False)
            short = b.conv_bn(x, cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else x
            x = b.node("Relu", [b.node("Add", [y, short])])
            cin = cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    fc_w = b.init("fc_w", b.rng.normal(0.0, np.sqrt(1.0 / cin), (num_classes, cin)))
    fc_b = b.init("fc_b", b.rng.normal(0.0, 0.01, num_classes))
    logits = b.node("Gemm", [x, fc_w, fc_b], transB=1)
    graph = helper.make_graph(b.nodes, f"resnet{depth}",
                              [helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, image, image])],
                              [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [batch, num_classes])],
                              b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="vta-py")
    model.ir_version = 8
    return model


def imagenet_like(batch: int = 1, image: int = 224, seed: int = 0) -> np.ndarray:
    """A normalized-image-like input: smooth random structure plus noise, roughly zero mean and unit scale."""
    r = np.random.default_rng(seed)
    coarse = r.normal(0.0, 1.0, (batch, 3, image // 16, image // 16))
    img = np.repeat(np.repeat(coarse, 16, axis=2), 16, axis=3)[:, :, :image, :image]
    return (0.7 * img + 0.5 * r.normal(0.0, 1.0, (batch, 3, image, image))).astype(np.float32)
