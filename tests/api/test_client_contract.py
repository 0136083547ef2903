"""The ``ControllerClient`` contract, checked against both implementations: ``SqlControllerClient`` on
the database and ``HttpControllerClient`` through a real API server over loopback HTTP. Each test's
oracle is the database itself (rows, plan statuses, the stored function)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.controller.tick import tick
from repart.errors import InvalidInput, NotFound
from repart.protocol.client import ControllerClient
from repart.protocol.http_client import HttpControllerClient
from repart.storage import models
from repart.storage.client import SqlControllerClient
from repart.storage.versions import version_function
from tests.api.conftest import new_token, plan_of_other_region, with_pending_plan, zipf_region
from tests.factories import (
    REGION,
    events,
    plans,
    row_counts,
    versions,
    zipf_snapshot,
)


@pytest.fixture(params=["sql", "http"])
def client(request: pytest.FixtureRequest, engine: Engine) -> Iterator[ControllerClient]:
    """The client under test, for a job of region ``REGION``."""
    zipf_region(engine)
    if request.param == "sql":
        yield SqlControllerClient(engine)
        return
    server = request.getfixturevalue("api")
    yield HttpControllerClient(server.url, new_token(engine, f"job:{REGION}"), attempts=2)


def test_applied_function_is_the_stored_one(engine: Engine, client: ControllerClient) -> None:
    with pytest.raises(NotFound):
        client.applied_function(REGION)
    tick(engine, REGION)
    applied = client.applied_function(REGION)
    [stored] = versions(engine)
    assert applied.version == 1
    assert applied.function.digest == version_function(stored).digest == stored.digest
    assert client.region_merge(REGION) is None


def test_a_claimed_plan_is_claimed_again_until_reported_once(
    engine: Engine, client: ControllerClient
) -> None:
    plan_id = with_pending_plan(engine)
    claimed = client.claim_next_plan(REGION)
    assert claimed is not None
    assert (claimed.plan_id, claimed.region, claimed.from_version, claimed.to_version) == (
        plan_id,
        REGION,
        1,
        2,
    )
    [stored] = plans(engine)
    assert (stored.status, stored.plan_json) == ("applying", claimed.plan_json)
    assert client.claim_next_plan(REGION) == claimed  # a retried claim gets the same plan
    client.report_plan(plan_id, "applied", moved_rows=7, moved_bytes=70)
    client.report_plan(plan_id, "applied", moved_rows=7, moved_bytes=70)
    [stored] = plans(engine)
    assert (stored.status, stored.moved_rows, stored.moved_bytes) == ("applied", 7, 70)
    assert client.claim_next_plan(REGION) is None
    assert client.applied_function(REGION).version == 2


def test_a_failed_plan_is_recorded_with_its_reason(engine: Engine, client: ControllerClient) -> None:
    plan_id = with_pending_plan(engine)
    assert client.claim_next_plan(REGION) is not None
    client.report_plan(plan_id, "failed", reason="store damaged at part 3")
    [stored] = plans(engine)
    assert stored.status == "failed"
    assert events(engine)[0].message == "store damaged at part 3"


def test_a_batch_reported_with_a_plan_of_another_region_is_refused_naming_plan_id(
    engine: Engine, client: ControllerClient
) -> None:
    other_plan = plan_of_other_region(engine)
    before = row_counts(engine)
    with pytest.raises(InvalidInput) as raised:
        client.report_batch(REGION, 7, {"rows": 1}, other_plan)
    assert raised.type is InvalidInput and raised.value.field == "plan_id"
    assert row_counts(engine) == before


def snapshot_rows(engine: Engine) -> list[models.Snapshot]:
    with Session(engine) as session:
        return list(session.scalars(select(models.Snapshot)))


def test_a_batch_is_recorded_once(engine: Engine, client: ControllerClient) -> None:
    plan_id = with_pending_plan(engine)
    before = row_counts(engine)
    snapshot = replace(zipf_snapshot(4, n_channels=2, demand=1.0), batch=41)
    snapshot_id = client.submit_snapshot(snapshot)
    assert client.submit_snapshot(snapshot) == snapshot_id  # the same batch again: a no-op
    assert snapshot_id == max(row.id for row in snapshot_rows(engine))
    first = client.report_batch(REGION, 41, {"rows": 10}, plan_id)
    assert client.report_batch(REGION, 41, {"rows": 99}, None) == first
    after = row_counts(engine)
    assert after["snapshots"] == before["snapshots"] + 1
    assert after["batch_reports"] == before["batch_reports"] + 1
    other_window = replace(zipf_snapshot(5, n_channels=2, demand=1.0), batch=41)
    with pytest.raises(InvalidInput):
        client.submit_snapshot(other_window)
    assert row_counts(engine) == after
