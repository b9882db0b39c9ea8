"""A conv2d operator with two bad candidates: the second-ranked one computes the wrong thing (its GEMMs are
skipped), so it is also the fastest, and only the tuner's check against numpy keeps it from being chosen;
the third-ranked one fails to build. Registered as ``conv2d_faulty``; the tuner's builder processes
import this module by name."""

from __future__ import annotations

from vta_compiler.tiling import register
from vta_compiler.top.conv2d import Conv2D
from vta_compiler.transform.common import VTACompileError


class FaultySpace(Conv2D):
    kind = "conv2d_faulty"

    def pattern(self):
        return None            # never offloaded by graph_pack: a tuning space only

    def faulty(self, wkl, env, acc_operands):
        """(the candidate with a wrong result, the candidate that does not build)"""
        cands = self.candidates(wkl, env, acc_operands)
        return cands[1], cands[2]

    def scheduled(self, wkl, t, env, acc_operands, shift):
        wrong, unbuildable = self.faulty(wkl, env, acc_operands)
        if t == unbuildable:
            raise VTACompileError("conv2d_faulty: this candidate does not build (on purpose)")
        if t != wrong:
            return super().scheduled(wkl, t, env, acc_operands, shift)
        func = self.compute(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.schedule(func, t, env=env, mock=("gemm",))


register(FaultySpace())
