"""Plan retention: the moves of old plans are pruned (by options, by the region's settings, by the daemon),
each pruned plan's summary stays in the audit log, and the applied version's plan is never pruned."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

import repart.storage.retention as retention_module
from repart.controller import service
from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.settings import ControllerSettings, plan_retention
from repart.errors import InvalidInput
from repart.migration import MigrationPlan
from repart.storage import RegionConfig, models, run_in_transaction
from repart.storage.client import SqlControllerClient
from repart.storage.jsontext import load_object
from repart.storage.retention import OPERATOR_RULE, SETTINGS_RULE, PlanRetention, prune_plans
from tests.cli.helpers import one_error, repart
from tests.factories import REGION, add_applied_chain, database_dump, plans

CHANNELS = (2, 3, 4, 5)  # versions 1 (p^(0)) to 4, each later one applied: plans to 2, 3 and 4
PENDING = 6  # version 5, its plan pending


def move_counts(engine: Engine) -> dict[int, int]:
    """The number of ``plan_moves`` rows of each plan, by plan id (plans without moves left out)."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(models.PlanMove.plan_id, func.count()).group_by(models.PlanMove.plan_id)
        ).all()
    return {plan_id: count for plan_id, count in rows}


def pruned_events(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        rows = connection.execute(
            select(models.Event.data_json).where(models.Event.kind == "plan-pruned").order_by(models.Event.id)
        ).all()
    return [load_object(data) for (data,) in rows]


def prune(engine: Engine, now: datetime | None = None, **options: Any) -> list[int]:
    pruned = run_in_transaction(engine, lambda s: service.prune_plans(s, REGION, now=now, **options))
    return [plan.summary["id"] for plan in pruned]


@pytest.fixture
def chain(engine: Engine) -> dict[int, models.Plan]:
    """The region's plans by target version: 2, 3, 4 applied (4 is the applied version), 5 pending."""
    add_applied_chain(engine, REGION, CHANNELS, pending=PENDING)
    by_target = {plan.to_version: plan for plan in plans(engine)}
    assert {v: p.status for v, p in by_target.items()} == {
        2: "applied",
        3: "applied",
        4: "applied",
        5: "pending",
    }
    return by_target


def test_keep_versions_prunes_the_plans_to_older_versions_and_keeps_their_summary(
    engine: Engine, chain: dict[int, models.Plan]
) -> None:
    moves_before = move_counts(engine)
    assert all(moves_before.get(plan.id, 0) > 0 for plan in chain.values())
    assert prune(engine, keep_versions=3) == [chain[2].id]  # keeps versions 3, 4, 5
    assert prune(engine, keep_versions=2) == [chain[3].id]  # keeps 4 (applied) and 5 (pending)
    assert prune(engine, keep_versions=2) == []  # nothing left to prune
    after = {plan.to_version: plan for plan in plans(engine)}
    for version in (2, 3):
        assert after[version].plan_json is None and after[version].pruned_at is not None
        assert after[version].status == chain[version].status  # the row and its numbers stay
        assert after[version].explicit_moves == chain[version].explicit_moves
    for version in (4, 5):
        assert after[version].plan_json == chain[version].plan_json and after[version].pruned_at is None
    kept = {plan_id: n for plan_id, n in moves_before.items() if plan_id not in (chain[2].id, chain[3].id)}
    assert move_counts(engine) == kept
    summaries = pruned_events(engine)
    assert [s["id"] for s in summaries] == [chain[2].id, chain[3].id]
    for summary, version in zip(summaries, (2, 3), strict=True):
        original = chain[version]
        plan = MigrationPlan.from_json(original.plan_json or "")
        assert summary["deleted_moves"] == moves_before[original.id]
        assert (summary["from_version"], summary["to_version"]) == (original.from_version, version)
        assert (summary["explicit_moves"], summary["slot_moves"]) == (
            len(plan.explicit_moves),
            len(plan.slot_moves),
        )
        assert summary["digest"] == plan.digest and summary["predicted_m"] == original.predicted_m


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"keep_versions": 1}, "keep_versions"),  # version 4, the applied one, is not the newest
        ({"older_than": 0.5}, "older_than"),  # a day later every plan is older than half a day
        ({"keep_versions": 3, "older_than": 0.5}, "older_than"),
    ],
)
def test_options_that_would_prune_the_applied_versions_plan_are_refused_and_write_nothing(
    engine: Engine, chain: dict[int, models.Plan], options: dict[str, Any], field: str
) -> None:
    later = datetime.now(UTC) + timedelta(days=1)
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        prune(engine, now=later, **options)
    assert refused.value.field == field
    assert "applied version 4" in str(refused.value)
    assert database_dump(engine) == before


