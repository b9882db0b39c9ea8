"""fsim's C++ engine: bounded memory and timeouts inside long instructions, its two GEMM kernels,
its fused ALU runs, and its static checks against the ones of vta_runtime.diagnose (which word the
messages)."""

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from vta_test_helpers import alu_reference

from sim.fsim import FsimDevice
from vta_hw.spec import AluOp, Isa, MemType, Opcode, load_config
from vta_runtime import DeviceTimeout, DramAccessError, ProgramError
from vta_runtime.diagnose import Program, check_stream

LIMIT = 256 << 20   # the most extra memory one instruction may take (README)
LONG = 4000         # iter_out = iter_in: 16 million uop iterations in one instruction


def traced_peak(fn) -> int:
    """tracemalloc's peak (Python and numpy allocations) while fn() runs."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Resident-set growth is measured in a fresh process: in a long-lived one, memory freed by earlier
# tests is reused without growing the resident set, which would hide an allocation.
RSS_SCRIPT = """
import sys, numpy as np
from sim.fsim import FsimDevice
from vta_hw.spec import AluOp, Isa, Opcode

def high_water():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

what, n = sys.argv[1], int(sys.argv[2])
dev = FsimDevice()
isa = dev.config.isa
dev.uop[0, 0] = isa.uop.encode(dst_idx=0, src_idx=1, wgt_idx=0)
if what == "gemm":
    insn = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=n, iter_in=n)
else:
    insn = isa.alu.encode(opcode=Opcode.ALU, uop_end=1, iter_out=n, iter_in=n, alu_opcode=AluOp.ADD, use_imm=0)
data = Isa.to_bytes([insn, isa.finish_insn()])
phys = dev.alloc(len(data))
dev.write(phys, data)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                    # the high-water mark restarts from the current resident set
before = high_water()
if what == "control":
    a = np.ones(n << 20, np.uint8)  # n MiB, touched
    a.sum()
else:
    dev.run(phys, 2)
