"""The service layer: every operation checks its input before storage sees it, and writes nothing when it
refuses."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from repart.controller import service
from repart.errors import Conflict, InvalidInput, NotFound
from repart.storage import RegionConfig, region_by_name, run_in_transaction
from tests.factories import REGION, add_applied_chain, add_region, database_dump, plans


@pytest.mark.parametrize(
    ("settings", "policy", "field"),
    [
        ({"target_utilisation": 7}, "fixed", "settings.target_utilisation"),  # misspelt: unknown
        ({"target_utilization": 7}, "target-utilization", "settings.target_utilization"),  # out of (0, 1]
        ({"counters": 1}, "fixed", "settings.counters"),
        ({"split": {"theta": -1}}, "fixed", "settings.split.theta"),
    ],
)
def test_create_refuses_bad_settings_and_stores_nothing(
    engine: Engine, settings: dict[str, Any], policy: str, field: str
) -> None:
    before = database_dump(engine)
    config = RegionConfig(key_type="str", n_channels_initial=2, policy=policy, settings=settings)
    with pytest.raises(InvalidInput) as refused:
        run_in_transaction(engine, lambda s: service.create_region(s, REGION, config))
    assert refused.value.field == field
    assert database_dump(engine) == before


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"settings": {"target_utilisation": 7}}, "settings.target_utilisation"),
        ({"colour": "red"}, "colour"),
        ({"min_channels": 8}, "n_channels_initial"),  # above the region's initial 4 channels
        ({"reason": "why"}, "reason"),  # a reason needs a mode
        ({}, "changes"),
    ],
)
def test_update_refuses_bad_changes_and_writes_nothing(
    engine: Engine, changes: dict[str, Any], field: str
) -> None:
    add_region(engine)
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        run_in_transaction(engine, lambda s: service.update_region(s, REGION, **changes))
    assert refused.value.field == field
    assert database_dump(engine) == before


def test_update_merges_settings_and_sets_the_mode(engine: Engine) -> None:
    add_region(engine, settings={"counters": 4, "split": {"theta": 0.2}})
    row = run_in_transaction(
        engine,
        lambda s: service.update_region(
            s, REGION, settings={"move_limit": 3, "split": {"seed": 7}}, mode="hold", reason="maintenance"
        ),
    )
    config = run_in_transaction(engine, lambda s: RegionConfig.from_row(region_by_name(s, REGION)))
    assert dict(config.settings) == {"counters": 4, "move_limit": 3, "split": {"theta": 0.2, "seed": 7}}
    assert (row.mode, row.mode_reason) == ("hold", "maintenance")


def test_delete_records_what_went(engine: Engine) -> None:
    add_applied_chain(engine, REGION, (2, 3))
    with pytest.raises(Conflict):
        run_in_transaction(engine, lambda s: service.delete_region(s, REGION))
    deleted = run_in_transaction(engine, lambda s: service.delete_region(s, REGION, force=True))
    assert (deleted["versions"], deleted["plans"], deleted["forced"]) == (2, 1, True)


def test_a_plan_report_is_checked_and_a_retry_changes_nothing(engine: Engine) -> None:
    add_applied_chain(engine, REGION, (2, 3), pending=4)
    pending = plans(engine, "pending")[0]
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        run_in_transaction(engine, lambda s: service.report_plan(s, REGION, pending.id, "done"))
    assert refused.value.field == "state"
    with pytest.raises(NotFound):
        run_in_transaction(engine, lambda s: service.report_plan(s, "other", pending.id, "applied"))
    assert database_dump(engine) == before

    def report(session: Any) -> bool:
        return service.report_plan(session, REGION, pending.id, "applied", moved_rows=5, moved_bytes=50)[1]

    assert run_in_transaction(engine, report) is True
    after = database_dump(engine)
    assert run_in_transaction(engine, report) is False
    assert database_dump(engine) == after
    with pytest.raises(Conflict, match="a retry must repeat them"):
        run_in_transaction(
            engine,
            lambda s: service.report_plan(s, REGION, pending.id, "applied", moved_rows=6, moved_bytes=50),
        )
