"""The spool directory: snapshot files a job leaves for the controller (DESIGN §8 step 1, §12.1).

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
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
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
    """The ``*.json`` files directly in ``directory`` that wait to be ingested, in name order."""
    return sorted(
        path
        for path in directory.iterdir()
        if path.name.endswith(".json") and not path.name.startswith(".") and path.is_file()
    )


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the spool's exclusive lock (``.lock``) for a pass over its files; creates ``done/`` and
    ``rejected/`` when missing."""
    (directory / DONE).mkdir(exist_ok=True)
    (directory / REJECTED).mkdir(exist_ok=True)
    with (directory / LOCK_NAME).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def settle(path: Path, status: Literal["ingested", "rejected"], reason: str | None = None) -> Path:
    """Move the spool file ``path`` to ``done/`` (ingested) or ``rejected/`` with a ``.reason`` file
    holding ``reason``; returns where it went."""
    folder = path.parent / (DONE if status == "ingested" else REJECTED)
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
