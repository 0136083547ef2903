"""Bad input to the job calls: a 4xx whose JSON names the field, and nothing written (a dump of every
table before and after is the oracle), except the audit row of a plan reported with another region's
token, which is a refused call."""

from __future__ import annotations

import http.client
import json
import socket

import pytest
from sqlalchemy import Engine

from repart.api.bodies import DRAINED_MULTIPLE, SMALL_BODY_BYTES
from repart.api.server import ApiServer
from tests.api.conftest import (
    call,
    dump,
    new_token,
    plan_of_other_region,
    with_pending_plan,
    zipf_region,
)
from tests.factories import REGION, counted_snapshot, zipf_snapshot

BATCHES = f"/v1/regions/{REGION}/batches"
SNAPSHOTS = f"/v1/regions/{REGION}/snapshots"


@pytest.fixture
def job(engine: Engine) -> str:
    """A job token of ``REGION``, which has plan 1 pending."""
    zipf_region(engine)
    with_pending_plan(engine)
    return new_token(engine, f"job:{REGION}")


CASES = {
    "oversized": (BATCHES, b"{" + b" " * (SMALL_BODY_BYTES + 1) + b"}", 413, "body"),
    "malformed": (BATCHES, b'{"batch_id": 1,', 400, "body"),
    "not an object": (BATCHES, b"[1, 2]", 400, "body"),
    "unknown field": (BATCHES, {"batch_id": 1, "payload": {}, "rows": 3}, 422, "rows"),
    "missing field": (BATCHES, {"batch_id": 1}, 422, "payload"),
    "negative batch": (BATCHES, {"batch_id": -1, "payload": {}}, 422, "batch_id"),
    "batch id not an integer": (BATCHES, {"batch_id": "7", "payload": {}}, 422, "batch_id"),
    "moved rows negative": (
        "/v1/plans/1/outcome",
        {"outcome": "applied", "moved_rows": -2},
        422,
        "moved_rows",
    ),
    "payload not an object": (BATCHES, {"batch_id": 1, "payload": [1]}, 422, "payload"),
    "plan of another region": (BATCHES, {"batch_id": 1, "payload": {}, "plan_id": "OTHER"}, 422, "plan_id"),
    "outcome unknown field": ("/v1/plans/1/outcome", {"outcome": "applied", "rows": 1}, 422, "rows"),
    "outcome value": ("/v1/plans/1/outcome", {"outcome": "done"}, 422, "outcome"),
    "snapshot of another region": (SNAPSHOTS, "OTHER-SNAPSHOT", 422, "region"),
    "snapshot unknown field": (SNAPSHOTS, "EXTRA-FIELD", 422, "the snapshot"),
    "deep nesting": (
        BATCHES,
        b'{"batch_id": 1, "payload": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        400,
        "body",
    ),
    "batch id over int64": (BATCHES, {"batch_id": 10**23, "payload": {}}, 422, "batch_id"),
    "batch id just over int64": (BATCHES, {"batch_id": 2**63, "payload": {}}, 422, "batch_id"),
    "plan id over int64": (BATCHES, {"batch_id": 1, "payload": {}, "plan_id": 10**23}, 422, "plan_id"),
    "path plan id over int64": (
        "/v1/plans/100000000000000000000000/outcome",
        {"outcome": "applied"},
        422,
        "plan_id",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    engine: Engine, api: ApiServer, job: str, case: str
) -> None:
    path, body, status, field = CASES[case]
    if body == "OTHER-SNAPSHOT":
        body = counted_snapshot("other", 9, [1, 2, 3], key_type="int", slot_bits=10).to_document()
    elif body == "EXTRA-FIELD":
        body = {**zipf_snapshot(9, n_channels=2, demand=1.0).to_document(), "surprise": 1}
    elif isinstance(body, dict) and body.get("plan_id") == "OTHER":
        body = {**body, "plan_id": plan_of_other_region(engine)}
    before = dump(engine)
    answer_status, answer = call(api, "POST", path, job, body, {"Content-Type": "application/json"})
    assert (answer_status, answer["field"]) == (status, field), answer
    assert answer["message"].startswith(f"{field} ")
    if case == "snapshot unknown field":
        assert "surprise" in answer["message"]
    assert dump(engine) == before


def post_head(api: ApiServer, token: str, length: int) -> bytes:
    """The head of a batch report declaring a body of ``length`` bytes."""
    return (
        f"POST {BATCHES} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def answer_on(connection: socket.socket) -> tuple[int, dict[str, object]]:
    """The next answer read from ``connection``: its status and its JSON body."""
    response = http.client.HTTPResponse(connection)
    response.begin()
    return response.status, json.loads(response.read())


@pytest.mark.parametrize("length", [SMALL_BODY_BYTES + 10, DRAINED_MULTIPLE * SMALL_BODY_BYTES])
def test_an_oversized_body_is_read_to_its_end_before_its_413_and_the_connection_serves_on(
    engine: Engine, api: ApiServer, job: str, length: int
) -> None:
    """A client answered while still sending may see a reset instead of the 413 (Broken pipe from
    urllib, 2 in 300 calls before the body was drained). The server answers only once the body has
    arrived, up to twice the limit, and the connection then serves the next call."""
    before = dump(engine)
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as connection:
        connection.sendall(post_head(api, job, length) + b" " * (length // 2))
        connection.settimeout(0.5)
        with pytest.raises(TimeoutError):
            connection.recv(1, socket.MSG_PEEK)  # no answer while the body is still arriving
        connection.settimeout(10)
        connection.sendall(b" " * (length - length // 2))
        status, answer = answer_on(connection)
        assert (status, answer["field"], answer["message"]) == (
            413,
            "body",
            f"body must be at most {SMALL_BODY_BYTES} bytes, got {length}",
        )
        assert dump(engine) == before
        connection.sendall(f"GET /v1/regions/{REGION}/merge HTTP/1.1\r\nHost: x\r\n".encode())
        connection.sendall(f"Authorization: Bearer {job}\r\n\r\n".encode())
        assert answer_on(connection)[0] == 200


def test_a_body_declared_over_the_drained_size_is_answered_unread(
    engine: Engine, api: ApiServer, job: str
) -> None:
    length = DRAINED_MULTIPLE * SMALL_BODY_BYTES + 1
    before = dump(engine)
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as connection:
        connection.sendall(post_head(api, job, length))  # and not one byte of the body
        status, answer = answer_on(connection)
    assert (status, answer["field"]) == (413, "body")
    assert answer["message"] == f"body must be at most {SMALL_BODY_BYTES} bytes, got Content-Length {length}"
    assert dump(engine) == before


def test_a_plan_reported_with_another_regions_token_is_refused(
    engine: Engine, api: ApiServer, job: str
) -> None:
    plan = plan_of_other_region(engine)
    before = dump(engine)
    status, answer = call(api, "POST", f"/v1/plans/{plan}/outcome", job, {"outcome": "applied"})
    assert (status, answer["error"], answer["field"]) == (403, "forbidden", "token")
    after = dump(engine)
    assert [row[3] for row in after.pop("events")[len(before["events"]) :]] == ["access-refused"]
    before.pop("events")
    assert after == before


def test_an_unknown_path_answers_json(api: ApiServer, job: str) -> None:
    status, answer = call(api, "GET", "/v1/nothing", job)
    assert (status, answer["error"]) == (404, "not-found")
    assert json.dumps(answer)


def test_an_unexpected_error_is_logged_as_json_lines(
    capfd: pytest.CaptureFixture[str], engine: Engine, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(session: object, region: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("repart.api.app.region_merge", broken)
    api = ApiServer(engine, 0)  # made after capfd, so that its log goes to the captured stderr
    api.serve()
    status, answer = call(api, "GET", f"/v1/regions/{REGION}/merge", job)
    assert (status, answer["error"]) == (500, "internal")
    api.close()  # the error's log line is written before the server stops
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert lines
    parsed = [json.loads(line) for line in lines]  # every line is JSON: no plain-text traceback
    assert any("a bug" in parsed_line.get("exception", "") for parsed_line in parsed)
