"""What the API's answers reveal: a snapshot's answer is its id, never where the database is."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.protocol.snapshot import Snapshot
from tests.api.conftest import call, new_token, zipf_region
from tests.factories import REGION, row_counts, zipf_snapshot


def test_a_snapshots_answer_is_its_id_and_names_no_database(engine: Engine, api: ApiServer) -> None:
    zipf_region(engine)
    token = new_token(engine, f"job:{REGION}")
    document = replace(zipf_snapshot(1, n_channels=2, demand=1.0), batch=7).to_document()
    status, answer = call(api, "POST", f"/v1/regions/{REGION}/snapshots", token, document)
    assert status == 200
    assert answer == {"snapshot_id": 1}
    assert row_counts(engine)["snapshots"] == 1
    assert str(engine.url.database) not in repr(answer)


def test_bodies_are_parsed_off_the_event_loop(
    engine: Engine, api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    zipf_region(engine)
    token = new_token(engine, f"job:{REGION}")
    threads: list[str] = []
    real_loads, real_from_document = json.loads, Snapshot.from_document

    def loads(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_loads(*args, **kwargs)

    def from_document(document: Any) -> Snapshot:
        threads.append(threading.current_thread().name)
        return real_from_document(document)

    monkeypatch.setattr("repart.api.bodies.json.loads", loads)
    monkeypatch.setattr(Snapshot, "from_document", staticmethod(from_document))
    document = replace(zipf_snapshot(1, n_channels=2, demand=1.0), batch=7).to_document()
    assert call(api, "POST", f"/v1/regions/{REGION}/snapshots", token, document)[0] == 200
    assert call(api, "POST", f"/v1/regions/{REGION}/batches", token, {"batch_id": 7, "payload": {}})[0] == 200
    served = [name for name in threads if name != "MainThread"]  # not the test's own json.loads calls
    assert len(served) == 3
    assert "repart-api" not in served  # the event loop's thread (ApiServer) parses nothing
