"""What VTA's GEMM operators share: the knob values, a tiling's geometry in the numbers the buffer check
and the cost model use, the one cost model, the one schedule ending, the measurement data, and the checks of a
convolution's Relax attributes.

A tiling of any of the operators (conv2d, group/depthwise conv2d, conv2d_transpose, dense) reduces to a
:class:`TileShape`: per tile (all its virtual threads together) the INP and WGT elements one input chunk
loads, the GEMM uops of a chunk, the accumulators, the chunks of a tile and the number of tiles. The buffer
check (``TileShape.needs``) and the cost model (:func:`estimate_cycles`) read nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..environment import Environment
from ..reference import calibrated_shift, requantize
from ..tiling.space import BufferNeeds, LayerData
from . import packing as P
from .common import attach_epilogue, pragma

#: virtual threads a tile may be split over (per dimension)
THREADS = (1, 2, 4)
#: input chunks in flight (``vta.pipeline``: double-buffered input and weight tiles)
CHUNKS_IN_FLIGHT = (1, 2)
#: where the weights load: per input chunk ("ko") or once per output-channel tile ("co")
WGT_AT = ("ko", "co")
#: weight of DRAM traffic (in bus cycles) in the cost, on top of the exposed latencies
TRAFFIC_WEIGHT = 0.5


@dataclass(frozen=True)
class TileShape:
    """One tiling in the numbers of the buffer check and the cost model (per tile: all threads together)."""
    inp_chunk: int          # INP elements one input chunk loads
    wgt_chunk: int          # WGT elements of one input chunk
    wgt_tile: int           # WGT elements of a whole output-channel tile (loaded once with wgt_at="co")
    wgt_layer: int          # WGT elements of the whole layer
    gemm_chunk: int         # GEMM uops of one input chunk
    acc_elems: int          # accumulator elements of a tile
    acc_per_operand: int    # ACC elements one per-channel operand (bias, shift) takes per tile
    chunks: int             # input chunks per tile
    out_tiles: int          # tiles over the output channels
    spatial_tiles: int      # tiles over batch, rows and columns
    oc_threads: int
    row_threads: int        # threads over rows (or batch): they share the weight tile
    chunks_in_flight: int
    wgt_at_co: bool
    uops: int               # uops of one thread's GEMM kernel

    @property
    def threads(self) -> int:
        return self.oc_threads * self.row_threads

    def needs(self, acc_operands: int) -> BufferNeeds:
        inp = self.inp_chunk * self.chunks_in_flight
        wgt = self.wgt_tile if self.wgt_at_co else self.wgt_chunk * self.chunks_in_flight
        return BufferNeeds(inp, wgt, self.acc_elems + acc_operands * self.acc_per_operand, self.uops)


def kernel_uops(loops: list[int], inner: int = 1) -> int:
    """Uops of a GEMM kernel over ``loops``: the two largest run as the instruction's loops, the rest are
    unrolled into uops (times ``inner`` uops that are always unrolled)."""
    return inner * math.prod(sorted(loops, reverse=True)[2:])


def chunk_cycles(loads: float, gemms: float, threads: int, pipelined: bool, row_threads: int) -> float:
    """Cycles of one input chunk of a tile, given the load and GEMM cycles of all its threads together.

    A tile shared by several virtual threads is reloaded only after all of their GEMMs, so with threads
    alone (chunks not pipelined) loads and GEMMs hardly overlap; two chunks in flight (``vta.pipeline``)
    overlap them, except that threads over rows then share the weight tile and serialise again in part."""
    if pipelined:
        return max(loads, gemms) + (min(loads, gemms) / 2 if row_threads > 1 else 0)
    if threads > 1:
        return max(loads, gemms) + min(loads, gemms)
    return loads + gemms


def estimate_cycles(s: TileShape, env: Environment) -> float:
    """The cost model of every GEMM operator: per tile, its chunks' loads and GEMMs (overlapped as the
    threads and chunks in flight allow), the requantisation on the ALU (which shares the compute module with
    the GEMMs) and the store; the first tile's loads, which nothing hides; the DRAM traffic, mostly hidden
    behind the GEMMs but shared with the host, at ``TRAFFIC_WEIGHT``."""
    bus = env.AXI_DATA_BYTES
    inp_c = s.inp_chunk * env.INP_ELEM_BYTES / bus
    chunk_wgt_c = s.wgt_chunk * env.WGT_ELEM_BYTES / bus
    wgt_c = 0.0 if s.wgt_at_co else chunk_wgt_c
    pipelined = s.chunks_in_flight > 1
    tile = s.chunks * chunk_cycles(inp_c + wgt_c, s.gemm_chunk, s.threads, pipelined, s.row_threads)
    if pipelined:
        tile += inp_c + wgt_c       # the first chunk's loads
    tile += 5 * s.acc_elems + s.acc_elems * env.OUT_ELEM_BYTES / bus / s.threads + 40
    tiles = s.out_tiles * s.spatial_tiles
    total = tiles * tile + (inp_c + chunk_wgt_c + s.gemm_chunk) / s.threads
    wgt_bytes = s.wgt_layer * env.WGT_ELEM_BYTES
    if s.wgt_at_co:
        total += wgt_bytes / bus
    else:
        wgt_bytes *= s.spatial_tiles
    inp_bytes = tiles * s.chunks * s.inp_chunk * env.INP_ELEM_BYTES
    return total + TRAFFIC_WEIGHT * (inp_bytes + wgt_bytes) / bus


# ------------------------------------------------------------------------------------------------ schedule
def finish_schedule(sch, env: Environment, func, block, producers, ewise, out, *, attach, ko_o, ko_v, wgt_at,
                    lanes, names) -> None:
    """The ending every GEMM operator's schedule shares, once its loops are split, ordered and bound: the
    epilogue and store at ``attach``, the input tile loaded per chunk (``ko_v``; producers such as padding
    inlined into that load), the weight tile at ``wgt_at``, the reduction's initialisation split off at
    ``ko_o``, the GEMM and its reset tensorized at the (batch, channel) lanes ``lanes = (b_i, c_i)``, and
    the DMA and ALU pragmas."""
    dma_copy, alu, gemm, gemm_reset = names
    attach_epilogue(sch, env, func, ewise, out, attach, dma_copy)
    inp = sch.cache_read(block, 0, env.inp_scope)
    sch.compute_at(inp, ko_v, preserve_unit_loops=True)
    for p in producers:
        sch.compute_inline(p)
    wgt = sch.cache_read(block, 1, env.wgt_scope)
    sch.compute_at(wgt, wgt_at, preserve_unit_loops=True)

    init = sch.decompose_reduction(block, ko_o)
    b_i, c_i = lanes
    if env.BATCH == 1:
        sch.tensorize(sch.get_loops(init)[-1], gemm_reset)
        sch.tensorize(c_i, gemm)
    else:
        sch.tensorize(sch.get_loops(init)[-2], gemm_reset)
        sch.tensorize(b_i, gemm)

    wgt_rank = len(sch.get(wgt).writes[0].region)
    out_rank = len(sch.get(out).writes[0].region)
    pragma(sch, sch.get_loops(inp)[-4], dma_copy)           # per input-channel block: rows x columns, padded
    pragma(sch, sch.get_loops(wgt)[-wgt_rank], dma_copy)    # output-channel rows x (ci, taps) columns
    for blk in ewise:
        pragma(sch, sch.get_loops(blk)[-out_rank], alu)
    pragma(sch, sch.get_loops(out)[-4], dma_copy)           # per output-channel block: rows x columns


# ------------------------------------------------------------------------------------------------ data
def random_layer(rng, wkl, weight_shape: tuple[int, ...]):
    """Full-range int8 NCHW data and weights, and an int32 bias per output channel, for a measurement."""
    x = rng.integers(-128, 128, (wkl.batch, wkl.in_filter, wkl.height, wkl.width), dtype=np.int8)
    w = rng.integers(-128, 128, weight_shape, dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, (wkl.out_filter,), dtype=np.int32)
    return x, w, b


def conv_layer_data(op, wkl, env: Environment, acc_operands: int, rng, x, w, b, acc, macs: int) -> LayerData:
    """A convolution measurement's arguments (data, kernel, bias, [shift]) and expected NCHW output: the
    calibrated shift, or with two ACC operands one shift per channel around it."""
    shift = calibrated_shift(acc, (0, 127))
    args = [P.pack_nchw(P.pad_channels(x, 1, env.BLOCK_IN), env.BATCH, env.BLOCK_IN), op.pack_weights(w, wkl, env),
            op.pack_channels(b, wkl, env)]
    if acc_operands >= 2:          # a per-channel shift (an ALU SHR with a register operand)
        shifts = np.clip(shift + rng.integers(-1, 2, wkl.out_filter), 0, 31).astype(np.int32)
        args.append(op.pack_channels(shifts, wkl, env))
        expected = np.clip(acc >> shifts.reshape(1, -1, 1, 1), 0, 127).astype(np.int8)
        shift = None
    else:
        expected = requantize(acc, shift, (0, 127))
    out_shape = (wkl.batch // env.BATCH, wkl.out_filter // env.BLOCK_OUT, wkl.out_height, wkl.out_width,
                 env.BATCH, env.BLOCK_OUT)
    return LayerData(args, out_shape, expected, shift, macs)


# ------------------------------------------------------------------------------------------------ graphs
def pads(attrs) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) padding of a Relax convolution."""
    pad = tuple(int(p) for p in attrs.padding)
    return pad * 2 if len(pad) == 2 else pad


def layout_refusal(attrs, layouts: tuple[str, str]) -> str | None:
    """Why graph_pack cannot read a Relax convolution's data and kernel layouts, or None."""
    got = (str(attrs.data_layout), str(attrs.kernel_layout))
    if got != layouts:
        return f"layout {got[0]}/{got[1]} (graph_pack reads {layouts[0]}/{layouts[1]})"
    return None


def window_refusal(attrs) -> str | None:
    """Why VTA cannot run a Relax convolution's window (dilation, asymmetric padding), or None."""
    if any(int(d) != 1 for d in attrs.dilation):
        return f"dilated convolution (dilation={tuple(int(d) for d in attrs.dilation)})"
    pad = pads(attrs)
    if pad[0] != pad[2] or pad[1] != pad[3]:
        return f"asymmetric padding {pad} (VTA pads symmetrically while loading)"
    return None


def ceil_to(n: int, k: int) -> int:
    return -(-n // k) * k
