"""What a host operator costs on the board's own CPU, so placement is not decided by this machine's fast one.

``graph_pack`` moves work from the host to VTA where that is faster on the board. A board's host is an ARM
core, several times slower than a desktop; the figures here are estimates from each core's published
characteristics, not measurements (no board was at hand):

* a Cortex-A9's NEON unit has a 64-bit datapath: a 4-lane int32 operation takes 2 cycles; a Cortex-A53's
  takes 1;
* the memory bandwidth a core's streaming loop gets: about 0.8 GB/s on the Zynq-7000 (Cortex-A9, DDR3),
  about 3 GB/s on Zynq UltraScale+ (Cortex-A53, DDR4);
* an elementwise operator costs the larger of its arithmetic (operations per element / 4 lanes x cycles per
  operation / clock) and its memory traffic (bytes per element / bandwidth).

The simulators (TARGET ``sim``, ``tsim``) model the Pynq system, so they take the Pynq's host.
"""

from __future__ import annotations

from dataclasses import dataclass

from vta_hw.spec import Config
from vta_hw.spec.config import SIMULATED_TARGETS

#: int32 lanes of a NEON vector
NEON_LANES = 4


@dataclass(frozen=True)
class Host:
    name: str
    clock_ghz: float
    cycles_per_vector_op: float     # a 4-lane int32 NEON operation
    stream_gb_per_s: float          # memory bandwidth of a streaming loop

    def elementwise_us(self, elements: int, ops: int, bytes_per_element: float) -> float:
        """Estimated microseconds of an elementwise operator chain over ``elements`` values."""
        compute_ns = ops * self.cycles_per_vector_op / NEON_LANES / self.clock_ghz
        memory_ns = bytes_per_element / self.stream_gb_per_s
        return elements * max(compute_ns, memory_ns) * 1e-3


_A9_PYNQ = Host("Cortex-A9 at 650 MHz (Pynq-Z1/Z2)", 0.65, 2.0, 0.8)
HOSTS = {
    "pynq": _A9_PYNQ,
    "de10nano": Host("Cortex-A9 at 800 MHz (DE10-Nano)", 0.8, 2.0, 0.8),
    "ultra96": Host("Cortex-A53 at 1.2 GHz (Ultra96)", 1.2, 1.0, 3.0),
    "zcu104": Host("Cortex-A53 at 1.2 GHz (ZCU104)", 1.2, 1.0, 3.0),
}

#: the host's residual add (``graph.quantize``'s ``residual_add``): two int8 reads, one int8 write, and per
#: element two widenings, two alignment shifts, the add, the rounding add and shift, min, max and the narrowing
RESIDUAL_ADD_OPS = 10
RESIDUAL_ADD_BYTES = 3


def host_of(cfg: Config) -> Host:
    """The CPU next to the configuration's VTA (the Pynq's for the simulators)."""
    return HOSTS["pynq" if cfg.TARGET in SIMULATED_TARGETS else cfg.TARGET]