print(high_water() - before)
"""


def rss_growth(what: str, n: int) -> int:
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("resident-set high-water marks need Linux's /proc/self/clear_refs")
    r = subprocess.run([sys.executable, "-c", RSS_SCRIPT, what, str(n)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[-1])


def test_the_memory_measurements_see_a_large_allocation():
    """Negative controls: both measurements below see an allocation above the limit."""
    def big():
        a = np.ones(LIMIT + (32 << 20), np.uint8)
        return a.sum()
    assert traced_peak(big) > LIMIT
    assert rss_growth("control", (LIMIT >> 20) + 32) > LIMIT


@pytest.mark.parametrize("what", ["gemm", "alu"])
def test_long_instruction_takes_no_resident_memory(what):
    """A fresh process runs one 4000 x 4000-iteration instruction; its resident set grows by less than the limit."""
    assert rss_growth(what, LONG) <= LIMIT


def run(dev, words, timeout=None):
    data = Isa.to_bytes(words)
    phys = dev.alloc(len(data))
    dev.write(phys, data)
    dev.run(phys, len(words), timeout)


def put(dev, array) -> int:
    phys = dev.alloc(array.nbytes)
    dev.write(phys, array)
    return phys


def loaded_device(rng):
    """A device with random INP row 0, WGT tile 0, ACC rows 0-1 and the uop (dst 0, src 0, wgt 0) at 0,
    and the instructions that load them."""
    dev = FsimDevice()
    cfg = dev.config
    isa = cfg.isa
    inp = rng.integers(-128, 128, (1, cfg.BATCH * cfg.BLOCK_IN), dtype=np.int8)
    wgt = rng.integers(-128, 128, (1, cfg.BLOCK_OUT * cfg.BLOCK_IN), dtype=np.int8)
    acc = rng.integers(-(1 << 20), 1 << 20, (2, cfg.BATCH * cfg.BLOCK_OUT), dtype=np.int32)
    uop = np.array([isa.uop.encode(dst_idx=0, src_idx=0, wgt_idx=0)], np.uint32)
    loads = [isa.load(MemType.INP, 0, put(dev, inp) // cfg.INP_ELEM_BYTES, 1, 1, 1),
             isa.load(MemType.WGT, 0, put(dev, wgt) // cfg.WGT_ELEM_BYTES, 1, 1, 1),
             isa.load(MemType.UOP, 0, put(dev, uop) // 4, 1, 1, 1),
             isa.load(MemType.ACC, 0, put(dev, acc) // cfg.ACC_ELEM_BYTES, 1, 2, 2)]
    return dev, loads, inp, wgt, acc


def wrap32(x):
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def test_long_gemm_takes_no_memory_and_is_exact():
    rng = np.random.default_rng(1)
    dev, loads, inp, wgt, acc = loaded_device(rng)
    cfg, isa = dev.config, dev.config.isa
    gemm = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=LONG, iter_in=LONG)   # all into acc[0]
    assert traced_peak(lambda: run(dev, loads + [gemm, isa.finish_insn()])) <= LIMIT
    x = inp.reshape(cfg.BATCH, cfg.BLOCK_IN).astype(np.int64)
    w = wgt.reshape(cfg.BLOCK_OUT, cfg.BLOCK_IN).astype(np.int64)
    want = wrap32(acc[0].astype(np.int64) + LONG * LONG * (x @ w.T).reshape(-1))
    assert np.array_equal(dev.acc[0], want)
    assert np.array_equal(dev.out[0], want.astype(np.int8))
    assert len(set(want.tolist())) > 8          # informative: distinct, wrapped values
    assert dev.stats()["gemm_counter"] == LONG * LONG


@pytest.mark.parametrize("use_imm", [1, 0])
def test_long_alu_takes_no_memory_and_is_exact(use_imm):
    rng = np.random.default_rng(2)
    dev, loads, _, _, acc = loaded_device(rng)
    isa = dev.config.isa
    # acc[0] += 3 (immediate) or acc[0] += acc[1] (register operand)
    alu = isa.alu.encode(opcode=Opcode.ALU, uop_end=1, iter_out=LONG, iter_in=LONG, alu_opcode=AluOp.ADD,
                         use_imm=use_imm, imm=3)
    if not use_imm:   # the uop at 1 reads row 1 and writes row 0
        uop = np.array([isa.uop.encode(dst_idx=0, src_idx=1, wgt_idx=0)], np.uint32)
        loads.append(isa.load(MemType.UOP, 1, put(dev, uop) // 4, 1, 1, 1))
        alu = isa.alu.encode(opcode=Opcode.ALU, uop_bgn=1, uop_end=2, iter_out=LONG, iter_in=LONG,
                             alu_opcode=AluOp.ADD, use_imm=0)
    assert traced_peak(lambda: run(dev, loads + [alu, isa.finish_insn()])) <= LIMIT
    step = 3 if use_imm else acc[1].astype(np.int64)
    want = wrap32(acc[0].astype(np.int64) + LONG * LONG * step)
    assert np.array_equal(dev.acc[0], want) and np.array_equal(dev.out[0], want.astype(np.int8))
    assert np.array_equal(dev.acc[1], acc[1])
    assert dev.stats()["alu_counter"] == LONG * LONG


@pytest.mark.parametrize("op", ["gemm", "alu"])
def test_timeout_holds_inside_one_long_instruction(op):
    """16383 x 16383 x 64 uop iterations would run for many minutes; the run stops at its bound."""
    rng = np.random.default_rng(3)
    dev, loads, _, _, _ = loaded_device(rng)
    isa = dev.config.isa
    n = (1 << 14) - 1
    if op == "gemm":
        insn = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=n, iter_in=n)
    else:
        insn = isa.alu.encode(opcode=Opcode.ALU, uop_end=1, iter_out=n, iter_in=n, alu_opcode=AluOp.MAX,
                              use_imm=1, imm=5)
    t0 = time.perf_counter()
    with pytest.raises(DeviceTimeout) as e:
        run(dev, loads + [insn, isa.finish_insn()], timeout=0.3)
    # the clock is looked at every few thousand uops, also inside one group of uops (the GEMM's
    # outer loop is folded into 16383 uops of one destination row): the bound holds to a fraction
    # of a second, not after the seconds one whole group would take
    assert time.perf_counter() - t0 < 1.0
    assert f"exceeded its 0.3 s bound (during instruction {len(loads)})" in str(e.value)
    assert f"compute: at instruction {len(loads)} ({op.upper()}" in str(e.value)


def fill_random_srams(dev, rng, zero_lanes=()):
    """Random INP, WGT and ACC; ``zero_lanes``: input lanes (of BLOCK_IN) that are zero in every INP
    row, as channel padding makes."""
    cfg = dev.config
    dev.inp[:] = rng.integers(-128, 128, dev.inp.shape, dtype=np.int8)
    for lane in zero_lanes:
        dev.inp.reshape(cfg.INP_BUFF_DEPTH, cfg.BATCH, cfg.BLOCK_IN)[:, :, lane] = 0
    dev.wgt[:] = rng.integers(-128, 128, dev.wgt.shape, dtype=np.int8)
    dev.acc[:] = rng.integers(-(1 << 30), 1 << 30, dev.acc.shape, dtype=np.int32)


def random_gemm_program(dev, rng, nuops=24, zero_lanes=()):
    """Random SRAM contents and one GEMM with random uops and loop factors inside the buffers;
    ``zero_lanes``: input lanes (of BLOCK_IN) that are zero in every INP row, as channel padding makes."""
    cfg, isa = dev.config, dev.config.isa
    fill_random_srams(dev, rng, zero_lanes)
    it_o, it_i = 5, 7
    f = {k: int(rng.integers(0, 4)) for k in ("dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
                                              "wgt_factor_out", "wgt_factor_in")}
    span = lambda a, b: (it_o - 1) * f[a] + (it_i - 1) * f[b]  # noqa: E731
    uops = [(int(rng.integers(0, cfg.ACC_BUFF_DEPTH - span("dst_factor_out", "dst_factor_in"))),
             int(rng.integers(0, cfg.INP_BUFF_DEPTH - span("src_factor_out", "src_factor_in"))),
             int(rng.integers(0, cfg.WGT_BUFF_DEPTH - span("wgt_factor_out", "wgt_factor_in")))) for _ in range(nuops)]
    dev.uop[:nuops, 0] = [isa.uop.encode(dst_idx=d, src_idx=s, wgt_idx=w) for d, s, w in uops]
    gemm = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=nuops, iter_out=it_o, iter_in=it_i, **f)
    return [gemm, isa.finish_insn()], uops, it_o, it_i, f


# input lanes zero in every row: none (the dense kernel); a 3-channel image padded to 16 (lanes 3-15);
# scattered lanes, some of them half of a pair (that pair still counts); every lane (the GEMM adds nothing)
ZERO_LANES = [(), tuple(range(3, 16)), (0, 1, 5, 8, 9, 14), tuple(range(16))]


def fast_and_plain_devices():
    """Two fresh default devices: one runs the AVX2 GEMM kernels (the test is skipped where there are
    none), the other the plain loop."""
    fast, plain = FsimDevice(), FsimDevice()
    if not fast.engine.has_fast_gemm:
        pytest.skip("no AVX2 kernel on this machine or config")
    plain.engine.use_generic_gemm(True)
    return fast, plain


@pytest.mark.parametrize("zero_lanes", ZERO_LANES, ids=["dense", "3-of-16", "scattered", "all-zero"])
def test_fast_gemm_kernel_equals_the_plain_loop_and_numpy(zero_lanes):
    fast, plain = fast_and_plain_devices()
    cfg = fast.config
    for seed in range(4):
        results = []
        for dev in (fast, plain):
            words, uops, it_o, it_i, f = random_gemm_program(dev, np.random.default_rng(seed), zero_lanes=zero_lanes)
            acc0 = dev.acc.astype(np.int64)
            inp = dev.inp.reshape(-1, cfg.BATCH, cfg.BLOCK_IN).astype(np.int64)
            wgt = dev.wgt.reshape(-1, cfg.BLOCK_OUT, cfg.BLOCK_IN).astype(np.int64)
            run(dev, words)
            results.append((dev.acc.copy(), dev.out.copy()))
        want = acc0.reshape(-1, cfg.BATCH, cfg.BLOCK_OUT)   # numpy, in the hardware's loop order
        touched = set()
        for o in range(it_o):
            for i in range(it_i):
                for d, s, w in uops:
                    d2 = d + o * f["dst_factor_out"] + i * f["dst_factor_in"]
                    s2 = s + o * f["src_factor_out"] + i * f["src_factor_in"]
                    w2 = w + o * f["wgt_factor_out"] + i * f["wgt_factor_in"]
                    want[d2] += inp[s2] @ wgt[w2].T
                    touched.add(d2)
        want = wrap32(want.reshape(acc0.shape))
        assert np.array_equal(results[0][0], want) and np.array_equal(results[1][0], want)
        assert np.array_equal(results[0][1], results[1][1])
        rows = sorted(touched)
        assert np.array_equal(results[0][1][rows], want[rows].astype(np.int8))


# Loop shapes of convolution GEMMs (factors; n stands for the loop whose count the test varies 1-9):
# rows over the inner loop with the same weights (register blocks of up to 4 rows), an outer loop
# over other rows or accumulating into the same ones (input-channel blocks), an inner loop that
# accumulates (kernel rows, each with its own weights) under an outer loop over rows.
LOOP_SHAPES = {
    "rows-inner": dict(iter_out=3, iter_in="n", dst_factor_out=40, dst_factor_in=1, src_factor_out=50,
                       src_factor_in=2, wgt_factor_out=27, wgt_factor_in=0),
    "rows-inner-step3": dict(iter_out=3, iter_in="n", dst_factor_out=40, dst_factor_in=3, src_factor_out=50,
                             src_factor_in=2, wgt_factor_out=27, wgt_factor_in=0),
    "same-row-inner": dict(iter_out=3, iter_in="n", dst_factor_out=40, dst_factor_in=0, src_factor_out=50,
                           src_factor_in=2, wgt_factor_out=27, wgt_factor_in=0),
    "acc-outer": dict(iter_out=3, iter_in="n", dst_factor_out=0, dst_factor_in=1, src_factor_out=50,
                      src_factor_in=2, wgt_factor_out=27, wgt_factor_in=0),
    "acc-inner": dict(iter_out="n", iter_in=7, dst_factor_out=4, dst_factor_in=0, src_factor_out=8,
                      src_factor_in=4, wgt_factor_out=0, wgt_factor_in=1),
    "acc-inner-wgt-outer": dict(iter_out="n", iter_in=3, dst_factor_out=4, dst_factor_in=0, src_factor_out=8,
                                src_factor_in=4, wgt_factor_out=2, wgt_factor_in=1),
    "acc-both": dict(iter_out="n", iter_in=3, dst_factor_out=0, dst_factor_in=0, src_factor_out=8,
                     src_factor_in=4, wgt_factor_out=2, wgt_factor_in=1),
}


def blocked_gemm_case(dev, rng, shape, n, zero_lanes):
    """Random SRAMs and a GEMM of LOOP_SHAPES[shape] with ``n`` for its varied loop: groups of 9 uops per
    destination row (a 3x3 window) in random order, ``zero_lanes`` zero in every INP row."""
    isa = dev.config.isa
    fill_random_srams(dev, rng, zero_lanes)
    f = {k: n if v == "n" else v for k, v in LOOP_SHAPES[shape].items()}
    uops = [(100 + g * 11, 3 * g + k % 3 + 17 * (k // 3), 9 * g + k) for g in range(3) for k in range(9)]
    uops = [uops[k] for k in rng.permutation(len(uops))]   # the engine groups them by destination itself
    dev.uop[:len(uops), 0] = [isa.uop.encode(dst_idx=d, src_idx=s, wgt_idx=w) for d, s, w in uops]
    gemm = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=len(uops), **f)
    return [gemm, isa.finish_insn()], uops, f


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("shape", LOOP_SHAPES)
@pytest.mark.parametrize("zero_lanes", [(), (0, 1, 5, 8, 9, 14), tuple(range(2, 16))],
                         ids=["dense", "scattered", "1-pair"])
def test_fast_gemm_register_blocks_equal_numpy(batch, shape, zero_lanes):
    """Every row count 1-9 (blocks of 4 and a rest of 1-3) in every loop shape: rows that alias
    (dst factor 0: the same accumulator row every iteration), rows interleaved with other groups' rows,
    accumulating loops folded into the uops by the engine, against numpy in the hardware's order."""
    cfg = load_config().replace(LOG_BATCH=batch.bit_length() - 1)
    dev = FsimDevice(cfg)
    if not dev.engine.has_fast_gemm:
        pytest.skip("no AVX2 kernel on this machine or config")
    rng = np.random.default_rng(batch * 1000 + list(LOOP_SHAPES).index(shape) * 10 + len(zero_lanes))
    for n in range(1, 10):
        words, uops, f = blocked_gemm_case(dev, rng, shape, n, zero_lanes)
        run_gemm_against_numpy(dev, words, uops, f, f"n = {n}")


