"""Networks shipped with the repository (built in code, no downloads).

* ``resnet_onnx(18 | 34 | 50)``: ResNet v1 as ONNX with batch norm (50: bottleneck blocks), seeded random
  weights.
* ``mobilenet_v1_onnx()``: MobileNet v1 as ONNX (depthwise-separable blocks, batch norm, ReLU6, a
  width multiplier), seeded random weights.
* ``dcgan_generator_onnx()``: a DCGAN-style generator as ONNX (transposed convolutions, batch norm,
  ReLU, tanh), seeded random weights; ``latent_like()`` draws its input.
* ``yolo_tiny_nn()``: a YOLO-tiny-style detector in ``relax.frontend.nn`` (max pools, upsample, concat,
  sigmoid heads), seeded random weights.
* ``digits``: a CNN trained on scikit-learn's digits (weights committed; ``digits.digits_onnx()``).
"""

from . import digits
from .dcgan import dcgan_generator_onnx, latent_like
from .mobilenet import mobilenet_v1_onnx
from .resnet import imagenet_like, resnet_onnx
from .yolo import yolo_tiny_nn

__all__ = ["dcgan_generator_onnx", "digits", "imagenet_like", "latent_like", "mobilenet_v1_onnx", "resnet_onnx",
           "yolo_tiny_nn"]
