"""What VTA's GEMM operators share: the knob values, a tiling's geometry in the numbers the buffer check
and the cost model use, the one cost model, the one schedule ending, the measurement data, and the checks of a
convolution's Relax attributes.

A tiling of any of the operators (conv2d, group/depthwise conv2d, conv2d_transpose, dense) reduces to a
:class:`TileShape`: per tile (all its virtual threads together) the INP and WGT elements one input chunk
loads, the GEMM uops of a chunk, the accumulators, the chunks of a tile and the number of tiles, and the shape
of the instruction stream the cost model replays (load instructions per thread, inputs private to a thread,
padding, stores, runs of tiles). The buffer check (``TileShape.needs``) and the cost model
(:func:`estimate_cycles`) read nothing else.
"""

from __future__ import annotations

import functools
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
#: accumulator copies that consecutive tiles alternate between (``vta.alternate``): with 2, one tile's epilogue and
#: stores run beside the next tile's resets and GEMMs (the compute module's two engines)
ACC_COPIES = (1, 2)


def alternated_loop(extents: tuple[int, ...]) -> int:
    """Which of the tile loops (outermost first) alternates accumulator copies: the innermost with more than one
    iteration (consecutive tiles are then its iterations)."""
    return next((i for i in range(len(extents) - 1, -1, -1) if extents[i] > 1), len(extents) - 1)


def alternation_refusal(extents: tuple[int, ...], copies: int) -> str | None:
    """Why tiles over ``extents`` (the tile loops, outermost first) cannot alternate ``copies`` accumulator copies."""
    if copies not in ACC_COPIES:
        return f"acc_nbuf must be one of {ACC_COPIES}, not {copies!r}"
    if copies == 1:
        return None
    n = extents[alternated_loop(extents)]
    if n % copies:
        return f"{copies} accumulator copies alternate over the innermost tile loop, whose {n} tiles they do not divide"
    return None


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
    # the instruction stream's shape, for the cost model only (the buffer check does not read these)
    inp_loads: int = 1              # INP load instructions of one thread's input tile per chunk (one per input block)
    inp_private: bool = False       # each output-channel thread loads its own input tile (a group per thread)
    inp_padding: float = 0.0        # average fraction of the loaded INP elements that are zero padding
    store_insns: int = 1            # STORE instructions of one thread per tile
    run_tiles: int = 1              # consecutive tiles of the innermost tile loop (the pipeline drains between runs)
    shortcut: bool = False          # a fused residual add: an int8 shortcut tile in ACC (acc_elems), one ACC_8BIT load
    acc_copies: int = 1             # accumulator copies consecutive tiles alternate between (ACC needs times this)
    gemm_run: int = 1               # consecutive GEMM uops into one destination (one ACC write-back per run)

    @property
    def threads(self) -> int:
        return self.oc_threads * self.row_threads

    def needs(self, acc_operands: int) -> BufferNeeds:
        inp = self.inp_chunk * self.chunks_in_flight
        wgt = self.wgt_tile if self.wgt_at_co else self.wgt_chunk * self.chunks_in_flight
        acc = self.acc_elems * (2 if self.shortcut else 1) + acc_operands * self.acc_per_operand
        return BufferNeeds(inp, wgt, acc * self.acc_copies, self.uops)


def residual_refusal(env: Environment) -> str | None:
    """Why a layer cannot fuse a residual add on this configuration (its shortcut is an ACC_8BIT load), or None."""
    if env.config.isa.has("acc_8bit"):
        return None
    return ("a fused residual add loads its int8 shortcut into the accumulators with an ACC_8BIT load, which "
            "needs ISA extension acc_8bit (config key ISA_EXTENSIONS)")


