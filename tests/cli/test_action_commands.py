"""``repart rollback|scale|explain`` from the command line: JSON shape, people output, exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repart.cli.database import number
from repart.storage import make_engine, version_function
from tests.cli.helpers import flat, repart, repart_json, table_row, table_rows
from tests.factories import (
    counted_snapshot,
    counter_document,
    row_counts,
    skewed_keys,
    strip_max_mean_load,
    versions,
    window_max_mean_load,
)

WHERE_EXPLAINED = "b and max/mean load: docs/concepts/metrics.md"

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


def field_rows(output: str) -> dict[str, str]:
    """The field -> value rows of the two-column tables of ``output`` (``explain``'s decision,
    ``versions show``)."""
    return {row[0]: row[1] for row in table_rows(output) if len(row) == 2}


def create_and_initialize(db_url: str, *options: str) -> None:
    created = repart(db_url, "region", "create", "ops", "--key-type", "str", "--channels", "4", *options)
    assert created.exit_code == 0, created.output
    assert repart_json(db_url, "tick")[0]["action"] == "initialized"


def ingest_skewed_window(db_url: str, tmp_path: Path) -> None:
    """Ingest window 1 of region ops: ``skewed_keys`` counted, through ``repart snapshot ingest``."""
    document = tmp_path / "window.json"
    document.write_text(json.dumps(counter_document("ops", 1, skewed_keys())))
    assert repart(db_url, "snapshot", "ingest", str(document)).exit_code == 0


def test_scale_then_rollback_then_explain(db_url: str, tmp_path: Path) -> None:
    create_and_initialize(db_url, "--max-channels", "8", "--algorithm", "auto")
    ingest_skewed_window(db_url, tmp_path)

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
    ingest_skewed_window(db_url, tmp_path)
    assert repart_json(db_url, "tick")[0]["action"] == "activated"

    shown = repart_json(db_url, "explain", "ops")
    assert shown["kind"] == "activated"
    assert [c["algorithm"] for c in shown["candidates"]] == ["scan", "redist", "readj"]
    # max/mean load beside b: of the applied version and of the new one, on the window's rows.
    engine = make_engine(db_url)
    try:
        applied, new = (version_function(version) for version in versions(engine, "ops"))
    finally:
        engine.dispose()
    window = counted_snapshot("ops", 1, skewed_keys())
    assert shown["load_before"] == pytest.approx(window_max_mean_load(applied, window), rel=1e-9)
    assert shown["predicted_load"] == pytest.approx(window_max_mean_load(new, window), rel=1e-9)
    chosen = shown["algorithm"].removeprefix("auto:")
    assert [c["predicted_load"] for c in shown["candidates"] if c["algorithm"] == chosen] == [
        shown["predicted_load"]
    ]
    people = repart(db_url, "explain", "ops")
    assert people.exit_code == 0
    assert "candidates" in people.output and "readj" in people.output
    rows = field_rows(people.output)
    assert (rows["load_before"], rows["predicted_load"]) == (
        number(shown["load_before"]),
        number(shown["predicted_load"]),
    )
    assert list(rows).index("load_before") == list(rows).index("b_before") + 1
    assert list(rows).index("predicted_load") == list(rows).index("predicted_b") + 1
    for candidate in shown["candidates"]:
        row = table_row(people.output, candidate["algorithm"], ("algorithm", "b", "max/mean", "m"))
        assert (row["b"], row["max/mean"]) == (
            number(candidate["predicted_b"]),
            number(candidate["predicted_load"]),
        )
    assert flat(people.output).count(WHERE_EXPLAINED) == 2  # under the decision and the candidates

    # The new version's build report: its predicted max/mean load beside its predicted b.
    version = repart_json(db_url, "versions", "show", "ops", "2")
    assert version["report"]["predicted_load"] == shown["predicted_load"]
    people = repart(db_url, "versions", "show", "ops", "2")
    assert people.exit_code == 0, people.output
    rows = field_rows(people.stdout)
    fields = list(rows)
    assert fields.index("report.predicted_load") == fields.index("report.predicted_b") + 1
    assert rows["report.predicted_load"] == json.dumps(shown["predicted_load"])
    assert WHERE_EXPLAINED in flat(people.stdout)


def test_explain_of_an_event_without_max_mean_load_shows_a_dash(db_url: str, tmp_path: Path) -> None:
    create_and_initialize(db_url, "--algorithm", "auto")
    ingest_skewed_window(db_url, tmp_path)
    assert repart_json(db_url, "tick")[0]["action"] == "activated"
    strip_max_mean_load(db_url, "ops")  # as an older repart wrote the event

    shown = repart_json(db_url, "explain", "ops")
    assert (shown["load_before"], shown["predicted_load"]) == (None, None)
    assert [c["predicted_load"] for c in shown["candidates"]] == [None, None, None]
    people = repart(db_url, "explain", "ops")
    assert people.exit_code == 0, people.output
    rows = field_rows(people.output)
    assert (rows["load_before"], rows["predicted_load"]) == ("-", "-")
    assert rows["b_before"] == number(shown["b_before"])
    for candidate in shown["candidates"]:
        row = table_row(people.output, candidate["algorithm"], ("algorithm", "b", "max/mean", "m"))
        assert (row["b"], row["max/mean"]) == (number(candidate["predicted_b"]), "-")


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
