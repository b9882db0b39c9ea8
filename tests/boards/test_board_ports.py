"""The ZynqMP top with two memory ports (AXI_PORTS=2: reads over HPC0 and HPC1), SRAM placement in block RAM
or UltraRAM on the xczu7ev, and the board's shipped configuration as the bitstream flow's default."""

import json
import re

import pytest

from boards import flow
from boards.platforms import BOARDS
from vta_hw.spec import load_config
from vta_hw.synth import DEVICES, sram_styles

# 32-byte INP/OUT elements: the narrowest that a 256-bit bus (two 128-bit ports) can carry
TWO_PORTS = {"TARGET": "zcu104", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
             "LOG_BATCH": 2, "LOG_BLOCK": 3, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 12,
             "LOG_WGT_BUFF_SIZE": 12, "LOG_ACC_BUFF_SIZE": 14, "AXI_PORTS": 2}
BIG = {**TWO_PORTS, "LOG_BATCH": 0, "LOG_BLOCK": 5, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 16,
       "LOG_WGT_BUFF_SIZE": 20, "LOG_ACC_BUFF_SIZE": 18}


def _pin(verilog: str, pin: str) -> str:
    found = re.findall(rf"\.{pin}\(([^)]*)\)", verilog)
    assert len(found) == 1, (pin, found)
    return found[0]


@pytest.fixture(scope="module")
def one_port_plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("one")
    cfg = load_config({**TWO_PORTS, "AXI_PORTS": 1})
    desc = flow.make_plan(BOARDS["zcu104"], cfg, d, progress=lambda m: None)
    return cfg, desc, (d / "vivado" / "vta_top.v").read_text()


def test_two_ports_on_hpc0_and_hpc1(tmp_path, one_port_plan):
    cfg = load_config(TWO_PORTS)
    desc = flow.make_plan(BOARDS["zcu104"], cfg, tmp_path, progress=lambda m: None)
    assert (desc["axi_data_bits"], desc["axi_ports"], desc["bitstream"]) == (256, 2, "4x8_i8w8a32_10_12_12_14_p2")
    assert desc["memory_port"].startswith("S_AXI_HPC0_FPD + S_AXI_HPC1_FPD")
    v = (tmp_path / "vivado" / "vta_top.v").read_text()
    assert "module vta_top" in v and "split" in v
    for k in (0, 1):     # both ports read, each 128 bits wide, clocked by the core's clock
        assert _pin(v, f"SAXIGP{k}ARVALID") == f"m{k}_axi_arvalid" and _pin(v, f"SAXIGP{k}RDATA") == f"m{k}_axi_rdata"
        assert re.search(rf"\.SAXIGP{k}RCLK\(", v)
    assert _pin(v, "SAXIGP0AWVALID").strip() != "1'h0" and _pin(v, "SAXIGP1AWVALID") == "1'h0"   # writes: HPC0
    assert re.search(r"input \[127:0\] m1_axi_rdata|wire \[127:0\] m1_axi_rdata", v)
    # one port: the top is exactly the single-port one (no splitter, HPC1 unused)
    _, one, v1 = one_port_plan
    assert one["axi_ports"] == 1 and "SAXIGP1ARVALID" not in v1 and "m1_axi" not in v1


def test_srams_go_to_ultraram_where_that_is_better():
    zcu, u96 = BOARDS["zcu104"].capacity, DEVICES["xcup"]
    big = load_config(BIG)
    # the weights (1,024 x 8,192 bits: 228 BRAM36 or 114 URAM288 > 96) stay in block RAM, and so do the uops
    # (8,192 words: two URAMs behind a fabric multiplexer, an unregistered UltraRAM output); the rest moves
    assert big.UOP_BUFF_DEPTH == 8192
    assert sram_styles(big, zcu) == {"uop": "block", "uop_alu": "block", "inp": "ultra", "wgt": "block",
                                     "acc": "ultra", "out": "ultra"}
    assert set(sram_styles(big, u96).values()) == {"block"}        # the xczu3eg has no UltraRAM
    small = load_config({**BIG, "LOG_WGT_BUFF_SIZE": 18})           # 256 x 8,192 bits: 114 of either kind
    assert sram_styles(small, zcu)["wgt"] == "block" and sram_styles(small, zcu)["acc"] == "ultra"


def test_ultraram_placement_reaches_the_verilog(tmp_path, one_port_plan):
    cfg, _, v = one_port_plan
    styles = sram_styles(cfg, BOARDS["zcu104"].capacity)
    assert v.count('(* ram_style = "ultra" *)') == list(styles.values()).count("ultra") > 0
    assert v.count('(* ram_style = "block" *)') == list(styles.values()).count("block")
    u96 = flow.make_plan(BOARDS["ultra96"], cfg.replace(TARGET="ultra96"), tmp_path / "u96", progress=lambda m: None)
    assert u96["sram_styles"] is None and "ram_style" not in (tmp_path / "u96" / "vivado" / "vta_top.v").read_text()


def test_bitstream_flow_defaults_to_the_boards_shipped_config(tmp_path, monkeypatch):
    monkeypatch.delenv("VTA_CONFIG", raising=False)
    monkeypatch.setattr(flow, "CONFIGS_DIR", tmp_path)
    assert flow.default_config("ultra96", None) == load_config()          # nothing shipped: the repository's
    (tmp_path / "ultra96.json").write_text(json.dumps({**TWO_PORTS, "TARGET": "ultra96", "FPGA_FREQ": 300}))
    cfg = flow.default_config("ultra96", None)
    assert (cfg.TARGET, cfg.fpga_freq, cfg.AXI_PORTS) == ("ultra96", 300, 2)
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**TWO_PORTS, "AXI_PORTS": 1}))
    assert flow.default_config("ultra96", str(mine)).AXI_PORTS == 1        # --config wins
    monkeypatch.setenv("VTA_CONFIG", str(mine))
    assert flow.default_config("ultra96", None).AXI_PORTS == 1             # and so does $VTA_CONFIG


@pytest.mark.parametrize("board", ["pynq-z1", "pynq-z2", "ultra96", "zcu104"])
def test_shipped_configs_build_for_their_board(board):
    path = flow.shipped_config(BOARDS[board])
    if path is None:
        pytest.skip(f"no configs/{board}.json yet")
    cfg = load_config(path)
    assert BOARDS[board].config_for(cfg).fpga_device == BOARDS[board].part
    assert "FPGA_FREQ" in json.loads(path.read_text()), "a shipped configuration states the clock it is built for"
