"""The original VTA unit tests (test_vta_insn.py) re-expressed through the runtime, asserting exact values."""

import numpy as np
import pytest
from vta_test_helpers import (
    C,
    L,
    alu_reference,
    read_acc,
    read_array,
    run_alu,
    shr_reference,
    store_out,
    write_array,
)

from vta_hw.spec import AluOp, MemType
from vta_runtime import DEBUG_FORCE_SERIAL, CommandQueue
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift, unsaturated_fraction

RNG = np.random.default_rng(2024)


def informative_reference(a, b, shift):
    """gemm_reference, checked to be mostly unsaturated (at least 30% strictly inside the clip range)."""
    c = gemm_reference(a, b, shift)
    assert unsaturated_fraction(c) >= 0.3, f"only {unsaturated_fraction(c):.0%} of the outputs are not saturated"
    return c


def lanes(cfg):
    return cfg.BATCH * cfg.BLOCK_OUT


def load_acc(cq, data, sram_base=0, pads=(0, 0, 0, 0)):
    """data: (rows, cols, lanes) int32 -> ACC at sram_base with pads (x0, y0, x1, y1)."""
    rows, cols = data.shape[:2]
    buf = write_array(cq, data.astype(np.int32))
    cq.load_buffer_2d(buf, 0, cols, rows, cols, pads[0], pads[1], pads[2], pads[3], sram_base, MemType.ACC)
    return buf


@pytest.mark.parametrize("force_serial", [False, True])
def test_save_load_out(make_device, force_serial):
    dev = make_device()
    cq = CommandQueue(dev, debug_flags=DEBUG_FORCE_SERIAL if force_serial else 0)
    n = 36
    data = RNG.integers(-300, 300, (n, 1, lanes(dev.config)), dtype=np.int32)
    load_acc(cq, data.reshape(1, n, -1))
    run_alu(cq, 0, n, AluOp.SHR, 0)
    out = cq.buffer_alloc(n * lanes(dev.config))
    store_out(cq, 0, n, out)
    cq.synchronize()
    got = read_array(cq, out, (n, lanes(dev.config)), np.int8)
    np.testing.assert_array_equal(got, data.reshape(n, -1).astype(np.int8))  # narrowing truncates
    assert dev.stats()["acc_load_nbytes"] == n * dev.config.ACC_ELEM_BYTES
    assert dev.stats()["alu_counter"] == n
    assert dev.stats()["out_store_nbytes"] == n * dev.config.OUT_ELEM_BYTES


def pad_id(p):
    return "x0={},y0={},x1={},y1={}".format(*p)


PAD_CASES = ([(p, 0, 0, 0) for p in range(16)] + [(0, p, 0, 0) for p in range(1, 16)] +
             [(0, 0, p, 0) for p in range(1, 16)] + [(0, 0, 0, p) for p in range(1, 16)] +
             [(1, 1, 1, 1), (2, 3, 4, 5), (15, 15, 15, 15)])


def _padded(data, pads):
    x0, y0, x1, y1 = pads
    return np.pad(data, ((y0, y1), (x0, x1), (0, 0)))


@pytest.mark.parametrize("pads", PAD_CASES, ids=pad_id)
def test_padded_load_acc(make_device, pads):
    dev = make_device()
    cq = CommandQueue(dev)
    data = RNG.integers(-100, 100, (3, 5, lanes(dev.config)), dtype=np.int32)
    load_acc(cq, data, 0, pads)
    want = _padded(data, pads)
    n = want.shape[0] * want.shape[1]
    run_alu(cq, 0, n, AluOp.SHR, 0)
    out = cq.buffer_alloc(n * lanes(dev.config))
    store_out(cq, 0, n, out)
    cq.synchronize()
    np.testing.assert_array_equal(read_array(cq, out, want.shape, np.int8), want.astype(np.int8))


def _gemm_loop(cq, count, dst_step, src_step, wgt_step, dst=0, src=0, wgt=0, reset=False, key=None):
    def record(_sig):
        cq.uop_loop_begin(count, dst_step, src_step, wgt_step)
        cq.uop_push(0, int(reset), dst, src, wgt)
        cq.uop_loop_end()
    cq.push_gemm_op(key or ("gemm", count, dst_step, src_step, wgt_step, dst, src, wgt, reset), record)


