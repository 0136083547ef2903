"""Ingesting snapshot files, one at a time or a whole spool directory (the controller's first step: measure).

``ingest_file`` parses and stores one file in its own transaction: all of it or none of it.
``ingest_spool`` takes the files waiting in a spool directory (``repart.protocol.spool``: naming,
``done/``, ``rejected/``, the lock), in name order, ingests each and settles it: to ``done/`` when it
was ingested, to ``rejected/`` with a ``.reason`` file otherwise. A spool's file is read only if it is
a regular file itself (a symbolic link is never followed); a file named on the command line may be a
link or a pipe.

A file is rejected for bad input: larger than the size limit (``max_bytes``, by default
``repart.protocol.limits.MAX_SNAPSHOT_BYTES``; checked by the file's size before it is read),
unreadable, in a spool a link or anything but a regular file, not JSON, a document or window the
region refuses (``InvalidInput``, ``NotFound``), so a bad file never blocks the files behind it. An
error that may pass (``Conflict``: a write lock not granted in time) or that is not the file's fault
(an unreachable database) propagates and leaves the file for the next pass.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

from sqlalchemy import Engine

from repart.controller.service import ingest_snapshot
from repart.errors import InvalidInput, NotFound
from repart.partitioning.documents import parse_json
from repart.protocol.limits import MAX_SNAPSHOT_BYTES
from repart.protocol.snapshot import Snapshot
from repart.protocol.spool import check_spool, locked, open_regular, settle, waiting_files
from repart.storage import run_in_transaction
from repart.validation import POSITIVE_INT, check


@dataclass(frozen=True)
class IngestOutcome:
    """What became of one snapshot file: ``ingested`` or ``rejected`` with the error message.

    ``region`` and ``seq`` are the snapshot's once its document parsed (``Snapshot.from_document``),
    None for a file rejected before that: an unparsed document's fields are not reported.
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


def check_max_bytes(value: int, field: str = "max_bytes") -> int:
    """``value`` if it is a positive integer, a size limit in bytes; InvalidInput naming ``field``."""
    return cast(int, check(field, value, POSITIVE_INT))


def ingest_file(
    engine: Engine, path: Path, *, max_bytes: int = MAX_SNAPSHOT_BYTES, regular_only: bool = False
) -> IngestOutcome:
    """Parse and ingest the snapshot document in ``path``, in its own transaction.

    Bad input (see the module docstring; a file of more than ``max_bytes`` bytes is not read; with
    ``regular_only``, as for a spool's file, a symbolic link or anything but a regular file) is reported
    as a ``rejected`` outcome naming the field; any other error propagates.
    """
    check_max_bytes(max_bytes)
    region: str | None = None
    seq: int | None = None
    try:
        # No name holds the parsed JSON (several times the size of the snapshot's item columns), so
        # it is freed before the ingest.
        text = read_document(path, max_bytes, regular_only=regular_only)
        snapshot = Snapshot.from_document(parse_json(text, "file"))
        region, seq = snapshot.region, snapshot.seq
        run_in_transaction(engine, lambda session: ingest_snapshot(session, snapshot, source=str(path)))
    except (OSError, UnicodeDecodeError) as error:
        return IngestOutcome(str(path), "rejected", seq, region, f"cannot read the file: {error}")
    except (InvalidInput, NotFound) as error:
        return IngestOutcome(str(path), "rejected", seq, region, str(error))
    return IngestOutcome(str(path), "ingested", seq, region, None)


def read_document(path: Path, max_bytes: int, *, regular_only: bool = False) -> str:
    """The UTF-8 text of the file ``path``; InvalidInput naming ``file`` when it holds more than
    ``max_bytes`` bytes, found by its size before anything is read (and by reading at most one byte
    more, for a file that grew since or has no size: a pipe). With ``regular_only`` the file is opened
    without following a symbolic link and its size taken from what was opened; InvalidInput naming
    ``file`` when it is a link or anything but a regular file."""
    with ExitStack() as closing:
        opened = None
        if regular_only:
            opened = closing.enter_context(os.fdopen(open_regular(path, os.O_RDONLY), "rb"))
        size = (path.stat() if opened is None else os.fstat(opened.fileno())).st_size
        if size > max_bytes:
            raise _too_large(size, max_bytes)
        file = opened or closing.enter_context(path.open("rb"))
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _too_large(None, max_bytes)
    return data.decode("utf-8")


def _too_large(size: int | None, max_bytes: int) -> InvalidInput:
    """The refusal of a file of ``size`` bytes (None: more than ``max_bytes`` were read from it)."""
    found = f"{size} bytes; it was not read" if size is not None else f"more than {max_bytes} bytes"
    return InvalidInput(
        "file",
        f"must be at most max_bytes = {max_bytes} bytes ({max_bytes / 2**20:.1f} MiB, the snapshot size "
        f"limit: --max-bytes, or repart run --max-snapshot-bytes), got {found}",
    )


def ingest_spool(
    engine: Engine, directory: Path, *, max_bytes: int = MAX_SNAPSHOT_BYTES
) -> list[SpoolOutcome]:
    """One pass over the spool ``directory``: ingest every waiting file and settle it (module docstring).

    InvalidInput naming ``spool`` when ``directory`` is not a directory (``max_bytes`` when the limit is
    not a positive integer). A second pass with no new files does nothing and returns an empty list.
    """
    directory = check_spool(directory)
    check_max_bytes(max_bytes)
    outcomes: list[SpoolOutcome] = []
    with locked(directory):
        for path in waiting_files(directory):
            outcome = ingest_file(engine, path, max_bytes=max_bytes, regular_only=True)
            if not os.path.lexists(path):  # removed by someone else meanwhile: nothing left to move
                continue
            target = settle(path, outcome.status, outcome.error)
            outcomes.append(SpoolOutcome(**outcome.to_json(), moved_to=str(target)))
    return outcomes
