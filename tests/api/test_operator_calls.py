"""The operator's calls over HTTP (scale, rollback, resume) do what the service layer does when the CLI
runs it, need an ``operator`` token, and refuse bad input naming the field with nothing written (a
dump of every table before and after is the oracle)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.controller import service
from repart.controller.tick import tick
from repart.storage.client import SqlControllerClient
from repart.storage.engine import read_transaction, run_in_transaction
from repart.storage.versions import list_versions
from repart.storage.views import mode_dict
from tests.api.conftest import call, dump, new_token
from tests.factories import MAX_CHANNELS, REGION, SMALL_SLOT_BITS, add_region

SCALE = f"/v1/regions/{REGION}/scale"
ROLLBACK = f"/v1/regions/{REGION}/rollback"
RESUME = f"/v1/regions/{REGION}/resume"
CONFIG = {"n_channels_initial": 2, "max_channels": MAX_CHANNELS, "slot_bits": SMALL_SLOT_BITS}


@pytest.fixture
def operator(engine: Engine) -> str:
    """An operator token, with region ``REGION`` and its twin ``twin`` (the same configuration), each
    ticked to its first version."""
    for name in (REGION, "twin"):
        add_region(engine, name, "int", **CONFIG)
        assert tick(engine, name).action == "initialized"
    return new_token(engine, "operator")


def digests(engine: Engine, region: str) -> list[str]:
    """The digests of the region's versions, oldest first."""
    return read_transaction(engine, lambda s: [row.digest for row in list_versions(s, region)])


def apply_pending_plan(engine: Engine, region: str) -> None:
    """Claim the region's pending plan and report it applied, as its job would."""
    client = SqlControllerClient(engine)
    plan = client.claim_next_plan(region)
    assert plan is not None
    client.report_plan(plan.plan_id, "applied", moved_rows=0, moved_bytes=0)


def test_scale_rollback_and_resume_do_what_the_service_does(
    engine: Engine, api: ApiServer, operator: str
) -> None:
    status, scaled = call(api, "POST", SCALE, operator, {"n_channels": 4, "reason": "peak"})
    assert status == 200, scaled
    twin = service.scale(engine, "twin", 4, reason="peak")  # the oracle: the service, as the CLI runs it
    assert scaled["digest"] == twin.digest == digests(engine, REGION)[1]
    assert (scaled["action"], scaled["version"], scaled["from_version"], scaled["n_channels"]) == (
        "scaled",
        2,
        1,
        4,
    )
    assert scaled["mode"] == "hold" and scaled["plan_id"] is not None
    apply_pending_plan(engine, REGION)  # version 2 applied: there is a version to roll back from

    status, rolled = call(api, "POST", ROLLBACK, operator, {"to_version": 1})
    assert status == 200, rolled
    assert (rolled["action"], rolled["version"], rolled["n_channels"]) == ("rollback", 3, 2)
    assert digests(engine, REGION)[2] == digests(engine, REGION)[0] == rolled["digest"]

    status, resumed = call(api, "POST", RESUME, operator)
    twin_resumed = run_in_transaction(engine, lambda s: mode_dict(service.resume(s, "twin")))
    assert status == 200
    assert resumed == twin_resumed | {"region": REGION}
    assert resumed["mode"] == "auto"
    before = dump(engine)
    status, again = call(api, "POST", RESUME, operator, {})  # a retry: the region is no longer held
    assert (status, again["error"], again["field"]) == (422, "invalid-input", "mode")
    assert dump(engine) == before


BAD = {
    "n_channels above the region's bound": (SCALE, {"n_channels": MAX_CHANNELS + 1}, 422, "n_channels"),
    "n_channels the applied one": (SCALE, {"n_channels": 2}, 422, "n_channels"),
    "n_channels not an integer": (SCALE, {"n_channels": "4"}, 422, "n_channels"),
    "n_channels missing": (SCALE, {"reason": "peak"}, 422, "n_channels"),
    "unknown field": (SCALE, {"n_channels": 4, "force": True}, 422, "force"),
    "reason not a string": (SCALE, {"n_channels": 4, "reason": 3}, 422, "reason"),
    "malformed": (SCALE, b'{"n_channels": 4', 400, "body"),
    "not an object": (ROLLBACK, b"[1]", 400, "body"),
    "to_version not an integer": (ROLLBACK, {"to_version": "1"}, 422, "to_version"),
    "to_version the applied function": (ROLLBACK, {"to_version": 1}, 422, "to_version"),
    "to_version unknown": (ROLLBACK, {"to_version": 9}, 404, None),
    "resume of a region not held": (RESUME, None, 422, "mode"),
    "resume with a field": (RESUME, {"mode": "auto"}, 422, "mode"),
    "unknown region": ("/v1/regions/nowhere/scale", {"n_channels": 4}, 404, None),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    engine: Engine, api: ApiServer, operator: str, case: str
) -> None:
    path, body, status, field = BAD[case]
    assert call(api, "GET", "/v1/regions", operator)[0] == 200  # the token's first use is written now
    before = dump(engine)
    answer_status, answer = call(api, "POST", path, operator, body)
    assert (answer_status, answer["field"]) == (status, field), answer
    assert dump(engine) == before


@pytest.mark.parametrize("holder", ["read", "job:trades"])
def test_only_an_operator_token_may_make_them(
    engine: Engine, api: ApiServer, operator: str, holder: str
) -> None:
    token = new_token(engine, holder)
    bodies: dict[str, Any] = {SCALE: {"n_channels": 4}, ROLLBACK: {"to_version": 1}, RESUME: None}
    for path, body in bodies.items():
        status, answer = call(api, "POST", path, token, body)
        assert (status, answer["error"], answer["field"]) == (403, "forbidden", "token")
        assert "scope operator" in answer["message"]
    assert len(digests(engine, REGION)) == 1