def run_gemm_against_numpy(dev, words, uops, f, label):
    """Runs a GEMM of (dst, src, wgt) uops and loop fields f; ACC and OUT as numpy says (hardware order)."""
    cfg = dev.config
    want = dev.acc.astype(np.int64).reshape(-1, cfg.BATCH, cfg.BLOCK_OUT)
    inp = dev.inp.reshape(-1, cfg.BATCH, cfg.BLOCK_IN).astype(np.int64)
    wgt = dev.wgt.reshape(-1, cfg.BLOCK_OUT, cfg.BLOCK_IN).astype(np.int64)
    out_before = dev.out.copy()
    touched = set()
    for o in range(f["iter_out"]):
        for i in range(f["iter_in"]):
            for d, s, w in uops:
                d2 = d + o * f["dst_factor_out"] + i * f["dst_factor_in"]
                want[d2] += inp[s + o * f["src_factor_out"] + i * f["src_factor_in"]] @ \
                    wgt[w + o * f["wgt_factor_out"] + i * f["wgt_factor_in"]].T
                touched.add(d2)
    want = wrap32(want.reshape(dev.acc.shape))
    run(dev, words)
    assert np.array_equal(dev.acc, want), label
    rows = sorted(touched)
    assert np.array_equal(dev.out[rows], want[rows].astype(np.int8)), label
    others = np.setdiff1d(np.arange(dev.out.shape[0]), rows)
    assert np.array_equal(dev.out[others], out_before[others]), label


