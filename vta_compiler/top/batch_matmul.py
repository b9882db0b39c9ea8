"""``batch_matmul``: a matmul of batched (3-D or more) data by one constant 2-D weight, run on VTA as dense.

Sequence models and transformers' linear layers apply one weight to every row of a ``(B, S, K)`` tensor:
``(B, S, K) @ (K, N) -> (B, S, N)``. That is ``dense`` on the ``(B*S, K)`` view of the data, so this operator
adds no kernel of its own: it maps the Relax op onto a :class:`~vta_compiler.top.dense.DenseWorkload` of
``B*S`` rows, and the dense kernel, its tiling and its records do the rest. The data and the result cross
the kernel as views (reshapes), so consecutive batched matmuls pass their packed tensors on unchanged. The
per-channel epilogue constants run along the last axis.

This file is the worked example of the guide page "Adding an operator".
"""

from __future__ import annotations

import math

import numpy as np
from tvm.relax.dpl import is_const, is_op, wildcard

from ..tiling import Offload, register
from . import conv_family as F
from .dense import Dense, DenseWorkload


class BatchMatmul(Dense):
    """``relax.matmul`` of data with two or more leading dimensions by a constant 2-D weight."""

    kind = "batch_matmul"
    takes_requant = False           # dense's epilogue would do, but it is not tested on batched layouts
    relax_ops = ()                  # dense counts the MACs of a matmul left on the CPU

    def label(self, wkl) -> str:
        return "batch_matmul"

    def pattern(self):
        return is_op("relax.matmul")(wildcard(), is_const())

    def from_relax(self, attrs, x_shape, weight, out_shape, env, options):
        if len(x_shape) < 3:
            return None                 # 2-D data: dense's
        if weight.ndim != 2:
            return (f"batched matmul of {tuple(x_shape)} by a {weight.ndim}-D weight {tuple(weight.shape)}: VTA runs "
                    "one 2-D weight for every row")
        rows, k, n = math.prod(x_shape[:-1]), x_shape[-1], weight.shape[1]
        wkl = DenseWorkload(rows, F.ceil_to(k, env.BLOCK_IN), F.ceil_to(n, env.BLOCK_OUT))
        return Offload(self, wkl, np.ascontiguousarray(weight.T), input_shape=(rows, k), output_shape=(rows, n),
                       channel_axis=-1, note=f"as dense on the ({rows}, {k}) view of the data")


BATCH_MATMUL = register(BatchMatmul())