@pytest.mark.parametrize("pads", PAD_CASES, ids=pad_id)
def test_padded_load_inp(make_device, pads):
    """Pad INP, then multiply by an identity weight so OUT shows the INP contents."""
    dev = make_device()
    cfg = dev.config
    cq = CommandQueue(dev)
    data = RNG.integers(-128, 128, (3, 5, cfg.BATCH * cfg.BLOCK_IN), dtype=np.int8)
    ident = np.eye(cfg.BLOCK_OUT, cfg.BLOCK_IN, dtype=np.int8)
    ibuf, wbuf = write_array(cq, data), write_array(cq, ident)
    x0, y0, x1, y1 = pads
    cq.load_buffer_2d(ibuf, 0, 5, 3, 5, x0, y0, x1, y1, 0, MemType.INP)
    cq.load_buffer_2d(wbuf, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.WGT)
    cq.dep_push(L, C)
    cq.dep_pop(L, C)
    want = _padded(data, pads)
    n = want.shape[0] * want.shape[1]
    _gemm_loop(cq, n, 1, 0, 0, reset=True)
    _gemm_loop(cq, n, 1, 1, 0)
    out = cq.buffer_alloc(n * lanes(cfg))
    store_out(cq, 0, n, out)
    cq.synchronize()
    np.testing.assert_array_equal(read_array(cq, out, want.shape, np.int8), want)
    assert dev.stats()["inp_load_nbytes"] == 15 * cfg.INP_ELEM_BYTES
    assert dev.stats()["gemm_counter"] == n  # reset GEMMs are not counted


@pytest.mark.parametrize("pads", PAD_CASES[:48:3] + PAD_CASES[-3:-1], ids=pad_id)
def test_padded_load_wgt(make_device, pads):
    """Pad WGT, then multiply unit vectors e_k by every weight element so OUT shows each column."""
    dev = make_device()
    cfg = dev.config
    bo, bi = cfg.BLOCK_OUT, cfg.BLOCK_IN
    cq = CommandQueue(dev)
    data = RNG.integers(-128, 128, (1, 2, bo * bi), dtype=np.int8)
    units = np.repeat(np.eye(bi, dtype=np.int8)[:, None, :], cfg.BATCH, axis=1).reshape(bi, -1)
    wbuf, ibuf = write_array(cq, data), write_array(cq, units)
    x0, y0, x1, y1 = pads
    cq.load_buffer_2d(wbuf, 0, 2, 1, 2, x0, y0, x1, y1, 0, MemType.WGT)
    cq.load_buffer_2d(ibuf, 0, bi, 1, bi, 0, 0, 0, 0, 0, MemType.INP)
    cq.dep_push(L, C)
    cq.dep_pop(L, C)
    want = _padded(data, pads)                              # (R, P, bo*bi) weight elements
    nw = want.shape[0] * want.shape[1]

    def record(_sig):
        cq.uop_loop_begin(nw, bi, 0, 1)
        for k in range(bi):
            cq.uop_push(0, 0, k, k, 0)
        cq.uop_loop_end()
    _gemm_loop(cq, nw * bi, 1, 0, 0, reset=True)
    cq.push_gemm_op(("columns", nw), record)
    out = cq.buffer_alloc(nw * bi * lanes(cfg))
    store_out(cq, 0, nw * bi, out)
    cq.synchronize()
    got = read_array(cq, out, (nw, bi, cfg.BATCH, bo), np.int8)
    expect = want.reshape(nw, bo, bi).transpose(0, 2, 1)   # row k of element j is column k of W_j
    for b in range(cfg.BATCH):
        np.testing.assert_array_equal(got[:, :, b, :], expect)


def _ref_gemm(acc, inp, wgt, uops, it_o, it_i, f):
    acc = acc.astype(np.int64).copy()
    for o in range(it_o):
        for i in range(it_i):
            for d, s, w in uops:
                a = d + o * f["dst_out"] + i * f["dst_in"]
                x = s + o * f["src_out"] + i * f["src_in"]
                ww = w + o * f["wgt_out"] + i * f["wgt_in"]
                acc[a] += (inp[x].astype(np.int64) @ wgt[ww].astype(np.int64).T).reshape(-1)
    return acc.astype(np.int32)