# GEMMs whose uops each write their own row (a 1x1 convolution: 7 output columns, stride 2), which
# the engine runs 4 rows at a time across uops and iterations when that is exact.
ONE_UOP_ROWS = {
    "1x1": dict(dst_factor_in=7),
    "1x1, uops shuffled": dict(dst_factor_in=7, shuffle=True),
    "rows overlap across iterations": dict(dst_factor_in=6),   # row 6 of one is row 0 of the next
    "the same rows every iteration": dict(dst_factor_in=0),
    "a tile per uop": dict(dst_factor_in=7, tile_per_uop=True),
}


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("case", ONE_UOP_ROWS)
def test_one_uop_rows_equal_numpy(case, batch):
    opts = dict(ONE_UOP_ROWS[case])
    cfg = load_config().replace(LOG_BATCH=batch.bit_length() - 1)
    dev = FsimDevice(cfg)
    isa = cfg.isa
    rng = np.random.default_rng(batch * 100 + list(ONE_UOP_ROWS).index(case))
    for n in range(1, 10):
        fill_random_srams(dev, rng)
        uops = [(100 + k, 2 * k, 5 + k * opts.get("tile_per_uop", 0)) for k in range(7)]
        if opts.get("shuffle"):
            uops = [uops[k] for k in rng.permutation(7)]
        dev.uop[:7, 0] = [isa.uop.encode(dst_idx=d, src_idx=s, wgt_idx=w) for d, s, w in uops]
        f = dict(iter_out=3, iter_in=n, dst_factor_out=70, dst_factor_in=opts["dst_factor_in"], src_factor_out=200,
                 src_factor_in=26, wgt_factor_out=1, wgt_factor_in=0)
        words = [isa.gemm.encode(opcode=Opcode.GEMM, uop_end=7, **f), isa.finish_insn()]
        run_gemm_against_numpy(dev, words, uops, f, f"n = {n}")