def uop_run(loops: list[int], reduction: int) -> int:
    """Consecutive uops into one destination of a GEMM kernel over ``loops`` whose last ``reduction`` loops reduce:
    the product of those of them unrolled into uops (not among the two largest, which are the instruction's)."""
    looped = sorted(range(len(loops)), key=lambda i: -loops[i])[:2]
    return math.prod(n for i, n in enumerate(loops) if i >= len(loops) - reduction and i not in looped)


def kernel_uops(loops: list[int], inner: int = 1) -> int:
    """Uops of a GEMM kernel over ``loops``: the two largest run as the instruction's loops, the rest are
    unrolled into uops (times ``inner`` uops that are always unrolled)."""
    return inner * math.prod(sorted(loops, reverse=True)[2:])


def innermost(loops: tuple[int, ...]) -> int:
    """Iterations of the innermost of a tile loop nest (outermost first) that has more than one: the tiles
    that follow each other without the pipeline draining between them."""
    return next((n for n in reversed(loops) if n > 1), 1)


def padding_fraction(rows: tuple[int, int, int, int, int], cols: tuple[int, int, int, int, int]) -> float:
    """Average fraction of an input window that is zero padding, over the tiles of one axis each:
    ``(tiles, first_offset, step, window, size)``: tile ``i`` reads input positions ``[first + i*step,
    first + i*step + window)`` of ``[0, size)``."""
    return 1.0 - _inside(*rows) * _inside(*cols)


@functools.lru_cache(maxsize=4096)
def _inside(tiles: int, first: int, step: int, window: int, size: int) -> float:
    """The fraction of one axis' windows inside ``[0, size)``; only the tiles near the edges are partly outside,
    so they are counted from both ends."""
    outside = 0
    for i in range(tiles):                        # from the start, while the window begins before 0
        lo = first + i * step
        if lo >= 0:
            break
        outside += min(-lo, window)
    for i in range(tiles - 1, -1, -1):            # from the end, while it ends after size
        hi = first + i * step + window
        if hi <= size:
            break
        outside += min(hi - size, window)
    total = tiles * window
    return (total - min(outside, total)) / total


# ------------------------------------------------------------------------------------------------ cost model
# The cost model replays what the hardware does with a tiling's instruction stream, at the level of groups of
# instructions. The stream is what the TIR passes make of the schedule (see the guide "Tuning" for how this
# was checked: the grouping and order below reproduce the dependency tokens of compiled layers):
#
# * per tile, the accumulators of each thread are reset (a GEMM with reset), each waiting for the previous
#   tile's store of that thread (ACC and OUT are reused);
# * per input chunk (``chunks / chunks_in_flight`` steps of ``chunks_in_flight`` slots), the load module loads
#   each slot's input tile (one instruction per input block, per row thread, and per output-channel thread when
#   the input is private) and weight tile (one per output-channel thread, unless ``wgt_at="co"``); when a
#   thread's input tile takes several instructions, they are one loop over the input blocks with every
#   thread's and slot's loads inside, which waits (one token) for every GEMM of the previous step. The GEMMs
#   follow, one per (thread, slot): output-channel threads outermost, then row threads and slots (slots before
#   row threads with ``wgt_at="co"``). A load waits for the previous step's GEMMs that read its buffer, a GEMM
#   for this step's loads of its buffers (the first step's loads wait for the resets);
# * then the epilogue of each thread on the compute module (the bias' ACC load per output-channel thread, four
#   ALU instructions: ADD of the bias with a register operand at two cycles per element, SHR/MAX/MIN at one) and
#   its stores (one loop after every epilogue when a thread has several store instructions, else one store per
#   thread after its epilogue);
# * with one step per tile there is no chunk loop: each output-channel thread's GEMMs are followed at once by
#   its epilogue, and the next tile's loads wait only for the GEMMs that read their buffer, so they overlap
#   this tile's epilogue and stores. Between two iterations of an outer tile loop the dependency pass drains
#   the pipeline (the next loads wait for the stores): tiles overlap only within a run of the innermost loop;
# * with ``wgt_at="co"`` each output-channel tile starts with its weight tile's load;
# * fetch dispatches in program order into 16-deep command queues (``vta_hw.core``), so a tile with more than
#   16 stores, or more than 16 compute instructions between its last GEMM and the next tile's loads, holds
#   those loads back until the queue has taken all but 16 of them;
# * the first tile loads every uop kernel once (they then stay in the UOP buffer), the first tile of each accumulator
#   copy with two copies;
# * with two accumulator copies (``acc_copies``) consecutive tiles alternate between them: a tile's resets wait for
#   the stores of the tile before the previous one, its first loads only for the previous tile's GEMMs (every one:
#   the token comes after its chunk loop), and its epilogue runs on the ALU engine beside the next tile's resets and
#   GEMMs, in the cycles the GEMMs' write-back leaves free (one per run of uops into one destination: none for a 1x1
#   layer's with one input block per chunk, whose epilogues then run in turn with the GEMMs).
#
# Each module runs its instructions in order; an instruction takes a fixed overhead (its command handshake,
# the DMA's first-beat latency or the GEMM/ALU pipeline fill) plus its beats or uops. Steps, tiles and runs
# repeat exactly, so the model simulates a few of each and extends the last period to the rest: it costs the
# same for a layer of 10 or 10,000 tiles.

