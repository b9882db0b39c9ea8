"""fsim throughput: GEMM uops/s and MACs/s, beside numpy's own int32 matmul on the same data."""

from __future__ import annotations

import numpy as np

from sim.fsim import FsimDevice
from vta_hw.spec import load_config
from vta_runtime import CommandQueue
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference

from .common import TimedDevice, best_of

TARGET_UOPS_PER_S = 1e6


def run(quick: bool = False) -> dict:
    cfg = load_config()
    rng = np.random.default_rng(0)
    m, n, k = (256, 256, 256) if quick else (512, 512, 512)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    tiling = GemmTiling(tile_m=32 // cfg.BATCH, tile_n=8, tile_k=8, vthreads=2)

    def once():
        dev = TimedDevice(FsimDevice(cfg))
        c = blocked_gemm(CommandQueue(dev), a, b, 8, tiling)
        return dev, c

    total, (dev, c) = best_of(once, 1 if quick else 3)
    assert np.array_equal(c, gemm_reference(a, b, 8)), "fsim GEMM result differs from numpy"
    uops = dev.stats()["gemm_counter"]
    macs = m * n * k
    np_time, _ = best_of(lambda: a.astype(np.int32) @ b.astype(np.int32).T, 3)
    res = {
        "shape": [m, n, k],
        "gemm_uops": uops,
        "fsim_run_s": dev.run_seconds,
        "runtime_plus_fsim_s": total,
        "fsim_gemm_uops_per_s": uops / dev.run_seconds,
        "fsim_macs_per_s": macs / dev.run_seconds,
        "numpy_int32_matmul_s": np_time,
        "numpy_int32_macs_per_s": macs / np_time,
        "fsim_over_numpy_speed": (macs / dev.run_seconds) / (macs / np_time),
        "target_fsim_uops_per_s": TARGET_UOPS_PER_S,
        "meets_target": uops / dev.run_seconds >= TARGET_UOPS_PER_S,
    }
    print(f"fsim GEMM {m}x{n}x{k}: {uops} uops in {dev.run_seconds * 1e3:.1f} ms -> "
          f"{res['fsim_gemm_uops_per_s'] / 1e6:.2f} M uops/s, {res['fsim_macs_per_s'] / 1e9:.2f} GMAC/s "
          f"(runtime+fsim {total * 1e3:.1f} ms)")
    print(f"numpy int32 matmul on the same data: {np_time * 1e3:.1f} ms -> {res['numpy_int32_macs_per_s'] / 1e9:.2f} "
          f"GMAC/s; fsim/numpy speed ratio {res['fsim_over_numpy_speed']:.2f}")
    print(f"target >= {TARGET_UOPS_PER_S / 1e6:.0f} M GEMM uops/s: {'met' if res['meets_target'] else 'NOT met'}")
    return res
