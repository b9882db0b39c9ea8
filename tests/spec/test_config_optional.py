"""The optional configuration keys FPGA_FREQ and AXI_PORTS: a config without them is exactly what it was
(same numbers, same hashes: the shipped tuning records stay keyed right), one with them derives the clock,
the core's bus and the bitstream name, and bad values are refused with the key named."""

import json

import pytest

from vta_hw.spec import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config
from vta_hw.spec.cli import main as vta_config

DEFAULT = json.loads(DEFAULT_CONFIG_PATH.read_text())


def test_without_the_keys_nothing_changes():
    c = load_config(DEFAULT)
    # the hash the shipped ResNet-18 records (vta_compiler/tiling/shipped/resnet18.jsonl) are keyed by
    assert load_config({**DEFAULT, "TARGET": "tsim"}).hash(hardware_only=True) == "7735181083ea953e"
    assert (c.AXI_PORTS, c.AXI_DATA_BITS, c.AXI_PORT_DATA_BITS, c.AXI_MAX_BURST_BEATS, c.fpga_freq) == \
        (1, 64, 64, 16, 100)
    assert c.cfg_dict == DEFAULT and c.BITSTREAM == "1x16_i8w8a32_15_15_18_17"
    # stating a default is the same as leaving the key out
    same = load_config({**DEFAULT, "FPGA_FREQ": 100, "AXI_PORTS": 1})
    assert same.cfg_dict == DEFAULT and same.hash() == c.hash() and same == c


def test_fpga_freq_sets_the_clock_not_the_hardware():
    u = load_config({**DEFAULT, "TARGET": "ultra96"})
    c = load_config({**DEFAULT, "TARGET": "ultra96", "FPGA_FREQ": 300})
    assert (c.fpga_freq, c.fpga_per, u.fpga_freq, u.fpga_per) == (300, 2, 333, 2)
    assert load_config({**DEFAULT, "FPGA_FREQ": 200}).fpga_per == 3
    assert c.BITSTREAM == "1x16_i8w8a32_15_15_18_17_300mhz" and c.MODEL == "ultra96_1x16_i8w8a32_15_15_18_17_300mhz"
    assert c.hash(hardware_only=True) == u.hash(hardware_only=True) and c.hash() != u.hash()
    assert c.cfg_dict["FPGA_FREQ"] == 300 and load_config(json.loads(c.to_json())) == c


def test_axi_ports_widen_the_cores_bus():
    one = load_config({**DEFAULT, "TARGET": "zcu104", "LOG_BLOCK": 5})
    two = one.replace(AXI_PORTS=2)
    assert (two.AXI_PORT_DATA_BITS, two.AXI_DATA_BITS, two.AXI_DATA_BYTES, two.LOG_BUS_WIDTH) == (128, 256, 32, 8)
    assert (one.AXI_MAX_BURST_BEATS, two.AXI_MAX_BURST_BEATS) == (256, 32)
    assert two.BITSTREAM == "1x32_i8w8a32_15_15_18_17_p2" and "-DVTA_LOG_BUS_WIDTH=8" in two.defs()
    assert one.hash(hardware_only=True) != two.hash(hardware_only=True)
    # a board's configuration compiles with TARGET sim (and runs on tsim with the board's system)
    assert two.replace(TARGET="sim").AXI_PORTS == 2


def test_vta_config_reports_the_clock(tmp_path, capsys):
    path = tmp_path / "board.json"
    path.write_text(json.dumps({**DEFAULT, "TARGET": "zcu104", "FPGA_FREQ": 300, "AXI_PORTS": 2}))
    assert vta_config(["--use-cfg", str(path), "--get-fpga-freq", "--get-axi-data-bits", "--bitstream"]) == 0
    assert capsys.readouterr().out.split() == ["1x16_i8w8a32_15_15_18_17_p2_300mhz", "300", "256"]


@pytest.mark.parametrize("change, message", [
    ({"FPGA_FREQ": "300"}, "FPGA_FREQ must be an integer, got str '300'"),
    ({"FPGA_FREQ": 2000}, "FPGA_FREQ=2000 is out of range: it must be between 10 and 1000"),
    ({"AXI_PORTS": 3, "TARGET": "zcu104"}, "AXI_PORTS=3 is out of range: it must be between 1 and 2"),
    ({"AXI_PORTS": 2, "TARGET": "pynq"}, "AXI_PORTS=2 but TARGET=pynq has 1 coherent memory port for the core; "
                                         "AXI_PORTS must be at most 1"),
    ({"AXI_PORT": 2}, "unknown configuration key(s) AXI_PORT; the valid keys are TARGET"),
])
def test_refusals_name_the_key(change, message):
    with pytest.raises(ConfigError) as e:
        Config({**DEFAULT, **change})
    assert message in str(e.value)


def test_a_core_too_wide_for_its_elements_is_refused():
    from vta_hw.core import HardwareConfigError, check_buildable
    cfg = load_config({**DEFAULT, "TARGET": "zcu104", "AXI_PORTS": 2})    # 16-byte INP elements, 32-byte beats
    with pytest.raises(HardwareConfigError, match=r"an INP element is 16 bytes, narrower than the 256-bit AXI bus "
                                                  r"of TARGET=zcu104 with AXI_PORTS=2.*or use fewer AXI_PORTS"):
        check_buildable(cfg)
