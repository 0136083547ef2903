"""A job's report of a plan, through both entry points (the service, which ``repart plans report``
calls, and a job's ``SqlControllerClient``): one behaviour, the retry rules and the ``plan-failed``
event included."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from repart.controller import service
from repart.errors import Conflict
from repart.storage import run_in_transaction
from repart.storage.client import SqlControllerClient
from tests.factories import REGION, add_applied_chain, database_dump, events, plans

Report = Callable[..., None]


def through_service(engine: Engine) -> Report:
    def report(plan_id: int, state: str, **details: int | str | None) -> None:
        run_in_transaction(engine, lambda s: service.report_plan(s, REGION, plan_id, state, **details))

    return report


def through_client(engine: Engine) -> Report:
    return SqlControllerClient(engine, source="test").report_plan


@pytest.fixture(params=[through_service, through_client], ids=["service", "client"])
def report(request: pytest.FixtureRequest, engine: Engine) -> Report:
    add_applied_chain(engine, REGION, (2, 3), pending=4)
    return request.param(engine)  # type: ignore[no-any-return]


def pending_plan(engine: Engine) -> int:
    [plan] = plans(engine, "pending")
    return plan.id


def test_a_retry_with_other_numbers_is_a_conflict_and_writes_nothing(engine: Engine, report: Report) -> None:
    plan_id = pending_plan(engine)
    report(plan_id, "applied", moved_rows=5, moved_bytes=50)
    report(plan_id, "applied", moved_rows=5, moved_bytes=50)  # the same retry: a no-op
    before = database_dump(engine)
    with pytest.raises(Conflict) as refused:
        report(plan_id, "applied", moved_rows=6, moved_bytes=50)
    assert "a retry must repeat them" in str(refused.value)
    assert database_dump(engine) == before
    [plan] = [p for p in plans(engine) if p.id == plan_id]
    assert (plan.status, plan.moved_rows, plan.moved_bytes) == ("applied", 5, 50)


def test_a_failure_is_one_plan_failed_event_with_its_reason(engine: Engine, report: Report) -> None:
    plan_id = pending_plan(engine)
    report(plan_id, "failed", reason="Corrupt: a file is missing")
    before = database_dump(engine)
    report(plan_id, "failed", reason="Corrupt: a file is missing")  # a retry: no second event
    assert database_dump(engine) == before
    failed = [event for event in events(engine) if event.kind == "plan-failed"]
    assert [(event.rule, event.message) for event in failed] == [("job-report", "Corrupt: a file is missing")]
    with pytest.raises(Conflict):
        report(plan_id, "applied")
