"""cocotb suite of the whole core (cocotbext-axi AXI4 RAM + AXI4-Lite master with back-pressure)."""

import shutil

import pytest

pytest.importorskip("cocotb")
pytest.importorskip("cocotbext.axi")
if shutil.which("verilator") is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

from hwbuild import cocotb_build, cocotb_run, core_verilog  # noqa: E402

from vta_hw.spec import load_config  # noqa: E402


@pytest.fixture(scope="session")
def core_sim():
    return cocotb_build(core_verilog(load_config()), "vta_core")


def test_core_suite(core_sim):
    cocotb_run(core_sim, "vta_core", "cocotb_core")
