"""The two-port memory path of the ZynqMP boards (``vta_hw.axi_split.AxiSplit``) under cocotb."""

import shutil

import pytest

pytest.importorskip("cocotb")
pytest.importorskip("cocotbext.axi")
if shutil.which("verilator") is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

from hwbuild import BUILD, cocotb_build, cocotb_run  # noqa: E402


def test_axi_split():
    from amaranth.back import verilog

    from vta_hw.axi_split import AxiSplit

    v = BUILD / "axi-split" / "split.v"
    v.parent.mkdir(parents=True, exist_ok=True)
    text = verilog.convert(AxiSplit(256, 32), name="split", emit_src=False)
    if not v.exists() or v.read_text() != text:
        v.write_text(text)
    cocotb_run(cocotb_build(v, "split"), "split", "cocotb_split")
