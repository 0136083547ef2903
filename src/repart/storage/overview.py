"""The overview ``repart status`` shows: per region its row, the applied version's N, the newest open
plan and the newest event, in three queries however many regions and however long their history."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from repart.storage import models
from repart.storage.regions import region_by_name


@dataclass(frozen=True)
class RegionOverview:
    """A region, the N of its applied version (None before the first), its newest plan not yet
    applied (pending or applying; None without one) and its newest event (None without one)."""

    region: models.Region
    n_channels: int | None
    open_plan: models.Plan | None
    last_event: models.Event | None


def region_overviews(session: Session, name: str | None = None) -> list[RegionOverview]:
    """The overview of region ``name`` (NotFound if there is none), or of every region by name."""
    region, version, plan, event = models.Region, models.Version, models.Plan, models.Event
    query = select(region, version.n_channels).outerjoin(
        version, and_(version.region_id == region.id, version.number == region.applied_version)
    )
    if name is not None:
        query = query.where(region.id == region_by_name(session, name).id)
    rows = session.execute(query.order_by(region.name)).all()
    ids = [row.id for row, _ in rows]
    open_plans = {
        p.region_id: p  # ascending ids: the newest plan of a region is written last
        for p in session.scalars(
            select(plan)
            .where(plan.region_id.in_(ids), plan.status.in_(models.OPEN_PLAN_STATUSES))
            .order_by(plan.id)
        )
    }
    newest_events = select(func.max(event.id)).where(event.region_id.in_(ids)).group_by(event.region_id)
    last_events = {e.region_id: e for e in session.scalars(select(event).where(event.id.in_(newest_events)))}
    return [RegionOverview(row, n, open_plans.get(row.id), last_events.get(row.id)) for row, n in rows]
