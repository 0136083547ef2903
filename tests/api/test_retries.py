"""Retries a job makes are safe: the same plan report sent twice at once is recorded once, and a
snapshot over HTTP carries its batch id (what makes its retry a no-op)."""

from __future__ import annotations

import threading
from dataclasses import replace

from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.storage.client import SqlControllerClient
from repart.storage.engine import run_in_transaction
from repart.storage.plan_reports import report_plan
from tests.api.conftest import call, dump, new_token, with_pending_plan, zipf_region
from tests.factories import REGION, events, plans, zipf_snapshot


def test_overlapping_identical_plan_reports_are_recorded_once(engine: Engine) -> None:
    zipf_region(engine)
    plan_id = with_pending_plan(engine)
    client = SqlControllerClient(engine)
    assert client.claim_next_plan(REGION) is not None
    reported, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        def work(session: object) -> None:
            report_plan(session, plan_id, "failed", reason="disk")  # type: ignore[arg-type]
            reported.set()
            release.wait(10)

        run_in_transaction(engine, work)

    def second() -> None:
        try:
            client.report_plan(plan_id, "failed", reason="disk")
        except BaseException as error:
            errors.append(error)

    one = threading.Thread(target=first)
    one.start()
    assert reported.wait(10)
    two = threading.Thread(target=second)
    two.start()
    two.join(1.0)  # it waits for the first report's lock (PostgreSQL) or write lock (SQLite)
    release.set()
    one.join()
    two.join()
    assert errors == []
    [stored] = plans(engine)
    assert stored.status == "failed"
    assert [event.kind for event in events(engine)].count("plan-failed") == 1


def test_a_snapshot_over_http_must_name_its_batch(engine: Engine, api: ApiServer) -> None:
    zipf_region(engine)
    token = new_token(engine, f"job:{REGION}")
    before = dump(engine)
    document = replace(zipf_snapshot(1, n_channels=2, demand=1.0), batch=None).to_document()
    status, answer = call(api, "POST", f"/v1/regions/{REGION}/snapshots", token, document)
    assert (status, answer["field"]) == (422, "batch")
    assert dump(engine) == before