#: cycles of one INP/WGT load instruction besides its beats: command, DRAM row and burst set-up, the read
#: latency (8 cycles on tsim's bus) and the SRAM writes' tail; fitted to ``load_busy_cycles`` of the shipped
#: ResNet-18 records (20.9 for INP, 19.1 for WGT; 2.0 and 32.0 cycles per INP and WGT element are the beats)
LOAD_INSN_CYCLES = 20.0
#: cycles of one zero-padding element of an INP load: the SRAM writer writes one per cycle, partly while the
#: bus delivers data (fitted like the above; a data element costs its beats, 2 on a 64-bit bus)
PAD_ELEM_CYCLES = 0.38
#: cycles of a GEMM instruction besides its uops (one per cycle): the uop loop's pipeline (11 cycles of
#: ``gemm_busy_cycles`` per instruction, exact on every record) and the command handshake (3, from
#: ``compute_busy_cycles``); the same for a reset GEMM
GEMM_INSN_CYCLES = 14.0
#: cycles of an ACC load (the bias) besides its beats, and of an ALU instruction besides its elements (one per
#: element with an immediate, two with a register operand): fitted to ``compute_busy_cycles``/``alu_busy_cycles``
ACC_INSN_CYCLES = 22.0
ALU_INSN_CYCLES = 11.0
#: the epilogue of one ACC operand (a bias): ADD with a register operand (2 cycles per element), then SHR,
#: MAX and MIN with immediates (1 each); a per-channel shift would add one cycle per element
EPILOGUE_INSNS = 4
EPILOGUE_CYCLES_PER_ELEM = 5
#: a fused residual add per thread: the shortcut's ACC_8BIT load (one DRAM byte per value, costed like the bias'
#: load), then six ALU instructions in place on it (SHR of the shortcut, ADD of the layer's result with a register
#: operand at two cycles per element, ADD of the rounding constant, SHR, MAX, MIN: 7 cycles per element)
RESIDUAL_ALU_INSNS = 6
RESIDUAL_CYCLES_PER_ELEM = 7
#: cycles of a STORE instruction besides its beats: command, burst set-up and the write response (8 cycles
#: on tsim's bus); fitted to ``store_busy_cycles``
STORE_INSN_CYCLES = 17.0
#: cycles of a UOP load instruction besides its beats (fitted to ``compute_busy_cycles``, like the above)
UOP_LOAD_CYCLES = 17.0
#: depth of the load/compute/store command queues (``vta_hw.core.Core(queue_depth=16)``)
COMMAND_QUEUE_DEPTH = 16
#: steps and tiles simulated before the last period is extended to the rest (the pattern is periodic from the
#: second step or tile on; three make the period exact, checked against simulating every one)
_SIMULATED = 3


