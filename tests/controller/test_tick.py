"""One controller tick (DESIGN §8, Gedik §4.5): initialize, measure, analyze, plan, activate.

Every test runs on SQLite and PostgreSQL (the ``engine`` fixture of tests/conftest.py). Snapshots are
what a job would emit (``tests.factories.zipf_snapshot``): Zipf streams counted by ``LossyCounter``,
with slot counts and per-channel measurements whose busy time sets the demand of the
target-utilization policy.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.controller.actions import explain, scale
from repart.controller.settings import ControllerSettings
from repart.controller.tick import (
    TickInput,
    TickResult,
    decide,
    last_considered_seq,
    persist,
    read_tick_input,
    tick,
)
from repart.controller.window import merge_snapshots
from repart.errors import Conflict, InvalidInput
from repart.migration import MigrationPlan
from repart.partitioning import build
from repart.storage import (
    RegionConfig,
    RegionStatus,
    make_engine,
    models,
    read_transaction,
    region_by_name,
    run_in_transaction,
    set_mode,
    set_plan_status,
    upgrade,
    version_function,
)
from repart.storage.jsontext import load_object
from tests.factories import (
    REGION,
    add_zipf_region,
    assert_plans_route_like_functions,
    events,
    ingest,
    ingest_skewed_window,
    plans,
    row_counts,
    versions,
    window_max_mean_load,
    zipf_snapshot,
)

# zipf_snapshot's windows are one minute: the job's batches, whose busy time the policy measures
# against the minute (its utilization is demand · u / N).
MINUTE_BATCHES = {"batch_interval_seconds": 60.0, "utilization_band": [0.3, 0.8]}


def test_first_tick_initializes_and_a_tick_without_snapshots_is_idle(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=3)
    first = tick(engine, REGION)
    assert (first.action, first.version, first.plan_id, first.n_channels) == ("initialized", 1, None, 3)
    [version] = versions(engine)
    assert (version.status, version.n_channels, version.algorithm) == ("applied", 3, "consistent")
    assert version_function(version).explicit == {}
    assert events(engine)[0].kind == "initialized"

    second = tick(engine, REGION)
    assert (second.action, second.version, second.n_channels) == ("idle", None, 3)
    assert "no snapshots" in second.reason
    assert len(events(engine)) == 1


def test_more_load_activates_the_policys_channel_count_with_a_pending_plan(engine: Engine) -> None:
    add_zipf_region(
        engine,
        policy="target-utilization",
        max_channels=8,
        algorithm="redist",
        settings=MINUTE_BATCHES | {"target_utilization": 0.5, "rebalance_threshold": 50.0},
    )
    assert tick(engine, REGION).action == "initialized"
    ingest(engine, *(zipf_snapshot(seq, n_channels=2, demand=3.6) for seq in (1, 2, 3)))

    result = tick(engine, REGION)
    assert isinstance(result, TickResult)
    assert (result.action, result.version, result.n_channels) == ("activated", 2, 4)
    assert result.build_seconds > 0 and result.storage_seconds > 0
    applied, new = versions(engine)
    assert (applied.status, new.status, new.parent_number, new.n_channels) == ("applied", "planned", 1, 4)
    [plan] = plans(engine)
    assert (plan.id, plan.status, plan.from_version, plan.to_version) == (result.plan_id, "pending", 1, 2)
    assert MigrationPlan.from_json(plan.plan_json).source_digest == applied.digest

    event = events(engine)[0]
    data = load_object(event.data_json)
    assert (event.kind, event.rule) == ("activated", "target-utilization")
    assert data["considered_seq"] == 3 and data["window_seqs"] == [2, 3]
    assert data["policy_numbers"]["demand"] == pytest.approx(3.6)
    assert (data["n_before"], data["n_next"], data["algorithm"]) == (2, 4, "redist")
    assert data["predicted_b"] == load_object(new.report_json)["predicted_b"]
    assert data["plan_id"] == plan.id and data["activated_version"] == 2

    again = tick(engine, REGION)
    assert (again.action, again.n_channels) == ("idle", 2)
    assert len(events(engine)) == 2
    assert_plans_route_like_functions(engine)


@pytest.mark.parametrize("tail_aware", [False, True])
def test_fixed_policy_rebalances_a_skewed_window_at_the_same_channel_count(
    engine: Engine, tail_aware: bool
) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist", tail_aware=tail_aware)
    tick(engine, REGION)
    window = zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3)
    ingest(engine, window)

    result = tick(engine, REGION)
    assert (result.action, result.n_channels, result.version) == ("activated", 4, 2)
    event = events(engine)[0]
    data = load_object(event.data_json)
    assert event.rule == "imbalance-threshold"
    assert data["b_before"] > data["threshold"] == 1.0
    assert data["predicted_b"] < data["b_before"]
    # max/mean load beside each b: of the applied function and of the new one, on the window's rows.
    applied, new = (version_function(version) for version in versions(engine))
    assert data["load_before"] == pytest.approx(window_max_mean_load(applied, window), rel=1e-9)
    assert data["predicted_load"] == pytest.approx(window_max_mean_load(new, window), rel=1e-9)
    assert data["predicted_load"] == load_object(versions(engine)[1].report_json)["predicted_load"]
    assert data["policy"] == "fixed"
    assert load_object(versions(engine)[1].report_json)["algorithm"] == "redist"
    assert_plans_route_like_functions(engine)


def test_a_balanced_window_within_the_threshold_is_unchanged_once(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=2, settings={"rebalance_threshold": 100.0})
    tick(engine, REGION)
    window = zipf_snapshot(1, n_channels=2, demand=2, exponent=0.5)
    ingest(engine, window)

    result = tick(engine, REGION)
    assert (result.action, result.version, result.plan_id, result.n_channels) == ("unchanged", None, None, 2)
    event = events(engine)[0]
    data = load_object(event.data_json)
    assert (event.kind, event.rule) == ("no-change", "fixed")
    assert data["considered_seq"] == 1 and data["b_before"] <= 100.0
    applied = version_function(versions(engine)[0])
    assert data["load_before"] == pytest.approx(window_max_mean_load(applied, window), rel=1e-9)
    assert "predicted_load" not in data  # nothing was built
    assert "within threshold" in event.message
    assert tick(engine, REGION).action == "idle"
    assert len(versions(engine)) == 1 and not plans(engine)


def test_a_tick_while_a_plan_is_applying_is_blocked_and_writes_nothing(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    plan_id = tick(engine, REGION).plan_id
    assert plan_id is not None
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applying"))
    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.4))
    before = row_counts(engine)

    result = tick(engine, REGION)
    assert (result.action, result.version, result.plan_id) == ("blocked", None, None)
    assert f"plan {plan_id} is being applied" in result.reason
    assert row_counts(engine) == before
    assert [plan.status for plan in plans(engine)] == ["applying"]


def test_a_new_plan_supersedes_the_pending_one(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    first = tick(engine, REGION)
    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.6))

    second = tick(engine, REGION)
    assert (second.action, second.version) == ("activated", 3)
    assert [(p.id, p.status, p.from_version) for p in plans(engine)] == [
        (first.plan_id, "superseded", 1),
        (second.plan_id, "pending", 1),
    ]
    assert_plans_route_like_functions(engine)


def test_auto_records_all_three_candidates(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="auto")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))

    assert tick(engine, REGION).action == "activated"
    new = versions(engine)[1]
    report = load_object(new.report_json)
    names = [candidate["algorithm"] for candidate in report["candidates"]]
    assert names == ["scan", "redist", "readj"]
    best = min(report["candidates"], key=lambda candidate: candidate["objective"])
    assert report["algorithm"] == f"auto:{best['algorithm']}"
    assert new.algorithm == "auto"
    assert load_object(events(engine)[0].data_json)["candidates"] == report["candidates"]
    # Each candidate's max/mean load is that of the function its algorithm builds alone on the window.
    window = zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3)
    applied = version_function(versions(engine)[0])
    config = read_transaction(engine, lambda session: RegionConfig.from_row(region_by_name(session, REGION)))
    params = ControllerSettings.from_config(config).params
    for candidate in report["candidates"]:
        alone = build(applied, merge_snapshots([window]), 4, params, candidate["algorithm"]).function
        assert candidate["predicted_load"] == pytest.approx(window_max_mean_load(alone, window), rel=1e-9)
    assert report["predicted_load"] == pytest.approx(
        window_max_mean_load(version_function(new), window), rel=1e-9
    )
    assert_plans_route_like_functions(engine)


def test_a_scale_down_waits_for_its_delay_in_batches_and_the_event_names_the_rule(engine: Engine) -> None:
    add_zipf_region(
        engine,
        policy="target-utilization",
        n_channels_initial=8,
        max_channels=8,
        algorithm="consistent",
        settings=MINUTE_BATCHES
        | {"target_utilization": 0.5, "rebalance_threshold": 50.0, "scale_down_delay": 2},
    )
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=8, demand=1.5))  # utilization 0.09, below the band
    held = tick(engine, REGION)
    assert (held.action, held.n_channels) == ("unchanged", 8)
    assert "scale-down delay" in held.reason
    data = load_object(events(engine)[0].data_json)
    assert data["held_by"] == "scale-down-delay" and data["policy_numbers"]["batches_below_band"] == 1
    with Session(engine) as session:
        assert explain(session, REGION)["held_by"] == "scale-down-delay"
    ingest(engine, zipf_snapshot(2, n_channels=8, demand=1.5))
    scaled = tick(engine, REGION)
    assert (scaled.action, scaled.n_channels) == ("activated", 4)  # at most half the channels go


def test_settings_are_checked_by_name() -> None:
    config = RegionConfig(key_type="int", n_channels_initial=2, settings={"counters": 1})
    with pytest.raises(InvalidInput, match=r"settings\.counters"):
        ControllerSettings.from_config(config)
    config = RegionConfig(key_type="int", n_channels_initial=2, settings={"treshold": 1})
    with pytest.raises(InvalidInput, match=r"settings\.treshold is not a parameter"):
        ControllerSettings.from_config(config)
    config = RegionConfig(
        key_type="int", n_channels_initial=2, policy="target-utilization", settings={"target_utilization": 0}
    )
    with pytest.raises(InvalidInput, match=r"settings\.target_utilization"):
        ControllerSettings.from_config(config)
    settings = ControllerSettings.from_config(RegionConfig(key_type="int", n_channels_initial=2))
    assert (settings.counters, settings.rebalance_threshold, settings.algorithm) == (3, 1.0, "auto")


def test_now_must_be_timezone_aware(engine: Engine) -> None:
    add_zipf_region(engine)
    with pytest.raises(InvalidInput, match="timezone-aware"):
        tick(engine, REGION, now=datetime(2026, 1, 1))


def test_a_build_that_reproduces_the_applied_function_is_unchanged(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="consistent")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))

    result = tick(engine, REGION)
    assert (result.action, result.version, result.n_channels) == ("unchanged", None, 4)
    assert "reproduced the applied version 1" in result.reason
    event = events(engine)[0]
    assert (event.kind, event.rule) == ("no-change", "imbalance-threshold")
    assert len(versions(engine)) == 1 and not plans(engine)


def region_row(engine: Engine) -> models.Region:
    return run_in_transaction(engine, lambda session: region_by_name(session, REGION))


def test_the_status_is_kept_on_the_region_row(engine: Engine) -> None:
    add_zipf_region(
        engine,
        policy="target-utilization",
        max_channels=8,
        algorithm="redist",
        settings=MINUTE_BATCHES | {"target_utilization": 0.5, "rebalance_threshold": 50.0},
    )
    assert RegionStatus.of(region_row(engine)) == RegionStatus()
    start = datetime(2026, 2, 1, tzinfo=UTC)
    tick(engine, REGION, now=start)
    assert RegionStatus.of(region_row(engine)) == RegionStatus(1, 1, None, None)
    ingest(engine, zipf_snapshot(1, n_channels=2, demand=3.6))
    changed = tick(engine, REGION, now=start + timedelta(minutes=1))
    assert (changed.action, changed.n_channels) == ("activated", 4)
    assert RegionStatus.of(region_row(engine)) == RegionStatus(1, 2, 1, start + timedelta(minutes=1))
    assert versions(engine)[1].created_at == start + timedelta(minutes=1)
    ingest(engine, zipf_snapshot(2, n_channels=2, demand=2.0))
    kept = tick(engine, REGION, now=start + timedelta(minutes=2))
    assert kept.action == "unchanged" and "inside the band" in kept.reason
    assert RegionStatus.of(region_row(engine)) == RegionStatus(1, 2, 2, start + timedelta(minutes=1))
    plan_id = changed.plan_id
    assert plan_id is not None
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, s=status: set_plan_status(session, plan_id, s))
    assert RegionStatus.of(region_row(engine)).applied_version == 2
    with Session(engine) as session:
        assert last_considered_seq(session, REGION) == 2


def test_an_idle_tick_reads_the_status_and_never_the_window(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_zipf_region(engine, n_channels_initial=4, settings={"rebalance_threshold": 100.0})
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4))
    assert tick(engine, REGION).action == "unchanged"

    def refuse(*_: object) -> None:
        raise AssertionError("an idle tick loaded the window")

    monkeypatch.setattr("repart.controller.tick.latest_snapshots", refuse)
    idle = tick(engine, REGION)
    assert (idle.action, idle.write_seconds) == ("idle", 0.0)
    assert "window seq 1, already decided on" in idle.reason


def test_decide_is_a_pure_function_of_what_was_read_and_now(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    tick_input = read_transaction(engine, lambda session: read_tick_input(session, REGION))
    before = row_counts(engine)
    engine.dispose()
    now = datetime(2026, 3, 1, tzinfo=UTC)
    first, second = decide(tick_input, now), decide(tick_input, now)
    assert first.action == second.action == "activated"
    assert first.version is not None and second.version is not None
    assert first.version.digest == second.version.digest and first.considered_seq == 1
    assert row_counts(engine) == before


def test_a_decision_on_a_status_that_changed_since_the_read_is_refused(engine: Engine) -> None:
    """Another tick persisted first: the stale decision is a Conflict and writes nothing (DESIGN §12.2)."""
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    now = datetime.now(UTC)
    stale = read_transaction(engine, lambda session: read_tick_input(session, REGION))
    verdict = decide(stale, now)
    assert tick(engine, REGION).action == "activated"
    before = row_counts(engine)
    with pytest.raises(Conflict, match="changed since its status was read"):
        run_in_transaction(engine, lambda session: persist(session, stale, verdict, now, None))
    assert row_counts(engine) == before
    assert [v.number for v in versions(engine)] == [1, 2]


def test_a_plan_applied_between_read_and_write_makes_the_decision_a_conflict(engine: Engine) -> None:
    """A job applies the pending plan after the tick read the region: the decision's plan starts at the
    version that was applied then, and the stale decision is a Conflict (retry), not an InvalidInput."""
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    pending = tick(engine, REGION).plan_id
    assert pending is not None
    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.6))
    now = datetime.now(UTC)
    stale = read_transaction(engine, lambda session: read_tick_input(session, REGION))
    verdict = decide(stale, now)
    assert verdict.action == "activated" and verdict.version is not None
    assert verdict.version.parent_number == 1
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, status=status: set_plan_status(session, pending, status))
    before = row_counts(engine)
    with pytest.raises(Conflict, match=r"applied version 1, latest version 2, .*; now applied version 2"):
        run_in_transaction(engine, lambda session: persist(session, stale, verdict, now, None))
    assert row_counts(engine) == before


def window_tick_input(engine: Engine, threshold: float, mode: str = "auto") -> TickInput:
    """What a tick reads of a 4-channel ``redist`` region in ``mode``, initialized, with window 1
    waiting, skewed (a rebalance threshold of 100 keeps the function, 1 rebuilds it)."""
    add_zipf_region(
        engine, n_channels_initial=4, algorithm="redist", settings={"rebalance_threshold": threshold}
    )
    tick(engine, REGION)
    if mode != "auto":
        run_in_transaction(engine, lambda session: set_mode(session, REGION, mode, None))
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    return read_transaction(engine, lambda session: read_tick_input(session, REGION))


def test_an_operator_action_makes_a_pending_decision_stale(engine: Engine) -> None:
    stale = window_tick_input(engine, threshold=100.0)
    now = datetime.now(UTC)
    verdict = decide(stale, now)
    assert verdict.action == "unchanged"
    scaled = scale(engine, REGION, 6)
    assert RegionStatus.of(region_row(engine)).latest_version == scaled.version
    before = row_counts(engine)
    with pytest.raises(Conflict, match="latest version 1, considered window seq None, mode auto; now"):
        run_in_transaction(engine, lambda session: persist(session, stale, verdict, now, None))
    assert row_counts(engine) == before


def test_a_hold_between_read_and_write_discards_the_decision(engine: Engine) -> None:
    stale = window_tick_input(engine, threshold=1.0)
    now = datetime.now(UTC)
    verdict = decide(stale, now)
    assert verdict.action == "activated"
    run_in_transaction(engine, lambda session: set_mode(session, REGION, "hold", "incident"))
    before = row_counts(engine)
    with pytest.raises(Conflict, match=r"mode auto; now .* mode hold"):
        run_in_transaction(engine, lambda session: persist(session, stale, verdict, now, None))
    assert row_counts(engine) == before
    held = read_transaction(engine, lambda session: read_tick_input(session, REGION))
    assert (held.window, held.applied_function, held.mode_reason) == ((), None, "incident")  # nothing loaded
    assert decide(held, now).action == "held"


def test_a_recommendation_is_what_auto_would_activate(engine: Engine) -> None:
    tick_input = window_tick_input(engine, threshold=1.0, mode="recommend")
    now = datetime.now(UTC)
    recommended = decide(tick_input, now)
    auto = decide(
        dataclasses.replace(tick_input, status=dataclasses.replace(tick_input.status, mode="auto")), now
    )
    assert (recommended.action, auto.action) == ("recommended", "activated")
    assert recommended.version is None and recommended.plan is None  # nothing to activate
    assert auto.version is not None and auto.plan is not None and recommended.event is not None
    data = recommended.event.data
    assert (data["digest"], data["n_channels"]) == (auto.version.digest, auto.version.n_channels)
    assert data["plan"]["explicit_moves"] == len(auto.plan.explicit_moves)
    assert data["plan"]["slot_moves"] == len(auto.plan.slot_moves)
    assert auto.event is not None
    for number in ("predicted_b", "predicted_load", "predicted_m", "b_before", "load_before"):
        assert data[number] == auto.event.data[number]
    before = row_counts(engine)
    assert tick(engine, REGION).action == "recommended"
    after = row_counts(engine)
    assert (after["versions"], after["plans"], after["events"]) == (
        before["versions"],
        before["plans"],
        before["events"] + 1,
    )


def test_the_tick_reads_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'repart.db'}"
    upgrade(url)
    engine = make_engine(url, busy_timeout=0.05)
    try:
        add_zipf_region(engine, n_channels_initial=3)
        tick(engine, REGION)
        holder = sqlite3.connect(tmp_path / "repart.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            assert tick(engine, REGION).action == "idle"  # reads only
            ingest_later = zipf_snapshot(1, n_channels=3, demand=3)
            with pytest.raises(Conflict, match="database is locked"):
                ingest(engine, ingest_later)
        finally:
            holder.rollback()
            holder.close()
    finally:
        engine.dispose()


def test_a_rebalance_over_the_migration_budget_is_a_recorded_no_change(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist", settings={"migration_budget": 0.1})
    tick(engine, REGION)
    window = zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3)
    ingest(engine, window)
    result = tick(engine, REGION)
    assert (result.action, result.n_channels) == ("unchanged", 4)
    event = events(engine)[0]
    data = load_object(event.data_json)
    assert (event.kind, event.rule) == ("no-change", "migration-budget")
    assert data["moved_state_share"] == pytest.approx(data["plan_m"] / 4) and data["moved_state_share"] > 0.1
    assert "over the budget 0.1" in event.message
    assert data["moved_rows"] == round(data["moved_state_share"] * window.distinct_estimate)
    assert data["moved_bytes"] == round(data["moved_state_share"] * 4 * 1000)  # 1000 state bytes per channel
    assert len(versions(engine)) == 1 and not plans(engine)


def test_a_rebalance_whose_gain_does_not_pay_for_its_move_is_a_recorded_no_change(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    first = tick(engine, REGION)
    assert first.action == "activated"  # from p(0): b 4.35 -> about 1, worth moving a quarter
    assert first.plan_id is not None
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, s=status: set_plan_status(session, first.plan_id, s))
    # A window close to the first: a rebuild gains little, under jump and prefix alike (at exponent 1.6
    # prefix's rebuild gains 0.015 in b for m 0.036, which pays within 10 batches).
    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.4))
    result = tick(engine, REGION)
    assert result.action == "unchanged"
    event = events(engine)[0]
    data = load_object(event.data_json)
    assert event.rule == "rebalance-gain" and "within 10 batch(es) under the utility APM" in event.message
    assert data["predicted_b"] + data["predicted_m"] / 10 >= data["b_before"] > data["threshold"]
    assert len(versions(engine)) == 2


@pytest.mark.parametrize(("payback", "action"), [(1, "unchanged"), (2, "activated"), (None, "activated")])
def test_a_rebalance_pays_for_its_move_within_the_payback_batches(
    engine: Engine, payback: int | None, action: str
) -> None:
    """b 1.83 -> 0.92 at m 0.94 (a quarter of the state): under APM the move pays over H batches when
    b' + m / H < b, i.e. H > m / (b - b') = 1.03: not in one batch, in two, and in the default 10."""
    settings: dict[str, Any] = {"rebalance_threshold": 0.5}
    if payback is not None:
        settings["rebalance_payback_batches"] = payback
    add_zipf_region(engine, n_channels_initial=4, algorithm="redist", settings=settings)
    assert tick(engine, REGION).action == "initialized"
    ingest_skewed_window(engine, 1)
    result = tick(engine, REGION)
    assert result.action == action
    event = events(engine)[0]
    data = load_object(event.data_json)
    b_after, m, b_before = data["predicted_b"], data["predicted_m"], data["b_before"]
    horizon = 10 if payback is None else payback
    assert b_before > data["threshold"]
    assert (b_after + m / horizon < b_before) == (action == "activated")
    if action == "unchanged":
        assert event.rule == "rebalance-gain" and "within 1 batch(es) under the utility APM" in event.message
        assert len(versions(engine)) == 1
    else:
        assert event.kind == "activated" and len(versions(engine)) == 2


@pytest.mark.parametrize(
    ("utility", "cost", "payback", "action"),
    [
        ("A", lambda b, m: b, 1, "activated"),  # any gain in b pays
        ("APLM", lambda b, m: b + math.log1p(m), 1, "unchanged"),
        ("APLM", lambda b, m: b + math.log1p(m), 10, "activated"),
        ("ATM", lambda b, m: b * (1 + m), 1, "activated"),
        ("ATM", lambda b, m: b * (1 + m), 10, "activated"),
        ("ATLM", lambda b, m: b * (1 + math.log1p(m)), 10, "unchanged"),
    ],
)
def test_the_rebalance_gain_is_judged_under_the_regions_utility(
    engine: Engine, utility: str, cost: Callable[[float, float], float], payback: int, action: str
) -> None:
    """The move's batch costs U(b', m), each of the next H - 1 costs b': the rebalance happens when
    that mean is below b."""
    settings = {"migration_budget": 1.0, "rebalance_payback_batches": payback}
    add_zipf_region(  # jump: the actions above were worked out on its slot table
        engine,
        n_channels_initial=4,
        algorithm="redist",
        utility=utility,
        settings=settings,
        consistent_method="jump",
    )
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    first = tick(engine, REGION)
    assert first.action == "activated" and first.plan_id is not None
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, s=status: set_plan_status(session, first.plan_id, s))
    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.2))
    result = tick(engine, REGION)
    event = events(engine)[0]
    data = load_object(event.data_json)
    assert data["utility"] == utility
    b_after, m, b_before = data["predicted_b"], data["predicted_m"], data["b_before"]
    assert b_before > data["threshold"]
    pays = (cost(b_after, m) + (payback - 1) * b_after) / payback < b_before
    assert result.action == action == ("activated" if pays else "unchanged")
    if not pays:
        assert event.rule == "rebalance-gain" and f"utility {utility}" in event.message


def test_an_ineffective_scale_up_holds_further_ones_until_n_changes_again(engine: Engine) -> None:
    """After 2 -> 4 channels whose busiest channel is as busy as before (the capacity did not rise), every
    later tick holds the scale-up, also once the policy's history window holds only batches at 4."""
    add_zipf_region(
        engine,
        policy="target-utilization",
        max_channels=8,
        settings=MINUTE_BATCHES | {"target_utilization": 0.5, "rebalance_threshold": 50.0},
    )
    tick(engine, REGION)
    ingest(engine, dataclasses.replace(zipf_snapshot(1, n_channels=2, demand=4.0), version=1))
    scaled = tick(engine, REGION)
    assert (scaled.action, scaled.n_channels) == ("activated", 4)
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, s=status: set_plan_status(session, scaled.plan_id, s))
    history_batches = ControllerSettings.from_config(
        RegionConfig(
            key_type="int", n_channels_initial=2, policy="target-utilization", settings=MINUTE_BATCHES
        )
    ).policy.history_batches
    for seq in range(2, history_batches + 5):
        # Each channel as busy as at 2 channels: demand 8 at 4 channels, the capacity unchanged.
        ingest(engine, dataclasses.replace(zipf_snapshot(seq, n_channels=4, demand=8.0), version=2))
        held = tick(engine, REGION)
        assert (held.action, held.n_channels) == ("unchanged", 4), seq
        assert load_object(events(engine)[0].data_json)["held_by"] == "effectiveness", seq


def test_a_tick_carries_the_b_its_decision_event_recorded(engine: Engine) -> None:
    add_zipf_region(engine, settings={"rebalance_threshold": 50.0})
    first = tick(engine, REGION)
    assert (first.action, first.b_before) == ("initialized", None)  # p(0) measured no window
    ingest(engine, *(zipf_snapshot(seq, n_channels=2, demand=1.0) for seq in (1, 2)))

    decided = tick(engine, REGION)
    assert decided.action == "unchanged"
    recorded = load_object(events(engine)[0].data_json)["b_before"]
    assert isinstance(recorded, float) and recorded > 0
    assert decided.b_before == recorded
    idle = tick(engine, REGION)
    assert (idle.action, idle.b_before) == ("idle", None)
