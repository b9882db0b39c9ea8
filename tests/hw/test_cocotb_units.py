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
