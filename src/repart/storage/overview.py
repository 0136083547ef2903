"""The overview ``repart status`` shows: per region its row, the applied version's N, the newest open
plan and the newest event, in three queries however many regions and however long their history.

It reads the Core tables (``repart.storage.tables``) on a connection and returns their rows: the
command then loads neither SQLAlchemy's ORM nor the mapped classes, over a quarter of its start.
A row has the columns of its table as attributes, as the mapped objects do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, and_, func, select

from repart.storage.region_names import unknown_region
from repart.storage.tables import OPEN_PLAN_STATUSES, events, plans, regions, versions


@dataclass(frozen=True)
class RegionOverview:
    """A region's row (the columns of ``tables.regions``, and ``applied_n_channels``), the N of its
    applied version (None before the first), its newest plan not yet applied (pending or applying; None
    without one) and its newest event (None without one), as rows of ``tables.plans`` and
    ``tables.events``."""

    region: Row[Any]
    n_channels: int | None
    open_plan: Row[Any] | None
    last_event: Row[Any] | None


def region_overviews(connection: Connection, name: str | None = None) -> list[RegionOverview]:
    """The overview of region ``name`` (NotFound if there is none), or of every region by name."""
    query = select(regions, versions.c.n_channels.label("applied_n_channels")).outerjoin(
        versions, and_(versions.c.region_id == regions.c.id, versions.c.number == regions.c.applied_version)
    )
    if name is not None:
        query = query.where(regions.c.name == name)
    rows = connection.execute(query.order_by(regions.c.name)).all()
    if name is not None and not rows:
        raise unknown_region(connection, name)
    ids = [row.id for row in rows]
    open_plans = {
        p.region_id: p  # ascending ids: the newest plan of a region is written last
        for p in connection.execute(
            select(plans)
            .where(plans.c.region_id.in_(ids), plans.c.status.in_(OPEN_PLAN_STATUSES))
            .order_by(plans.c.id)
        )
    }
    newest_events = (
        select(func.max(events.c.id)).where(events.c.region_id.in_(ids)).group_by(events.c.region_id)
    )
    last_events = {
        e.region_id: e for e in connection.execute(select(events).where(events.c.id.in_(newest_events)))
    }
    return [
        RegionOverview(row, row.applied_n_channels, open_plans.get(row.id), last_events.get(row.id))
        for row in rows
    ]
