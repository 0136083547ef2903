"""The lease a running streaming query holds on its ``spark-state`` region's checkpoint.

Spark has no checkpoint lock: repartitioning the checkpoint of a running query corrupts it. So the
driver that runs a region's query (``repart.spark.streaming.ManagedQuery``) holds a lease in the
controller's database while the query runs, renewing it as batches complete, and anything that
repartitions the checkpoint first checks that no live lease names it (``check_no_running_query``).
A lease expires ``ttl_seconds`` after its last renewal, so a killed driver does not block its region
for ever. One region has at most one lease (its row is keyed by the region), and so one running query.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput
from repart.storage import models
from repart.storage.regions import region_by_name
from repart.validation import LEASE_HOLDER, POSITIVE, check


def _state_region(session: Session, region: str) -> models.Region:
    """The region row, if its engine is ``spark-state`` (InvalidInput naming ``region`` otherwise)."""
    row = region_by_name(session, region, lock=True)
    if row.engine != "spark-state":
        raise InvalidInput(
            "region",
            f"must be a spark-state region, got {region!r} with engine {row.engine!r}",
        )
    return row


def hold_query_lease(
    session: Session, region: str, checkpoint: str, holder: str, ttl_seconds: float, now: datetime
) -> None:
    """Take or renew ``holder``'s lease of ``region``'s checkpoint until ``now + ttl_seconds``.

    Conflict, naming the holder and its checkpoint, while another holder's lease is live (a second
    query over the region, or over its checkpoint, would corrupt it); InvalidInput for a region that
    is not ``spark-state``; NotFound for an unknown one."""
    check("holder", holder, LEASE_HOLDER)
    expires = now + timedelta(seconds=check("ttl_seconds", ttl_seconds, POSITIVE))
    row = _state_region(session, region)
    lease = session.get(models.QueryLease, row.id, with_for_update=True, populate_existing=True)
    if lease is not None and lease.holder != holder and lease.expires_at > now:
        raise Conflict(
            f"region {region!r} has a running query: {lease.holder} holds its checkpoint "
            f"{lease.checkpoint} until {lease.expires_at.isoformat()}; stop that query first"
        )
    if lease is None:
        session.add(
            models.QueryLease(
                region_id=row.id, checkpoint=checkpoint, holder=holder, acquired_at=now, expires_at=expires
            )
        )
    else:
        if lease.holder != holder:
            lease.acquired_at = now
        lease.holder, lease.checkpoint, lease.expires_at = holder, checkpoint, expires
    session.flush()


def release_query_lease(session: Session, region: str, holder: str) -> None:
    """End ``holder``'s lease of ``region`` (nothing when it holds none)."""
    row = region_by_name(session, region)
    session.execute(
        delete(models.QueryLease).where(
            models.QueryLease.region_id == row.id, models.QueryLease.holder == holder
        )
    )


def check_no_running_query(
    session: Session, region: str, now: datetime, *, holder: str | None = None
) -> None:
    """Conflict while a live lease of another holder than ``holder`` names ``region``: its checkpoint
    belongs to a running query, and Spark repartitions only a stopped query's checkpoint."""
    row = _state_region(session, region)
    lease = session.scalar(select(models.QueryLease).where(models.QueryLease.region_id == row.id))
    if lease is not None and lease.holder != holder and lease.expires_at > now:
        raise Conflict(
            f"the checkpoint {lease.checkpoint} of region {region!r} belongs to a running query "
            f"({lease.holder}, lease until {lease.expires_at.isoformat()}); Spark repartitions only a "
            "stopped query's checkpoint: stop it first"
        )