def test_gemm_two_loops_every_factor_nonzero_with_overflow(make_device):
    dev = make_device()
    cfg = dev.config
    bt, bi, bo = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    cq = CommandQueue(dev)
    n_inp, n_wgt, n_acc = 40, 30, 64
    inp = RNG.integers(-128, 128, (n_inp, bt, bi), dtype=np.int8)
    wgt = RNG.integers(-128, 128, (n_wgt, bo, bi), dtype=np.int8)
    acc0 = RNG.integers(-2**31, 2**31, (n_acc, bt * bo), dtype=np.int64).astype(np.int32)
    acc0[:8] = 2**31 - 5                                  # these wrap
    f = dict(dst_out=7, dst_in=3, src_out=5, src_in=2, wgt_out=4, wgt_in=1)
    uops = [(1, 3, 2), (2, 0, 5), (9, 7, 1), (1, 1, 1)]  # dst 1 twice: accumulate in one instruction
    it_o, it_i = 3, 4
    ib, wb = write_array(cq, inp), write_array(cq, wgt)
    load_acc(cq, acc0.reshape(1, n_acc, -1))
    cq.load_buffer_2d(ib, 0, n_inp, 1, n_inp, 0, 0, 0, 0, 0, MemType.INP)
    cq.load_buffer_2d(wb, 0, n_wgt, 1, n_wgt, 0, 0, 0, 0, 0, MemType.WGT)
    cq.dep_push(L, C)
    cq.dep_pop(L, C)

    def record(_sig):
        cq.uop_loop_begin(it_o, f["dst_out"], f["src_out"], f["wgt_out"])
        cq.uop_loop_begin(it_i, f["dst_in"], f["src_in"], f["wgt_in"])
        for d, s, w in uops:
            cq.uop_push(0, 0, d, s, w)
        cq.uop_loop_end()
        cq.uop_loop_end()
    cq.push_gemm_op("two_loops", record)
    got = read_acc(cq, 0, n_acc)
    want = _ref_gemm(acc0, inp.reshape(n_inp, -1).reshape(n_inp, bt, bi), wgt, uops, it_o, it_i, f)
    np.testing.assert_array_equal(got, want)
    assert dev.stats()["gemm_counter"] == it_o * it_i * len(uops)


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("force_serial", [False, True])
def test_gemm_virtual_threads(make_device, vthreads, force_serial):
    dev = make_device()
    cfg = dev.config
    cq = CommandQueue(dev, debug_flags=DEBUG_FORCE_SERIAL if force_serial else 0)
    a = RNG.integers(-128, 128, (4 * cfg.BATCH, 4 * cfg.BLOCK_IN), dtype=np.int8)
    b = RNG.integers(-128, 128, (4 * cfg.BLOCK_OUT, 4 * cfg.BLOCK_IN), dtype=np.int8)
    shift = informative_shift(a, b)
    got = blocked_gemm(cq, a, b, shift=shift, tiling=GemmTiling(tile_m=1, tile_n=2, tile_k=2, vthreads=vthreads))
    np.testing.assert_array_equal(got, informative_reference(a, b, shift))
    assert dev.stats()["gemm_counter"] == 4 * 4 * 4


