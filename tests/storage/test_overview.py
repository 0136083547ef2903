"""``region_overviews``, the status overview in Core, against the per-region repository queries (ORM)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.errors import NotFound
from repart.storage import applied_version, list_events, list_plans, record_event, run_in_transaction
from repart.storage.engine import read_connection
from repart.storage.overview import region_overviews
from repart.storage.tables import OPEN_PLAN_STATUSES
from tests.factories import REBALANCE_EVENT, add_region, add_versions


def expected(session: Session, name: str) -> tuple[int | None, int | None, int | None]:
    """(N of the applied version, id of the newest open plan, id of the newest event) of ``name``,
    read one query at a time."""
    applied = applied_version(session, name)
    open_plans = [p.id for p in list_plans(session, name) if p.status in OPEN_PLAN_STATUSES]
    newest = list_events(session, name, limit=1)
    return (
        None if applied is None else applied.n_channels,
        open_plans[-1] if open_plans else None,
        newest[0].id if newest else None,
    )


def test_overviews_match_the_per_region_queries(engine: Engine, db_url: str) -> None:
    add_region(engine, "c-history")
    add_versions(db_url, "c-history", (4, 5, 6))  # applied 4, a pending plan, a superseded one
    add_region(engine, "a-bare")
    add_region(engine, "b-events")
    for _ in range(3):
        run_in_transaction(engine, lambda s: record_event(s, "b-events", REBALANCE_EVENT))
    overviews = read_connection(engine, region_overviews)
    assert [o.region.name for o in overviews] == ["a-bare", "b-events", "c-history"]
    with Session(engine) as session:
        for overview in overviews:
            found = (
                overview.n_channels,
                None if overview.open_plan is None else overview.open_plan.id,
                None if overview.last_event is None else overview.last_event.id,
            )
            assert found == expected(session, overview.region.name)
    history = overviews[2]
    assert history.n_channels == 4 and history.open_plan is not None
    assert history.open_plan.status == "pending" and history.region.mode == "auto"
    assert overviews[0].open_plan is None and overviews[0].n_channels is None
    only = read_connection(engine, lambda connection: region_overviews(connection, "b-events"))
    assert [o.region.name for o in only] == ["b-events"]


def test_overview_of_an_unknown_region_is_not_found(engine: Engine) -> None:
    add_region(engine, "present")
    with pytest.raises(NotFound) as raised:
        read_connection(engine, lambda connection: region_overviews(connection, "absent"))
    assert str(raised.value) == "unknown region 'absent'; known regions: present"
