"""Where ``observe`` delivers a snapshot document: the controller's database or its spool (DESIGN §3, §8).

Both sinks validate the document with ``parse_snapshot`` before anything is written, so a bad document
never lands, and return a description of where it went.

- ``DatabaseSink`` stores it with ``ingest_snapshot`` in one transaction (``run_in_transaction``, the
  helper ``repart.controller.spool.ingest_file`` uses): all of it or nothing.
- ``SpoolSink`` writes it as ``<region>-<seq, 20 digits>.json`` into a spool directory with
  ``write_atomically`` (a hidden temporary file renamed into place, which the ingester never reads),
  for ``repart run --spool`` or ``repart snapshot ingest``. The zero-padded ``seq`` makes name order
  (the order the spool ingests in) window order within a region; a name already taken gets a numeric
  suffix (``free_name``) instead of overwriting a document that still waits, and the ingester then
  rejects the duplicate window with a reason file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine

from repart.controller.spool import free_name, write_atomically
from repart.spark.errors import JobInputError
from repart.storage import ingest_snapshot, parse_snapshot, run_in_transaction
from repart.storage.regions import check_region_name


class SnapshotSink(Protocol):
    """Anything that takes a snapshot document and returns where it wrote it."""

    def write(self, document: Mapping[str, Any]) -> str:
        """Validate and store ``document``; raise (a ValueError for a bad document) having written nothing."""
        ...


@dataclass(frozen=True)
class DatabaseSink:
    """Ingest snapshot documents into the controller's database; ``source`` is recorded with each."""

    engine: Engine
    source: str = "repart.spark.observe"

    def write(self, document: Mapping[str, Any]) -> str:
        """Parse and ingest ``document`` in one transaction; returns ``<url>#snapshot/<row id>``.

        Raises SnapshotError for an invalid document, and NotFound, SnapshotError or Conflict
        (all ValueErrors) when the region rejects it: unknown region, other key type or slot bits, a
        seq already ingested or an overlapping window. Nothing is stored then.
        """
        snapshot = parse_snapshot(document)
        row_id = run_in_transaction(
            self.engine, lambda session: ingest_snapshot(session, snapshot, source=self.source)
        )
        return f"{self.engine.url.render_as_string(hide_password=True)}#snapshot/{row_id}"


@dataclass(frozen=True)
class SpoolSink:
    """Write snapshot documents as files into a spool directory (JobInputError if it is not one)."""

    directory: Path

    def __init__(self, directory: Path | str) -> None:
        path = Path(directory)
        if not path.is_dir():
            raise JobInputError(
                f"sink: the spool directory {str(path)!r} does not exist or is not a directory"
            )
        object.__setattr__(self, "directory", path)

    def write(self, document: Mapping[str, Any]) -> str:
        """Validate ``document`` and write it atomically; returns its path.

        Raises SnapshotError for an invalid document and StorageError for a region name that is not one
        (it becomes part of the file name, so it must be a region name: no path separators).
        """
        snapshot = parse_snapshot(document)
        region = check_region_name(snapshot.region)
        path = free_name(f"{region}-{snapshot.seq:020d}.json", self.directory)
        write_atomically(path, json.dumps(document, ensure_ascii=False) + "\n")
        return str(path)
