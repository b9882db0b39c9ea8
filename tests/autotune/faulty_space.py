"""A conv2d space whose second-ranked candidate computes the wrong thing (its GEMMs are skipped), so it is
also the fastest: only the tuner's check against numpy keeps it from being chosen. Registered as
``conv2d_faulty``; the tuner's builder processes import this module by name."""

from __future__ import annotations

from vta_compiler.autotune.space import Conv2DSpace, register_space


class FaultySpace(Conv2DSpace):
    def faulty(self, wkl, env, acc_operands):
        return self.candidates(wkl, env, acc_operands)[1]

    def layer(self, wkl, t, env, acc_operands, shift):
        if t != self.faulty(wkl, env, acc_operands):
            return super().layer(wkl, t, env, acc_operands, shift)
        func = self.C.conv2d_layer(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.C.schedule_conv2d_packed(func, t, env=env, mock=("gemm",))


register_space("conv2d_faulty", FaultySpace())
