"""``repart token create|list|revoke``: a token is printed once, the database keeps only its hash, and a
revoked or expired token is refused by the API."""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.cli.tokens import duration
from repart.errors import InvalidInput
from tests.api.conftest import call, dump
from tests.cli.helpers import repart, repart_json
from tests.factories import add_region


def test_a_token_is_shown_once_and_stored_as_its_hash(engine: Engine, db_url: str) -> None:
    api = ApiServer(engine, 0, token_cache_seconds=0.5)
    api.serve()
    try:
        shown_once(engine, db_url, api)
    finally:
        api.close()


def shown_once(engine: Engine, db_url: str, api: ApiServer) -> None:
    """The body of the test above, on ``api``, which keeps a grant 0.5 s."""
    add_region(engine, "trades")
    made = repart_json(db_url, "token", "create", "--scope", "job:trades", "--expires", "30d")
    token = made["token"]
    assert made["scope"] == "job:trades" and made["expires_at"] is not None
    secret = token.split("_", 2)[2]
    stored = repr(dump(engine))
    assert secret not in stored and token not in stored
    assert hashlib.sha256(secret.encode()).hexdigest() in stored
    listed = repart_json(db_url, "token", "list")
    assert [(row["id"], row["scope"], row["revoked_at"]) for row in listed] == [
        (made["id"], "job:trades", None)
    ]
    assert "token" not in listed[0]

    assert call(api, "GET", "/v1/regions/trades/merge", token) == (200, {"merge": None})
    assert repart_json(db_url, "token", "list")[0]["last_used_at"] is not None
    revoked = repart_json(db_url, "token", "revoke", str(made["id"]))
    assert revoked["revoked_at"] is not None
    time.sleep(0.5)  # the server keeps a granted token this long (token_cache_seconds)
    status, answer = call(api, "GET", "/v1/regions/trades/merge", token)
    assert (status, answer["field"]) == (401, "token")
    assert dump(engine)["events"][-1][3:5] == ("access-refused", "revoked")  # the reason: audit only


def test_an_expired_token_is_refused(engine: Engine, db_url: str, api: ApiServer) -> None:
    add_region(engine, "trades")
    token = repart_json(db_url, "token", "create", "--scope", "read", "--expires", "1s")["token"]
    time.sleep(1.2)
    status, answer = call(api, "GET", "/v1/regions", token)
    assert (status, answer["field"]) == (401, "token")
    assert dump(engine)["events"][-1][3:5] == ("access-refused", "expired")  # the reason: audit only


def test_bad_scopes_and_durations_exit_2(engine: Engine, db_url: str) -> None:
    add_region(engine, "trades")
    for args in (("--scope", "admin"), ("--scope", "job:bonds"), ("--scope", "read", "--expires", "soon")):
        result = repart(db_url, "token", "create", *args)
        assert result.exit_code == 2, result.output
    assert repart(db_url, "token", "revoke", "99").exit_code == 2
    assert repart_json(db_url, "token", "list") == []


def test_durations() -> None:
    assert duration("30d") == timedelta(days=30)
    assert duration("90m") == timedelta(minutes=90)
    with pytest.raises(InvalidInput) as raised:
        duration("0d")
    assert raised.value.field == "--expires"
