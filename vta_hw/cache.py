"""Where generated and compiled artifacts are cached, and how several processes share the cache.

``cache_dir()``: ``$VTA_CACHE_DIR``, else the repository's ``build/`` when it is writable, else
``~/.cache/vta-py``. Used by the Verilog emission (``vta_hw.verilog``), tsim's library build
(``sim.tsim``) and the C++ parts (``vta_runtime.cxx``).

Writers of a cache entry take ``locked(folder)`` (one writer at a time; the others wait, then find
its result) and publish each file with ``atomic_write`` (a temporary file of a name of its own in
the same folder, renamed over the target), so a reader sees the old file or the new one, never a
part of one, and two writers never share a temporary file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
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


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (its ``.lock`` file) for the ``with`` block; creates the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def temp_path(target: Path) -> Path:
    """A new, empty file beside ``target`` with a name no other writer uses (for a build tool to write
    into before ``os.replace(tmp, target)``)."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    return Path(name)


def atomic_write(target: Path, data: str | bytes) -> None:
    """Write ``target`` so that readers see the old contents or the new ones, never a part."""
    tmp = temp_path(target)
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
