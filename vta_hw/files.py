"""Files that several processes write: whole-file replacement and an advisory lock.

``write_atomic`` writes a temporary file of a name no other writer uses, in the same folder, and
renames it over the target, so a reader sees the old file or the new one, never a part of one,
and two writers never trip over each other's temporary file. ``locked`` holds an exclusive
``flock`` on ``<path>.lock`` for a read-modify-write (or a computation whose result is cached in
``path``; for a cache folder, the whole folder), so two processes do it one after the other.
``temp_path`` is the unique temporary name alone, for a tool that writes the file itself. Pure Python,
no amaranth: the compiler, the runtime and the simulators use it too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def temp_path(target: str | os.PathLike[str]) -> Path:
    """A new, empty file beside ``target`` with a name no other writer uses (for a build tool to write into
    before ``os.replace(tmp, target)``)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (created if needed; left in place for the next user)."""
    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
