"""The one durable writer for the local files repart writes.

A file appears whole or not at all, and survives a power loss once the call returns: its bytes go to
a hidden temporary file beside it (``.<name>.<random>``, which readers such as the spool ingester
skip), the file is ``fsync``ed, renamed over the target (atomic on POSIX within one file system), and
the directory is ``fsync``ed so that the new name is durable too. Snapshot files in a spool and the
CLI's result, JSON and plot files go through it; the state store commits through its own object layer
(``repart.state.objects``: a create that fails when the name exists, which a rename cannot give), and
uses ``fsync_path`` from here.

This module imports nothing of repart's, so every package may use it (the state store included).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _process_umask() -> int:
    """The process's umask, read once at import: reading it means setting it, which would race with
    threads creating files, so it is not read again."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


_UMASK = _process_umask()


def write_durably(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``: all of it or nothing, durable when this returns."""
    with durable_output(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


@contextmanager
def durable_output(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that needs a file name (Parquet, a plot).

    When the block succeeds the temporary file is ``fsync``ed, gets the permissions of a newly created
    file (the umask applied to 0o666), replaces ``path``, and the directory is ``fsync``ed. When it
    raises, the temporary file is removed and ``path`` is untouched.
    """
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        temporary = Path(handle.name)
    try:
        yield temporary
        fsync_path(temporary)
        os.chmod(temporary, 0o666 & ~_UMASK)
        os.replace(temporary, path)
        fsync_path(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


def fsync_path(path: Path) -> None:
    """``fsync`` a file or a directory (a directory, to make the names in it durable)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
