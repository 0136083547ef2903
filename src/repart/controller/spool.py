"""Ingesting snapshot files, one at a time or a whole spool directory (DESIGN §8 step 1, §10).

``ingest_file`` parses and stores one file in its own transaction: all of it or none of it.
``ingest_spool`` takes the files waiting in a spool directory (``repart.protocol.spool``: naming,
``done/``, ``rejected/``, the lock), in name order, ingests each and settles it: to ``done/`` when it
was ingested, to ``rejected/`` with a ``.reason`` file otherwise.

A file is rejected for bad input: unreadable, not JSON, a document or window the region refuses
(``InvalidInput``, ``NotFound``), so a bad file never blocks the files behind it. An error that may
pass (``Conflict``: a write lock not granted in time) or that is not the file's fault (an unreachable
database) propagates and leaves the file for the next pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine

from repart.errors import InvalidInput, NotFound
from repart.partitioning.documents import parse_json
from repart.protocol.snapshot import Snapshot
from repart.protocol.spool import check_spool, locked, settle, waiting_files
from repart.storage import ingest_snapshot, run_in_transaction


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
        document = parse_json(path.read_text(encoding="utf-8"), "file")
        if isinstance(document, dict) and isinstance(document.get("region"), str):
            region = document["region"]
        snapshot = Snapshot.from_document(document)
        seq = snapshot.seq
        run_in_transaction(engine, lambda session: ingest_snapshot(session, snapshot, source=str(path)))
    except (OSError, UnicodeDecodeError) as error:
        return IngestOutcome(str(path), "rejected", seq, region, f"cannot read the file: {error}")
    except (InvalidInput, NotFound) as error:
        return IngestOutcome(str(path), "rejected", seq, region, str(error))
    return IngestOutcome(str(path), "ingested", seq, region, None)


def ingest_spool(engine: Engine, directory: Path) -> list[SpoolOutcome]:
    """One pass over the spool ``directory``: ingest every waiting file and settle it (module docstring).

    InvalidInput naming ``spool`` when ``directory`` is not a directory. A second pass with no new files
    does nothing and returns an empty list.
    """
    directory = check_spool(directory)
    outcomes: list[SpoolOutcome] = []
    with locked(directory):
        for path in waiting_files(directory):
            outcome = ingest_file(engine, path)
            if not path.exists():  # removed by someone else meanwhile: nothing left to move
                continue
            target = settle(path, outcome.status, outcome.error)
            outcomes.append(SpoolOutcome(**outcome.to_json(), moved_to=str(target)))
    return outcomes
