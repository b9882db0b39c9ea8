"""Networks shipped with the repository (built in code, no downloads)."""

from .resnet import imagenet_like, resnet_onnx

__all__ = ["imagenet_like", "resnet_onnx"]
