"""Hardware checks that need no Verilator: layouts from the ISA tables, the register map, the
packed-multiplier arithmetic, the GEMM array and ALU in the Amaranth simulator, buildability."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from vta_hw.alu import AluLanes
from vta_hw.core import HardwareConfigError, check_buildable
from vta_hw.gemm import PACK_BIAS, PACK_SHIFT, DotArray
from vta_hw.layouts import Layouts
from vta_hw.spec import AluOp, load_config
from vta_hw.spec.regmap import COUNTERS, FSIM_COUNTERS, REGISTERS, STATE, WINDOW_BYTES, hwconfig_word

CFG = load_config()


@pytest.mark.parametrize("fmt", ["mem", "gemm", "alu", "uop"])
def test_layouts_are_the_isa_field_tables(fmt):
    layout = getattr(Layouts(CFG), fmt)
    table = getattr(CFG.isa, fmt)
    assert layout.size == table.total_bits
    for f in table:
        field = layout[f.name]
        assert field.offset == f.lsb and field.width == f.width and field.shape.signed == f.signed, f.name
    assert {name for name, _ in layout} == {f.name for f in table}


def test_register_map_is_consistent():
    offsets = [r.offset for r in REGISTERS]
    assert len(set(offsets)) == len(offsets)
    assert all(o % 4 == 0 and o < WINDOW_BYTES for o in offsets)
    assert COUNTERS[:len(FSIM_COUNTERS)] == FSIM_COUNTERS == (
        "inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes",
        "gemm_counter", "alu_counter")
    assert len(STATE) == len({*STATE})
    assert hwconfig_word(CFG) != hwconfig_word(CFG.replace(TARGET="ultra96"))


def test_packed_multiplier_identity_is_exact_for_every_int8_triple():
    """P = x*((w1 << 16) + w0) + 2^15: (P[15:0] ^ 2^15) read as int16 = w0*x, P >> 16 = w1*x."""
    v = np.arange(-128, 128, dtype=np.int64)
    w0, w1, x = np.meshgrid(v, v, v, indexing="ij")
    p = x * ((w1 << PACK_SHIFT) + w0) + PACK_BIAS
    lo = (((p & 0xFFFF) ^ 0x8000) ^ 0x8000) - 0x8000
    hi = p >> PACK_SHIFT
    assert np.array_equal(lo, w0 * x) and np.array_equal(hi, w1 * x)
    assert PACK_BIAS == 1 << 15 and (p & 0xFFFF).min() > 0 and (p & 0xFFFF).max() < 1 << 16
    assert (w1 << PACK_SHIFT).max() + 127 < 1 << 24 and (w1 << PACK_SHIFT).min() - 128 >= -(1 << 24)  # 25 bits


@pytest.mark.parametrize("batch,block,latency", [(1, 4, None), (2, 4, None), (1, 8, 7)])
def test_dot_array_in_amaranth_simulator(batch, block, latency):
    dut = DotArray(batch, block, block, latency=latency)
    assert dut.latency == (latency or DotArray.latency_for(block))
    rng = np.random.default_rng(batch * 10 + block)
    cases = [rng.integers(-128, 128, (batch * block,)) for _ in range(6)]
    wgts = [rng.integers(-128, 128, (block * block,)) for _ in range(6)]
    cases[0][:] = -128
    wgts[0][:] = -128

    def pack(a):
        return sum((int(x) & 0xFF) << (8 * k) for k, x in enumerate(a))

    got = []

    async def tb(ctx):
        for k in range(len(cases) + dut.latency):
            if k < len(cases):
                ctx.set(dut.inp, pack(cases[k]))
                ctx.set(dut.wgt, pack(wgts[k]))
            await ctx.tick()
            if k + 1 >= dut.latency:
                got.append([ctx.get(dut.dot[j]) for j in range(batch * block)])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for k in range(len(cases)):
        want = (cases[k].reshape(batch, block) @ wgts[k].reshape(block, block).T).reshape(-1)
        assert got[k] == list(want), k


@pytest.mark.parametrize("packed", [True, False])
def test_dot_array_loads_only_valid_slots(packed):
    """With ``valid`` low the array's registers hold (clock enables): slots issued between bubbles, with
    other operands on the inputs during the bubbles, still give their dot product ``latency`` cycles on,
    and the output holds the last valid slot's through a run of bubbles."""
    batch, block = 1, 4
    dut = DotArray(batch, block, block, packed=packed)
    rng = np.random.default_rng(5)
    valid = [1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1] + [0] * dut.latency
    inps = [rng.integers(-128, 128, (batch * block,)) for _ in valid]
    wgts = [rng.integers(-128, 128, (block * block,)) for _ in valid]

    def pack(a):
        return sum((int(x) & 0xFF) << (8 * k) for k, x in enumerate(a))

    got = {}

    async def tb(ctx):
        for t in range(len(valid)):
            ctx.set(dut.valid, valid[t])
            ctx.set(dut.inp, pack(inps[t]))
            ctx.set(dut.wgt, pack(wgts[t]))
            await ctx.tick()
            got[t + 1] = [ctx.get(dut.dot[j]) for j in range(batch * block)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()

    def want(t):
        return list((inps[t].reshape(batch, block) @ wgts[t].reshape(block, block).T).reshape(-1))

    issued = [t for t, v in enumerate(valid) if v]
    for t in issued:
        assert got[t + dut.latency] == want(t), t
    # the bubbles' operands never reach the output: after the slot issued at 6, the output holds its dot
    # product until the slot issued at 13 arrives, although other operands were on the inputs meanwhile
    for t in range(6 + dut.latency, 13 + dut.latency):
        assert got[t] == want(6), t
    assert want(7) != want(6)   # (the negative control: a bubble's operands give another result)


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_dot_array_refuses_a_latency_its_adder_tree_does_not_fit():
    """The tree of 16 terms needs 2 register stages at 2 adds per stage (3 product stages before
    it): a latency of 4 would silently misalign every dot product, so elaboration stops."""
    from amaranth.back import rtlil

    from vta_hw.gemm import DotArrayLatencyError, tree_stages

    assert tree_stages(16) == 2 and tree_stages(16, adds_per_stage=1) == 4 and tree_stages(64) == 3
    rtlil.convert(DotArray(1, 16, 2, latency=5))              # exactly fits
    with pytest.raises(DotArrayLatencyError, match=r"needs 2 register stages .* leaves room for 1"):
        rtlil.convert(DotArray(1, 16, 2, latency=4))
    with pytest.raises(DotArrayLatencyError, match=r"needs 4 register stages at 1 adds per stage"):
        rtlil.convert(DotArray(1, 16, 2, latency=5, adds_per_stage=1))


def test_alu_lanes_every_opcode():
    dut = AluLanes(4)
    rng = np.random.default_rng(1)
    a = rng.integers(-2**31, 2**31, 4)
    b = np.array([-33, -32, 31, 64 + 5])

    async def tb(ctx):
        for op in (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR):
            ctx.set(dut.op, op)
            for k in range(4):
                ctx.set(dut.a[k], int(a[k]))
                ctx.set(dut.b[k], int(b[k]))
            for k in range(4):
                x, y = int(a[k]), int(b[k])
                if op == AluOp.MIN:
                    want = min(x, y)
                elif op == AluOp.MAX:
                    want = max(x, y)
                elif op == AluOp.ADD:
                    want = x + y
                else:
                    amt = ((y & 63) ^ 32) - 32
                    want = x >> amt if amt >= 0 else x << -amt
                want = ((want + 2**31) % 2**32) - 2**31
                assert ctx.get(dut.res[k]) == want, (op, x, y)

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def test_configs_the_hardware_cannot_build_are_refused():
    check_buildable(CFG)
    check_buildable(CFG.replace(TARGET="ultra96"))
    check_buildable(CFG.replace(LOG_BATCH=1, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=16))
    with pytest.raises(HardwareConfigError, match="an INP element is 4 bytes, narrower than the 64-bit AXI bus"):
        check_buildable(CFG.replace(LOG_BLOCK=2, LOG_INP_BUFF_SIZE=13, LOG_WGT_BUFF_SIZE=14, LOG_ACC_BUFF_SIZE=15))


@pytest.mark.parametrize("target, top", [("pynq", "Zynq7Top"), ("ultra96", "ZynqMPTop")])
def test_the_core_bursts_as_long_as_the_boards_memory_port_takes(target, top):
    """The target's AXI_MAX_BURST_BEATS (what tsim builds and checks) is the board top's port limit."""
    from boards import zynq

    cfg = CFG.replace(TARGET=target)
    board_top = getattr(zynq, top)(cfg)
    assert cfg.AXI_MAX_BURST_BEATS == board_top.max_burst == {"pynq": 16, "ultra96": 256}[target]
    assert board_top.core.layouts.max_burst_beats == cfg.AXI_MAX_BURST_BEATS
    from vta_hw.core import VtaCore

    assert VtaCore(cfg).layouts.max_burst_beats == cfg.AXI_MAX_BURST_BEATS