@pytest.mark.parametrize("op", [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR], ids=lambda o: AluOp(o).name)
@pytest.mark.parametrize("use_imm", [True, False], ids=["imm", "reg"])
def test_alu(make_device, op, use_imm):
    dev = make_device()
    cfg = dev.config
    cq = CommandQueue(dev)
    n = 64
    a = RNG.integers(-2**31, 2**31, (n, lanes(cfg)), dtype=np.int64).astype(np.int32)
    a[:4] = RNG.integers(-300, 300, (4, lanes(cfg)))
    if op == AluOp.SHR:
        b = RNG.integers(-32, 32, (n, lanes(cfg)), dtype=np.int32)
        b[:8] = RNG.integers(-2**31, 2**31, (8, lanes(cfg)), dtype=np.int64)  # only the low 6 bits count
    else:
        b = RNG.integers(-2**31, 2**31, (n, lanes(cfg)), dtype=np.int64).astype(np.int32)
    load_acc(cq, np.concatenate([a, b]).reshape(1, 2 * n, -1))
    imms = [-16, -5, -1, 0, 1, 7, 15] if op == AluOp.SHR else [-32768, -1, 0, 1, 32767]
    if use_imm:
        chunk = n // len(imms)
        want = a.copy()
        for k, imm in enumerate(imms):
            sl = slice(k * chunk, (k + 1) * chunk)
            run_alu(cq, sl.start, chunk, op, imm)
            want[sl] = alu_reference(op, a[sl], imm)
        n_ops = chunk * len(imms)
    else:
        run_alu(cq, 0, n, op, use_imm=False, src_base=n)
        want = alu_reference(op, a, b)
        n_ops = n
    got = read_acc(cq, 0, n)
    np.testing.assert_array_equal(got, want)
    assert dev.stats()["alu_counter"] == n_ops + 4 * n  # read_acc adds 4 passes


def test_shr_semantics_reference():
    """Guards the reference itself: HLS rule for -16..15, original fsim rule for -32..31."""
    x = np.array([-1000, 1000, -1, 123456789], np.int32)
    for s in range(-31, 32):
        for v in x:
            want = (int(v) >> s) if s >= 0 else ((int(v) << -s) & 0xFFFFFFFF)
            want = want - (1 << 32) if want >= 1 << 31 else want
            assert shr_reference(np.array([v]), s)[0] == np.int32(want)


def test_alu_in_place_chain_is_sequential(make_device):
    """A source written earlier in the same instruction is read after that write (program order)."""
    dev = make_device()
    cq = CommandQueue(dev)
    n = 16
    a = RNG.integers(-1000, 1000, (n, lanes(dev.config)), dtype=np.int32)
    load_acc(cq, a.reshape(1, n, -1))

    def record(_sig):  # acc[i+1] += acc[i], i = 0..n-2: a prefix sum
        cq.uop_loop_begin(n - 1, 1, 1, 0)
        cq.uop_push(1, 0, 1, 0, 0, AluOp.ADD, 0, 0)
        cq.uop_loop_end()
    cq.push_alu_op("prefix", record)
    np.testing.assert_array_equal(read_acc(cq, 0, n), np.cumsum(a, axis=0, dtype=np.int64).astype(np.int32))


def test_relu(make_device):
    dev = make_device()
    cq = CommandQueue(dev)
    n = 80
    a = RNG.integers(-256, 256, (n, lanes(dev.config)), dtype=np.int32)
    load_acc(cq, a.reshape(1, n, -1))
    run_alu(cq, 0, n, AluOp.MAX, 0)
    run_alu(cq, 0, n, AluOp.MIN, 127)
    out = cq.buffer_alloc(n * lanes(dev.config))
    store_out(cq, 0, n, out)
    cq.synchronize()
    np.testing.assert_array_equal(read_array(cq, out, a.shape, np.int8), np.clip(a, 0, 127).astype(np.int8))


def test_shift_and_scale(make_device):
    dev = make_device()
    cq = CommandQueue(dev)
    n = 16
    a = RNG.integers(-10, 10, (n, lanes(dev.config)), dtype=np.int32)
    shift, scale = 5, 2
    load_acc(cq, a.reshape(1, n, -1))
    run_alu(cq, 0, n, AluOp.ADD, shift)
    run_alu(cq, 0, n, AluOp.SHR, scale)
    out = cq.buffer_alloc(n * lanes(dev.config))
    store_out(cq, 0, n, out)
    cq.synchronize()
    np.testing.assert_array_equal(read_array(cq, out, a.shape, np.int8), ((a + shift) >> scale).astype(np.int8))


