"""Leases: one active controller per region (DESIGN §7, §8).

A lease row names the holder of a region until ``expires_at``. ``acquire_lease`` takes a free or
expired lease, or renews one the caller already holds, with single race-safe statements: an
``UPDATE … WHERE holder = me OR expired``, then, if no row existed, ``INSERT … ON CONFLICT DO
NOTHING``. Both backends decide each statement atomically (PostgreSQL re-checks the WHERE clause of
an UPDATE after waiting for a concurrent one; SQLite runs one writer at a time), so of two
controllers racing for a region exactly one gets it. The statements write before they read, so an
SQLite transaction never has to upgrade a stale read snapshot.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Delete, Insert, Update, case, delete, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import ScalarSelect

from repart.partitioning.documents import require_number
from repart.storage import models
from repart.storage.errors import StorageError
from repart.storage.models import UTCDateTime
from repart.storage.regions import region_by_name


def _region_id(name: str) -> ScalarSelect[int]:
    return select(models.Region.id).where(models.Region.name == name).scalar_subquery()


def _affected(session: Session, statement: Insert | Update | Delete) -> int:
    """Rows an INSERT, UPDATE or DELETE touched, counted from its RETURNING rows (the DB-API rowcount
    of an ``INSERT … SELECT`` is not reliable across drivers)."""
    return len(session.execute(statement.returning(models.Lease.region_id)).all())


def _timestamp(value: datetime) -> ColumnElement[datetime]:
    return literal(value, UTCDateTime())


def acquire_lease(session: Session, region: str, holder: str, ttl_seconds: float, now: datetime) -> bool:
    """Take or renew the lease of ``region`` for ``holder`` until ``now + ttl_seconds``.

    True if ``holder`` holds the lease afterwards: it was free, expired (``expires_at <= now``) or
    already ``holder``'s (a renewal keeps ``acquired_at``). False if another holder's lease is still
    valid. NotFound for an unknown region.
    """
    if not isinstance(holder, str) or not 1 <= len(holder) <= 200:
        raise StorageError(f"holder must be a string of 1-200 characters, got {holder!r}")
    expires = now + timedelta(seconds=require_number(ttl_seconds, "ttl_seconds", 0.001, error=StorageError))
    lease = models.Lease
    renewed = _affected(
        session,
        update(lease)
        .where(lease.region_id == _region_id(region), (lease.holder == holder) | (lease.expires_at <= now))
        .values(
            holder=holder,
            acquired_at=case((lease.holder == holder, lease.acquired_at), else_=_timestamp(now)),
            expires_at=expires,
        )
        .execution_options(synchronize_session=False),
    )
    if renewed == 1:
        return True
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    inserted = _affected(
        session,
        dialect.insert(lease)
        .from_select(
            ["region_id", "holder", "acquired_at", "expires_at"],
            select(models.Region.id, literal(holder), _timestamp(now), _timestamp(expires)).where(
                models.Region.name == region
            ),
        )
        .on_conflict_do_nothing(index_elements=["region_id"]),
    )
    if inserted == 1:
        return True
    region_by_name(session, region)  # NotFound if no lease row could exist for it
    return False


def release_lease(session: Session, region: str, holder: str) -> bool:
    """Give up ``holder``'s lease of ``region``; True if it held one (expired or not)."""
    lease = models.Lease
    released = _affected(
        session,
        delete(lease)
        .where(lease.region_id == _region_id(region), lease.holder == holder)
        .execution_options(synchronize_session=False),
    )
    if released == 1:
        return True
    region_by_name(session, region)
    return False


def current_lease(session: Session, region: str) -> models.Lease | None:
    """The lease row of ``region`` (possibly expired), or None."""
    return session.get(models.Lease, region_by_name(session, region).id, populate_existing=True)
