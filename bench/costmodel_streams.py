"""Check the cost model's rules against the instruction streams the compiler really makes (no tsim needed).

    python -m bench.costmodel_streams --layers C5,DW7,G4,CT2,UP1 --tilings 16

For each layer it builds random legal tilings, runs each once on fsim to capture its instruction stream, and
replays the stream instruction by instruction (``replay``): the three modules run their own instructions in
order, an instruction starts when its module is free, fetch has dispatched it (in program order, into 16-deep
command queues) and the tokens it pops have been pushed (the n-th pop of a queue waits for the n-th push); it
takes the cost model's per-instruction overheads plus its beats or uops. The replay knows nothing of tiles,
threads or chunks, so the cost model (``estimate_cycles``), which rebuilds the stream's groups from the tiling
alone, agrees with it only if its rules for the order of loads and GEMMs, the tokens and the overlaps between
tiles are those of the compiled stream. Printed per layer: the Spearman correlation between the two and
their ratio. After a change to the TIR passes or the schedules, run this first; then measure on tsim
(``bench.costmodel_measure``) and ``python -m bench --only costmodel``.
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np


def capture(task, tiling, env, device) -> np.ndarray:
    """The instruction words of one run of a tiling of ``task`` (built here, run on ``device``: fsim)."""
    import tvm

    from vta_compiler.build_module import build
    op = task.op
    data = op.data(task.workload, env, task.acc_operands)
    mod = build(op.scheduled(task.workload, tiling, env, task.acc_operands, data.shift))
    device.streams.clear()
    dev = tvm.ext_dev(0)
    args = [tvm.runtime.tensor(a, device=dev) for a in data.args]
    out = tvm.runtime.empty(data.out_shape, "int8", device=dev)
    mod(*args, out)
    return np.concatenate(device.streams)


def durations(p, env) -> list[float]:
    """Cycles of each instruction of a decoded stream with the cost model's constants."""
    from vta_compiler.top import conv_family as F
    from vta_hw.spec import MemType, Opcode
    bus = env.AXI_DATA_BYTES
    beats = {MemType.INP: env.INP_ELEM_BYTES / bus, MemType.WGT: env.WGT_ELEM_BYTES / bus,
             MemType.ACC: env.ACC_ELEM_BYTES / bus, MemType.UOP: env.UOP_ELEM_BYTES / bus}
    mem, gemm, alu = p._cols["mem"], p._cols["gemm"], p._cols["alu"]
    out = []
    for i, op in enumerate(p.opcode):
        if op in (Opcode.LOAD, Opcode.STORE):
            mt, xs, ys = mem["memory_type"][i], mem["x_size"][i], mem["y_size"][i]
            if xs == 0:
                out.append(2.0)                       # a token-only NOP
                continue
            rows = ys + mem["y_pad_0"][i] + mem["y_pad_1"][i]
            pads = rows * (xs + mem["x_pad_0"][i] + mem["x_pad_1"][i]) - xs * ys
            if op == Opcode.STORE:
                out.append(F.STORE_INSN_CYCLES + xs * ys * env.OUT_ELEM_BYTES / bus)
            elif mt in (MemType.INP, MemType.WGT):
                out.append(F.LOAD_INSN_CYCLES + xs * ys * beats[mt] + pads * F.PAD_ELEM_CYCLES)
            elif mt == MemType.UOP:
                out.append(F.UOP_LOAD_CYCLES + xs * ys * beats[mt])
            else:
                out.append(F.ACC_INSN_CYCLES + xs * ys * beats[mt])
        elif op in (Opcode.GEMM, Opcode.ALU):
            n = gemm["iter_out"][i] * gemm["iter_in"][i] * max(gemm["uop_end"][i] - gemm["uop_bgn"][i], 0)
            if op == Opcode.GEMM:
                out.append(F.GEMM_INSN_CYCLES + n)
            else:
                out.append(F.ALU_INSN_CYCLES + n * (1 if alu["use_imm"][i] else 2))
        else:
            out.append(1.0)
    return out


def replay(words: np.ndarray, env) -> float:
    """Cycles of an instruction stream on in-order modules with dependency tokens and 16-deep command queues."""
    from vta_compiler.top.conv_family import COMMAND_QUEUE_DEPTH
    from vta_hw.spec import Stage
    from vta_runtime.diagnose import Program
    p = Program(env.config.isa, words)
    dur = durations(p, env)
    free = dict.fromkeys((Stage.LOAD, Stage.COMPUTE, Stage.STORE), 0.0)
    taken = {st: [] for st in free}
    pushed: dict[str, list[float]] = {}
    popped: dict[str, int] = {}
    dispatch = end = 0.0
    for i in range(p.n):
        st = p.stage[i] or Stage.COMPUTE
        dispatch += 1
        if len(taken[st]) >= COMMAND_QUEUE_DEPTH:          # the queue is full until an earlier one is taken
            dispatch = max(dispatch, taken[st][-COMMAND_QUEUE_DEPTH])
        take = max(dispatch, free[st])
        taken[st].append(take)
        start = take + 1
        for q in p.pops[i]:
            k = popped.get(q, 0)
            popped[q] = k + 1
            start = max(start, pushed[q][k])
        free[st] = start + dur[i]
        for q in p.pushes[i]:
            pushed.setdefault(q, []).append(free[st])
        end = max(end, free[st])
    return end


def spearman(a, b) -> float:
    from .costmodel_bench import spearman as rho
    return rho(a, b)


def main(argv: list[str] | None = None) -> int:
    import vta_compiler as vta
    import vta_runtime
    from sim.fsim import FsimDevice

    from .costmodel_measure import layer_tasks
    from .pipeline_model import ModelDevice
    ap = argparse.ArgumentParser(prog="python -m bench.costmodel_streams", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", required=True, help="comma-separated layer names (see bench.costmodel_measure)")
    ap.add_argument("--tilings", type=int, default=16, help="random legal tilings per layer (default 16)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    env = vta.get_env()
    device = ModelDevice(FsimDevice(env.config))
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(device))
    try:
        for task in layer_tasks(args.layers.split(",")):
            cands = task.op.candidates(task.workload, env, task.acc_operands)
            picks = random.Random(f"{args.seed}:{task.name}").sample(cands, min(args.tilings, len(cands)))
            rep, est = [], []
            for t in picks:
                rep.append(replay(capture(task, t, env, device), env))
                est.append(task.op.estimate(task.workload, t, env))
            ratio = np.array(est) / np.array(rep)
            print(f"{task.name:6} {len(picks):3} tilings: Spearman {spearman(est, rep):.3f}, model / replay median "
                  f"{np.median(ratio):.3f} [{ratio.min():.3f}, {ratio.max():.3f}]", flush=True)
    finally:
        vta_runtime.set_command_queue(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
