"""Operator actions (DESIGN §6–§8, §10): rollback, scale and explain, on a migrated SQLite file.

Snapshots are ``tests.factories.zipf_snapshot`` windows (Zipf streams counted by ``LossyCounter``
with slot counts and channel measurements); every refusal must leave every table as it was.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine

from repart.controller import actions
from repart.controller import build as build_module
from repart.controller.actions import ActionResult, explain, rollback, scale
from repart.controller.tick import tick
from repart.errors import Conflict, InvalidInput, NotFound
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import ConsistentSpec, build, initial_function
from repart.storage import run_in_transaction, set_plan_status, version_function
from repart.storage.jsontext import load_object
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    add_zipf_region,
    assert_plans_route_like_functions,
    events,
    ingest,
    plans,
    row_counts,
    strip_max_mean_load,
    versions,
    window_max_mean_load,
    zipf_snapshot,
)


@pytest.fixture
def backend() -> str:
    """The ``engine`` of these tests is a migrated SQLite file (tests/storage covers PostgreSQL)."""
    return "sqlite"


def apply(engine: Engine, plan_id: int) -> None:
    """Take a plan through applying to applied, as a job would."""
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applying"))
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applied"))


def rebalanced_and_applied(engine: Engine, algorithm: str = "redist") -> None:
    """Version 1 (p^(0) on 4 channels), then version 2 built by tick on a skewed window, applied."""
    add_zipf_region(engine, n_channels_initial=4, max_channels=8, algorithm=algorithm)
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    plan_id = tick(engine, REGION).plan_id
    assert plan_id is not None
    apply(engine, plan_id)


def test_rollback_writes_a_new_version_with_the_old_function_and_a_plan_from_the_applied_one(
    engine: Engine,
) -> None:
    rebalanced_and_applied(engine)
    first, second = versions(engine)
    contents = [(v.number, v.digest, v.function_json) for v in (first, second)]
    moment = datetime(2026, 2, 1, tzinfo=UTC)

    result = rollback(engine, REGION, 1, reason="bad rebuild", now=moment)
    assert isinstance(result, ActionResult)
    assert (result.action, result.version, result.from_version, result.n_channels) == ("rollback", 3, 2, 4)
    assert result.digest == first.digest and result.plan_m is not None
    old_one, old_two, new = versions(engine)
    assert [(v.number, v.digest, v.function_json) for v in (old_one, old_two)] == contents
    assert (new.digest, new.function_json, new.parent_number) == (first.digest, first.function_json, 2)
    assert (old_two.status, new.status) == ("applied", "planned")
    assert load_object(new.report_json)["rollback_of"] == 1

    plan = plans(engine, "pending")[0]
    assert (plan.id, plan.from_version, plan.to_version) == (result.plan_id, 2, 3)
    stored = MigrationPlan.from_json(plan.plan_json)
    assert (stored.source_digest, stored.target_digest) == (second.digest, first.digest)
    assert_plans_route_like_functions(engine)

    held, event = events(engine)[:2]
    data = load_object(event.data_json)
    assert (event.kind, event.rule, event.at) == ("rollback", "operator", moment)
    assert (data["to_version"], data["from_version"], data["activated_version"]) == (1, 2, 3)
    assert data["b_before"] is not None and data["predicted_m"] is not None
    # max/mean load beside each b, on the window: of the applied version 2, and of version 1's function.
    window = zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3)
    assert data["load_before"] == pytest.approx(
        window_max_mean_load(version_function(second), window), rel=1e-9
    )
    assert data["predicted_load"] == pytest.approx(
        window_max_mean_load(version_function(first), window), rel=1e-9
    )
    # The rollback holds the region (DESIGN §12.3), with the operator's reason, in the same transaction.
    reason = "operator rolled back from version 2 to the function of version 1: bad rebuild"
    assert (result.mode, result.mode_reason) == ("hold", reason)
    assert (held.kind, held.at, load_object(held.data_json)) == (
        "mode-changed",
        moment,
        {"from": "auto", "to": "hold", "reason": reason},
    )


def test_rollback_refusals_name_the_parameter_and_write_nothing(engine: Engine) -> None:
    rebalanced_and_applied(engine)
    before = row_counts(engine)

    with pytest.raises(NotFound, match=r"--to: .* no version 7; its versions are 1, 2"):
        rollback(engine, REGION, 7)
    with pytest.raises(InvalidInput, match="another function than the applied version 2") as excinfo:
        rollback(engine, REGION, 2)
    assert excinfo.value.field == "to_version"
    assert row_counts(engine) == before

    ingest(engine, zipf_snapshot(2, n_channels=4, demand=4, exponent=1.6))
    plan_id = scale(engine, REGION, 6).plan_id
    assert plan_id is not None
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applying"))
    applying = row_counts(engine)
    with pytest.raises(Conflict, match=f"plan {plan_id} .* is being applied"):
        rollback(engine, REGION, 1)
    assert row_counts(engine) == applying


def test_scale_builds_on_the_window_and_activates_n_with_a_plan(engine: Engine) -> None:
    rebalanced_and_applied(engine, algorithm="auto")
    applied = versions(engine)[1]

    result = scale(engine, REGION, 6)
    assert (result.action, result.version, result.from_version, result.n_channels) == ("scaled", 3, 2, 6)
    new = versions(engine)[2]
    assert (new.n_channels, new.status, new.parent_number) == (6, "planned", 2)
    plan = plans(engine, "pending")[0]
    assert (plan.id, plan.from_version, plan.to_version) == (result.plan_id, 2, 3)
    assert MigrationPlan.from_json(plan.plan_json).source_digest == applied.digest
    assert_plans_route_like_functions(engine)
    held, event = events(engine)[:2]
    data = load_object(event.data_json)
    assert (event.kind, event.rule, data["n_before"], data["n_next"]) == ("scaled", "operator", 4, 6)
    assert (held.kind, result.mode) == ("mode-changed", "hold")
    assert [c["algorithm"] for c in data["candidates"]] == ["scan", "redist", "readj"]
    window = zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3)
    assert data["load_before"] == pytest.approx(
        window_max_mean_load(version_function(applied), window), rel=1e-9
    )
    assert data["predicted_load"] == pytest.approx(
        window_max_mean_load(version_function(new), window), rel=1e-9
    )


def test_scale_without_snapshots_runs_the_consistent_hash_on_n(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=2, max_channels=8)
    tick(engine, REGION)

    result = scale(engine, REGION, 5)
    new = versions(engine)[1]
    expected = initial_function(5, "int", SMALL_SLOT_BITS, ConsistentSpec())
    assert (result.n_channels, result.plan_m, new.digest, new.algorithm) == (
        5,
        None,
        expected.digest,
        "consistent",
    )
    assert plans(engine, "pending")[0].to_version == 2

    apply(engine, result.plan_id)
    back = rollback(engine, REGION, 1)
    assert (back.n_channels, back.digest) == (2, versions(engine)[0].digest)


def test_scale_refuses_n_outside_the_bounds_or_unchanged_and_writes_nothing(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=2, min_channels=2, max_channels=8)
    tick(engine, REGION)
    before = row_counts(engine)
    for n in (1, 9):
        with pytest.raises(
            InvalidInput, match=rf"n_channels must be an integer in \[2, 8\], got {n}"
        ) as excinfo:
            scale(engine, REGION, n)
        assert excinfo.value.field == "n_channels"
    with pytest.raises(
        InvalidInput, match=r"n_channels must differ from the 2 channels .* already runs"
    ) as excinfo:
        scale(engine, REGION, 2)
    assert excinfo.value.field == "n_channels"
    assert row_counts(engine) == before


def test_explain_shows_the_last_decision_with_every_auto_candidate(engine: Engine) -> None:
    add_zipf_region(engine, n_channels_initial=4, algorithm="auto")
    with pytest.raises(NotFound, match="no decision to explain"):
        run_in_transaction(engine, lambda session: explain(session, REGION))
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    assert tick(engine, REGION).action == "activated"

    shown = run_in_transaction(engine, lambda session: explain(session, REGION))
    assert (shown["kind"], shown["rule"], shown["version"]) == ("activated", "imbalance-threshold", 2)
    assert shown["policy"] == "fixed" and shown["b_before"] > shown["threshold"]
    assert shown["predicted_b"] == shown["data"]["predicted_b"] and shown["predicted_m"] is not None
    assert [c["algorithm"] for c in shown["candidates"]] == ["scan", "redist", "readj"]
    assert (shown["load_before"], shown["predicted_load"]) == (
        shown["data"]["load_before"],
        shown["data"]["predicted_load"],
    )
    for candidate, stored in zip(shown["candidates"], shown["data"]["candidates"], strict=True):
        assert set(candidate) == {"algorithm", "predicted_b", "predicted_load", "predicted_m", "objective"}
        assert candidate["objective"] is not None
        assert candidate["predicted_load"] == stored["predicted_load"]


def test_explain_of_an_event_without_max_mean_load_shows_none(engine: Engine) -> None:
    """An event an older repart wrote has b but no max/mean load: explain shows None for it."""
    add_zipf_region(engine, n_channels_initial=4, algorithm="auto")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=4, demand=4, exponent=1.3))
    assert tick(engine, REGION).action == "activated"
    strip_max_mean_load(engine)

    shown = run_in_transaction(engine, lambda session: explain(session, REGION))
    assert shown["b_before"] is not None and shown["predicted_b"] is not None
    assert (shown["load_before"], shown["predicted_load"]) == (None, None)
    assert [c["predicted_load"] for c in shown["candidates"]] == [None, None, None]
    assert all(c["predicted_b"] is not None for c in shown["candidates"])


def test_scale_builds_without_holding_the_write_lock(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    rebalanced_and_applied(engine, algorithm="auto")
    real_build = build
    builds = []

    def build_while_another_writer_takes_the_lock(*args: Any, **kwargs: Any) -> Any:
        other = sqlite3.connect(str(engine.url.database), timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # sqlite3.OperationalError if a write transaction is open
            other.execute("ROLLBACK")
        finally:
            other.close()
        builds.append(args[2])
        return real_build(*args, **kwargs)

    monkeypatch.setattr(build_module, "build", build_while_another_writer_takes_the_lock)
    assert scale(engine, REGION, 6).version == 3
    assert builds == [6]


def test_an_action_on_a_region_that_changed_since_its_read_writes_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebalanced_and_applied(engine)
    real_plan = plan_migration

    def plan_while_a_rollback_activates(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(actions, "plan_migration", real_plan)
        assert rollback(engine, REGION, 1).version == 3
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(actions, "plan_migration", plan_while_a_rollback_activates)
    with pytest.raises(Conflict, match="changed since its status was read"):
        scale(engine, REGION, 6)
    assert [v.number for v in versions(engine)] == [1, 2, 3]  # the rollback's version 3, nothing of scale
    assert "rollback" in [event.kind for event in events(engine)]
    assert "scaled" not in [event.kind for event in events(engine)]
