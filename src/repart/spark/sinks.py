"""Where ``observe`` delivers a snapshot document: the controller or its spool (DESIGN §3, §8, §12.1).

Both sinks validate the document with ``Snapshot.from_document`` before anything is written, so a bad
document never lands, and return a description of where it went.

- ``ControllerSink`` hands it to the controller through the ``ControllerClient`` port
  (``submit_snapshot``), under the job's batch id: a batch's snapshot submitted again after a crash is
  a no-op (exactly-once batches).
- ``SpoolSink`` writes it into a spool directory (``repart.protocol.spool.write_snapshot``: durably,
  named by region and seq) for ``repart run --spool`` or ``repart snapshot ingest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from repart.protocol.client import ControllerClient
from repart.protocol.snapshot import Snapshot
from repart.protocol.spool import check_spool, write_snapshot


class SnapshotSink(Protocol):
    """Anything that takes a snapshot document and returns where it wrote it."""

    def write(self, document: Mapping[str, Any]) -> str:
        """Validate and store ``document``; raise (a ValueError for a bad document) having written nothing."""
        ...


@dataclass(frozen=True)
class ControllerSink:
    """Submit snapshot documents to the controller through the ``ControllerClient`` port."""

    client: ControllerClient

    def write(self, document: Mapping[str, Any]) -> str:
        """Parse ``document`` and submit it; returns where the controller stored it.

        Raises InvalidInput for an invalid document, and NotFound, InvalidInput or Conflict when the
        region rejects it: unknown region, other key type or slot bits, a window already ingested
        under another batch or overlapping one. Nothing is stored then.
        """
        return self.client.submit_snapshot(Snapshot.from_document(document))


@dataclass(frozen=True)
class SpoolSink:
    """Write snapshot documents as files into a spool directory (InvalidInput ``sink`` if it is not
    one)."""

    directory: Path

    def __init__(self, directory: Path | str) -> None:
        object.__setattr__(self, "directory", check_spool(directory, "sink"))

    def write(self, document: Mapping[str, Any]) -> str:
        """Validate ``document`` and write it atomically; returns its path.

        Raises InvalidInput for an invalid document or a region name that is not one (it becomes part
        of the file name, so it must be a region name: no path separators).
        """
        snapshot = Snapshot.from_document(document)
        path = write_snapshot(self.directory, snapshot)
        return str(path)
