"""Configuration loading, validation and derived numbers (spec 1.1-1.6)."""

import json

import pytest

from vta_hw.spec import DEFAULT_CONFIG_PATH, KEYS, Config, ConfigError, load_config
from vta_hw.spec.cli import main as vta_config

DEFAULT = json.loads(DEFAULT_CONFIG_PATH.read_text())

ORIGINAL_DEFS = (
    "-DVTA_TARGET=sim -DVTA_HW_VER=0.0.2 -DVTA_LOG_INP_WIDTH=3 -DVTA_LOG_WGT_WIDTH=3 -DVTA_LOG_ACC_WIDTH=5 "
    "-DVTA_LOG_BATCH=0 -DVTA_LOG_BLOCK=4 -DVTA_LOG_UOP_BUFF_SIZE=15 -DVTA_LOG_INP_BUFF_SIZE=15 "
    "-DVTA_LOG_WGT_BUFF_SIZE=18 -DVTA_LOG_ACC_BUFF_SIZE=17 -DVTA_LOG_BLOCK_IN=4 -DVTA_LOG_BLOCK_OUT=4 "
    "-DVTA_LOG_OUT_WIDTH=3 -DVTA_LOG_OUT_BUFF_SIZE=15 -DVTA_LOG_BUS_WIDTH=6 -DVTA_IP_REG_MAP_RANGE=0x1000 "
    "-DVTA_FETCH_ADDR=0x43C00000 -DVTA_LOAD_ADDR=0x43C01000 -DVTA_COMPUTE_ADDR=0x43C02000 "
    "-DVTA_STORE_ADDR=0x43C03000 -DVTA_FETCH_INSN_COUNT_OFFSET=16 -DVTA_FETCH_INSN_ADDR_OFFSET=24 "
    "-DVTA_LOAD_INP_ADDR_OFFSET=16 -DVTA_LOAD_WGT_ADDR_OFFSET=24 -DVTA_COMPUTE_DONE_WR_OFFSET=16 "
    "-DVTA_COMPUTE_DONE_RD_OFFSET=24 -DVTA_COMPUTE_UOP_ADDR_OFFSET=32 -DVTA_COMPUTE_BIAS_ADDR_OFFSET=40 "
    "-DVTA_STORE_OUT_ADDR_OFFSET=16 -DVTA_COHERENT_ACCESSES=true")


