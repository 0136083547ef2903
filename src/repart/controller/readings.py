"""What the daemon's metrics read from the database (``repart.controller.metrics``).

Two reads, both cheap and neither on a scrape:

- ``region_readings``, once per sweep: every region's mode, applied version, its channel count and when its
  oldest plan not yet applied (``pending``, or ``applying``: a job has started it) was created, in one
  query. A job reporting a plan applied, or an operator's ``scale``, changes these without a tick, so
  they are read from the database rather than derived from the daemon's ticks.
- ``decided_imbalance``, after a tick that did not itself record the region's newest decision (a
  ``recommended``, ``blocked`` or ``held`` tick, or a region's first idle tick): the b of the applied
  function on the window that the region's newest decision (an event of ``EXPLAINED_KINDS``, the ones
  ``repart explain`` shows) measured. A tick that recorded it carries it (``TickResult.b_before``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from repart.controller.actions import EXPLAINED_KINDS
from repart.storage import models
from repart.storage.jsontext import load_object
from repart.storage.tables import OPEN_PLAN_STATUSES


@dataclass(frozen=True)
class RegionReading:
    """A region's applied version and its N (None before the first version), when its oldest plan not
    yet applied (pending or being applied) was created (None without one), its mode, and its failed
    ticks in a row with the time the daemon ticks it again (its backoff; 0 and None without)."""

    region: str
    applied_version: int | None
    n_channels: int | None
    pending_since: datetime | None
    mode: str = "auto"
    tick_failures: int = 0
    retry_at: datetime | None = None


def region_readings(session: Session) -> list[RegionReading]:
    """Every region's ``RegionReading``, in name order: one query (see the module docstring)."""
    region, version, plan = models.Region, models.Version, models.Plan
    pending_since = (
        select(func.min(plan.created_at))
        .where(
            plan.region_id == region.id,
            plan.status.in_(OPEN_PLAN_STATUSES),
        )
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            region.name,
            region.applied_version,
            version.n_channels,
            pending_since,
            region.mode,
            region.tick_failures,
            region.retry_at,
        )
        .outerjoin(version, and_(version.region_id == region.id, version.number == region.applied_version))
        .order_by(region.name)
    ).all()
    return [RegionReading(*row) for row in rows]


def decided_imbalance(session: Session, region: str) -> float | None:
    """``b_before`` of ``region``'s newest decision event (see the module docstring); None when the
    region has no decision yet, when that decision measured none (p^(0), an empty window) or when it
    was infinite (stored as null)."""
    data = session.scalar(
        select(models.Event.data_json)
        .join(models.Region, models.Region.id == models.Event.region_id)
        .where(models.Region.name == region, models.Event.kind.in_(EXPLAINED_KINDS))
        .order_by(models.Event.id.desc())
        .limit(1)
    )
    if data is None:
        return None
    value = load_object(data).get("b_before")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
