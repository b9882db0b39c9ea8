"""Operators in VTA's packed layouts with their schedules (spec 5.6), and numpy packing helpers.

Each operator has a ``*_layer`` PrimFunc builder and a ``schedule_*_packed`` with automatic tiling;
the group, depthwise and transposed convolutions also have a ``*_supported(wkl, env)`` that says in
one sentence why VTA cannot run a shape (None when it can), for whole-network placement.
"""

from __future__ import annotations

from .bitpack import bitpack, bitpack_np, bitunpack, bitunpack_np
from .conv2d import (
    RESNET18,
    Conv2DTiling,
    Conv2DWorkload,
    conv2d_layer,
    conv2d_packed,
    conv2d_tiling,
    schedule_conv2d_packed,
)
from .conv2d_transpose import (
    DCGAN,
    UNET_DECODER,
    Conv2DTransposeTiling,
    Conv2DTransposeWorkload,
    conv2d_transpose_layer,
    conv2d_transpose_packed,
    conv2d_transpose_supported,
    conv2d_transpose_tiling,
    pack_conv2d_transpose_kernel,
    schedule_conv2d_transpose_packed,
)
from .dense import DenseTiling, dense_layer, dense_packed, dense_tiling, schedule_dense_packed
from .group_conv2d import (
    MOBILENET_DEPTHWISE,
    MOBILENET_GROUP,
    WIDE_GROUP,
    GroupConv2DTiling,
    GroupConv2DWorkload,
    depthwise_conv2d_layer,
    depthwise_conv2d_supported,
    depthwise_conv2d_tiling,
    depthwise_workload,
    group_conv2d_layer,
    group_conv2d_packed,
    group_conv2d_supported,
    group_conv2d_tiling,
    pack_depthwise_kernel,
    pack_group_conv2d_kernel,
    schedule_depthwise_conv2d_packed,
    schedule_group_conv2d_packed,
)
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


def graph_pack(qmod, env=None, **options):
    """``vta_compiler.graph.graph_pack`` (the original's users look for it here): offload every layer of a
    quantized Relax network that VTA can run, in packed layouts (``options``: ``depthwise="vta" | "cpu"``)."""
    from ..graph import graph_pack as pack
    return pack(qmod, env, **options)


__all__ = ["RESNET18", "graph_pack", "Conv2DTiling", "Conv2DWorkload", "DenseTiling", "conv2d_layer", "conv2d_packed",
           "conv2d_tiling", "dense_layer", "dense_packed", "dense_tiling", "pack_bias_conv", "pack_bias_dense",
           "pack_nc", "pack_nchw", "pack_oi", "pack_oihw", "pad_channels", "schedule_conv2d_packed",
           "schedule_dense_packed", "unpack_nc", "unpack_nchw", "unpack_oihw",
           # group / depthwise convolution
           "MOBILENET_DEPTHWISE", "MOBILENET_GROUP", "WIDE_GROUP", "GroupConv2DTiling", "GroupConv2DWorkload",
           "depthwise_conv2d_layer", "depthwise_conv2d_supported", "depthwise_conv2d_tiling", "depthwise_workload",
           "group_conv2d_layer", "group_conv2d_packed", "group_conv2d_supported", "group_conv2d_tiling",
           "pack_depthwise_kernel", "pack_group_conv2d_kernel", "schedule_depthwise_conv2d_packed",
           "schedule_group_conv2d_packed",
           # transposed convolution
           "DCGAN", "UNET_DECODER", "Conv2DTransposeTiling", "Conv2DTransposeWorkload", "conv2d_transpose_layer",
           "conv2d_transpose_packed", "conv2d_transpose_supported", "conv2d_transpose_tiling",
           "pack_conv2d_transpose_kernel", "schedule_conv2d_transpose_packed",
           # bit packing
           "bitpack", "bitpack_np", "bitunpack", "bitunpack_np"]
