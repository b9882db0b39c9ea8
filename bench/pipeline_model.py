"""A timing model of VTA's three-module pipeline, to judge latency hiding before tsim exists.

It is a model, not the hardware: every module runs its instructions in order; an instruction
starts when its module is free and the tokens it pops have been pushed (the n-th pop of a queue
waits for the n-th push); it takes

* LOAD/STORE: a fixed setup plus one cycle per bus word, plus a little per row;
* GEMM/ALU: one cycle per uop iteration (II = 1) plus a pipeline fill;
* NOPs (x_size = 0) and FINISH: one cycle.

``ModelDevice`` wraps a device and runs every stream on it unchanged; it keeps a copy of each
stream and models them afterwards (``model_cycles``), so timing the device is not disturbed.
"""

from __future__ import annotations

from collections import deque

from vta_hw.spec import Opcode, Stage
from vta_runtime.diagnose import Program, sram_geometry

SETUP = 20          # per DMA instruction
ROW = 2             # per DMA row
FILL = 8            # GEMM/ALU pipeline fill


class ModelDevice:
    def __init__(self, device):
        self._dev = device
        self.config = device.config
        self.streams: list = []
        self.recording = True   # False: run streams without keeping copies (for timing)

    def __getattr__(self, name):
        return getattr(self._dev, name)

    def run(self, insn_phys, insn_count, timeout=None):
        if self.recording:
            self.streams.append(self._dev.dram.data[insn_phys:insn_phys + insn_count * 16].view("<u8")
                                .reshape(-1, 2).copy())
        return self._dev.run(insn_phys, insn_count, timeout)

    @property
    def model_cycles(self) -> int:
        return sum(stream_cycles(Program(self.config.isa, w), self.config) for w in self.streams)


def _duration(p: Program, i: int, cfg) -> int:
    op = p.opcode[i]
    bus = cfg.AXI_DATA_BYTES
    if op in (Opcode.LOAD, Opcode.STORE):
        f = p.mem_fields(i)
        if f["x_size"] == 0:
            return 1
        _, eb, _ = sram_geometry(cfg, f["memory_type"])
        rows = f["y_size"] + f["y_pad_0"] + f["y_pad_1"]
        cols = f["x_size"] + f["x_pad_0"] + f["x_pad_1"]
        return SETUP + rows * (ROW + -(-cols * eb // bus))
    if op in (Opcode.GEMM, Opcode.ALU):
        g = p.gemm_fields(i)
        return FILL + g["iter_out"] * g["iter_in"] * max(g["uop_end"] - g["uop_bgn"], 0)
    return 1


def stream_cycles(p: Program, cfg) -> int:
    queues = {Stage.LOAD: deque(), Stage.COMPUTE: deque(), Stage.STORE: deque()}
    for i in range(p.n):
        if p.stage[i] is not None:
            queues[p.stage[i]].append(i)
    free = dict.fromkeys(queues, 0)
    pushed: dict[str, list[int]] = {}
    popped: dict[str, int] = {}
    end = 0
    progress = True
    while progress:
        progress = False
        for st, q in queues.items():
            while q:
                i = q[0]
                pops = p.pops[i]
                if any(popped.get(t, 0) >= len(pushed.get(t, [])) for t in pops):
                    break
                start = free[st]
                for t in pops:
                    start = max(start, pushed[t][popped.get(t, 0)])
                    popped[t] = popped.get(t, 0) + 1
                q.popleft()
                free[st] = start + _duration(p, i, cfg)
                for t in p.pushes[i]:
                    pushed.setdefault(t, []).append(free[st])
                end = max(end, free[st])
                progress = True
    return end
