"""Operators in VTA's packed layouts with their schedules (spec 5.6), one per file, and numpy packing helpers.

Each operator is one object of a :class:`vta_compiler.tiling.Operator` subclass, registered in
``vta_compiler.tiling.registry``: ``conv2d`` (:mod:`.conv2d`), ``group_conv2d`` (grouped and depthwise,
:mod:`.group_conv2d`), ``conv2d_transpose`` (:mod:`.conv2d_transpose`), ``dense`` (:mod:`.dense`) and
``batch_matmul`` (:mod:`.batch_matmul`, run as dense), ``pool2d`` (max and average pooling on the ALU,
:mod:`.pool2d`) and ``activation`` (elementwise and channel multiply, hard-sigmoid, hard-swish on the ALU,
:mod:`.activation`). Each file
also has the functions users call: a ``*_layer`` PrimFunc builder, a ``schedule_*_packed`` with automatic tiling,
a ``*_tiling`` and, where VTA refuses some shapes, a ``*_supported(wkl, env)`` that says in one sentence why
(None when it can). What the GEMM operators share (knobs, the cost model, the schedule ending) is in
:mod:`.conv_family`. Adding an operator: a file like these and one import line here (the guide "Adding an
operator").
"""

from __future__ import annotations

from ..tiling import Operator, register
from ..tiling import registry as _registry
from . import activation, batch_matmul, conv2d, conv2d_transpose, dense, group_conv2d, pool2d  # noqa: F401  (each registers)
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
from .dense import DenseTiling, DenseWorkload, dense_layer, dense_packed, dense_tiling, schedule_dense_packed
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


def operator(kind_or_workload):
    """The registered operator of a kind (``"conv2d"``) or of a workload (``Conv2DWorkload(...)``)."""
    return _registry.get(kind_or_workload) if isinstance(kind_or_workload, str) else _registry.of(kind_or_workload)


__all__ = ["RESNET18", "Conv2DTiling", "Conv2DWorkload", "DenseTiling", "DenseWorkload", "Operator", "conv2d_layer",
           "conv2d_packed", "conv2d_tiling", "dense_layer", "dense_packed", "dense_tiling", "operator",
           "pack_bias_conv", "pack_bias_dense", "pack_nc", "pack_nchw", "pack_oi", "pack_oihw", "pad_channels",
           "register", "schedule_conv2d_packed", "schedule_dense_packed", "unpack_nc", "unpack_nchw", "unpack_oihw",
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