def test_older_than_prunes_the_finished_plans_created_before_then(
    engine: Engine, chain: dict[int, models.Plan]
) -> None:
    assert prune(engine, older_than=1.0) == []  # all were created just now
    # From the settings, the applied version's plan is left out instead of refused.
    run_in_transaction(engine, lambda s: service.update_region(s, REGION, settings={"plan_keep_days": 0.5}))
    assert prune(engine, now=datetime.now(UTC) + timedelta(days=1)) == [chain[2].id, chain[3].id]
    assert [p.pruned_at is None for p in plans(engine)] == [False, False, True, True]


def test_a_region_without_retention_settings_needs_an_option(
    engine: Engine, chain: dict[int, models.Plan]
) -> None:
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        prune(engine)
    assert refused.value.field == "keep_versions"
    assert database_dump(engine) == before


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"keep_versions": 0}, "keep_versions"),
        ({"keep_versions": 1.5}, "keep_versions"),
        ({"older_than": 0}, "older_than"),
        ({"older_than": -1.0}, "older_than"),
        ({}, "keep_versions"),
    ],
)
def test_bad_retention_names_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        PlanRetention(**options)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"plan_keep_versions": 0}, "settings.plan_keep_versions"),
        ({"plan_keep_days": 0}, "settings.plan_keep_days"),
    ],
)
def test_bad_retention_settings_are_refused_when_the_region_is_updated(
    engine: Engine, chain: dict[int, models.Plan], settings: dict[str, Any], field: str
) -> None:
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        run_in_transaction(engine, lambda s: service.update_region(s, REGION, settings=settings))
    assert refused.value.field == field
    assert database_dump(engine) == before