def test_default_file_holds_spec_defaults():
    assert DEFAULT == {"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3,
                       "LOG_ACC_WIDTH": 5, "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15,
                       "LOG_INP_BUFF_SIZE": 15, "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}


def test_derived_numbers_of_default_config():
    c = load_config(DEFAULT)
    assert (c.INP_WIDTH, c.WGT_WIDTH, c.ACC_WIDTH, c.OUT_WIDTH) == (8, 8, 32, 8)
    assert (c.BATCH, c.BLOCK_IN, c.BLOCK_OUT) == (1, 16, 16)
    assert (c.INP_ELEM_BITS, c.WGT_ELEM_BITS, c.ACC_ELEM_BITS, c.OUT_ELEM_BITS) == (128, 2048, 512, 128)
    assert (c.INP_ELEM_BYTES, c.WGT_ELEM_BYTES, c.ACC_ELEM_BYTES, c.OUT_ELEM_BYTES, c.UOP_ELEM_BYTES) == \
        (16, 256, 64, 16, 4)
    assert (c.UOP_BUFF_DEPTH, c.INP_BUFF_DEPTH, c.WGT_BUFF_DEPTH, c.ACC_BUFF_DEPTH, c.OUT_BUFF_DEPTH) == \
        (8192, 2048, 1024, 2048, 2048)
    assert (c.LOG_UOP_BUFF_DEPTH, c.LOG_INP_BUFF_DEPTH, c.LOG_WGT_BUFF_DEPTH, c.LOG_ACC_BUFF_DEPTH) == \
        (13, 11, 10, 11)
    assert (c.UOP_BUFF_SIZE, c.INP_BUFF_SIZE, c.WGT_BUFF_SIZE, c.ACC_BUFF_SIZE, c.OUT_BUFF_SIZE) == \
        (32768, 32768, 262144, 131072, 32768)
    assert (c.LOG_BLOCK_IN, c.LOG_BLOCK_OUT, c.LOG_OUT_WIDTH, c.LOG_OUT_BUFF_SIZE) == (4, 4, 3, 15)
    assert c.BITSTREAM == "1x16_i8w8a32_15_15_18_17"
    assert c.MODEL == "sim_1x16_i8w8a32_15_15_18_17"
    assert (c.fpga_device, c.fpga_family, c.fpga_freq, c.fpga_per, c.AXI_DATA_BITS) == \
        ("xc7z020clg400-1", "zynq-7000", 100, 7, 64)
    assert [c.mem_bank(m) for m in ("inp", "wgt", "out")] == [
        {"banks": 1, "width": 128, "depth": 2048, "axi_ratio": 2},
        {"banks": 2, "width": 1024, "depth": 1024, "axi_ratio": 16},
        {"banks": 1, "width": 128, "depth": 2048, "axi_ratio": 2}]
    assert " ".join(c.defs()) == ORIGINAL_DEFS


def test_ultra96_target_fields():
    c = load_config({**DEFAULT, "TARGET": "ultra96"})
    assert (c.fpga_device, c.fpga_family, c.fpga_freq, c.fpga_per, c.AXI_DATA_BITS, c.axi_prot_bits) == \
        ("xczu3eg-sbva484-1-i", "zynq-ultrascale+", 333, 2, 128, "010")
    assert (c.fetch_base_addr, c.store_base_addr) == (0xA0000000, 0xA0003000)
    assert c.MODEL == "ultra96_1x16_i8w8a32_15_15_18_17"
    assert [c.mem_bank(m)["axi_ratio"] for m in ("inp", "wgt", "out")] == [1, 8, 1]


def test_de10nano_target_fields():
    """The original's values for de10nano (spec 1.4): Cyclone V SoC, 100 MHz, 64-bit bus, the
    register window on the HPS's lightweight bridge."""
    c = load_config({**DEFAULT, "TARGET": "de10nano"})
    assert (c.fpga_device, c.fpga_family, c.fpga_freq, c.fpga_per, c.AXI_DATA_BITS, c.axi_prot_bits,
            c.axi_cache_bits) == ("5CSEBA6U23I7", "Cyclone V", 100, 2, 64, "100", "1111")
    assert (c.fetch_base_addr, c.load_base_addr, c.compute_base_addr, c.store_base_addr, c.ip_reg_map_range) == \
        (0xFF220000, 0xFF221000, 0xFF222000, 0xFF223000, 0x1000)
    assert c.MODEL == "de10nano_1x16_i8w8a32_15_15_18_17" and c.bitstream_ext == ".rbf"
    assert [c.mem_bank(m)["axi_ratio"] for m in ("inp", "wgt", "out")] == [2, 16, 2]
    assert "-DVTA_FETCH_ADDR=0xFF220000" in c.defs() and "-DVTA_TARGET=de10nano" in c.defs()
    # the same bus width as Pynq but other AXI attributes: a different core, so a different hardware hash
    pynq = load_config({**DEFAULT, "TARGET": "pynq"})
    assert c.AXI_DATA_BITS == pynq.AXI_DATA_BITS and c.hash(hardware_only=True) != pynq.hash(hardware_only=True)


def test_zcu104_target_fields():
    """ZCU104: the Ultra96's system on the xczu7ev (the original's pkg_config values)."""
    c = load_config({**DEFAULT, "TARGET": "zcu104"})
    u = load_config({**DEFAULT, "TARGET": "ultra96"})
    assert (c.fpga_device, c.fpga_family, c.fpga_board, c.fpga_board_rev, c.fpga_freq, c.AXI_DATA_BITS) == \
        ("xczu7ev-ffvc1156-2-e", "zynq-ultrascale+", "xilinx.com:zcu104:part0", "1.1", 333, 128)
    assert (c.fetch_base_addr, c.store_base_addr, c.axi_prot_bits) == (0xA0000000, 0xA0003000, "010")
    assert c.bitstream_ext == ".bit" and c.MODEL == "zcu104_1x16_i8w8a32_15_15_18_17"
    assert c.hash(hardware_only=True) == u.hash(hardware_only=True)    # the same core as the Ultra96's


def test_load_from_path_dict_env_and_default(tmp_path, monkeypatch):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**DEFAULT, "TARGET": "tsim"}))
    assert load_config(path).TARGET == "tsim"
    assert load_config(str(path)).TARGET == "tsim"
    assert load_config({**DEFAULT, "TARGET": "pynq"}).TARGET == "pynq"
    monkeypatch.delenv("VTA_CONFIG", raising=False)
    assert load_config().cfg_dict == DEFAULT
    monkeypatch.setenv("VTA_CONFIG", str(path))
    assert load_config().TARGET == "tsim"
    c = load_config(path)
    assert load_config(c) is c


def test_hash_is_stable_and_hardware_hash_ignores_target():
    a, b = load_config(DEFAULT), load_config({**DEFAULT, "TARGET": "tsim"})
    assert a.hash() == load_config(dict(DEFAULT)).hash() != b.hash()
    assert a.hash(hardware_only=True) == b.hash(hardware_only=True)
    assert a.hash(hardware_only=True) != load_config({**DEFAULT, "TARGET": "ultra96"}).hash(hardware_only=True)


