"""tsim figures: simulation speed (simulated cycles per second of wall time, for every program run
here), cycles per GEMM/ALU uop on long kernels, DMA bytes per cycle, and tsim wall time / fsim wall
time on the same program."""

from __future__ import annotations

import time

import numpy as np

from vta_hw.spec import AluOp, Isa, MemType, Opcode, load_config
from vta_runtime import CommandQueue
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference

from .common import TimedDevice


def _run(dev, words, speeds: dict | None = None, name: str = ""):
    """Run ``words``; returns (stats, wall seconds of ``run``) and records the simulator's speed under ``name``."""
    data = Isa.to_bytes(words)
    phys = dev.alloc(len(data))
    dev.write(phys, data)
    dev.clear_stats()
    c0 = dev.cycles()
    t0 = time.perf_counter()
    dev.run(phys, len(words), timeout=3600)
    wall = time.perf_counter() - t0
    cycles = dev.cycles() - c0
    dev.free(phys)
    if speeds is not None:
        speeds[name] = cycles / wall
        print(f"  tsim speed, {name}: {cycles / wall / 1e3:,.0f} k cycles/s ({cycles:,} cycles in {wall * 1e3:.1f} ms)")
    return dev.stats(), wall


def run(quick: bool = False) -> dict:
    from sim.fsim import FsimDevice
    from sim.tsim import TsimDevice, verilator_available

    if not verilator_available():
        print("Verilator is not installed: tsim section skipped")
        return {"skipped": "no verilator"}
    cfg = load_config()
    isa = cfg.isa
    dev = TsimDevice(cfg)
    res: dict = {"model": cfg.MODEL, "axi_data_bits": cfg.AXI_DATA_BITS}
    speeds: dict[str, float] = {}      # simulated cycles per second, per program
    res["tsim_cycles_per_s_by_program"] = speeds
    rep = 8 if quick else 32

    # long kernels: 256 uops x rep x rep iterations
    nu = 256
    uops = np.array([isa.uop.encode(dst_idx=k % 64, src_idx=k % 128, wgt_idx=k % 256) for k in range(nu)], np.uint32)
    ub = dev.alloc(uops.nbytes)
    dev.write(ub, uops)
    load_uops = isa.load(MemType.UOP, 0, ub // 4, 1, nu, nu)
    gemm = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=nu, iter_out=rep, iter_in=rep, dst_factor_in=1,
                           src_factor_in=1, wgt_factor_in=1)
    s, wall = _run(dev, [load_uops, gemm, isa.finish_insn()], speeds, "GEMM kernel")
    res["gemm_uops"] = s["gemm_counter"]
    res["cycles_per_gemm_uop"] = s["gemm_busy_cycles"] / s["gemm_counter"]
    res["tsim_cycles_per_s"] = s["cycle_count"] / wall
    print(f"GEMM: {s['gemm_counter']} uops in {s['gemm_busy_cycles']} busy cycles -> "
          f"{res['cycles_per_gemm_uop']:.3f} cycles/uop (run {s['cycle_count']} cycles)")
    print(f"tsim speed: {res['tsim_cycles_per_s'] / 1e3:.0f} k cycles/s "
          f"({s['gemm_counter'] * cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT / wall / 1e6:.0f} M simulated MAC/s)")
    for use_imm in (1, 0):
        alu = isa.alu.encode(opcode=Opcode.ALU, uop_end=nu, iter_out=rep, iter_in=rep, dst_factor_in=1,
                             src_factor_in=1, alu_opcode=AluOp.ADD, use_imm=use_imm, imm=3)
        key = "cycles_per_alu_uop_imm" if use_imm else "cycles_per_alu_uop_reg"
        s, _ = _run(dev, [load_uops, alu, isa.finish_insn()], speeds,
                    f"ALU kernel ({'immediate' if use_imm else 'register'})")
        res[key] = s["alu_busy_cycles"] / s["alu_counter"]
        print(f"ALU ({'immediate' if use_imm else 'register'} operand): {s['alu_counter']} uops -> "
              f"{res[key]:.3f} cycles/uop")

    # DMA: whole-buffer loads in long rows, and a long store
    bus = cfg.AXI_DATA_BYTES
    for name, mt, depth, eb, counter, busy in (
            ("wgt", MemType.WGT, cfg.WGT_BUFF_DEPTH, cfg.WGT_ELEM_BYTES, "wgt_load_nbytes", "load_busy_cycles"),
            ("inp", MemType.INP, cfg.INP_BUFF_DEPTH, cfg.INP_ELEM_BYTES, "inp_load_nbytes", "load_busy_cycles"),
            ("acc", MemType.ACC, cfg.ACC_BUFF_DEPTH, cfg.ACC_ELEM_BYTES, "acc_load_nbytes", "compute_busy_cycles")):
        b = dev.alloc(depth * eb)
        rows = 8
        s, _ = _run(dev, [isa.load(mt, 0, b // eb, rows, depth // rows, depth // rows), isa.finish_insn()], speeds,
                    f"DMA load {name.upper()}")
        res[f"dma_{name}_bytes_per_cycle"] = s[counter] / s[busy]
        print(f"DMA load {name.upper()}: {s[counter]} bytes in {s[busy]} cycles -> "
              f"{res[f'dma_{name}_bytes_per_cycle']:.2f} B/cycle (bus {bus} B/cycle)")
        dev.free(b)
    ob = dev.alloc(cfg.ACC_BUFF_DEPTH * cfg.OUT_ELEM_BYTES)
    n = cfg.ACC_BUFF_DEPTH
    s, _ = _run(dev, [isa.store(0, ob // cfg.OUT_ELEM_BYTES, 8, n // 8, n // 8), isa.finish_insn()], speeds,
                "DMA store OUT")
    res["dma_out_bytes_per_cycle"] = s["out_store_nbytes"] / s["store_busy_cycles"]
    print(f"DMA store OUT: {s['out_store_nbytes']} bytes in {s['store_busy_cycles']} cycles -> "
          f"{res['dma_out_bytes_per_cycle']:.2f} B/cycle")
    dev.close()

    # the same runtime program on both simulators
    rng = np.random.default_rng(0)
    m, n, k = (64, 64, 64) if quick else (128, 128, 128)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    bmat = rng.integers(-128, 128, (n, k), dtype=np.int8)
    tiling = GemmTiling(tile_m=max(32 // cfg.BATCH // (2 if quick else 1), 1), tile_n=4, tile_k=4, vthreads=2)
    walls = {}
    for name, cls in (("fsim", FsimDevice), ("tsim", TsimDevice)):
        d = TimedDevice(cls(cfg))
        c = blocked_gemm(CommandQueue(d), a, bmat, 8, tiling)
        assert np.array_equal(c, gemm_reference(a, bmat, 8)), f"{name} GEMM result differs from numpy"
        walls[name] = d.run_seconds
        if name == "tsim":
            cyc = d.stats()["cycle_count"]
            uops = d.stats()["gemm_counter"]
            speeds["blocked GEMM (runtime)"] = d.cycles_per_second
            print(f"  tsim speed, blocked GEMM (runtime): {d.cycles_per_second / 1e3:,.0f} k cycles/s")
    res.update({"program": f"blocked GEMM {m}x{n}x{k}", "fsim_run_s": walls["fsim"], "tsim_run_s": walls["tsim"],
                "tsim_over_fsim_wall": walls["tsim"] / walls["fsim"], "program_cycles": cyc,
                "program_gemm_uops": uops, "program_cycles_per_gemm_uop": cyc / uops})
    print(f"{res['program']}: fsim {walls['fsim'] * 1e3:.1f} ms, tsim {walls['tsim'] * 1e3:.1f} ms "
          f"({cyc} cycles, {cyc / uops:.2f} cycles per GEMM uop overall) -> tsim/fsim wall time "
          f"{res['tsim_over_fsim_wall']:.1f}x")
    return res
