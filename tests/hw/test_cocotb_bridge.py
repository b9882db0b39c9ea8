"""The board-side AXI pieces under cocotb: the AXI to AXI-Lite bridge (Zynq-7000 GP0 AXI3 32-bit,
ZynqMP HPM0 AXI4 128-bit, the Cyclone V HPS's lightweight bridge AXI3 32-bit with 21-bit addresses),
and the DE10-Nano fabric (core + lightweight-bridge register path + ACP window) against fsim."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("cocotb")
pytest.importorskip("cocotbext.axi")
if shutil.which("verilator") is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

from hwbuild import BUILD, cocotb_build, cocotb_run  # noqa: E402


@pytest.mark.parametrize("variant", ["axi3_32", "axi4_128", "axi3_32_lw"])
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


#: a small configuration (fast to build) on the DE10-Nano's 64-bit bus
DE10_SMALL = {"TARGET": "de10nano", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
              "LOG_BATCH": 0, "LOG_BLOCK": 3, "LOG_UOP_BUFF_SIZE": 12, "LOG_INP_BUFF_SIZE": 12,
              "LOG_WGT_BUFF_SIZE": 14, "LOG_ACC_BUFF_SIZE": 14}


def test_de10_fabric():
    """The DE10-Nano top without the hard block, with the Cyclone V platform's choices (one int8
    product per multiplier), running runtime programs through the HPS bridges' ports."""
    from amaranth.back import verilog

    from boards.cyclonev import De10NanoVtaPlatform
    from vta_hw.spec import load_config
    from vta_hw.verilog import strip_zero_init

    sys.path.insert(0, str(Path(__file__).parent))
    from bridge_top import De10FabricTop

    cfg = load_config(DE10_SMALL)
    text = strip_zero_init(verilog.convert(De10FabricTop(cfg), name="de10_fabric", platform=De10NanoVtaPlatform(),
                                           emit_src=False))
    assert re.search(r"\bw_0_0\b", text) and "wp_0_0" not in text     # the plain (unpacked) GEMM multipliers
    v = BUILD / "de10-fabric" / "de10_fabric.v"
    v.parent.mkdir(parents=True, exist_ok=True)
    if not v.exists() or v.read_text() != text:
        v.write_text(text)
    sim = cocotb_build(v, "de10_fabric")
    cocotb_run(sim, "de10_fabric", "cocotb_de10", env={"DE10_CONFIG": json.dumps(cfg.cfg_dict)})
