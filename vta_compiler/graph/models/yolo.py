"""A YOLO-tiny-style detector written with TVM's ``relax.frontend.nn`` (seeded random weights).

Not shaped like ResNet: a plain stack of 3x3 convolutions and 2x2 max pools, then two detection
heads; the fine head upsamples the coarse features (nearest, 2x) and concatenates them with an
earlier feature map, as YOLOv3-tiny does. Each head ends in a 1x1 convolution and a sigmoid, an
operator the quantizer runs in float on the CPU.
"""

from __future__ import annotations

import numpy as np

#: anchors x (box 4 + objectness 1 + classes 11)
HEAD_CHANNELS = 3 * 16


def _model_class():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    def wrap(expr, name):
        return nn.core.wrap_nested(expr, name)

    class TinyYolo(nn.Module):
        def __init__(self):
            chans = [3, 16, 32, 64, 128, 256]
            self.backbone = nn.ModuleList([nn.Conv2D(a, b, 3, padding=1, bias=True) for a, b in zip(chans, chans[1:])])
            self.reduce = nn.Conv2D(256, 128, 1, bias=True)
            self.head_coarse = nn.Conv2D(128, HEAD_CHANNELS, 1, bias=True)
            self.merge = nn.Conv2D(256, 128, 3, padding=1, bias=True)
            self.head_fine = nn.Conv2D(128, HEAD_CHANNELS, 1, bias=True)

        def forward(self, x: nn.Tensor):
            route = None
            for k, conv in enumerate(self.backbone):
                x = op.relu(conv(x))
                if k == 3:
                    route = x                                   # 1/8 scale, 128 channels
                if k < 4:
                    x = wrap(relax.op.nn.max_pool2d(x._expr, pool_size=(2, 2), strides=(2, 2)), f"pool{k}")
            coarse = op.relu(self.reduce(x))                    # 1/16 scale
            h, w = (int(s) for s in coarse.shape[2:])
            up = wrap(relax.op.image.resize2d(coarse._expr, size=(2 * h, 2 * w), method="nearest_neighbor",
                                              coordinate_transformation_mode="asymmetric", rounding_method="floor"),
                      "upsample")
            fine = op.relu(self.merge(op.concat([up, route], dim=1)))
            out_coarse = op.sigmoid(self.head_coarse(coarse))
            out_fine = op.sigmoid(self.head_fine(fine))
            return out_coarse, out_fine

    return TinyYolo


def yolo_tiny_nn(batch: int = 1, image: int = 96, seed: int = 0):
    """``(mod, params)`` as ``export_tvm`` returns them, with seeded He-normal weights set on the parameters."""
    import tvm
    from tvm.relax.frontend import nn
    model = _model_class()()
    mod, params = model.export_tvm({"forward": {"x": nn.spec.Tensor((batch, 3, image, image), "float32")}})
    rng = np.random.default_rng(seed)
    for name, p in params:
        shape = tuple(int(s) for s in p.shape)
        if name.endswith("weight"):
            value = rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
        else:
            value = rng.normal(0.0, 0.05, shape)
        p.data = tvm.runtime.tensor(value.astype("float32"))
    return mod, params
