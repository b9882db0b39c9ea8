"""The documentation site builds with Sphinx (-W: a warning fails it), every tutorial runs (quick mode) and
shows its output, the spec tables match vta_hw.spec, and no internal link is broken."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _load_build_module():
    spec = importlib.util.spec_from_file_location("vta_docs_build", DOCS / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


docs_build = _load_build_module()
pytest.importorskip("sphinx_gallery", reason="the test extra is not installed (pip install -e .[test])")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The whole site, built once with the tutorials in quick mode (VTA_DOCS_FAST=1)."""
    return docs_build.build(tmp_path_factory.mktemp("docs"), fast=True, quiet=True)


def _text(page: Path) -> str:
    return re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))


def test_every_tutorial_ran_and_shows_its_output(site):
    scripts = sorted((DOCS / "tutorials").rglob("*.py"))
    assert len(scripts) >= 10
    for script in scripts:
        page = site / "tutorials_run" / script.parent.name / (script.stem + ".html")
        assert page.exists(), f"{script.relative_to(REPO)} has no page"
        html = page.read_text(encoding="utf-8")
        assert "sphx-glr-script-out" in html, f"{page.name} shows no output"
        assert "Traceback (most recent call last)" not in html
    # outputs are the scripts' own prints, not placeholders
    expected = {
        "get_started/vta_get_started": "equal to numpy: True",
        "frontend/deploy_classification": "exact against the CPU: True",
        "frontend/deploy_other_networks": "exact against the CPU: True",
        "frontend/deploy_ppocr": "VTA equals the CPU int8 run: True",
        "optimize/tune_conv2d": "the tuned layer on fsim equals numpy: True",
        "frontend/tune_network": "equals the CPU run of the quantized network: True",
    }
    for page, line in expected.items():
        assert line in _text(site / "tutorials_run" / f"{page}.html"), f"{page}: no '{line}'"


def test_isa_tables_are_the_spec(site):
    from vta_hw.spec import load_config
    cfg = load_config()
    text = _text(site / "hardware" / "isa.html")
    for fmt in (cfg.isa.mem, cfg.isa.gemm, cfg.isa.alu, cfg.isa.uop):
        for f in fmt.fields:
            bits = f"{f.msb}:{f.lsb}" if f.width > 1 else f"{f.lsb}"
            assert re.search(rf"{f.name}\s*{bits}\s*{f.width}", text), f"{fmt.name}.{f.name} [{bits}] not in the table"
    regs = _text(site / "hardware" / "regmap.html")
    from vta_hw.spec import regmap
    for r in regmap.REGISTERS:
        assert re.search(rf"0x{r.offset:03X}\s*{r.name}", regs), r.name


def test_api_reference_has_the_core_calls(site):
    html = (site / "api" / "vta_compiler.html").read_text(encoding="utf-8")
    for name in ("get_env", "Environment", "build_config", "lower", "build", "program_fpga", "reconfig_runtime",
                 "get_bitstream_path", "download_bitstream", "install_bitstream"):
        assert f'id="vta_compiler.{name}"' in html or f'id="vta_compiler.bitstream.{name}"' in html, name


def test_no_broken_internal_links(site):
    assert docs_build.check_links(site) == []


def test_link_checker_finds_broken_links(tmp_path):
    """Negative control: a missing page and a missing anchor are reported; good links are not."""
    (tmp_path / "a.html").write_text('<a href="b.html#here">ok</a> <a href="missing.html">x</a> '
                                     '<a href="b.html#nowhere">y</a> <img src="_static/pic.png">')
    (tmp_path / "b.html").write_text('<h1 id="here">B</h1><a href="https://example.org/">external</a>')
    broken = docs_build.check_links(tmp_path)
    assert len(broken) == 3
    assert any("missing.html" in b for b in broken)
    assert any("#nowhere" in b for b in broken)
    assert any("pic.png" in b for b in broken)