@functools.lru_cache(maxsize=512)
def _step_program(vo_n: int, vh_n: int, k_n: int, private: bool, inp_loop: bool, wgt_per_step: bool):
    """The order of one step's loads and GEMMs, as indices (cached per thread structure).

    GEMM ``(vo, vh, k)`` has index ``(vo * vh_n + vh) * k_n + k``. Returns (loads, gemms):
    loads: ``(kind, buffer, readers)`` with kind 0 one INP instruction, 1 the loop of every INP load, 2 a WGT
    load; readers: the GEMM indices that read the buffer. gemms: ``(vo, gemm, inp buffer, wgt buffer)``."""
    def gi(vo, vh, k):
        return (vo * vh_n + vh) * k_n + k

    def ib(k, vo, vh):
        return (k * (vo_n if private else 1) + (vo if private else 0)) * vh_n + vh

    def inp_readers(k, vo, vh):
        return tuple(gi(o, vh, k) for o in ((vo,) if private else range(vo_n)))

    def wgt_load(k, vo):
        return (2, k * vo_n + vo, tuple(gi(vo, h, k) for h in range(vh_n)))

    loads = []
    if inp_loop:
        readers = tuple(range(vo_n * vh_n * k_n))
        loads.append((1, -1, readers))
        if wgt_per_step:
            loads += [wgt_load(k, vo) for vo in range(vo_n) for k in range(k_n)]
    else:
        for k in range(k_n):
            if private:
                for vo in range(vo_n):
                    loads += [(0, ib(k, vo, vh), inp_readers(k, vo, vh)) for vh in range(vh_n)]
                    if wgt_per_step:
                        loads.append(wgt_load(k, vo))
            else:
                loads += [(0, ib(k, 0, vh), inp_readers(k, 0, vh)) for vh in range(vh_n)]
                if wgt_per_step:
                    loads += [wgt_load(k, vo) for vo in range(vo_n)]
    if wgt_per_step:
        order = [(vo, vh, k) for vo in range(vo_n) for vh in range(vh_n) for k in range(k_n)]
    else:
        order = [(vo, vh, k) for vo in range(vo_n) for k in range(k_n) for vh in range(vh_n)]
    gemms = tuple((vo, gi(vo, vh, k), ib(k, vo, vh), k * vo_n + vo if wgt_per_step else -1) for vo, vh, k in order)
    return tuple(loads), gemms


