"""The cocotb suite of every unit (fetch, load, GEMM, ALU, store, token queues, arbiter, register
file) on one shared Verilator build of ``unit_top.UnitTop``, with cocotbext-axi memory models and
random back-pressure on every AXI channel."""

import shutil

import pytest

pytest.importorskip("cocotb")
pytest.importorskip("cocotbext.axi")
if shutil.which("verilator") is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

from hwbuild import cocotb_build, cocotb_run, unit_verilog  # noqa: E402

from vta_hw.spec import load_config  # noqa: E402

SUITES = ["fetch", "load", "gemm", "alu", "store", "tokens", "arbiter", "regfile"]


@pytest.fixture(scope="session")
def units_sim():
    return cocotb_build(unit_verilog(load_config()), "units")


@pytest.mark.parametrize("suite", SUITES)
def test_unit_suite(units_sim, suite):
    cocotb_run(units_sim, "units", f"cocotb_{suite}")


#: the ISA extensions' suite: 2x8x8 on Pynq's bus (16 lanes, a two-beat ACC_8BIT element) with both
EXT_CONFIG = {**load_config().cfg_dict, "LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16,
              "ISA_EXTENSIONS": ["alu_mul", "acc_8bit"]}


def test_extension_suite(tmp_path):
    """MUL in the tensor-compute unit and the ACC_8BIT loader, on a build of just those two units."""
    cfg = load_config(EXT_CONFIG)
    path = tmp_path / "ext.json"
    path.write_text(cfg.to_json())
    sim = cocotb_build(unit_verilog(cfg, units=("tc", "acc8"), name="ext_units"), "ext_units")
    cocotb_run(sim, "ext_units", "cocotb_ext", env={"VTA_CONFIG": str(path)})
