"""Networks shipped with the repository (built in code, no downloads).

* ``resnet_onnx(18 | 34)``: ResNet v1 as ONNX with batch norm, seeded random weights.
* ``yolo_tiny_nn()``: a YOLO-tiny-style detector in ``relax.frontend.nn`` (max pools, upsample, concat,
  sigmoid heads), seeded random weights.
* ``digits``: a CNN trained on scikit-learn's digits (weights committed; ``digits.digits_onnx()``).
"""

from . import digits
from .resnet import imagenet_like, resnet_onnx
from .yolo import yolo_tiny_nn

__all__ = ["digits", "imagenet_like", "resnet_onnx", "yolo_tiny_nn"]
