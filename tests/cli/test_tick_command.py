"""``repart tick``: one controller iteration per region, from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import repart, repart_json
from tests.factories import counter_document, row_counts, skewed_keys


def test_tick_initializes_then_rebalances_a_skewed_window(db_url: str, tmp_path: Path) -> None:
    created = repart(db_url, "region", "create", "ticks", "--key-type", "str", "--channels", "4")
    assert created.exit_code == 0, created.output
    [first] = repart_json(db_url, "tick")
    assert (first["region"], first["action"], first["version"], first["n_channels"]) == (
        "ticks",
        "initialized",
        1,
        4,
    )
    [idle] = repart_json(db_url, "tick", "--region", "ticks")
    assert idle["action"] == "idle"

    document = tmp_path / "window.json"
    document.write_text(json.dumps(counter_document("ticks", 1, skewed_keys())))
    assert repart(db_url, "snapshot", "ingest", str(document)).exit_code == 0
    [second] = repart_json(db_url, "tick")
    assert second["action"] == "activated" and second["version"] == 2 and second["plan_id"] is not None
    plans = repart_json(db_url, "plans", "list", "ticks")
    assert [(p["from_version"], p["to_version"], p["status"]) for p in plans] == [(1, 2, "pending")]

    people = repart(db_url, "tick")
    assert people.exit_code == 0 and "idle" in people.output


def test_tick_of_an_unknown_region_exits_2_and_writes_nothing(db_url: str) -> None:
    before = row_counts(db_url)
    result = repart(db_url, "tick", "--region", "nope")
    assert result.exit_code == 2
    assert "nope" in result.output and "Traceback" not in result.output
    assert row_counts(db_url) == before