def estimate_cycles(s: TileShape, env: Environment) -> float:
    """The cost model of every GEMM operator: the device cycles of a layer tiled as ``s``, from a replay of its
    instruction stream's groups on the three in-order modules with their dependency tokens (see above)."""
    bus = env.AXI_DATA_BYTES
    vo_n, vh_n, k_n = s.oc_threads, s.row_threads, s.chunks_in_flight
    threads = vo_n * vh_n
    steps = s.chunks // k_n
    wgt_per_step = not s.wgt_at_co
    inp_loop = s.inp_loads > 1
    # durations of the instruction groups (cycles)
    inp_groups = k_n * vh_n * (vo_n if s.inp_private else 1)
    window = s.inp_chunk / (vh_n * (vo_n if s.inp_private else 1) * s.inp_loads)      # one INP instruction's
    inp1 = LOAD_INSN_CYCLES + window * ((1.0 - s.inp_padding) * env.INP_ELEM_BYTES / bus
                                        + s.inp_padding * PAD_ELEM_CYCLES)
    inp_all = inp_groups * s.inp_loads * inp1
    wgt1 = LOAD_INSN_CYCLES + s.wgt_chunk / vo_n * env.WGT_ELEM_BYTES / bus
    gemm1 = GEMM_INSN_CYCLES + s.gemm_chunk / threads
    acc_v = s.acc_elems / threads
    reset1 = GEMM_INSN_CYCLES + acc_v
    bias1 = ACC_INSN_CYCLES + s.acc_per_operand / vo_n * env.ACC_ELEM_BYTES / bus
    alu1 = EPILOGUE_INSNS * ALU_INSN_CYCLES + EPILOGUE_CYCLES_PER_ELEM * acc_v
    epi_insns = EPILOGUE_INSNS
    shortcut1 = residual1 = 0.0     # a fused residual's load (several rows: it waits for every older instruction
    #                                 to retire) and its ALU work
    if s.shortcut:          # the shortcut's load and its ALU work, per thread, after the bias' epilogue
        shortcut1 = ACC_INSN_CYCLES + acc_v * env.OUT_ELEM_BYTES / bus
        residual1 = RESIDUAL_ALU_INSNS * ALU_INSN_CYCLES + RESIDUAL_CYCLES_PER_ELEM * acc_v
        alu1 += shortcut1 + residual1
        epi_insns += 1 + RESIDUAL_ALU_INSNS
    store1 = s.store_insns * STORE_INSN_CYCLES + acc_v * env.OUT_ELEM_BYTES / bus
    wtile = LOAD_INSN_CYCLES + s.wgt_tile * env.WGT_ELEM_BYTES / bus
    store_loop = s.store_insns > 1
    n_stores = threads * s.store_insns
    gate_after = (n_stores - COMMAND_QUEUE_DEPTH) * STORE_INSN_CYCLES + \
        (n_stores - COMMAND_QUEUE_DEPTH) / s.store_insns * acc_v * env.OUT_ELEM_BYTES / bus \
        if n_stores > COMMAND_QUEUE_DEPTH else None
    loads, gemms = _step_program(vo_n, vh_n, k_n, s.inp_private, inp_loop, wgt_per_step)
    # the ALU engine works beside the GEMMs only in the cycles their write-back leaves the ACC ports free (one in
    # gemm_run): with one uop per destination it gets none, and the tiles run one after the other
    alternate = s.acc_copies > 1 and s.gemm_run > 1
    speed = s.gemm_run / (s.gemm_run - 1) if alternate else 1.0      # ALU cycles per cycle of work beside GEMMs
    alu_beside = alu1 * speed

    def epilogue(cf, af, ends):
        """One output-channel thread's epilogue once its GEMMs are done (at ``cf``): on the ALU engine (free at
        ``af``) beside the next GEMMs when tiles alternate, else in turn on the compute module. Returns (cf, af)."""
        a = (af if af > cf else cf) + bias1
        for _ in range(vh_n):
            if alternate and s.shortcut:
                # the shortcut's load waits for the bias' part before it to retire and holds the next instructions
                # back until it is done; only the shortcut's own ALU work runs beside the next GEMMs
                a += (alu1 - shortcut1 - residual1) * speed + shortcut1
                cf = a
                a += residual1 * speed
            else:
                a += alu_beside
            ends.append(a)
        return (cf, a) if alternate else (a, af)
    # can the compute queue hold back the next tile's loads (more than 16 instructions between them)?
    queued = threads + (1 + epi_insns * vh_n if steps == 1 else 0) > COMMAND_QUEUE_DEPTH
    n_inp_buf = k_n * (vo_n if s.inp_private else 1) * vh_n
    n_gemm = threads * k_n
    load_dur = (inp1, inp_all, wgt1)

    def step_loads(lf, prev, first):
        """One step's loads: the load module's free time and when each input and weight buffer is filled;
        ``prev``: the previous step's GEMM end times, or the time the first step's loads wait for (a float)."""
        inp = [0.0] * n_inp_buf
        wgt = [0.0] * (k_n * vo_n)
        for kind, buf, readers in loads:
            dep = prev if first else max(map(prev.__getitem__, readers))
            lf = (lf if lf > dep else dep) + load_dur[kind]
            if kind == 2:
                wgt[buf] = lf
            elif kind == 0:
                inp[buf] = lf
            else:
                inp = [lf] * n_inp_buf
        return lf, inp, wgt

    def step(lf, cf, prev, first):
        """One step's loads and GEMMs; ``prev`` as for ``step_loads``."""
        lf, inp, wgt = step_loads(lf, prev, first)
        g = [0.0] * n_gemm
        for _, gi, b, w in gemms:
            dep = inp[b]
            if w >= 0 and wgt[w] > dep:
                dep = wgt[w]
            cf = (cf if cf > dep else dep) + gemm1
            g[gi] = cf
        return lf, cf, g

    def tile(state, weights):
        """One tile from ``state = (load free, compute free, store free, stores' ends per thread, GEMM ends of
        the previous tile, the time the store queue lets this tile's loads through, the start times of the
        compute instructions since the previous tile's last GEMM)``."""
        lf, cf, sf, stores, prev_g, gate, pending, _, af, stores2 = state
        if weights:
            lf = max(lf, max(prev_g)) + wtile
        # with two accumulator copies a tile's resets wait for the stores of the tile before the previous one
        reuse = stores2 if s.acc_copies > 1 else stores
        for v in range(threads):
            start = cf if cf > reuse[v] else reuse[v]
            if queued:
                pending.append(start)
            cf = start + reset1
        resets = cf
        # this tile's loads follow the stores and resets in program order: fetch dispatches them once the store
        # and compute queues have taken all but their last 16 instructions
        if queued and len(pending) > COMMAND_QUEUE_DEPTH and pending[-COMMAND_QUEUE_DEPTH - 1] > gate:
            gate = pending[-COMMAND_QUEUE_DEPTH - 1]
        if gate > lf:
            lf = gate
        alu_end = []
        pending = []
        if steps == 1:
            # no chunk loop: the loads wait for the previous tile's GEMMs of their buffers; each output-channel
            # thread's epilogue follows its GEMMs
            lf, inp, wgt = step_loads(lf, prev_g, False)
            g = [0.0] * n_gemm
            last_vo = 0
            for vo, gi, b, w in gemms:
                if vo != last_vo:
                    cf, af = epilogue(cf, af, alu_end)
                    last_vo = vo
                dep = inp[b]
                if w >= 0 and wgt[w] > dep:
                    dep = wgt[w]
                cf = (cf if cf > dep else dep) + gemm1
                g[gi] = cf
            if queued:                           # the last epilogue: its ACC load, then its ALU instructions
                pending = [cf] + [cf + bias1 + (h + i / epi_insns) * alu1 for h in range(vh_n)
                                  for i in range(epi_insns)]
            cf, af = epilogue(cf, af, alu_end)
        else:
            first_wait = cf
            marks = []
            g = first_wait
            for j in range(min(steps, _SIMULATED)):
                if j == 0 and s.acc_copies > 1:
                    # the first loads wait only for the previous tile's GEMMs (all of them: their token follows the
                    # previous tile's chunk loop), not for its epilogue
                    lf, cf, g = step(lf, cf, max(prev_g), True)
                else:
                    lf, cf, g = step(lf, cf, g, j == 0)
                marks.append(cf)
            if steps > _SIMULATED:              # the steady state: every further step takes the last period
                shift = (steps - _SIMULATED) * (marks[-1] - marks[-2])
                lf += shift
                cf += shift
                g = [x + shift for x in g]
            for _ in range(vo_n):
                cf, af = epilogue(cf, af, alu_end)
        if store_loop:
            start = sf if sf > cf else cf
            sf = start + threads * store1
            new_stores = [sf] * threads
        else:
            new_stores = []
            start = None
            for v in range(threads):
                t0 = sf if sf > alu_end[v] else alu_end[v]
                start = t0 if start is None else start
                sf = t0 + store1
                new_stores.append(sf)
        gate = start + gate_after if gate_after is not None else 0.0
        return lf, cf, sf, new_stores, g, gate, pending, resets, af, stores

    def resets_end(state):
        """When the next tile's resets end, from the stores of the tile that left ``state``."""
        cf, stores = state[1], state[3]
        for v in range(threads):
            cf = (cf if cf > stores[v] else stores[v]) + reset1
        return cf

    plain = []           # (a plain tile's time from its resets' end to its end, the period) once known

    def run(n_tiles, weights):
        """A run of tiles from a drained pipeline to the last store (cycles); ``weights``: which of its tiles
        load their weight tile first ("first", "every" or None)."""
        state = (0.0, 0.0, 0.0, [0.0] * threads, [0.0] * n_gemm, 0.0, [], 0.0, 0.0, [0.0] * threads)
        if steps > 1 and weights != "every" and s.acc_copies == 1:
            # with a chunk loop a tile's loads wait for its resets, and they for the previous tile's stores: every
            # tile without the weight load takes the same time from its resets on, and the next one's resets end
            # the same time after its own
            if weights == "first":
                state = tile(state, True)
                n_tiles -= 1
                if not n_tiles:
                    return max(state[0], state[1], state[2])
            elif plain:                    # known from an earlier run: a plain tile from a drained pipeline
                return threads * reset1 + plain[0] + (n_tiles - 1) * plain[1]
            state = tile(state, False)
            plain[:] = [max(state[0], state[1], state[2]) - state[7], resets_end(state) - state[7]]
            return state[7] + plain[0] + (n_tiles - 1) * plain[1]
        marks = []
        for i in range(min(n_tiles, _SIMULATED)):
            state = tile(state, weights == "every" or (weights == "first" and i == 0))
            marks.append(max(state[0], state[1], state[2]))
        total = marks[-1]
        if n_tiles > _SIMULATED:
            total += (n_tiles - _SIMULATED) * (marks[-1] - marks[-2])
        return total

    # the first tile also loads every uop kernel (then they stay in the UOP buffer): a reset, the ALU instructions
    # and the GEMMs of each thread, one GEMM kernel per slot, or per chunk when the weights stay (the weight
    # offset is in the uops)
    gemm_kernels = threads * (s.chunks if s.wgt_at_co else k_n)
    uop_loads = s.acc_copies * (UOP_LOAD_CYCLES * (threads * (1 + epi_insns) + gemm_kernels) +
                                gemm_kernels * s.uops * env.UOP_ELEM_BYTES / bus)
    n_tiles = s.out_tiles * s.spatial_tiles
    run_tiles = max(1, min(s.run_tiles, n_tiles))
    if not s.wgt_at_co:
        return uop_loads + (n_tiles // run_tiles) * run(run_tiles, None)
    if s.spatial_tiles < run_tiles:          # every tile loads its own weight tile
        return uop_loads + (n_tiles // run_tiles) * run(run_tiles, "every")
    runs = s.spatial_tiles // run_tiles      # runs sharing one weight tile: the first one loads it
    first = run(run_tiles, "first")
    rest = run(run_tiles, None) if runs > 1 else 0.0
    return uop_loads + s.out_tiles * (first + (runs - 1) * rest)


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
    """A convolution measurement's arguments (data, kernel, bias, [shift], [shortcut]) and expected NCHW output:
    the calibrated shift, or with two ACC operands one shift per channel around it; a residual workload adds an
    int8 shortcut (the default ``Residual()``: added, clipped to int8)."""
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
    if getattr(wkl, "residual", False):      # a fused residual add with the default Residual(): + shortcut, clip
        sc = rng.integers(-128, 128, expected.shape, dtype=np.int8)
        args.append(P.pack_nchw(sc, env.BATCH, env.BLOCK_OUT))
        expected = np.clip(expected.astype(np.int32) + sc, -128, 127).astype(np.int8)
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
