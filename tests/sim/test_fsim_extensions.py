"""fsim's engine with the ISA extensions: MUL on the AVX2 rows and the plain loop, in fused epilogues
(a MUL starts a fused group but never joins one as a later step) and alone, ACC_8BIT loads, and the
checks that refuse either without its extension (one enabled, the other not)."""

import numpy as np
import pytest

from sim.fsim import FsimDevice
from vta_hw.spec import AluOp, Isa, MemType, Opcode, load_config
from vta_runtime import IllegalInstructionError

BASE = load_config().cfg_dict
BOTH = ["alu_mul", "acc_8bit"]
CONFIGS = {   # 16 lanes (the AVX2 rows) and 8 lanes (the plain loop)
    "1x16x16": {**BASE, "ISA_EXTENSIONS": BOTH},
    "1x8x8": {**BASE, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16, "LOG_INP_BUFF_SIZE": 14, "LOG_ACC_BUFF_SIZE": 16,
              "ISA_EXTENSIONS": BOTH},
}
RNG = np.random.default_rng(31)


def s16(x):
    return ((np.asarray(x, np.int64) + (1 << 15)) % (1 << 16)) - (1 << 15)


def reference(op, a, b):
    """numpy semantics of the ALU opcodes a fused epilogue uses (MUL: the extension's exact int16 product)."""
    a = np.asarray(a, np.int64)
    if op == AluOp.MUL:
        return (s16(a) * s16(b)).astype(np.int32)
    if op == AluOp.ADD:
        return ((a + b + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    if op == AluOp.SHR:
        return (a >> b if b >= 0 else a << -b).astype(np.int32)
    return (np.maximum(a, b) if op == AluOp.MAX else np.minimum(a, b)).astype(np.int32)


def put(dev, array) -> int:
    phys = dev.alloc(array.nbytes)
    dev.write(phys, array)
    return phys


def run(dev, words):
    phys = put(dev, np.frombuffer(Isa.to_bytes(words), np.uint8))
    dev.run(phys, len(words))


def alu(isa, op, n, *, imm=0, use_imm=True, src_in=1, bgn=0):
    """One ALU instruction over rows uop.dst .. +n (the uop at bgn), source rows stepping by src_in."""
    return isa.alu.encode(opcode=Opcode.ALU, uop_bgn=bgn, uop_end=bgn + 1, iter_out=1, iter_in=n, dst_factor_in=1,
                          src_factor_in=src_in, alu_opcode=op, use_imm=int(use_imm), imm=imm)


def uop_load(dev, isa, slot, dst, src):
    return isa.load(MemType.UOP, slot, put(dev, np.array([isa.uop.encode(dst_idx=dst, src_idx=src)], np.uint32)) // 4,
                    1, 1, 1)


def epilogue(dev, steps, n, rng, small: int):
    """ACC rows 0..n (and the source rows n..2n) random, then the steps [(op, imm or None for the source
    rows)], each after the load of its own one-uop kernel (as compiled layers are): fsim's fused case."""
    cfg, isa = dev.config, dev.config.isa
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    acc = rng.integers(-2**31, 2**31, (2 * n, lanes), dtype=np.int64)
    acc[1:n] = rng.integers(-small, small, (n - 1, lanes))       # row 0 stays big (past int16 after any shift)
    acc[n + 1:] = rng.integers(-small // 8, small // 8, (n - 1, lanes))
    acc = acc.astype(np.int32)
    words = [isa.load(MemType.ACC, 0, put(dev, acc) // cfg.ACC_ELEM_BYTES, 1, 2 * n, 2 * n)]
    want = acc[:n].copy()
    for k, (op, imm) in enumerate(steps):
        words.append(uop_load(dev, isa, k, 0, n))
        words.append(alu(isa, op, n, imm=imm or 0, use_imm=imm is not None, bgn=k))
        want = reference(op, want, acc[n:] if imm is None else imm)
    run(dev, words + [isa.finish_insn()])
    return want


#: a requantization by the fixed-point multiplier 11585 / 2^20 (0.011), after a bias add
REQUANT = [(AluOp.ADD, None), (AluOp.SHR, 5), (AluOp.MAX, -32768), (AluOp.MIN, 32767), (AluOp.MUL, 11585),
           (AluOp.ADD, 1 << 14), (AluOp.SHR, 15), (AluOp.MAX, -128), (AluOp.MIN, 127)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("steps, groups, small", [
    (REQUANT, 2, 12000),                                                  # ADD..MIN fuse, then MUL..MIN
    ([(AluOp.MUL, None), (AluOp.SHR, 8), (AluOp.MAX, -9000)], 1, 40000),  # MUL by source rows starts a group
    ([(AluOp.MUL, -3), (AluOp.MUL, 32767), (AluOp.MUL, -32768)], 0, 40000),   # MULs only: none joins another
], ids=["requant", "mul-first", "mul-only"])
def test_mul_in_epilogues_fused_or_not_equals_numpy(name, steps, groups, small):
    n = 24
    fused, alone = FsimDevice(CONFIGS[name]), FsimDevice(CONFIGS[name])
    alone.engine.fuse_alu(False)
    seed = int(RNG.integers(1 << 30))
    for dev in (fused, alone):
        want = epilogue(dev, steps, n, np.random.default_rng(seed), small)
        np.testing.assert_array_equal(dev.acc[:n], want)
        np.testing.assert_array_equal(dev.out[:n], want.astype(np.int8))
        assert len(np.unique(want)) > n       # informative: many distinct values
        if steps is REQUANT:                  # ... mostly not saturated
            assert ((want[1:] > -128) & (want[1:] < 127)).mean() > 0.8
    assert alone.engine.fused_groups == 0 and fused.engine.fused_groups == groups


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_mul_in_place_chain_and_register_rows(name):
    """MUL over one instruction whose uops read rows that earlier uops of it wrote (program order)."""
    dev = FsimDevice(CONFIGS[name])
    cfg, isa = dev.config, dev.config.isa
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    n = 12
    acc = RNG.integers(-300, 300, (n, lanes)).astype(np.int32)
    acc[3] = 0x7FFF0000 | 0x8001          # low half -32767 under a high half that must be ignored
    words = [isa.load(MemType.ACC, 0, put(dev, acc) // cfg.ACC_ELEM_BYTES, 1, n, n), uop_load(dev, isa, 0, 1, 0),
             alu(isa, AluOp.MUL, n - 1, use_imm=False), isa.finish_insn()]
    run(dev, words)
    want = acc.astype(np.int64)
    for i in range(1, n):
        want[i] = reference(AluOp.MUL, want[i], want[i - 1])
    np.testing.assert_array_equal(dev.acc[:n], want)
    assert dev.stats()["alu_counter"] == n - 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_acc_8bit_load(name):
    dev = FsimDevice(CONFIGS[name])
    cfg, isa = dev.config, dev.config.isa
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    src = RNG.integers(-128, 128, (40, lanes), dtype=np.int8)
    dev.acc[:64] = 12345
    dev.out[:64] = 7
    y, x, stride, pads = 3, 5, 9, (2, 1, 1, 3)   # y_pad_0, y_pad_1, x_pad_0, x_pad_1
    base = 4
    run(dev, [isa.load(MemType.ACC_8BIT, base, put(dev, src) // cfg.OUT_ELEM_BYTES + 2, y, x, stride, *pads),
              isa.finish_insn()])
    rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
    want = np.zeros((rows, cols, lanes), np.int32)
    for r in range(y):
        want[pads[0] + r, pads[2]:pads[2] + x] = src[2 + r * stride:2 + r * stride + x]
    np.testing.assert_array_equal(dev.acc[base:base + rows * cols], want.reshape(-1, lanes))
    assert (dev.acc[:base] == 12345).all() and (dev.acc[base + rows * cols:64] == 12345).all()
    assert (dev.out[:64] == 7).all()                               # OUT is not written
    assert dev.stats()["acc_load_nbytes"] == x * y * cfg.OUT_ELEM_BYTES == x * y * lanes


@pytest.mark.parametrize("enabled, word, message", [
    (["alu_mul"], lambda isa: isa.load(MemType.ACC_8BIT, 0, 0, 1, 1, 1),
     "instruction 0: LOAD with memory type 5: ACC_8BIT loads are not supported by this configuration: it needs "
     "the ISA extension 'acc_8bit'"),
    (["acc_8bit"], lambda isa: alu(isa, AluOp.MUL, 1, imm=2),
     "instruction 0: illegal ALU opcode 4 (MUL is not supported by this configuration: it needs the ISA extension "
     "'alu_mul', which the config key ISA_EXTENSIONS does not enable)"),
    (BOTH, lambda isa: alu(isa, 5, 1),
     "instruction 0: illegal ALU opcode 5 (valid: MIN 0, MAX 1, ADD 2, SHR 3, MUL 4)"),
    (BOTH, lambda isa: isa.load(MemType.OUT, 0, 0, 1, 1, 1),
     "LOAD with memory type 4: a LOAD may target UOP(0), WGT(1), INP(2), ACC(3), ACC_8BIT(5)"),
])
def test_the_checks_refuse_what_the_config_lacks(enabled, word, message):
    dev = FsimDevice({**BASE, "ISA_EXTENSIONS": enabled})
    isa = dev.config.isa
    with pytest.raises(IllegalInstructionError) as e:
        run(dev, [word(isa), isa.finish_insn()])
    assert message in str(e.value) and e.value.index == 0
