"""Operators in VTA's packed layouts with their schedules (spec 5.6), and numpy packing helpers."""

from __future__ import annotations

from .conv2d import (
    RESNET18,
    Conv2DTiling,
    Conv2DWorkload,
    conv2d_layer,
    conv2d_packed,
    conv2d_tiling,
    schedule_conv2d_packed,
)
from .dense import DenseTiling, dense_layer, dense_packed, dense_tiling, schedule_dense_packed
from .packing import (
    pack_bias_conv,
    pack_bias_dense,
    pack_nc,
    pack_nchw,
    pack_oi,
    pack_oihw,
    pad_channels,
    unpack_nc,
    unpack_nchw,
    unpack_oihw,
)


def graph_pack(qmod, env=None):
    """``vta_compiler.graph.graph_pack`` (the original's users look for it here): offload every layer of a
    quantized Relax network that VTA can run, in packed layouts."""
    from ..graph import graph_pack as pack
    return pack(qmod, env)


__all__ = ["RESNET18", "graph_pack", "Conv2DTiling", "Conv2DWorkload", "DenseTiling", "conv2d_layer", "conv2d_packed",
           "conv2d_tiling", "dense_layer", "dense_packed", "dense_tiling", "pack_bias_conv", "pack_bias_dense",
           "pack_nc", "pack_nchw", "pack_oi", "pack_oihw", "pad_channels", "schedule_conv2d_packed",
           "schedule_dense_packed", "unpack_nc", "unpack_nchw", "unpack_oihw"]
