"""nox -s demo: run real work on the functional simulator (default config) and check it.

A blocked GEMM driven through the runtime API, then a ResNet-18 convolution compiled with vta.build.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from sim.fsim import FsimDevice
from vta_hw.spec import load_config
from vta_runtime import CommandQueue
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference


def gemm_demo(seed: int) -> bool:
    cfg = load_config()
    dev = FsimDevice(cfg)
    cq = CommandQueue(dev)
    rng = np.random.default_rng(seed)
    m, k, n = 64, 256, 64
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    tiling = GemmTiling(tile_m=16 // cfg.BATCH, tile_n=2, tile_k=8, vthreads=2)
    t0 = time.perf_counter()
    c = blocked_gemm(cq, a, b, shift=8, tiling=tiling)
    dt = time.perf_counter() - t0
    ok = np.array_equal(c, gemm_reference(a, b, 8))
    s = dev.stats()
    print(f"[runtime] blocked int8 GEMM ({m}x{k}) x ({n}x{k})^T -> >>8 -> clip[0,127] on fsim, config {cfg.MODEL}")
    print(f"          tiles {tiling.tile_m}x{tiling.tile_n}x{tiling.tile_k} blocks, {tiling.vthreads} virtual threads,"
          f" {cq.runs} device run(s), {dt * 1e3:.1f} ms")
    print(f"          result matches numpy exactly: {ok}")
    print("          counters: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    print(f"          MACs per GEMM uop: {m * n * k / s['gemm_counter']:.0f} "
          f"(ideal {cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT})")
    return ok


def conv_demo(seed: int, layer: str) -> bool:
    """A ResNet-18 convolution compiled with vta.build (TVM 0.27) and run on fsim through the runtime."""
    import vta_compiler as vta
    import vta_runtime
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top import RESNET18

    env = vta.get_env()
    dev = FsimDevice(env.config)
    vta_runtime.set_command_queue(CommandQueue(dev))
    try:
        wkl = RESNET18[layer]
        r = run_conv2d(wkl, name=layer, seed=seed, repeat=5)
    finally:
        vta_runtime.set_command_queue(None)
    s = r.stats
    t = r.tiling
    print(f"[compiler] ResNet-18 {layer}: {wkl.height}x{wkl.width}, {wkl.in_filter}->{wkl.out_filter} channels, "
          f"{wkl.hkernel}x{wkl.wkernel} kernel, stride {wkl.hstride}, pad {wkl.hpad}; int8, >>8, +bias, clip")
    print(f"           vta.build in {r.build_s * 1e3:.0f} ms (tiles: {t.tile_co} channel blocks x {t.tile_h} rows x "
          f"{t.tile_w} columns, {t.oc_nthread}x{t.h_nthread} virtual threads)")
    print(f"           run on fsim (runtime included) in {r.run_s * 1e3:.1f} ms; the first run took "
          f"{r.first_s * 1e3:.0f} ms (it also compiles the host code)")
    print(f"           result matches numpy exactly: {r.correct}")
    print("           counters: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    print(f"           MACs per GEMM uop: {r.macs / s['gemm_counter']:.0f} "
          f"(ideal {env.BATCH * env.BLOCK_IN * env.BLOCK_OUT}); DRAM bytes / compulsory: {r.dram_ratio:.2f}")
    return r.correct


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layer", default="C5", help="ResNet-18 layer for the compiler demo (C1..C11)")
    args = p.parse_args(argv)
    ok = gemm_demo(args.seed)
    ok = conv_demo(args.seed, args.layer) and ok
    print("DEMO PASSED" if ok else "DEMO FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
