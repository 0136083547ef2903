"""Every job, read and operator call is refused without a token, with a wrong, malformed, expired or
revoked one, and with a token of another scope or region: 401 or 403, and nothing is written but the refusal's
audit row (a dump of every table before and after is the oracle)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, update

from repart.api.server import ApiServer
from repart.storage import models
from repart.storage.engine import run_in_transaction
from repart.storage.regions import delete_region
from repart.storage.tables import utc_now
from repart.storage.tokens import revoke_token
from tests.api.conftest import call, dump, new_token, with_pending_plan, zipf_region
from tests.factories import add_region

JOB_CALLS = (
    ("GET", "/v1/regions/trades/applied-function", None),
    ("GET", "/v1/regions/trades/merge", None),
    ("POST", "/v1/regions/trades/plans/claim", None),
    ("POST", "/v1/plans/1/outcome", {"outcome": "applied"}),
    ("POST", "/v1/regions/trades/snapshots", {"format": 1}),
    ("POST", "/v1/regions/trades/batches", {"batch_id": 1, "payload": {}}),
)
READ_CALLS = (
    ("GET", "/v1/regions", None),
    ("GET", "/v1/regions/trades/status", None),
    ("GET", "/v1/regions/trades/versions", None),
    ("GET", "/v1/regions/trades/plans", None),
    ("GET", "/v1/regions/trades/events", None),
)
OPERATOR_CALLS = (
    ("POST", "/v1/regions/trades/scale", {"n_channels": 4}),
    ("POST", "/v1/regions/trades/rollback", {"to_version": 1}),
    ("POST", "/v1/regions/trades/resume", None),
)


@pytest.fixture
def tokens(engine: Engine) -> dict[str, str]:
    """Region ``trades`` (with plan 1, of version 1 to 2) and ``other``, and a token of every kind."""
    zipf_region(engine)
    assert with_pending_plan(engine) == 1
    add_region(engine, "other")
    expired = new_token(engine, "job:trades", expires_at=utc_now() + timedelta(seconds=30))
    run_in_transaction(
        engine,
        lambda s: s.execute(update(models.ApiToken).values(expires_at=utc_now() - timedelta(seconds=1))),
    )
    revoked = new_token(engine, "job:trades")
    run_in_transaction(engine, lambda s: revoke_token(s, int(revoked.split("_")[1])))
    job = new_token(engine, "job:trades")
    wrong = job[:-4] + ("AAAA" if not job.endswith("AAAA") else "BBBB")
    return {
        "job": job,
        "expired": expired,
        "revoked": revoked,
        "wrong": wrong,
        "malformed": "not-a-token",
        "other-region": new_token(engine, "job:other"),
        "read": new_token(engine, "read"),
        "operator": new_token(engine, "operator"),
    }


REFUSED_JOB = {
    None: (401, "missing"),
    "wrong": (401, "wrong-secret"),
    "malformed": (401, "malformed"),
    "expired": (401, "expired"),
    "revoked": (401, "revoked"),
    "other-region": (403, "scope"),
    "read": (403, "scope"),
    "operator": (403, "scope"),
}
REFUSED_READ = {
    key: value for key, value in REFUSED_JOB.items() if key not in ("read", "operator", "other-region")
}
REFUSED_READ["job"] = (403, "scope")
REFUSED_OPERATOR = {key: value for key, value in REFUSED_JOB.items() if key != "operator"}
REFUSED_OPERATOR["job"] = (403, "scope")


@pytest.mark.parametrize("method,path,body", JOB_CALLS + READ_CALLS + OPERATOR_CALLS)
def test_a_refused_call_writes_only_its_audit_row(
    engine: Engine,
    api: ApiServer,
    tokens: dict[str, str],
    method: str,
    path: str,
    body: dict[str, object] | None,
) -> None:
    refusals = (
        REFUSED_JOB
        if (method, path, body) in JOB_CALLS
        else REFUSED_OPERATOR
        if (method, path, body) in OPERATOR_CALLS
        else REFUSED_READ
    )
    for holder, (status, reason) in refusals.items():
        before = dump(engine)
        token = None if holder is None else tokens[holder]
        answer_status, answer = call(api, method, path, token, body)
        assert (answer_status, answer["error"], answer["field"]) == (
            status,
            "unauthorized" if status == 401 else "forbidden",
            "token",
        ), (holder, answer)
        after = dump(engine)
        new_events = after.pop("events")[len(before["events"]) :]
        before.pop("events")
        assert after == before, holder
        [event] = new_events
        assert event[1] is None  # the controller's own log: no region
        assert (event[3], event[4]) == ("access-refused", reason)


def test_a_job_token_dies_with_its_region(engine: Engine, api: ApiServer) -> None:
    add_region(engine, "alpha", "int")
    token = new_token(engine, "job:alpha")
    run_in_transaction(engine, lambda s: delete_region(s, "alpha", force=True))
    add_region(engine, "alpha", "int")  # another region of the same name
    assert call(api, "GET", "/v1/regions/alpha/merge", token)[0] == 401
    assert call(api, "POST", "/v1/regions/alpha/plans/claim", token)[0] == 401
    assert dump(engine)["api_tokens"] == []  # deleted with its region


def audit_rows(engine: Engine) -> list[tuple[str, str]]:
    """The controller's own audit log (events of no region): (kind, rule) of each, oldest first."""
    return [(row[3], row[4]) for row in dump(engine)["events"] if row[1] is None]


@pytest.mark.parametrize("holder", ["read", "operator", "job", "other-region"])
def test_a_plan_outside_the_tokens_region_is_forbidden_whether_or_not_it_exists(
    engine: Engine, api: ApiServer, tokens: dict[str, str], holder: str
) -> None:
    paths = ["/v1/plans/999/outcome"] + ([] if holder == "job" else ["/v1/plans/1/outcome"])
    for path in paths:
        before = audit_rows(engine)
        status, answer = call(api, "POST", path, tokens[holder], {"outcome": "applied"})
        assert (status, answer["error"], answer["field"]) == (403, "forbidden", "token"), (path, answer)
        assert audit_rows(engine) == [*before, ("access-refused", "scope")]


def test_every_refused_token_gets_one_message_and_the_audit_row_keeps_why(
    engine: Engine, api: ApiServer, tokens: dict[str, str]
) -> None:
    job_id = tokens["job"].split("_")[1]
    unknown = tokens["job"].replace(f"repart_{job_id}_", "repart_999_")
    messages = set()
    for token in (unknown, tokens["wrong"], tokens["expired"], tokens["revoked"], tokens["malformed"], None):
        status, answer = call(api, "GET", "/v1/regions/trades/merge", token)
        assert status == 401
        messages.add(answer["message"])
    assert len(messages) == 1
    rules = [rule for kind, rule in audit_rows(engine) if kind == "access-refused"]
    assert rules == ["unknown", "wrong-secret", "expired", "revoked", "malformed", "missing"]