def test_the_cli_prunes_with_json_and_refuses_in_one_line(
    engine: Engine, db_url: str, chain: dict[int, models.Plan]
) -> None:
    before = database_dump(engine)
    refused = repart(db_url, "plans", "prune", REGION, "--keep-versions", "1", "--json")
    assert refused.exit_code == 2
    assert one_error(refused.output).startswith("error: --keep-versions must be at least 2")
    assert database_dump(engine) == before
    done = repart(db_url, "plans", "prune", REGION, "--keep-versions", "2", "--json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    assert shown["region"] == REGION
    assert [p["id"] for p in shown["pruned"]] == [chain[2].id, chain[3].id]
    pruned = repart(db_url, "plans", "show", REGION, str(chain[2].id), "--json")
    assert json.loads(pruned.stdout)["plan"] is None and json.loads(pruned.stdout)["pruned_at"] is not None


def test_the_daemon_prunes_by_the_regions_settings_after_a_tick(
    engine: Engine, chain: dict[int, models.Plan]
) -> None:
    run_in_transaction(engine, lambda s: service.update_region(s, REGION, settings={"plan_keep_versions": 1}))
    daemon = Daemon(engine, DaemonConfig(interval_seconds=1, lease_ttl_seconds=5, holder="a"))
    try:
        daemon.sweep()
        deadline = time.monotonic() + 30
        while daemon.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        daemon.stop()
    # keep 1 version: only 5 (pending) would stay, but the applied version 4's plan is kept
    assert [p["id"] for p in pruned_events(engine)] == [chain[2].id, chain[3].id]
    with engine.connect() as connection:
        rules = (
            connection.execute(select(models.Event.rule).where(models.Event.kind == "plan-pruned"))
            .scalars()
            .all()
        )
    assert rules == ["retention", "retention"]


def test_two_concurrent_prunes_prune_each_plan_once(engine: Engine, chain: dict[int, models.Plan]) -> None:
    """A prune that has not committed yet and a second one of the same region: the second waits for
    the first (the region row's lock) and finds nothing left, so each plan has one ``plan-pruned``
    event and the counts add up to the rows that existed."""
    moves_before = move_counts(engine)
    retention = PlanRetention(keep_versions=2)
    first = Session(engine)
    first.begin()
    second: dict[str, Any] = {}

    def prune_meanwhile() -> None:
        try:
            with Session(engine) as session, session.begin():
                second["pruned"] = prune_plans(
                    session, REGION, retention, datetime.now(UTC), strict=False, rule=OPERATOR_RULE
                )
        except Exception as error:  # reported by the assertion below
            second["error"] = error

    try:
        now = datetime.now(UTC)
        pruned_first = prune_plans(first, REGION, retention, now, strict=False, rule=SETTINGS_RULE)
        thread = threading.Thread(target=prune_meanwhile)
        thread.start()
        time.sleep(1.0)  # the second prune runs into the first's lock (or its BEGIN IMMEDIATE on SQLite)
        first.commit()
    finally:
        first.close()
    thread.join(30)
    assert "error" not in second, second.get("error")
    assert [p.summary["id"] for p in pruned_first] == [chain[2].id, chain[3].id]
    assert second["pruned"] == []
    assert [p.deleted_moves for p in pruned_first] == [moves_before[chain[2].id], moves_before[chain[3].id]]
    assert [s["id"] for s in pruned_events(engine)] == [chain[2].id, chain[3].id]


def test_a_plan_applied_during_a_prune_is_not_pruned(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job reports the pending plan applied while a prune runs: it waits for the prune's lock on the
    region row, so the prune never sees the new applied version's plan as an old one."""
    add_applied_chain(engine, REGION, (2, 3), pending=4)  # version 2 applied, the plan to 3 pending
    pending = plans(engine, "pending")[0]
    job: dict[str, Any] = {}

    def report() -> None:
        try:
            client = SqlControllerClient(engine, source="job")
            claimed = client.claim_next_plan(REGION)
            assert claimed is not None and claimed.plan_id == pending.id
            client.report_plan(pending.id, "applied", moved_rows=1)
        except Exception as error:  # reported by the assertion below
            job["error"] = error

    original = retention_module._selected

    def selected_after_the_job(*args: Any) -> list[models.Plan]:
        thread = threading.Thread(target=report)
        thread.start()
        job["thread"] = thread
        thread.join(1.0)  # done at once without a lock; blocked by the prune's lock otherwise
        return original(*args)

    monkeypatch.setattr(retention_module, "_selected", selected_after_the_job)
    later = datetime.now(UTC) + timedelta(days=1)
    retention = PlanRetention(older_than=0.5)
    pruned = run_in_transaction(
        engine, lambda s: prune_plans(s, REGION, retention, later, strict=False, rule=SETTINGS_RULE)
    )
    job["thread"].join(30)
    assert "error" not in job, job.get("error")
    assert pruned == []
    after = {plan.to_version: plan for plan in plans(engine)}
    assert after[3].status == "applied" and after[3].pruned_at is None and after[3].plan_json is not None


def test_the_older_than_refusal_names_a_value_that_keeps_the_plan(
    engine: Engine, chain: dict[int, models.Plan]
) -> None:
    """The applied version's plan is a day and a few milliseconds old: the refusal rounds its age up,
    and the value it names keeps the plan."""
    later = chain[4].created_at + timedelta(days=1, milliseconds=50)
    with pytest.raises(InvalidInput) as refused:
        prune(engine, now=later, older_than=1.0)
    assert refused.value.field == "older_than"
    assert refused.value.requirement.startswith("must be at least 1.001 days to keep the plan of the applied")
    assert refused.value.requirement.endswith("got 1")
    assert prune(engine, now=later, older_than=1.001) == []  # accepted: every plan is as young


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"plan_keep_versions": 3},
        {"plan_keep_days": 7},
        {"plan_keep_days": 2, "plan_keep_versions": 1, "rebalance_threshold": 0.2, "counters": 4},
    ],
)
def test_the_daemons_retention_read_is_the_one_the_settings_make(settings: dict[str, Any]) -> None:
    config = RegionConfig(key_type="int", n_channels_initial=2, settings=settings)
    expected = ControllerSettings.from_config(config).retention
    assert plan_retention(settings) == expected


def test_the_daemons_retention_read_names_a_bad_value() -> None:
    with pytest.raises(InvalidInput) as refused:
        plan_retention({"plan_keep_days": -1})
    assert refused.value.field == "settings.plan_keep_days"
