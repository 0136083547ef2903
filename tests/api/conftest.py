"""Fixtures of the HTTP API's tests: the API served on loopback by a real server (uvicorn on a free
port, stopped at the end of the test), tokens, and a dump of the database to compare."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.api.server import ApiServer
from repart.controller.tick import tick
from repart.storage import models
from repart.storage.engine import run_in_transaction
from repart.storage.tokens import create_token
from tests.factories import REGION, add_region, add_zipf_region, ingest, zipf_snapshot


@pytest.fixture
def api(engine: Engine) -> Iterator[ApiServer]:
    """The API on ``engine``, served on a free loopback port."""
    server = ApiServer(engine, 0)
    server.serve()
    yield server
    server.close()


def new_token(engine: Engine, scope: str, **options: Any) -> str:
    """A new token of ``scope`` (its text, shown once)."""
    return run_in_transaction(engine, lambda session: create_token(session, scope, **options)[0])


def call(
    api: ApiServer,
    method: str,
    path: str,
    token: str | None,
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """Send one request; its status and its JSON answer."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(api.url + path, data=data, headers=sent, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, by table, in primary key order (the oracle of "nothing written")."""
    with Session(engine) as session:
        return {
            table.name: [
                tuple(row) for row in session.execute(select(table).order_by(*table.primary_key.columns))
            ]
            for table in models.Base.metadata.sorted_tables
        }


def zipf_region(engine: Engine) -> None:
    """Region ``REGION`` whose target-utilization policy scales it from 2 channels under more load."""
    add_zipf_region(
        engine,
        policy="target-utilization",
        max_channels=8,
        algorithm="redist",
        settings={"target_utilization": 0.5, "rebalance_threshold": 50.0},
    )


def with_pending_plan(engine: Engine) -> int:
    """Region ``REGION`` (``zipf_region``) ticked to version 2 with its plan pending; the plan's id."""
    assert tick(engine, REGION).action == "initialized"
    ingest(engine, *(zipf_snapshot(seq, n_channels=2, demand=3.6) for seq in (1, 2, 3)))
    result = tick(engine, REGION)
    assert result.action == "activated" and result.plan_id is not None
    return result.plan_id


def plan_of_other_region(engine: Engine) -> int:
    """The id of a pending plan of a new region ``other``, beside ``REGION``."""
    add_region(engine, "other", "int", n_channels_initial=2, slot_bits=10, policy="target-utilization")
    tick(engine, "other")
    windows = [replace(zipf_snapshot(seq, n_channels=2, demand=3.6), region="other") for seq in (1, 2, 3)]
    ingest(engine, *windows)
    result = tick(engine, "other")
    assert result.plan_id is not None
    return result.plan_id
