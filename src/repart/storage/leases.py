"""Leases with fencing tokens: one active controller per region, and only it may write.

A lease row names the holder of a region until ``expires_at`` and carries a fencing token: an integer
that grows every time the lease goes to a new holder (``regions.lease_token`` counts the tokens issued,
so a token is never reused, not even after a release deletes the lease row). ``acquire_lease`` renews
the caller's own lease (same token), or takes a free or expired lease with a new token, and returns
the token; None while another holder's lease is valid. Of two controllers racing for a region exactly
one gets it: the token is drawn by an ``UPDATE`` of the region row, which serializes them (PostgreSQL
row lock; SQLite runs one writer at a time), and the takeover is one ``UPDATE … WHERE expires_at <=
now`` (or an ``INSERT … ON CONFLICT DO NOTHING``) that the loser finds already done.

A holder's write presents its ``Fence`` (holder and token); ``check_fence``, run inside the write
transaction, refuses it with Conflict unless the lease is still that holder's, with that token, and
not expired. A controller paused past its lease (a stopped process, a long GC or swap) therefore
cannot write when it wakes up: its lease has expired, or another holder took it with a newer token.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import ScalarSelect

from repart.errors import Conflict
from repart.storage import models
from repart.storage.regions import region_by_name
from repart.storage.tables import UTCDateTime
from repart.validation import LEASE_HOLDER, POSITIVE, check


@dataclass(frozen=True)
class Fence:
    """What a lease holder presents with a write: its name and the fencing token of its lease."""

    holder: str
    token: int


def _region_id(name: str) -> ScalarSelect[int]:
    return select(models.Region.id).where(models.Region.name == name).scalar_subquery()


def _timestamp(value: datetime) -> ColumnElement[datetime]:
    return literal(value, UTCDateTime())


def acquire_lease(
    session: Session, region: str, holder: str, ttl_seconds: float, now: datetime
) -> int | None:
    """Take or renew the lease of ``region`` for ``holder`` until ``now + ttl_seconds``.

    Returns the lease's fencing token if ``holder`` holds the lease afterwards: a renewal of its own
    lease (expired or not) keeps the token and ``acquired_at``; a free or expired lease
    (``expires_at <= now``) is taken with a new, larger token. None if another holder's lease is still
    valid. NotFound for an unknown region.
    """
    check("holder", holder, LEASE_HOLDER)
    expires = now + timedelta(seconds=check("ttl_seconds", ttl_seconds, POSITIVE))
    region_id = region_by_name(session, region).id
    lease = models.Lease
    renewed = session.scalar(
        update(lease)
        .where(lease.region_id == region_id, lease.holder == holder)
        .values(expires_at=expires)
        .returning(lease.token)
        .execution_options(synchronize_session=False)
    )
    if renewed is not None:
        return renewed
    other = session.scalar(select(lease.expires_at).where(lease.region_id == region_id))
    if other is not None and other > now:
        return None  # held by another: no token is drawn
    token = _next_token(session, region_id)
    taken = session.scalar(
        update(lease)
        .where(lease.region_id == region_id, lease.expires_at <= now)
        .values(holder=holder, token=token, acquired_at=now, expires_at=expires)
        .returning(lease.token)
        .execution_options(synchronize_session=False)
    )
    if taken is not None:
        return token
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    inserted = session.scalar(
        dialect.insert(lease)
        .from_select(
            ["region_id", "holder", "token", "acquired_at", "expires_at"],
            select(
                models.Region.id, literal(holder), literal(token), _timestamp(now), _timestamp(expires)
            ).where(models.Region.id == region_id),
        )
        .on_conflict_do_nothing(index_elements=["region_id"])
        .returning(lease.token)
    )
    return None if inserted is None else token


def claim_leases(session: Session, holder: str, ttl_seconds: float, now: datetime) -> dict[str, int]:
    """Renew every lease ``holder`` holds (expired or not) and take every free or expired lease, all
    until ``now + ttl_seconds``, in five statements however many regions there are (the last reads
    their names): the rule of ``acquire_lease`` applied to every region at once. Returns region name →
    fencing token of each lease ``holder`` holds afterwards; a region another holder's valid lease
    covers is not in it.

    The free and expired regions draw their new tokens in one ``UPDATE`` of their region rows, which
    serializes two claimants as ``acquire_lease``'s draw does; the takeover (``UPDATE … WHERE
    expires_at <= now``) and the insert of missing leases (``ON CONFLICT DO NOTHING``) then find a
    lease the other claimant committed in between already valid or present, and leave it. A token
    drawn for a lease not taken is never used, as in ``acquire_lease``. Two claimants can deadlock on
    PostgreSQL (one renewing its expired lease row while the other, holding region rows, waits for
    it); the server aborts one and ``run_in_transaction`` retries it.
    """
    check("holder", holder, LEASE_HOLDER)
    expires = now + timedelta(seconds=check("ttl_seconds", ttl_seconds, POSITIVE))
    lease, region = models.Lease, models.Region
    held = dict(
        session.execute(
            update(lease)
            .where(lease.holder == holder)
            .values(expires_at=expires)
            .returning(lease.region_id, lease.token)
            .execution_options(synchronize_session=False)
        ).all()
    )
    valid = select(lease.region_id).where(lease.region_id == region.id, lease.expires_at > _timestamp(now))
    drawn = (
        session.execute(
            update(region)
            .where(~valid.exists())
            .values(lease_token=region.lease_token + 1, updated_at=region.updated_at)
            .returning(region.id)
            .execution_options(synchronize_session=False)
        )
        .scalars()
        .all()
    )
    if drawn:
        token = select(region.lease_token).where(region.id == lease.region_id).scalar_subquery()
        held.update(
            session.execute(
                update(lease)
                .where(lease.region_id.in_(drawn), lease.expires_at <= _timestamp(now))
                .values(holder=holder, token=token, acquired_at=now, expires_at=expires)
                .returning(lease.region_id, lease.token)
                .execution_options(synchronize_session=False)
            ).all()
        )
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        missing = ~select(lease.region_id).where(lease.region_id == region.id).exists()
        held.update(
            session.execute(
                dialect.insert(lease)
                .from_select(
                    ["region_id", "holder", "token", "acquired_at", "expires_at"],
                    select(
                        region.id, literal(holder), region.lease_token, _timestamp(now), _timestamp(expires)
                    ).where(region.id.in_(drawn), missing),
                )
                .on_conflict_do_nothing(index_elements=["region_id"])
                .returning(lease.region_id, lease.token)
            ).all()
        )
    if not held:
        return {}
    names = dict(session.execute(select(region.id, region.name).where(region.id.in_(list(held)))).all())
    return {names[region_id]: token for region_id, token in held.items()}


@dataclass(frozen=True)
class RegionLease:
    """A region's name and who holds its lease until when (both None when nobody does), with its
    failed ticks in a row and when it may be ticked again (0 and None when it is not backing off)."""

    region: str
    holder: str | None
    expires_at: datetime | None
    tick_failures: int = 0
    retry_at: datetime | None = None

    def backing_off(self, now: datetime) -> bool:
        """True while the region waits for its next try after failed ticks (``retry_at > now``)."""
        return self.retry_at is not None and self.retry_at > now

    def held_by_another(self, holder: str, now: datetime) -> bool:
        """True while a holder other than ``holder`` has a valid lease (``expires_at > now``)."""
        return (
            self.holder is not None
            and self.holder != holder
            and self.expires_at is not None
            and self.expires_at > now
        )


def region_leases(session: Session) -> list[RegionLease]:
    """Every region with its lease and backoff, in name order: one query."""
    rows = session.execute(
        select(
            models.Region.name,
            models.Lease.holder,
            models.Lease.expires_at,
            models.Region.tick_failures,
            models.Region.retry_at,
        )
        .outerjoin(models.Lease, models.Lease.region_id == models.Region.id)
        .order_by(models.Region.name)
    ).all()
    return [RegionLease(*row) for row in rows]


def _next_token(session: Session, region_id: int) -> int:
    """Draw the next fencing token of region ``region_id``."""
    table = models.Region
    return session.execute(
        update(table)
        .where(table.id == region_id)
        .values(lease_token=table.lease_token + 1, updated_at=table.updated_at)
        .returning(table.lease_token)
        .execution_options(synchronize_session=False)
    ).scalar_one()


def check_fence(session: Session, region: str, region_id: int, fence: Fence, now: datetime) -> None:
    """Refuse (Conflict) a write by ``fence``'s holder unless it still holds the lease of region
    ``region_id`` with that token at ``now``. The lease row is locked until the transaction ends, so
    no takeover commits in between (PostgreSQL; SQLite runs one writer at a time)."""
    lease = session.execute(
        select(models.Lease.holder, models.Lease.token, models.Lease.expires_at)
        .where(models.Lease.region_id == region_id)
        .with_for_update()
    ).one_or_none()
    if lease is None or lease.holder != fence.holder or lease.token != fence.token:
        holder = "nobody" if lease is None else f"{lease.holder!r} with token {lease.token}"
        raise Conflict(
            f"the lease of region {region!r} is not held by {fence.holder!r} with token {fence.token} "
            f"(held by {holder}); the write was refused"
        )
    if lease.expires_at <= now:
        raise Conflict(
            f"the lease of region {region!r} held by {fence.holder!r} expired at "
            f"{lease.expires_at.isoformat()} (now {now.isoformat()}); the write was refused"
        )


def release_lease(session: Session, region: str, holder: str) -> bool:
    """Give up ``holder``'s lease of ``region``; True if it held one (expired or not)."""
    lease = models.Lease
    released = session.execute(
        delete(lease)
        .where(lease.region_id == _region_id(region), lease.holder == holder)
        .returning(lease.region_id)
        .execution_options(synchronize_session=False)
    ).all()
    if released:
        return True
    region_by_name(session, region)
    return False


def current_lease(session: Session, region: str) -> models.Lease | None:
    """The lease row of ``region`` (possibly expired), or None."""
    return session.get(models.Lease, region_by_name(session, region).id, populate_existing=True)
