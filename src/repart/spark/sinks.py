"""Where ``observe`` delivers a batch's snapshot: the controller or its spool.

A sink takes a ``Snapshot`` (``repart.protocol.snapshot``), checks it as a document would be checked
(``Snapshot.checked``: a snapshot built in code is not validated by its constructor), and returns a
description of where it went; nothing is written when the check fails. The spool writes
``Snapshot.to_document()``, the controller ingests the snapshot.

- ``ControllerSink`` hands it to the controller through the ``ControllerClient`` port
  (``submit_snapshot``), under the job's batch id: a batch's snapshot submitted again after a crash is
  a no-op (exactly-once batches).
- ``SpoolSink`` writes its document into a spool directory (``repart.protocol.spool.write_snapshot``:
  durably, named by region and seq) for ``repart run --spool`` or ``repart snapshot ingest``, which
  read it with ``Snapshot.from_document``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from repart.protocol.client import ControllerClient
from repart.protocol.snapshot import Snapshot
from repart.protocol.spool import check_spool, write_snapshot


class SnapshotSink(Protocol):
    """Anything that takes a snapshot and returns where it wrote it."""

    def write(self, snapshot: Snapshot) -> str:
        """Store ``snapshot``; raise (a RepartError for one the destination refuses) having written
        nothing."""
        ...


@dataclass(frozen=True)
class ControllerSink:
    """Submit snapshots to the controller through the ``ControllerClient`` port."""

    client: ControllerClient

    def write(self, snapshot: Snapshot) -> str:
        """Submit ``snapshot``; returns ``snapshot ID``, the id the controller stored it under.

        Raises InvalidInput naming the field for a snapshot no document could hold (``checked``), and
        NotFound, InvalidInput or Conflict when the region rejects it: unknown region, other key type or
        slot bits, a window already ingested under another batch or overlapping one. Nothing is stored
        then.
        """
        return f"snapshot {self.client.submit_snapshot(snapshot.checked())}"


@dataclass(frozen=True)
class SpoolSink:
    """Write snapshots as document files into a spool directory (InvalidInput ``sink`` if it is not
    one)."""

    directory: Path

    def __init__(self, directory: Path | str) -> None:
        object.__setattr__(self, "directory", check_spool(directory, "sink"))

    def write(self, snapshot: Snapshot) -> str:
        """Write ``snapshot``'s document atomically; returns its path.

        Raises InvalidInput naming the field for a snapshot no document could hold (``checked``), such
        as a region name that is not one (it becomes part of the file name: no path separators);
        nothing is written then.
        """
        return str(write_snapshot(self.directory, snapshot.checked()))