@pytest.mark.parametrize("change, message", [
    ({"LOG_FOO": 1}, "unknown configuration key(s) LOG_FOO"),
    ({"HW_FREQ": 100}, "HW_FREQ/HW_CLK_TARGET were removed"),
    ({"TARGET": "zc706"}, "unknown TARGET 'zc706'; supported targets are sim, tsim, pynq, ultra96, zcu104, de10nano"),
    ({"TARGET": 3}, "TARGET must be a string, got int 3"),
    ({"HW_VER": "0.0.1"}, "HW_VER '0.0.1' is not supported"),
    ({"LOG_BLOCK": "4"}, "LOG_BLOCK must be an integer, got str '4'"),
    ({"LOG_BLOCK": 4.0}, "LOG_BLOCK must be an integer, got float 4.0"),
    ({"LOG_BATCH": True}, "LOG_BATCH must be an integer, got bool True"),
    ({"LOG_BLOCK": 7}, "LOG_BLOCK=7 is out of range: it must be between 1 and 6"),
    ({"LOG_INP_WIDTH": 2}, "LOG_INP_WIDTH=2 is out of range: it must be 3 (only 8-bit signed inputs"),
    ({"LOG_ACC_WIDTH": 6}, "LOG_ACC_WIDTH=6 is out of range: it must be 5"),
    ({"LOG_UOP_BUFF_SIZE": 25}, "LOG_UOP_BUFF_SIZE=25 is out of range: it must be between 2 and 24"),
    ({"LOG_WGT_BUFF_SIZE": 7}, "LOG_WGT_BUFF_SIZE=7 makes the WGT buffer (128 bytes) smaller than one WGT element "
                               "(256 bytes); it must be at least 8"),
    ({"LOG_ACC_BUFF_SIZE": 18},
     "the GEMM format needs 138 bits but has 128 and the ALU format needs 144 bits but has 128 and the uop format "
     "needs 34 bits but has 32: LOG_ACC_BUFF_SIZE=18 (LOG_ACC_BUFF_DEPTH=12) must be at most 17"),
    ({"LOG_UOP_BUFF_SIZE": 16}, "LOG_UOP_BUFF_SIZE=16 (LOG_UOP_BUFF_DEPTH=14) must be at most 15"),
    ({"LOG_BATCH": 1, "LOG_BLOCK": 3},
     "LOG_ACC_BUFF_SIZE=17 (LOG_ACC_BUFF_DEPTH=11) must be at most 15; or LOG_WGT_BUFF_SIZE=18 "
     "(LOG_WGT_BUFF_DEPTH=12) must be at most 16"),
])
def test_refusals_name_key_value_and_limit(change, message):
    with pytest.raises(ConfigError) as e:
        Config({**DEFAULT, **change})
    assert message in str(e.value)


def test_missing_key_and_bad_files(tmp_path):
    cfg = dict(DEFAULT)
    del cfg["LOG_BLOCK"]
    with pytest.raises(ConfigError, match="missing configuration key.s. LOG_BLOCK"):
        Config(cfg)
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ConfigError, match=r"bad.json: not valid JSON"):
        load_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object, got list"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read configuration file .*nope.json"):
        load_config(tmp_path / "nope.json")


def test_small_block_config_is_legal():
    c = Config({**DEFAULT, "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16})
    assert (c.BATCH, c.BLOCK_IN, c.INP_ELEM_BYTES, c.WGT_ELEM_BYTES, c.ACC_ELEM_BYTES) == (2, 8, 16, 64, 64)
    assert c.MODEL == "sim_2x8_i8w8a32_15_15_16_17"


def test_cli(capsys, tmp_path):
    assert vta_config(["--cfg-str"]) == 0
    assert capsys.readouterr().out.strip() == load_config().MODEL
    assert vta_config(["--defs"]) == 0
    assert capsys.readouterr().out.strip() == " ".join(load_config().defs())
    path = tmp_path / "u96.json"
    path.write_text(json.dumps({**DEFAULT, "TARGET": "ultra96"}))
    assert vta_config(["--use-cfg", str(path), "--target", "--get-fpga-dev", "--get-fpga-freq",
                       "--get-fetch-base-addr", "--get-wgt-mem-axi-ratio"]) == 0
    assert capsys.readouterr().out.split() == ["ultra96", "xczu3eg-sbva484-1-i", "333", "0xA0000000", "8"]
    assert vta_config(["--cfg-json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {k: got[k] for k in KEYS} == load_config().cfg_dict and got["LOG_OUT_BUFF_SIZE"] == 15
    out = tmp_path / "saved.json"
    tcl = tmp_path / "consts.tcl"
    assert vta_config(["--save-cfg-json", str(out), "--export-tcl", str(tcl)]) == 0
    assert json.loads(out.read_text()) == load_config().cfg_dict
    assert "set WGT_MEM_BANKS 2" in tcl.read_text() and "set FPGA_DEVICE xc7z020clg400-1" in tcl.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**DEFAULT, "LOG_BLOCK": 9}))
    assert vta_config(["--use-cfg", str(bad), "--cfg-str"]) == 2
    assert "LOG_BLOCK=9 is out of range" in capsys.readouterr().err