@pytest.mark.parametrize("where", [0, 1, 100, 127, 128, 130])
def test_a_pair_nonzero_in_one_row_only_is_not_skipped(where):
    """The engine skips input pairs that are zero in every INP row a GEMM reads: a pair that is
    non-zero in just one of those rows (first, early, middle, the end of the 8-row chunks the scan
    reads, the rows after them, the last) must still count."""
    fast, plain = fast_and_plain_devices()
    isa = fast.config.isa
    rng = np.random.default_rng(where)
    inp = np.zeros_like(fast.inp)
    inp[:, :2] = rng.integers(-128, 128, (inp.shape[0], 2), dtype=np.int8)   # pair 0 on everywhere
    inp[10 + where, 9] = -77                                                  # pair 4 on in one row
    wgt = rng.integers(-128, 128, fast.wgt.shape, dtype=np.int8)
    results = []
    for dev in (fast, plain):
        dev.inp[:], dev.wgt[:], dev.acc[:] = inp, wgt, 0
        dev.uop[0, 0] = isa.uop.encode(dst_idx=0, src_idx=10, wgt_idx=3)
        gemm = isa.gemm.encode(opcode=Opcode.GEMM, uop_end=1, iter_out=1, iter_in=131, dst_factor_in=1, src_factor_in=1)
        run(dev, [gemm, isa.finish_insn()])
        results.append(dev.acc[:131].copy())
    want = inp[10:141].astype(np.int64) @ wgt[3].reshape(16, 16).astype(np.int64).T
    assert np.array_equal(results[1], want) and np.array_equal(results[0], want)


def test_gemms_see_the_inp_rows_each_load_wrote():
    """INP rows loaded twice in one run (the second load overwrites the first, with padding in the first):
    each GEMM must use the rows as loaded before it, also in the kernels that read a widened copy
    of INP (here 3 live channels of 16, then 1 live channel in a different pair)."""
    results = []
    for dev in fast_and_plain_devices():
        cfg, isa = dev.config, dev.config.isa
        rng = np.random.default_rng(7)
        a = np.zeros((6, 16), np.int8)
        a[:, :3] = rng.integers(-128, 128, (6, 3))
        b = np.zeros((8, 16), np.int8)
        b[:, 9] = rng.integers(-128, 128, 8)
        dev.wgt[:1] = rng.integers(-128, 128, (1, 256), dtype=np.int8)
        dev.uop[:2, 0] = [isa.uop.encode(dst_idx=d, src_idx=0, wgt_idx=0) for d in (0, 8)]
        dev.acc[:16] = 0
        step = dict(opcode=Opcode.GEMM, iter_out=1, iter_in=8, dst_factor_in=1, src_factor_in=1)
        words = [isa.load(MemType.INP, 0, put(dev, a) // cfg.INP_ELEM_BYTES, 1, 6, 6, x_pad_0=1, x_pad_1=1,
                          push_next_dep=1),
                 isa.gemm.encode(uop_bgn=0, uop_end=1, pop_prev_dep=1, push_prev_dep=1, **step),
                 isa.load(MemType.INP, 0, put(dev, b) // cfg.INP_ELEM_BYTES, 1, 8, 8, pop_next_dep=1,
                          push_next_dep=1),
                 isa.gemm.encode(uop_bgn=1, uop_end=2, pop_prev_dep=1, **step),
                 isa.finish_insn()]
        run(dev, words)
        results.append(dev.acc[:16].copy())
    w = dev.wgt[0].reshape(16, 16).astype(np.int64)
    a_rows = np.vstack([np.zeros((1, 16), np.int64), a, np.zeros((1, 16), np.int64)])
    want = np.vstack([a_rows @ w.T, b.astype(np.int64) @ w.T])
    assert np.array_equal(results[1], want) and np.array_equal(results[0], want)


