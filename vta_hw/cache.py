"""Where generated and compiled artifacts are cached, and how several processes share the cache.

``cache_dir()``: ``$VTA_CACHE_DIR``, else the repository's ``build/`` when it is writable, else
``~/.cache/vta-py``. Used by the Verilog emission (``vta_hw.verilog``), tsim's library build
(``sim.tsim``) and the C++ parts (``vta_runtime.cxx``).

Writers of a cache entry take ``vta_hw.files.locked(folder)`` (one writer at a time; the others wait,
then find its result) and publish each file with ``vta_hw.files.write_atomic`` (a temporary file of a
name of its own in the same folder, renamed over the target), so a reader sees the old file or the new
one, never a part of one, and two writers never share a temporary file.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV_VAR = "VTA_CACHE_DIR"


def cache_dir() -> Path:
    """``$VTA_CACHE_DIR``, else the repository's ``build/`` when it is writable, else ``~/.cache/vta-py``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists() and os.access(repo, os.W_OK):
        return repo / "build"
    return Path.home() / ".cache" / "vta-py"
