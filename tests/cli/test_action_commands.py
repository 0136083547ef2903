"""``repart rollback|scale|explain`` from the command line: JSON shape, people output, exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import repart, repart_json
from tests.factories import counter_document, row_counts, skewed_keys

RESULT_FIELDS = {
    "region",
    "action",
    "reason",
    "version",
    "plan_id",
    "from_version",
    "n_channels",
    "digest",
    "plan_m",
    "mode",
    "mode_reason",
}


def create_and_initialize(db_url: str, *options: str) -> None:
    created = repart(db_url, "region", "create", "ops", "--key-type", "str", "--channels", "4", *options)
    assert created.exit_code == 0, created.output
    assert repart_json(db_url, "tick")[0]["action"] == "initialized"


def test_scale_then_rollback_then_explain(db_url: str, tmp_path: Path) -> None:
    create_and_initialize(db_url, "--max-channels", "8", "--algorithm", "auto")
    document = tmp_path / "window.json"
    document.write_text(json.dumps(counter_document("ops", 1, skewed_keys())))
    assert repart(db_url, "snapshot", "ingest", str(document)).exit_code == 0

    scaled = repart_json(db_url, "scale", "ops", "--channels", "6")
    assert set(scaled) == RESULT_FIELDS
    assert (scaled["action"], scaled["version"], scaled["from_version"], scaled["n_channels"]) == (
        "scaled",
        2,
        1,
        6,
    )
    assert scaled["plan_m"] is not None
    applied = repart_json(db_url, "plans", "report", "ops", str(scaled["plan_id"]), "--state", "applied")
    assert applied["status"] == "applied"

    back = repart_json(db_url, "rollback", "ops", "--to", "1")
    assert (back["action"], back["version"], back["from_version"], back["n_channels"]) == (
        "rollback",
        3,
        2,
        4,
    )
    listed = repart_json(db_url, "versions", "list", "ops")
    assert [v["version"] for v in listed] == [1, 2, 3]
    assert listed[2]["digest"] == listed[0]["digest"] == back["digest"]

    shown = repart_json(db_url, "explain", "ops")
    assert (shown["kind"], shown["rule"], shown["version"], shown["plan_id"]) == (
        "rollback",
        "operator",
        3,
        back["plan_id"],
    )
    assert shown["data"]["to_version"] == 1 and shown["data"]["from_version"] == 2
    people = repart(db_url, "explain", "ops")
    assert people.exit_code == 0 and "rollback" in people.output and "operator" in people.output


def test_explain_after_an_auto_tick_lists_the_candidates(db_url: str, tmp_path: Path) -> None:
    create_and_initialize(db_url, "--algorithm", "auto")
    document = tmp_path / "window.json"
    document.write_text(json.dumps(counter_document("ops", 1, skewed_keys())))
    assert repart(db_url, "snapshot", "ingest", str(document)).exit_code == 0
    assert repart_json(db_url, "tick")[0]["action"] == "activated"

    shown = repart_json(db_url, "explain", "ops")
    assert shown["kind"] == "activated"
    assert [c["algorithm"] for c in shown["candidates"]] == ["scan", "redist", "readj"]
    people = repart(db_url, "explain", "ops")
    assert people.exit_code == 0
    assert "candidates" in people.output and "readj" in people.output


def test_people_output_of_scale_and_rollback(db_url: str) -> None:
    create_and_initialize(db_url)
    scaled = repart(db_url, "scale", "ops", "--channels", "2")
    assert scaled.exit_code == 0, scaled.output
    assert "scaled" in scaled.output and "1 → 2" in scaled.output
    rolled = repart(db_url, "rollback", "ops", "--to", "1")
    assert rolled.exit_code == 2 and "nothing to roll back" in rolled.output


def test_bad_input_exits_2_and_writes_nothing(db_url: str) -> None:
    create_and_initialize(db_url, "--max-channels", "8")
    before = row_counts(db_url)
    cases = [
        (("rollback", "ops", "--to", "9"), "--to: region 'ops' has no version 9; its versions are 1"),
        (("rollback", "ops", "--to", "1"), "nothing to roll back"),
        (("scale", "ops", "--channels", "9"), "--channels must be an integer in [1, 8], got 9"),
        (("scale", "ops", "--channels", "0"), "--channels must be an integer in [1, 8], got 0"),
        (("scale", "nope", "--channels", "2"), "nope"),
        (("explain", "nope"), "nope"),
    ]
    for args, message in cases:
        result = repart(db_url, *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert row_counts(db_url) == before

    fresh = repart(db_url, "region", "create", "fresh", "--key-type", "int", "--channels", "2")
    assert fresh.exit_code == 0
    unexplained = repart(db_url, "explain", "fresh")
    assert unexplained.exit_code == 2 and "no decision to explain" in unexplained.output