def test_runtime_array_copies(make_device):
    dev = make_device()
    cq = CommandQueue(dev)
    x = RNG.integers(-128, 128, (100, 100, dev.config.BATCH, 16), dtype=np.int8)
    a, b = cq.buffer_alloc(x.nbytes), cq.buffer_alloc(x.nbytes)
    cq.buffer_copy(x, 0, a, 0, x.nbytes)                   # host -> device
    cq.buffer_copy(a, 0, b, 0, x.nbytes, kind_mask=3)      # device -> device
    y = np.zeros_like(x)
    cq.buffer_copy(b, 0, y, 0, x.nbytes)                   # device -> host
    np.testing.assert_array_equal(x, y)
    part = bytearray(10)
    cq.buffer_copy(a, 5, part, 0, 10)
    assert bytes(part) == x.reshape(-1).view(np.uint8)[5:15].tobytes()
    cq.buffer_free(a)
    cq.buffer_free(b)


def test_same_result_normal_force_serial_and_auto_flush(make_device):
    cfg = make_device().config
    a = RNG.integers(-128, 128, (8 * cfg.BATCH, 8 * cfg.BLOCK_IN), dtype=np.int8)
    b = RNG.integers(-128, 128, (8 * cfg.BLOCK_OUT, 8 * cfg.BLOCK_IN), dtype=np.int8)
    t = GemmTiling(tile_m=2, tile_n=2, tile_k=4, vthreads=2)
    normal = CommandQueue(make_device())
    serial = CommandQueue(make_device(), debug_flags=DEBUG_FORCE_SERIAL)
    flushing = CommandQueue(make_device(), max_insns=30)
    shift = informative_shift(a, b)
    results = [blocked_gemm(q, a, b, shift, t) for q in (normal, serial, flushing)]
    for r in results:
        np.testing.assert_array_equal(r, informative_reference(a, b, shift))
    assert normal.runs == serial.runs == 1 and flushing.runs > 3
    for q in (normal, serial, flushing):
        assert q.device.stats()["gemm_counter"] == 8 * 8 * 8


@pytest.mark.slow_on("tsim")     # its tsim run is a Verilator build of its own (about 50 s)
def test_uop_buffer_wraps_and_evicts(make_device, default_cfg):
    """A 16-uop UOP buffer forces kernels to wrap and evict each other; results stay exact."""
    dev = make_device({**default_cfg, "LOG_UOP_BUFF_SIZE": 6})
    cq = CommandQueue(dev)
    cfg = dev.config
    a = RNG.integers(-128, 128, (4 * cfg.BATCH, 16 * cfg.BLOCK_IN), dtype=np.int8)
    b = RNG.integers(-128, 128, (4 * cfg.BLOCK_OUT, 16 * cfg.BLOCK_IN), dtype=np.int8)
    shift = informative_shift(a, b)
    got = blocked_gemm(cq, a, b, shift, GemmTiling(tile_m=2, tile_n=2, tile_k=8, vthreads=2))
    np.testing.assert_array_equal(got, informative_reference(a, b, shift))
    assert dev.stats()["uop_load_nbytes"] > 4 * (8 + 1 + 3)  # kernels were reloaded after eviction


def test_small_block_config(make_device, default_cfg):
    dev = make_device({**default_cfg, "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16})
    cq = CommandQueue(dev)
    a = RNG.integers(-128, 128, (8, 32), dtype=np.int8)
    b = RNG.integers(-128, 128, (16, 32), dtype=np.int8)
    shift = informative_shift(a, b)
    got = blocked_gemm(cq, a, b, shift, GemmTiling(tile_m=2, tile_n=1, tile_k=2, vthreads=2))
    np.testing.assert_array_equal(got, informative_reference(a, b, shift))


def test_shr_register_operand_uses_low_bits(make_device):
    dev = make_device()
    cq = CommandQueue(dev)
    n = 4
    a = np.full((n, lanes(dev.config)), -12345678, np.int32)
    b = np.tile(np.array([3, -3, 64 + 3, 32], np.int32)[:, None], (1, lanes(dev.config)))
    load_acc(cq, np.concatenate([a, b]).reshape(1, 2 * n, -1))
    run_alu(cq, 0, n, AluOp.SHR, use_imm=False, src_base=n)
    got = read_acc(cq, 0, n)
    assert list(got[:, 0]) == [-12345678 >> 3, -12345678 << 3,
                               -12345678 >> 3, np.int32(0)]
