"""Sphinx configuration of the VTA documentation (``nox -s docs``; ``python -m docs.build``).

The site is built from a copy of this folder (``docs/build.py`` makes it), so the pages that
sphinx-gallery generates from the tutorials never land in the source tree, and a fast build (the
test suite's, ``VTA_DOCS_FAST=1``) and a full one never share executed outputs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("VTA_DOCS_REPO") or HERE.parent).resolve()
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE / "_ext"))

import vta_docs  # noqa: E402,F401  (docs/_ext: spec tables, tutorial order, gallery reset; fails early if missing)

FAST = os.environ.get("VTA_DOCS_FAST") == "1"
vta_docs_repo = str(REPO)          # the ``vta-source`` directive reads the repository's files from here

project = "VTA in Python"
author = "the vta-py authors"
copyright = "the vta-py authors, Apache-2.0"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "sphinx_design",
    "myst_parser",
    "vta_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "tutorials/**/README.rst", "tutorials/README.rst", "**.ipynb_checkpoints",
                    "build.py", "screenshots.py"]
suppress_warnings = ["myst.header"]          # original-vta.md starts its numbering at "## 1."
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# -- API reference ----------------------------------------------------------------------------
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# -- Tutorials (sphinx-gallery, as TVM's VTA tutorials were) ----------------------------------
sphinx_gallery_conf = {
    "examples_dirs": ["tutorials"],
    "gallery_dirs": ["tutorials_run"],
    "filename_pattern": r".*\.py$",             # run every tutorial, not only plot_*.py
    "subsection_order": "vta_docs.subsection_key",
    "within_subsection_order": "vta_docs.TutorialOrder",
    "reset_modules": ("matplotlib", "vta_docs.reset_vta"),
    "abort_on_example_error": False,             # run them all, then fail the build listing every failure
    "only_warn_on_example_error": False,
    "download_all_examples": False,
    "backreferences_dir": None,
    "min_reported_time": 0,
    "write_computation_times": True,
    "show_memory": False,
    "remove_config_comments": True,
    "default_thumb_file": str(HERE / "_static" / "vta_thumb.png"),
    # the quick build (the test suite's) runs a subsection's tutorials two at a time; the full build one at a
    # time, so that the times its tutorials print are not shared with another
    "parallel": 2 if FAST else False,
}

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "VTA in Python"
html_static_path = ["_static"]
html_css_files = ["vta.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": [],
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": []}
html_context = {"default_mode": "light"}