def test_engine_checks_agree_with_diagnose():
    """Random instructions, legal and not: the engine refuses exactly those that diagnose refuses."""
    cfg = load_config()
    dev = FsimDevice(cfg)
    isa = cfg.isa
    bufs = [dev.alloc(n) for n in (4096, 3 * 4096 + 100, 64)]
    rng = np.random.default_rng(4)
    verdicts = {True: 0, False: 0}
    fmts = [isa.mem, isa.gemm, isa.alu]
    for _ in range(3000):
        fmt = fmts[rng.integers(0, 3)]
        vals = {}
        for f in fmt:
            hi = f.max if rng.random() < 0.2 else min(f.max, 8 if f.width > 3 else f.max)
            vals[f.name] = int(rng.integers(max(f.min, 0), hi + 1))
        if fmt is isa.mem and rng.random() < 0.7:   # aim DMAs at allocations, sometimes past their end
            buf = bufs[rng.integers(0, len(bufs))]
            eb = {MemType.UOP: 4, MemType.WGT: cfg.WGT_ELEM_BYTES, MemType.INP: cfg.INP_ELEM_BYTES,
                  MemType.ACC: cfg.ACC_ELEM_BYTES, MemType.OUT: cfg.OUT_ELEM_BYTES}.get(vals["memory_type"], 1)
            vals["dram_base"] = buf // eb + int(rng.integers(0, 64))
        if fmt is not isa.mem:
            vals["opcode"] = Opcode.GEMM if fmt is isa.gemm else Opcode.ALU
        words = np.array([[w & (2**64 - 1), w >> 64] for w in (fmt.encode(vals), isa.finish_insn())], np.uint64)
        if rng.random() < 0.05:
            words = words[:1]                   # no FINISH
        engine_ok = dev.engine.check(words, dev.dram.pages.allocations()) < 0
        try:
            check_stream(cfg, Program(isa, words), dev.dram)
            python_ok = True
        except ProgramError:
            python_ok = False
        assert engine_ok == python_ok, (fmt.name, vals, len(words))
        verdicts[python_ok] += 1
    assert min(verdicts.values()) > 300, verdicts   # both outcomes well represented


# ------------------------------------------------------------------ fused ALU runs
# (op, use_imm, imm, dst, iter_out, iter_in, dst_factors, src, src_factors, pop): one ALU
# instruction whose kernel is `uops` (dst, src) pairs; each is loaded into uop slot `slot` just
# before it. A layer's epilogue (ADD bias, SHR, MAX, MIN over one range) is the case that fuses.
def alu_step(op, imm=0, uops=((8, 0),), iters=(1, 24), dst=(0, 1), src=(0, 0), use_imm=1, slot=0, pop=0):
    return dict(op=op, imm=imm, uops=uops, iters=iters, dst=dst, src=src, use_imm=use_imm, slot=slot, pop=pop)


BIAS = dict(uops=((8, 0),), iters=(4, 6), dst=(6, 1), src=(1, 0), use_imm=0)   # rows 8-31 += bias rows 0-3
ROWS2 = dict(uops=((40, 0), (41, 0)), iters=(1, 5), dst=(0, 2))                  # rows 40-49, two uops
# name: (the instructions, how many groups run fused, whether the result is informative)
FUSED_RUNS = {
    # ADD bias, SHR, MAX, MIN, each kernel in its own slot: one group of four
    "epilogue": ([alu_step(AluOp.ADD, slot=1, **BIAS), alu_step(AluOp.SHR, 10, slot=2),
                  alu_step(AluOp.MAX, -100, slot=3), alu_step(AluOp.MIN, 100, slot=4)], 1, True),
    # every kernel in slot 0 (a load overwrites the uop the instruction before it read); a left
    # shift (-1), one that wraps (40 is -24 in 6 bits), adds between clips: several stages
    "mixed": ([alu_step(op, imm, **ROWS2) for op, imm in (
        (AluOp.MAX, -32000), (AluOp.ADD, 5), (AluOp.SHR, -1), (AluOp.SHR, 40), (AluOp.SHR, 22), (AluOp.ADD, -9),
        (AluOp.MIN, 480), (AluOp.MAX, -480), (AluOp.ADD, 3))], 1, True),
    # a left shift by 32 zeroes (a count taken mod 32 would keep the values)
    "shift out": ([alu_step(AluOp.ADD, 1, **ROWS2), alu_step(AluOp.SHR, -32, **ROWS2)], 1, False),
    # the first reads rows it writes (row d adds row d - 1, written just before): it runs alone,
    # the other three fuse
    "source inside": ([alu_step(AluOp.ADD, uops=((9, 8),), src=(0, 1), use_imm=0),
                       *[alu_step(op, imm, uops=((9, 0),)) for op, imm in
                         ((AluOp.SHR, 10), (AluOp.MAX, -50), (AluOp.MIN, 50))]], 1, True),
    # the second writes other rows, or some rows twice (two uops, an inner loop, an outer loop
    # that overlap): the first and second run alone, the last two fuse
    **{f"then {name}": ([alu_step(AluOp.SHR, 9), alu_step(AluOp.ADD, 7, **second),
                         alu_step(AluOp.MAX, -60), alu_step(AluOp.MIN, 60)], 1, True)
       for name, second in (("other rows", dict(uops=((9, 0),))),
                            ("a row twice (uops)", dict(uops=((8, 0), (8, 0)), iters=(1, 12), dst=(0, 2))),
                            ("a row twice (inner loop)", dict(uops=((8, 0), (9, 0)), iters=(1, 12), dst=(0, 1))),
                            ("a row twice (outer loop)", dict(iters=(2, 12), dst=(11, 1))))},
    # the third pops a token (it may wait for another module): the group ends before it
    "token": ([alu_step(AluOp.SHR, 8), alu_step(AluOp.MAX, -300), alu_step(AluOp.MIN, 300, pop=1),
               alu_step(AluOp.ADD, 11)], 2, True),
}


