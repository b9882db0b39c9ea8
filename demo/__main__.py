"""nox -s demo: run real work on the functional simulator (default config) and check it.

A blocked GEMM driven through the runtime API, a ResNet-18 convolution compiled with vta.build, then
whole networks: the digits classifier (float and int8-on-VTA accuracy side by side) and ResNet-18 end
to end (quantize, graph_pack, build, run), each exact against the CPU run of the quantized model.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from sim.fsim import FsimDevice
from vta_hw.spec import load_config
from vta_runtime import CommandQueue
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift, unsaturated_fraction


def gemm_demo(seed: int) -> bool:
    cfg = load_config()
    dev = FsimDevice(cfg)
    cq = CommandQueue(dev)
    rng = np.random.default_rng(seed)
    m, k, n = 64, 256, 64
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    tiling = GemmTiling(tile_m=16 // cfg.BATCH, tile_n=2, tile_k=8, vthreads=2)
    shift = informative_shift(a, b)           # most outputs strictly inside [0, 127]: the check checks values
    expected = gemm_reference(a, b, shift)
    t0 = time.perf_counter()
    c = blocked_gemm(cq, a, b, shift=shift, tiling=tiling)
    dt = time.perf_counter() - t0
    ok = np.array_equal(c, expected)
    s = dev.stats()
    print(f"[runtime] blocked int8 GEMM ({m}x{k}) x ({n}x{k})^T -> >>{shift} -> clip[0,127] on fsim, "
          f"config {cfg.MODEL}")
    print(f"          tiles {tiling.tile_m}x{tiling.tile_n}x{tiling.tile_k} blocks, {tiling.vthreads} virtual threads,"
          f" {cq.runs} device run(s), {dt * 1e3:.1f} ms")
    print(f"          result matches numpy exactly: {ok} ({unsaturated_fraction(expected):.0%} of the "
          "outputs strictly inside the clip range)")
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
          f"{wkl.hkernel}x{wkl.wkernel} kernel, stride {wkl.hstride}, pad {wkl.hpad}; int8, +bias, >>{r.shift}, "
          "clip[0,127]")
    print(f"           vta.build in {r.build_s * 1e3:.0f} ms (tiles: {t.tile_co} channel blocks x {t.tile_h} rows x "
          f"{t.tile_w} columns, {t.oc_nthread}x{t.h_nthread} virtual threads)")
    print(f"           run on fsim (runtime included) in {r.run_s * 1e3:.1f} ms; the first run took "
          f"{r.first_s * 1e3:.0f} ms (it also compiles the host code)")
    print(f"           result matches numpy exactly: {r.correct} ({r.inside_fraction:.0%} of the outputs strictly "
          "inside the clip range)")
    print("           counters: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    print(f"           MACs per GEMM uop: {r.macs / s['gemm_counter']:.0f} "
          f"(ideal {env.BATCH * env.BLOCK_IN * env.BLOCK_OUT}); DRAM bytes / compulsory: {r.dram_ratio:.2f}")
    return r.correct


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layer", default="C5", help="ResNet-18 layer for the compiler demo (C1..C11)")
    p.add_argument("--no-networks", action="store_true", help="skip the whole-network part")
    args = p.parse_args(argv)
    ok = gemm_demo(args.seed)
    from vta_compiler import HostMismatchError
    try:
        ok = conv_demo(args.seed, args.layer) and ok
        if not args.no_networks:
            import vta_runtime

            from .networks import digits_demo, resnet_demo
            vta_runtime.set_command_queue(CommandQueue(FsimDevice()))
            try:
                ok = digits_demo() and ok
                ok = resnet_demo() and ok
            finally:
                vta_runtime.set_command_queue(None)
    except HostMismatchError as exc:   # a board TARGET: its code runs on the board, not here
        print(f"[compiler] {exc}")
        print("DEMO FAILED")
        return 2
    print("DEMO PASSED" if ok else "DEMO FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
