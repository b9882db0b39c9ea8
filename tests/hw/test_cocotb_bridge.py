"""The board-side AXI to AXI-Lite bridge (Zynq-7000 GP0 AXI3 32-bit, ZynqMP HPM0 AXI4 128-bit) under cocotb."""

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("cocotb")
pytest.importorskip("cocotbext.axi")
if shutil.which("verilator") is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

from hwbuild import BUILD, cocotb_build, cocotb_run  # noqa: E402


@pytest.mark.parametrize("variant", ["axi3_32", "axi4_128"])
def test_bridge(variant):
    from amaranth.back import verilog

    sys.path.insert(0, str(Path(__file__).parent))
    from bridge_top import VARIANTS, BridgeTop

    v = BUILD / f"bridge-{variant}" / "bridge.v"
    v.parent.mkdir(parents=True, exist_ok=True)
    text = verilog.convert(BridgeTop(variant), name="bridge", emit_src=False)
    if not v.exists() or v.read_text() != text:
        v.write_text(text)
    sim = cocotb_build(v, "bridge")
    p = VARIANTS[variant]
    cocotb_run(sim, "bridge", "cocotb_bridge",
               env={"BRIDGE_DATA_BITS": str(p["data_bits"]), "BRIDGE_MAX_BURST": str(1 << p["len_bits"])})
