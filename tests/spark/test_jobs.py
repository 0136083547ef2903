"""The job's side of the plan life cycle: pending → applying → applied | failed (DESIGN §6–§9)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine

from repart.controller.tick import last_considered_seq, tick
from repart.errors import NotFound
from repart.migration import MigrationPlan
from repart.spark.errors import StateStoreError
from repart.spark.jobs import applied_function, apply_next_plan, next_plan
from repart.storage import run_in_transaction, set_plan_status
from tests.controller.test_tick import REGION, ingest, make_region, plans, snapshot_document


@dataclass(frozen=True)
class Moved:
    moved_rows: int
    moved_bytes: int
    already_applied: bool = False


@dataclass
class FakeStore:
    """Records what it was asked to apply; fails when told to."""

    error: Exception | None = None
    committed_before: bool = False
    calls: list[tuple[int, int, int]] = field(default_factory=list)

    def apply(
        self, plan: MigrationPlan, *, plan_id: int, region: str, from_version: int, to_version: int
    ) -> Moved:
        assert region == REGION and isinstance(plan, MigrationPlan)
        self.calls.append((plan_id, from_version, to_version))
        if self.error is not None:
            raise self.error
        if self.committed_before:
            return Moved(moved_rows=0, moved_bytes=0, already_applied=True)
        return Moved(moved_rows=123, moved_bytes=4567)


def planned(engine: Engine) -> int:
    """Version 1 applied on 4 channels, version 2 planned with a pending plan; returns its id."""
    make_region(engine, n_channels_initial=4, max_channels=8, algorithm="redist")
    tick(engine, REGION)
    ingest(engine, snapshot_document(1, n_channels=4, demand=4, exponent=1.3))
    plan_id = tick(engine, REGION).plan_id
    assert plan_id is not None
    return plan_id


def test_before_the_first_tick_there_is_no_function_and_nothing_to_apply(db: Engine) -> None:
    make_region(db, n_channels_initial=4)
    with pytest.raises(NotFound, match="no applied version yet"):
        applied_function(db, REGION)
    assert apply_next_plan(db, REGION, FakeStore()) is None


def test_apply_next_plan_takes_the_plan_through_applying_to_applied(db: Engine) -> None:
    plan_id = planned(db)
    assert applied_function(db, REGION)[0] == 1
    store = FakeStore()
    done = apply_next_plan(db, REGION, store)
    assert done is not None
    todo, moved = done
    assert (todo.plan_id, todo.from_version, todo.to_version) == (plan_id, 1, 2)
    assert store.calls == [(plan_id, 1, 2)] and moved.moved_rows == 123
    (row,) = plans(db)
    assert (row.status, row.moved_rows, row.moved_bytes) == ("applied", 123, 4567)
    number, function = applied_function(db, REGION)
    assert number == 2 and function.digest == MigrationPlan.from_json(row.plan_json).target_digest
    assert next_plan(db, REGION) is None


def test_a_plan_the_store_refuses_fails_and_the_error_propagates(db: Engine) -> None:
    planned(db)
    with pytest.raises(StateStoreError, match="holds version 7"):
        apply_next_plan(db, REGION, FakeStore(error=StateStoreError("the store holds version 7")))
    (row,) = plans(db)
    assert row.status == "failed"
    assert applied_function(db, REGION)[0] == 1


def test_an_error_that_may_follow_the_commit_leaves_the_plan_applying_for_a_retry(db: Engine) -> None:
    plan_id = planned(db)
    with pytest.raises(OSError, match="disk full"):
        apply_next_plan(db, REGION, FakeStore(error=OSError("disk full")))
    assert plans(db)[0].status == "applying"
    # The retry finds the plan committed in the store: applied, with the moved amounts unknown.
    done = apply_next_plan(db, REGION, FakeStore(committed_before=True))
    assert done is not None and done[0].plan_id == plan_id
    (row,) = plans(db)
    assert (row.status, row.moved_rows, row.moved_bytes) == ("applied", None, None)


def test_a_plan_left_applying_by_a_dead_job_is_retried(db: Engine) -> None:
    plan_id = planned(db)
    run_in_transaction(db, lambda session: set_plan_status(session, plan_id, "applying"))
    todo = next_plan(db, REGION)
    assert todo is not None and todo.plan_id == plan_id
    assert apply_next_plan(db, REGION, FakeStore()) is not None
    assert plans(db)[0].status == "applied"


def test_last_considered_seq_follows_the_decisions(db: Engine) -> None:
    make_region(db, n_channels_initial=4, max_channels=8)
    tick(db, REGION)
    assert run_in_transaction(db, lambda session: last_considered_seq(session, REGION)) is None
    ingest(db, snapshot_document(1, n_channels=4, demand=4, exponent=1.3))
    tick(db, REGION)
    assert run_in_transaction(db, lambda session: last_considered_seq(session, REGION)) == 1
