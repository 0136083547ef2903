"""What the API's answers reveal: a snapshot's answer is its id, never where the database is."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Engine

from repart.api.server import ApiServer
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
