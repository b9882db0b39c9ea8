"""The names of the device counters: the one definition every device, tool and register uses.

``DEVICE_COUNTERS`` are the original VTA simulator's counters; fsim, tsim and the boards all count
them with the same meaning (see ``vta_hw.spec.regmap`` for the exact semantics).
``PERF_COUNTERS`` are the cycle-level performance counters that only the hardware has. The
register map places ``DEVICE_COUNTERS + PERF_COUNTERS`` at consecutive offsets.
"""

from __future__ import annotations

DEVICE_COUNTERS = (
    "inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes",
    "gemm_counter", "alu_counter",
)

PERF_COUNTERS = (
    "fetch_busy_cycles", "fetch_stall_cycles",
    "load_busy_cycles", "load_stall_cycles",
    "compute_busy_cycles", "compute_stall_cycles",
    "store_busy_cycles", "store_stall_cycles",
    "gemm_busy_cycles", "alu_busy_cycles",
    "axi_read_beats", "axi_write_beats", "axi_read_stall_cycles",
)

