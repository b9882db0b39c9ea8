"""The Cyclone V choices: the GEMM array with one int8 product per multiplier (the platform asks
for it), the HPS black boxes, the register window check."""

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from boards import flow
from boards.cyclonev import De10NanoVtaPlatform, hps_blackboxes
from boards.platforms import BOARDS
from vta_hw.gemm import DotArray
from vta_hw.spec import load_config


def _run_dot_array(dut, fragment, batch, block, seed):
    rng = np.random.default_rng(seed)
    cases = [rng.integers(-128, 128, (batch * block,)) for _ in range(6)]
    wgts = [rng.integers(-128, 128, (block * block,)) for _ in range(6)]
    cases[0][:] = -128                       # the extremes: -128 * -128 summed over a row
    wgts[0][:] = -128
    cases[1][:] = 127
    wgts[1][:] = -128

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

    sim = Simulator(fragment)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return [(cases[k].reshape(batch, block) @ wgts[k].reshape(block, block).T).reshape(-1).tolist()
            for k in range(len(cases))], got[:len(cases)]


@pytest.mark.parametrize("batch,block", [(1, 4), (2, 8)])
def test_plain_dot_array_on_the_cyclone_v_platform(batch, block):
    """Elaborated for the DE10-Nano platform the array has one 8x8 product per multiplier, with the
    packed array's latency and results."""
    dut = DotArray(batch, block, block)
    frag = Fragment.get(dut, De10NanoVtaPlatform())
    want, got = _run_dot_array(dut, frag, batch, block, batch * 10 + block)
    assert got == want
    # the negative control: the same array elaborated without a platform is the packed one
    packed = DotArray(batch, block, block)
    want_p, got_p = _run_dot_array(packed, Fragment.get(packed, None), batch, block, 7)
    assert got_p == want_p


def test_platform_chooses_the_multiplier_form():
    from amaranth.back import rtlil
    plain = rtlil.convert(DotArray(1, 4, 4), platform=De10NanoVtaPlatform())
    packed = rtlil.convert(DotArray(1, 4, 4))
    forced = rtlil.convert(DotArray(1, 4, 4, packed=True), platform=De10NanoVtaPlatform())
    assert "wp_0_0" in packed and "wp_0_0" in forced and "wp_0_0" not in plain
    assert plain.count(" $mul ") == 16 and packed.count(" $mul ") == 8    # 4x4 products; two per packed multiply


def test_hps_black_boxes_match_the_ports_the_top_connects():
    cfg = load_config({**load_config().cfg_dict, "TARGET": "de10nano"})
    text = hps_blackboxes(cfg)
    assert "module cyclonev_hps_interface_fpga2hps (" in text
    f2h = text.split("module cyclonev_hps_interface_fpga2hps (")[1].split("endmodule")[0]
    for decl in ("input [63:0] wdata", "output [63:0] rdata", "input [4:0] awuser", "input [7:0] wid",
                 "input [1:0] arlock", "output [7:0] bid", "input [1:0] port_size_config"):
        assert decl in f2h, decl
    lw = text.split("module cyclonev_hps_interface_hps2fpga_light_weight (")[1].split("endmodule")[0]
    for decl in ("output [20:0] awaddr", "output [11:0] arid", "input [31:0] rdata", "output [31:0] wdata"):
        assert decl in lw, decl


def test_register_window_must_be_on_the_lightweight_bridge(tmp_path):
    """A window outside 0xFF200000-0xFF3FFFFF cannot be reached through the lightweight bridge."""
    from vta_hw.spec import config as config_module
    board = BOARDS["de10-nano"]
    cfg = load_config({**load_config().cfg_dict, "TARGET": "de10nano"})
    table = dict(config_module.TARGETS["de10nano"])
    try:
        config_module.TARGETS["de10nano"] = {**table, "fetch_base_addr": 0xC000_0000}
        bad = load_config(cfg.cfg_dict)
        with pytest.raises(flow.FlowError, match=r"register window 0xc0000000 is outside the HPS's lightweight bridge "
                                                 r"window 0xff200000-0xff3fffff"):
            flow.make_plan(board, bad, tmp_path, progress=lambda m: None)
    finally:
        config_module.TARGETS["de10nano"] = table
