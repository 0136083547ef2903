"""The spool directory: snapshot files a job leaves for the controller (the controller's first step: measure).

A job writes each snapshot document as ``<region>-<seq, 20 digits>.json`` (``write_snapshot``) with
the durable writer, so a file appears whole: the temporary names start with ``.`` and are never read.
The zero-padded seq makes name order (the order the controller ingests in) window order within a
region; a name already taken gets a numeric suffix (``free_name``) instead of overwriting a document
that still waits.

The controller takes the waiting files (``waiting_files``) in name order under an exclusive lock on
``.lock`` (``locked``, so two controllers sharing a spool never ingest one file twice) and moves each
out of the way (``settle``): to ``done/`` when it was ingested, to ``rejected/`` otherwise, next to a
``<name>.reason`` file holding the error. Files move with ``os.replace`` inside the spool directory
(one file system), and a name already taken in ``done/`` or ``rejected/`` gets a numeric suffix: no
file is ever lost or overwritten.

The spool reads and writes only what is its own: a waiting file is opened without following a
symbolic link and read only if it is a regular file (``open_regular``; a link, a pipe or a device is
rejected with its reason), and ``.lock``, ``done/`` and ``rejected/`` must be a regular file and
directories of the spool itself, not links to somewhere else (``own_folder``; InvalidInput naming
``spool`` and the path otherwise), so a link placed in the spool can neither show the controller
another file nor make it write outside the spool.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

from repart.errors import InvalidInput
from repart.protocol.files import fsync_path, write_durably
from repart.protocol.snapshot import Snapshot, check_region_name

DONE = "done"
REJECTED = "rejected"
LOCK_NAME = ".lock"


def check_spool(directory: Path | str, field: str = "spool") -> Path:
    """``directory`` as a Path if it is an existing directory (InvalidInput naming ``field`` otherwise)."""
    path = Path(directory)
    if not path.is_dir():
        raise InvalidInput(field, f"must be an existing directory (a spool), got {str(path)!r}")
    return path


def write_snapshot(directory: Path, snapshot: Snapshot) -> Path:
    """Write ``snapshot``'s document into the spool ``directory``, durably; returns its path."""
    region = check_region_name(snapshot.region)  # part of the file name: no path separators
    path = free_name(f"{region}-{snapshot.seq:020d}.json", directory)
    write_durably(path, json.dumps(snapshot.to_document(), ensure_ascii=False) + "\n")
    return path


def waiting_files(directory: Path) -> list[Path]:
    """The ``*.json`` entries directly in ``directory`` that wait to be ingested, in name order: every
    one but a directory, so that a link, a pipe or a device is rejected with its reason rather than
    left waiting."""
    with os.scandir(directory) as entries:
        return sorted(
            Path(entry.path)
            for entry in entries
            if entry.name.endswith(".json")
            and not entry.name.startswith(".")
            and not entry.is_dir(follow_symlinks=False)
        )


# What a waiting file must be, and what .lock, done/ and rejected/ must be.
_REGULAR_FILE = "must be a regular file in the spool, not a symbolic link, a pipe or a device"
_OWN = "must hold its own {name}, not a symbolic link to one or anything else"


def open_regular(path: Path, flags: int, field: str = "file", requirement: str = _REGULAR_FILE) -> int:
    """A descriptor of ``path`` opened with ``flags`` (``os.O_RDONLY``, ``os.O_CREAT``, …) if it is a
    regular file itself: a symbolic link is not followed, and a pipe does not wait for a writer.
    InvalidInput ``"<field> <requirement>: <path> is <what it is>"`` otherwise (by default, as for a
    waiting file: ``file must be a regular file in the spool, …``)."""
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise InvalidInput(field, f"{requirement}: {path} is a symbolic link") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise InvalidInput(field, f"{requirement}: {path} is {_kind(mode)}")
    return descriptor


def own_folder(directory: Path, name: str) -> Path:
    """The spool's folder ``directory/name`` (``done`` or ``rejected``) if it is a directory itself;
    InvalidInput naming ``spool`` and the path when it is a symbolic link or anything else."""
    folder = directory / name
    mode = folder.lstat().st_mode
    if not stat.S_ISDIR(mode):
        raise InvalidInput("spool", f"{_OWN.format(name=f'{name}/ directory')}: {folder} is {_kind(mode)}")
    return folder


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, for messages: ``a symbolic link``, ``a directory``, …"""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((kind for test, kind in kinds if test(mode)), "a device")


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the spool's exclusive lock (``.lock``) for a pass over its files; creates ``done/`` and
    ``rejected/`` when missing. InvalidInput naming ``spool`` and the path when one of the three is
    not the spool's own (a symbolic link, or a file of the wrong kind)."""
    for name in (DONE, REJECTED):
        # An existing name is checked, not trusted: a link to a directory exists too.
        with suppress(FileExistsError):
            (directory / name).mkdir()
        own_folder(directory, name)
    lock = open_regular(
        directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, "spool", _OWN.format(name=f"{LOCK_NAME} file")
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


def settle(path: Path, status: Literal["ingested", "rejected"], reason: str | None = None) -> Path:
    """Move the spool file ``path`` to ``done/`` (ingested) or ``rejected/`` with a ``.reason`` file
    holding ``reason``; returns where it went. The folder is checked first (``own_folder``): nothing is
    moved into a link that replaced it."""
    folder = own_folder(path.parent, DONE if status == "ingested" else REJECTED)
    target = free_name(path.name, folder)
    if status == "rejected":
        write_durably(reason_path(target), f"{reason}\n")
    os.replace(path, target)
    fsync_path(folder)
    fsync_path(path.parent)  # the name is gone from the spool too: a crash cannot bring it back
    return target


def reason_path(rejected_file: Path) -> Path:
    """The file holding the error message of a rejected file: ``<name>.reason`` next to it."""
    return rejected_file.with_name(rejected_file.name + ".reason")


def free_name(name: str, folder: Path) -> Path:
    """``folder/name``, or ``folder/<stem>.<n><suffix>`` with the least n >= 1 whose names are free."""
    target = folder / name
    stem, suffix = Path(name).stem, Path(name).suffix
    number = 1
    while target.exists() or reason_path(target).exists():
        target = folder / f"{stem}.{number}{suffix}"
        number += 1
    return target
