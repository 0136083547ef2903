"""A region's reconcile status, stored on its row and changed only by compare-and-set.

The controller reads the status with the region row, decides, and writes its decision only if the
status is still the one it read: ``compare_and_set_status`` is one ``UPDATE regions … WHERE id = ?
AND applied_version IS ? AND latest_version IS ? AND considered_seq IS ? AND mode = ?``, which both backends
decide atomically (PostgreSQL re-checks the WHERE clause on the newest row after waiting for a
concurrent writer; SQLite runs one writer at a time). Losing it is a ``Conflict`` and changes
nothing. ``last_change_at`` changes only together with ``latest_version`` (an activation), so it is
covered by that comparison. The region's mode is part of the status: an operator who holds
the region between a tick's read and its write makes the tick's write a Conflict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from repart.errors import Conflict
from repart.storage import models


@dataclass(frozen=True)
class RegionStatus:
    """The applied and newest version numbers, the newest window seq a decision considered, and when
    N last changed (see ``models.Region``), all None before the region's first version; and the
    region's mode."""

    applied_version: int | None = None
    latest_version: int | None = None
    considered_seq: int | None = None
    last_change_at: datetime | None = None
    mode: str = "auto"

    @classmethod
    def of(cls, row: models.Region) -> RegionStatus:
        """The status stored on a region row."""
        return cls(row.applied_version, row.latest_version, row.considered_seq, row.last_change_at, row.mode)

    def same_as(self, other: RegionStatus) -> bool:
        """True when ``other`` is this status in what compare-and-set compares: the version numbers,
        the window seq and the mode (``last_change_at`` changes only with the latest version)."""
        return (self.applied_version, self.latest_version, self.considered_seq, self.mode) == (
            other.applied_version,
            other.latest_version,
            other.considered_seq,
            other.mode,
        )

    def describe(self) -> str:
        """``applied v…, latest v…, considered seq …`` for messages."""
        return (
            f"applied version {self.applied_version}, latest version {self.latest_version}, "
            f"considered window seq {self.considered_seq}, mode {self.mode}"
        )


def compare_and_set_status(
    session: Session, region: str, region_id: int, expected: RegionStatus, new: RegionStatus
) -> None:
    """Store ``new`` as the status of region ``region_id`` if its status is still ``expected``;
    Conflict naming ``region`` and both statuses otherwise (nothing is changed then)."""
    table = models.Region
    changed = session.execute(
        update(table)
        .where(
            table.id == region_id,
            table.applied_version.is_not_distinct_from(expected.applied_version),
            table.latest_version.is_not_distinct_from(expected.latest_version),
            table.considered_seq.is_not_distinct_from(expected.considered_seq),
            table.mode == expected.mode,
        )
        # A status change is not a configuration change: updated_at keeps its value.
        .values(**asdict(new), updated_at=table.updated_at)
        .returning(table.id)
        .execution_options(synchronize_session="fetch")
    ).all()
    if not changed:
        current = session.get_one(models.Region, region_id, populate_existing=True)
        raise _stale(region, expected, RegionStatus.of(current))


def check_status(region: str, expected: RegionStatus, current: RegionStatus) -> None:
    """Conflict naming ``region`` and both statuses when ``current`` (read under the region's lock) is no
    longer ``expected``: a decision made on ``expected`` is stale and must be made again."""
    if not expected.same_as(current):
        raise _stale(region, expected, current)


def _stale(region: str, expected: RegionStatus, current: RegionStatus) -> Conflict:
    """The refusal of a decision made on ``expected`` now that the region's status is ``current``."""
    return Conflict(
        f"region {region!r} changed since its status was read ({expected.describe()}; now "
        f"{current.describe()}); the decision based on it was discarded"
    )


def set_applied_version(session: Session, region_id: int, number: int) -> None:
    """Record that version ``number`` of region ``region_id`` is now applied (a job applied its plan)."""
    table = models.Region
    session.execute(
        update(table)
        .where(table.id == region_id)
        .values(applied_version=number, updated_at=table.updated_at)
        .execution_options(synchronize_session="fetch")
    )
