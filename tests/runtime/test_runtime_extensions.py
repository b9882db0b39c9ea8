"""The ISA extensions through the runtime, on every device: ALU MUL (alu_mul) and ACC_8BIT loads
(acc_8bit) against numpy, and the refusals of a config that lacks them."""

import numpy as np
import pytest
from vta_test_helpers import read_acc, run_alu, store_out, write_array

from vta_hw.spec import AluOp, MemType, load_config
from vta_runtime import CommandQueue, RuntimeUsageError

BASE = load_config().cfg_dict
#: 2x8x8 on Pynq's 64-bit bus: 16 lanes of two batch rows, an OUT element of two bus beats
EXT = {**BASE, "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16, "ISA_EXTENSIONS": ["alu_mul", "acc_8bit"]}
RNG = np.random.default_rng(23)


def s16(x):
    """The low 16 bits of x read as a signed number (numpy, int64)."""
    return ((np.asarray(x, np.int64) + (1 << 15)) % (1 << 16)) - (1 << 15)


def mul_reference(a, b):
    return (s16(a) * s16(b)).astype(np.int32)


def informative_int32(shape):
    """int32 values whose low 16 bits are anything (extremes included) and whose high bits are noise
    the MUL must ignore; a few rows are small values with nothing above bit 15."""
    x = RNG.integers(-2**31, 2**31, shape, dtype=np.int64)
    x.reshape(-1)[:4] = [0x7FFF, -0x8000, 0x12348000, -1]     # int16 extremes, a high word with a negative low one
    x[:2] = RNG.integers(-3000, 3000, (2, *shape[1:]))
    return x.astype(np.int32)


def load_acc(cq, rows: np.ndarray, sram_base: int):
    buf = write_array(cq, rows.astype(np.int32))
    cq.load_buffer_2d(buf, 0, rows.shape[0], 1, rows.shape[0], 0, 0, 0, 0, sram_base, MemType.ACC)


def test_mul_register_immediate_and_program_order(make_device):
    dev = make_device(EXT)
    cq = CommandQueue(dev)
    lanes = dev.config.BATCH * dev.config.BLOCK_OUT
    n = 10
    a, b = informative_int32((n, lanes)), informative_int32((n, lanes))
    load_acc(cq, a, 0)
    load_acc(cq, b, n)
    load_acc(cq, a, 2 * n)
    run_alu(cq, 0, n, AluOp.MUL, use_imm=False, src_base=n)           # a[i] *= b[i]
    run_alu(cq, n, n, AluOp.MUL, imm=-32768)                          # b[i] *= -32768 (the immediate's extreme)
    # c[i + 1] *= c[i], in place: each uop reads what the one before it wrote (back to back on one row pair)
    run_alu(cq, 2 * n + 1, n - 1, AluOp.MUL, use_imm=False, src_base=2 * n)
    got = read_acc(cq, 0, 3 * n)
    want_c = a.copy()
    for i in range(1, n):
        want_c[i] = mul_reference(want_c[i], want_c[i - 1])
    np.testing.assert_array_equal(got[:n], mul_reference(a, b))
    np.testing.assert_array_equal(got[n:2 * n], mul_reference(b, -32768))
    np.testing.assert_array_equal(got[2 * n:], want_c)
    # informative: not a plain 32-bit product, not all small, and the chain really changes values
    assert not np.array_equal(got[:n], (a.astype(np.int64) * b).astype(np.int32))
    assert (np.abs(got[:n].astype(np.int64)) > 1 << 24).mean() > 0.3
    assert mul_reference(0x7FFF, 0x7FFF) == 0x3FFF0001 and mul_reference(-0x8000, -0x8000) == 1 << 30
    assert dev.stats()["alu_counter"] == n + n + (n - 1) + 4 * 3 * n   # and read_acc's four passes


def test_acc_8bit_load_pads_strides_and_counter(make_device):
    dev = make_device(EXT)
    cfg = dev.config
    cq = CommandQueue(dev)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    rows, cols, stride = 3, 4, 6
    src = RNG.integers(-128, 128, (rows * stride + 2, lanes), dtype=np.int8)
    src[1, :4] = [-128, 127, -1, 0]
    buf = write_array(cq, src)
    # garbage in the ACC rows the load must overwrite (its pads included)
    xp0, yp0, xp1, yp1 = 1, 2, 2, 1
    prows, pcols = yp0 + rows + yp1, xp0 + cols + xp1
    base = 5
    before = informative_int32((prows * pcols + 2, lanes))
    load_acc(cq, before, base - 1)
    cq.load_buffer_2d(buf, 1, cols, rows, stride, xp0, yp0, xp1, yp1, base, MemType.ACC_8BIT)
    got = read_acc(cq, base - 1, prows * pcols + 2)
    block = np.zeros((prows, pcols, lanes), np.int64)
    for r in range(rows):
        block[yp0 + r, xp0:xp0 + cols] = src[1 + r * stride:1 + r * stride + cols]
    np.testing.assert_array_equal(got[1:-1], block.reshape(-1, lanes))
    np.testing.assert_array_equal(got[[0, -1]], before[[0, -1]])   # nothing outside the block changed
    assert (got[1:-1] < 0).any() and (got[1:-1] > 0).any()   # sign-extended, both signs
    acc_bytes = (prows * pcols + 2) * cfg.ACC_ELEM_BYTES
    # an 8-bit load counts the bytes it reads: one per element lane (OUT_ELEM_BYTES per element)
    assert dev.stats()["acc_load_nbytes"] == acc_bytes + rows * cols * cfg.OUT_ELEM_BYTES
    assert cfg.OUT_ELEM_BYTES == lanes


def test_residual_add_and_fixed_point_requantization(make_device):
    """What the extensions are for: an int8 shortcut loaded at a byte per element, added to the
    accumulators, then requantized by a fixed-point multiplier ((x >> s1) clipped to int16, MUL,
    round, >> s2, clip to int8) and stored."""
    dev = make_device(EXT)
    cfg = dev.config
    cq = CommandQueue(dev)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    n = 16
    acc = RNG.integers(-12000, 12000, (n, lanes))
    acc[0] = RNG.integers(-(1 << 24), 1 << 24, lanes)          # past int16 after >> s1: the first clip acts
    acc = acc.astype(np.int32)
    shortcut = RNG.integers(-128, 128, (n, lanes), dtype=np.int8)
    load_acc(cq, acc, 0)
    cq.load_buffer_2d(write_array(cq, shortcut), 0, n, 1, n, 0, 0, 0, 0, n, MemType.ACC_8BIT)
    s1, mult, s2 = 6, 23170, 15      # scale 23170 / 2^21 = 0.01105 (not a power of two)
    run_alu(cq, 0, n, AluOp.ADD, use_imm=False, src_base=n)
    for op, imm in ((AluOp.SHR, s1), (AluOp.MAX, -32768), (AluOp.MIN, 32767), (AluOp.MUL, mult),
                    (AluOp.ADD, 1 << (s2 - 1)), (AluOp.SHR, s2), (AluOp.MAX, -128), (AluOp.MIN, 127)):
        run_alu(cq, 0, n, op, imm)
    out = cq.buffer_alloc(n * cfg.OUT_ELEM_BYTES)
    store_out(cq, 0, n, out)
    cq.synchronize()
    got = np.frombuffer(cq.buffer_read(out, n * lanes), np.int8).reshape(n, lanes)
    x = np.clip((acc.astype(np.int64) + shortcut) >> s1, -32768, 32767)
    want = np.clip((x * mult + (1 << (s2 - 1))) >> s2, -128, 127)
    np.testing.assert_array_equal(got, want)
    assert ((want > -128) & (want < 127)).mean() > 0.8        # mostly not saturated
    assert (np.abs((acc[0].astype(np.int64) + shortcut[0]) >> s1) > 32767).any()


@pytest.mark.parametrize("enabled, refused, message", [
    (["alu_mul"], "acc8", r"ACC_8BIT is not supported by this configuration: it needs the ISA extension 'acc_8bit'"),
    (["acc_8bit"], "mul", r"ALU opcode MUL is not supported by this configuration: it needs the ISA extension "
                          r"'alu_mul', which the config key ISA_EXTENSIONS does not enable"),
    ([], "mul", r"ALU opcode MUL is not supported by this configuration"),
    ([], "acc8", r"memory type 5 cannot be loaded: ACC_8BIT is not supported"),
])
def test_a_config_without_the_extension_refuses_to_record_it(enabled, refused, message):
    from sim.fsim import FsimDevice
    cq = CommandQueue(FsimDevice({**EXT, "ISA_EXTENSIONS": enabled}))
    buf = cq.buffer_alloc(4096)
    with pytest.raises(RuntimeUsageError, match=message):
        if refused == "acc8":
            cq.load_buffer_2d(buf, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.ACC_8BIT)
        else:
            run_alu(cq, 0, 1, AluOp.MUL, 3)
    # the other extension (if enabled) still records
    if enabled == ["alu_mul"]:
        run_alu(cq, 0, 1, AluOp.MUL, 3)
    if enabled == ["acc_8bit"]:
        cq.load_buffer_2d(buf, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.ACC_8BIT)
