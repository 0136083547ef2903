"""Snapshot files: ingesting one, and the spool directory the daemon watches (DESIGN §8 step 1, §10).

A job writes each snapshot document as one JSON file. ``ingest_file`` parses and stores one file in
its own transaction: all of it or none of it. ``ingest_spool`` takes every ``*.json`` file directly
in a spool directory, in name order, ingests it, and moves it out of the way: to ``done/`` when it
was ingested, to ``rejected/`` otherwise, next to a ``<name>.reason`` file holding the error. Writers
should write ``.<name>.json.tmp`` and rename it into place: names starting with ``.`` are ignored,
so a half-written file is never read.

No file is ever lost: files move with ``os.replace`` inside the spool directory (one filesystem), a
name already taken in ``done/`` or ``rejected/`` gets a numeric suffix, and a file is only rejected
for bad input (unreadable, not JSON, a validation error, a duplicate window, an unknown region). Any
other error, such as an unreachable database, propagates and leaves the file for the next pass.
Passes over one spool directory are serialised by an exclusive lock on ``.lock`` in it, so two
daemons sharing a spool never ingest one file twice.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine

from repart.errors import ReparError
from repart.storage import ingest_snapshot, parse_snapshot, run_in_transaction

DONE = "done"
REJECTED = "rejected"
LOCK_NAME = ".lock"


@dataclass(frozen=True)
class IngestOutcome:
    """What became of one snapshot file: ``ingested`` or ``rejected`` with the error message.

    ``region`` and ``seq`` are the document's, as far as it could be read (None otherwise).
    """

    file: str
    status: Literal["ingested", "rejected"]
    seq: int | None
    region: str | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON object with one member per field."""
        return asdict(self)


@dataclass(frozen=True)
class SpoolOutcome(IngestOutcome):
    """The outcome of one spool file and where it was moved (``done/…`` or ``rejected/…``)."""

    moved_to: str


def ingest_file(engine: Engine, path: Path) -> IngestOutcome:
    """Parse and ingest the snapshot document in ``path``, in its own transaction.

    Bad input (see the module docstring) is reported as a ``rejected`` outcome naming the field; any
    other error propagates.
    """
    region: str | None = None
    seq: int | None = None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and isinstance(document.get("region"), str):
            region = document["region"]
        snapshot = parse_snapshot(document)
        seq = snapshot.seq
        run_in_transaction(engine, lambda session: ingest_snapshot(session, snapshot, source=str(path)))
    except (OSError, UnicodeDecodeError) as error:
        return IngestOutcome(str(path), "rejected", seq, region, f"cannot read the file: {error}")
    except json.JSONDecodeError as error:
        return IngestOutcome(str(path), "rejected", seq, region, f"not JSON: {error}")
    except (ReparError, ValueError) as error:
        return IngestOutcome(str(path), "rejected", seq, region, str(error))
    return IngestOutcome(str(path), "ingested", seq, region, None)


def spool_files(directory: Path) -> list[Path]:
    """The ``*.json`` files directly in ``directory`` that wait to be ingested, in name order."""
    return sorted(
        path
        for path in directory.iterdir()
        if path.name.endswith(".json") and not path.name.startswith(".") and path.is_file()
    )


def ingest_spool(engine: Engine, directory: Path) -> list[SpoolOutcome]:
    """One pass over the spool ``directory``: ingest every waiting file and move it (module docstring).

    Raises ValueError when ``directory`` is not a directory. A second pass with no new files does
    nothing and returns an empty list.
    """
    if not directory.is_dir():
        raise ValueError(f"spool: {str(directory)!r} is not a directory")
    done = directory / DONE
    rejected = directory / REJECTED
    done.mkdir(exist_ok=True)
    rejected.mkdir(exist_ok=True)
    outcomes: list[SpoolOutcome] = []
    with (directory / LOCK_NAME).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in spool_files(directory):
            outcome = ingest_file(engine, path)
            if not path.exists():  # removed by someone else meanwhile: nothing left to move
                continue
            target = free_name(path.name, done if outcome.status == "ingested" else rejected)
            if outcome.status == "rejected":
                write_atomically(reason_path(target), f"{outcome.error}\n")
            os.replace(path, target)
            outcomes.append(SpoolOutcome(**outcome.to_json(), moved_to=str(target)))
    return outcomes


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


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: all of it or nothing."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
