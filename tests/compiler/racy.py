"""A functional simulator whose three modules interleave in random order (a race detector for tokens).

fsim runs the load module as far as it can, then compute, then store, so a missing
load->compute or compute->store token never shows there. Here, at every step one module that can
proceed (its next instruction's tokens are available) runs one instruction: usually the first
ready one in a per-seed random priority order (so one module runs far ahead), else a random one.
Any interleaving the tokens allow can happen, as on hardware; results that depend on a missing
token come out wrong for some seed. As in fsim and the core, FINISH stops compute, load and store
go on while they can, and the run must then end balanced (else an UnbalancedTokensError).
"""

from __future__ import annotations

import random
from collections import deque

from sim.fsim import FsimDevice
from vta_hw.spec import TOKEN_QUEUES, Opcode, Stage
from vta_runtime.diagnose import unbalanced_error
from vta_runtime.errors import DeadlockError


class RacyFsim(FsimDevice):
    def __init__(self, *args, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)
        # a preferred order of the modules: most steps let the first ready one in it run ahead
        self.priority = self.rng.sample([Stage.LOAD, Stage.COMPUTE, Stage.STORE], 3)

    def _execute(self, p, timeout):
        finish = p.opcode.index(Opcode.FINISH)   # fetch dispatches nothing after it
        queues = {Stage.LOAD: deque(), Stage.COMPUTE: deque(), Stage.STORE: deque()}
        for i in range(finish + 1):
            queues[p.stage[i]].append(i)
        tokens = dict.fromkeys(TOKEN_QUEUES, 0)
        finished = False
        while True:
            ready = [q for q in queues.values() if q and all(tokens[t] > 0 for t in p.pops[q[0]])]
            if not ready and finished:   # FINISH stops compute; load and store go on while they can
                break
            if not ready:
                raise DeadlockError("deadlock under random interleaving\n" + self._state(p, queues, tokens))
            if self.rng.random() < 0.7:
                q = next(queues[st] for st in self.priority if queues[st] in ready)
            else:
                q = self.rng.choice(ready)
            i = q.popleft()
            for t in p.pops[i]:
                tokens[t] -= 1
            self._exec_one(p, i)
            for t in p.pushes[i]:
                tokens[t] += 1
            finished = finished or p.opcode[i] == Opcode.FINISH
        for i in range(finish + 1, p.n):
            if p.stage[i] is not None:
                queues[p.stage[i]].append(i)
        err = unbalanced_error(self.isa, p, queues, tokens)
        if err is not None:
            raise err
