"""The server keeps a granted token for ``token_cache_seconds``: a revocation takes effect within that
bound, an expiry at once, a token whose region was deleted grants nothing on a new region of its name,
every refusal is decided and audited by the database, and the token's last use is written once a
minute, not at every call."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from repart.api.grants import GrantCache
from repart.api.server import ApiServer
from repart.errors import InvalidInput
from repart.storage.engine import run_in_transaction
from repart.storage.regions import delete_region
from repart.storage.tables import utc_now
from repart.storage.tokens import revoke_token
from tests.api.conftest import call, dump, new_token
from tests.factories import add_region

MERGE = "/v1/regions/alpha/merge"


@pytest.fixture
def kept(engine: Engine) -> Iterator[ApiServer]:
    """The API keeping a grant for 60 s (longer than any of these tests), with region ``alpha``."""
    add_region(engine, "alpha", "int")
    add_region(engine, "beta", "int")
    server = ApiServer(engine, 0, token_cache_seconds=60)
    server.serve()
    yield server
    server.close()


def refusals(engine: Engine) -> list[str]:
    """The reasons of the refusals in the controller's audit log, oldest first."""
    return [row[4] for row in dump(engine)["events"] if row[3] == "access-refused"]


def test_a_revocation_takes_effect_within_the_bound(engine: Engine) -> None:
    add_region(engine, "alpha", "int")
    server = ApiServer(engine, 0, token_cache_seconds=1.0)
    server.serve()
    try:
        token = new_token(engine, "job:alpha")
        assert call(server, "GET", MERGE, token)[0] == 200
        run_in_transaction(engine, lambda s: revoke_token(s, int(token.split("_")[1])))
        revoked_at = time.monotonic()
        assert call(server, "GET", MERGE, token)[0] == 200  # still kept: the bound is not zero
        time.sleep(max(0.0, 1.0 - (time.monotonic() - revoked_at)))
        assert call(server, "GET", MERGE, token)[0] == 401
        assert refusals(engine) == ["revoked"]
    finally:
        server.close()


def test_a_kept_token_is_refused_at_its_expiry(engine: Engine, kept: ApiServer) -> None:
    token = new_token(engine, "job:alpha", expires_at=utc_now() + timedelta(seconds=1))
    assert call(kept, "GET", MERGE, token)[0] == 200
    time.sleep(1.0)
    assert call(kept, "GET", MERGE, token)[0] == 401
    assert refusals(engine) == ["expired"]


def test_a_kept_job_token_dies_with_its_region(engine: Engine, kept: ApiServer) -> None:
    token = new_token(engine, "job:alpha")
    assert call(kept, "GET", MERGE, token)[0] == 200
    assert call(kept, "POST", "/v1/regions/alpha/batches", token, {"batch_id": 1, "payload": {}})[0] == 200
    run_in_transaction(engine, lambda s: delete_region(s, "alpha", force=True))
    add_region(engine, "alpha", "int")  # another region of the same name
    before = dump(engine)
    status, answer = call(kept, "POST", "/v1/regions/alpha/batches", token, {"batch_id": 2, "payload": {}})
    assert (status, answer["error"], answer["field"]) == (401, "unauthorized", "token")
    assert call(kept, "GET", MERGE, token)[0] == 401
    after = dump(engine)
    new_events = after.pop("events")[len(before["events"]) :]
    before.pop("events")
    assert after == before  # nothing written but the refusals
    assert [(row[3], row[4]) for row in new_events] == [("access-refused", "unknown")] * 2


def test_a_kept_token_is_refused_with_a_wrong_secret_or_on_another_region(
    engine: Engine, kept: ApiServer
) -> None:
    token = new_token(engine, "job:alpha")
    assert call(kept, "GET", MERGE, token)[0] == 200
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert call(kept, "GET", MERGE, wrong)[0] == 401
    assert call(kept, "GET", "/v1/regions/beta/merge", token)[0] == 403
    assert call(kept, "GET", "/v1/regions", token)[0] == 403
    assert refusals(engine) == ["wrong-secret", "scope", "scope"]
    assert call(kept, "GET", MERGE, token)[0] == 200  # the kept grant is still good


def test_the_last_use_is_written_once_a_minute_not_at_every_call(engine: Engine, kept: ApiServer) -> None:
    token = new_token(engine, "read")
    [(_, _, _, _, _, never_used, _, _)] = dump(engine)["api_tokens"]
    assert never_used is None
    assert call(kept, "GET", "/v1/regions", token)[0] == 200
    first = dump(engine)["api_tokens"]
    assert first[0][5] is not None
    for _ in range(3):
        assert call(kept, "GET", "/v1/regions/alpha/status", token)[0] == 200
    assert dump(engine)["api_tokens"] == first


def test_a_cache_of_zero_seconds_keeps_nothing() -> None:
    from repart.storage.tokens import Grant

    cache = GrantCache(0)
    grant = Grant(1, "read", None, None, None)
    cache.keep("repart_1_secret", grant, time.monotonic())
    assert cache.get("repart_1_secret", utc_now()) is None
    kept = GrantCache(60)
    kept.keep("repart_1_secret", grant, time.monotonic())
    assert kept.get("repart_1_secret", utc_now()) == grant
    assert kept.get("repart_1_other", utc_now()) is None
    assert kept.get("repart_2_secret", utc_now()) is None
    assert kept.get("not-a-token", utc_now()) is None
    with pytest.raises(InvalidInput, match="token_cache_seconds"):
        GrantCache(-1)
    with pytest.raises(InvalidInput, match="token_cache_seconds"):
        GrantCache(3601)


def test_a_grant_is_kept_from_the_moment_the_database_read_it() -> None:
    """The bound counts from the admission's read, not from when the call got round to keeping it."""
    from repart.storage.tokens import Grant

    grant = Grant(1, "read", None, None, None)
    cache = GrantCache(5)
    cache.keep("repart_1_secret", grant, time.monotonic() - 6)  # read 6 s ago: already past the bound
    assert cache.get("repart_1_secret", utc_now()) is None
    cache.keep("repart_1_secret", grant, time.monotonic() - 4)
    assert cache.get("repart_1_secret", utc_now()) == grant