def alu_run_reference(acc, steps):
    """The ALU instructions one after another, uop by uop in loop order (the ISA's semantics): ACC, and
    OUT (the low bytes of the rows written; the others stay 0)."""
    acc = acc.copy()
    written = np.zeros(len(acc), bool)
    for st in steps:
        for o in range(st["iters"][0]):
            for i in range(st["iters"][1]):
                for d, s in st["uops"]:
                    d += o * st["dst"][0] + i * st["dst"][1]
                    s += o * st["src"][0] + i * st["src"][1]
                    acc[d] = alu_reference(st["op"], acc[d], st["imm"] if st["use_imm"] else acc[s])
                    written[d] = True
    return acc, np.where(written[:, None], acc, 0).astype(np.int8), written


CONFIGS = {"1x16x16": {}, "2x8x8": dict(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16),
           "1x8x8 (no AVX2 rows)": dict(LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16, LOG_ACC_BUFF_SIZE=15, LOG_INP_BUFF_SIZE=13),
           "2x16x16": dict(LOG_BATCH=1)}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("case", FUSED_RUNS)
def test_fused_alu_runs_equal_numpy_and_the_unfused_engine(case, config):
    """Runs of ALU instructions that fuse (or must not, or only in part) give the ISA's results, on
    the AVX2 rows (16 and 32 lanes) and the plain loop (8 lanes)."""
    steps, groups, informative = FUSED_RUNS[case]
    cfg = load_config().replace(**CONFIGS[config])
    rng = np.random.default_rng(11)
    acc0 = rng.integers(-(1 << 16), 1 << 16, (64, cfg.BATCH * cfg.BLOCK_OUT), dtype=np.int32)
    want, want_out, written = alu_run_reference(acc0, steps)
    if informative:   # not clipped flat, not left as loaded
        assert len(np.unique(want[written])) > 40 and np.all(np.any(want[written] != acc0[written], axis=1))
    stats = []
    for fuse in (True, False):
        dev = FsimDevice(cfg)
        isa = dev.config.isa
        dev.engine.fuse_alu(fuse)
        dev.acc[:64] = acc0
        words = [isa.load(MemType.INP, 0, 0, 0, 0, 0, push_next_dep=1)] if any(st["pop"] for st in steps) else []
        for st in steps:
            kernel = np.array([isa.uop.encode(dst_idx=d, src_idx=s, wgt_idx=0) for d, s in st["uops"]], np.uint32)
            words.append(isa.load(MemType.UOP, st["slot"], put(dev, kernel) // 4, 1, len(kernel), len(kernel)))
            words.append(isa.alu.encode(
                opcode=Opcode.ALU, uop_bgn=st["slot"], uop_end=st["slot"] + len(kernel), iter_out=st["iters"][0],
                iter_in=st["iters"][1], dst_factor_out=st["dst"][0], dst_factor_in=st["dst"][1],
                src_factor_out=st["src"][0], src_factor_in=st["src"][1], alu_opcode=st["op"],
                use_imm=st["use_imm"], imm=st["imm"], pop_prev_dep=st["pop"]))
        run(dev, words + [isa.finish_insn()])
        assert np.array_equal(dev.acc[:64], want), f"fuse={fuse}"
        assert np.array_equal(dev.out[:64], want_out), f"fuse={fuse}"
        assert dev.engine.fused_groups == (groups if fuse else 0)
        stats.append(dev.stats())
    assert stats[0] == stats[1]


def test_a_stream_that_passed_is_checked_again_when_it_or_the_allocations_change():
    """The engine remembers streams that passed its checks; a changed stream at the same place, or the
    same stream after its buffer is freed, is still refused with the usual message."""
    dev = FsimDevice()
    isa = dev.config.isa
    buf = dev.alloc(100)   # 6 INP elements fit, 7 do not
    phys = dev.alloc(32)

    def run_at(x_size):
        dev.write(phys, Isa.to_bytes([isa.load(MemType.INP, 0, buf // 16, 1, x_size, x_size), isa.finish_insn()]))
        dev.run(phys, 2)

    run_at(6)
    run_at(6)   # remembered
    with pytest.raises(DramAccessError, match="instruction 0: LOAD INP accesses device memory .* has only 100 bytes"):
        run_at(7)
    run_at(6)
    dev.free(buf)
    with pytest.raises(DramAccessError, match="instruction 0: LOAD INP .* no allocation contains its start"):
        run_at(6)
    assert dev.alloc(80) == buf   # as many allocations, at the same places, one smaller
    with pytest.raises(DramAccessError, match="instruction 0: LOAD INP accesses device memory .* has only 80 bytes"):
        run_at(6)


# ------------------------------------------------------------------ OUT after a GEMM
# The AVX2 kernels leave OUT rows stale and write them when something could tell. Each case: a GEMM
# into ACC rows 0-3, then what follows it; the rows are stored to DRAM at the end where a STORE is
# named. Expected: OUT = the low bytes of the GEMM's sums, except where an ALU wrote later.
OUT_CASES = {
    "a store reads them": ["store"],
    "a reset GEMM zeroes the sums": ["reset", "store"],
    "a LOAD ACC replaces the sums": ["load acc", "store"],
    "the run ends": [],
    "an ALU writes two of them": ["alu", "store"],
}


@pytest.mark.parametrize("case", OUT_CASES)
def test_out_holds_the_gemm_sums_whenever_it_can_be_seen(case):
    steps = OUT_CASES[case]
    results = []
    for dev in fast_and_plain_devices():
        cfg, isa = dev.config, dev.config.isa
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        rng = np.random.default_rng(13)
        dev.inp[:4] = rng.integers(-128, 128, (4, dev.inp.shape[1]), dtype=np.int8)
        dev.wgt[:1] = rng.integers(-128, 128, (1, dev.wgt.shape[1]), dtype=np.int8)
        acc0 = rng.integers(-(1 << 20), 1 << 20, (4, lanes), dtype=np.int32)
        dev.acc[:4] = acc0
        dev.uop[:2, 0] = isa.uop.encode(dst_idx=0, src_idx=0, wgt_idx=0)   # the GEMM's and the ALU's
        new_acc = rng.integers(-(1 << 20), 1 << 20, (4, lanes), dtype=np.int32)
        out_phys = dev.alloc(4 * lanes)
        loop = dict(iter_out=1, iter_in=4, dst_factor_in=1, src_factor_in=1)
        words = [isa.gemm.encode(opcode=Opcode.GEMM, uop_bgn=0, uop_end=1, **loop)]
        for step in steps:
            if step == "reset":
                words.append(isa.gemm.encode(opcode=Opcode.GEMM, reset_reg=1, uop_bgn=0, uop_end=1, **loop))
            elif step == "load acc":
                words.append(isa.load(MemType.ACC, 0, put(dev, new_acc) // cfg.ACC_ELEM_BYTES, 1, 4, 4))
            elif step == "alu":
                words.append(isa.alu.encode(opcode=Opcode.ALU, uop_bgn=1, uop_end=2, iter_out=1, iter_in=2,
                                            dst_factor_in=1, src_factor_in=1, alu_opcode=AluOp.ADD, use_imm=1, imm=5))
            else:   # store: compute hands OUT rows 0-3 to the store module, which hands back to FINISH
                words[-1] = words[-1] | (1 << isa.mem["push_next_dep"].lsb)
                words.append(isa.store(0, out_phys // cfg.OUT_ELEM_BYTES, 1, 4, 4, pop_prev_dep=1, push_prev_dep=1))
        run(dev, words + [isa.finish_insn(pop_next_dep=int("store" in steps))])
        stored = np.frombuffer(dev.read(out_phys, 4 * lanes), np.int8).reshape(4, lanes).copy()
        results.append((dev.out[:4].copy(), dev.acc[:4].copy(), stored))
    x = dev.inp[:4].astype(np.int64).reshape(4 * cfg.BATCH, cfg.BLOCK_IN)
    w = dev.wgt[0].astype(np.int64).reshape(cfg.BLOCK_OUT, cfg.BLOCK_IN)
    sums = wrap32(acc0.astype(np.int64) + (x @ w.T).reshape(4, lanes))
    want_out = sums.astype(np.int8)
    want_acc = {"reset": np.zeros_like(sums), "load acc": new_acc}.get((steps or [""])[0], sums)
    if "alu" in steps:
        want_acc = sums.copy()
        want_acc[:2] = wrap32(sums[:2].astype(np.int64) + 5)
        want_out = want_acc.astype(np.int8)
    assert len(np.unique(want_out)) > 50
    for out, acc, stored in results:   # the AVX2 kernel, then the plain loop
        assert np.array_equal(out, want_out) and np.array_equal(acc, want_acc)
        assert np.array_equal(stored, want_out if "store" in steps else np.zeros_like(want_out))


@pytest.mark.parametrize("shape", ["rows-inner", "acc-inner", "acc-both"])
@pytest.mark.parametrize("tiles", ["diagonal", "one-off-diagonal"])
def test_fast_gemm_with_diagonal_tiles_equals_numpy(shape, tiles):
    """Depthwise layers' weight tiles are diagonal (one channel per group), which the engine multiplies
    lane by lane; a tile with one weight off the diagonal must take the dense kernel (a negative control
    for the detection: the off-diagonal product changes the result)."""
    dev = FsimDevice()
    if not dev.engine.has_fast_gemm:
        pytest.skip("no AVX2 kernel on this machine or config")
    cfg = dev.config
    rng = np.random.default_rng(11 + len(shape))
    for n in (1, 2, 5):
        words, uops, f = blocked_gemm_case(dev, rng, shape, n, ())
        w = dev.wgt.reshape(-1, cfg.BLOCK_OUT, cfg.BLOCK_IN)
        w *= np.eye(cfg.BLOCK_OUT, cfg.BLOCK_IN, dtype=np.int8)      # every tile diagonal
        if tiles == "one-off-diagonal":
            w[[u[2] for u in uops][3], 2, 9] = 77
        run_gemm_against_numpy(dev, words, uops, f, f"{tiles}, n = {n}")
