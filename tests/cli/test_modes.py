"""Region modes from the command line (DESIGN §12.3): holds that stick, resume, recommend, the first tick.

The scenarios are the ones issue #10 reports: a scale undone by the fixed policy on the next window, a
rollback rebuilt away by the next tick, an operator's pending plan superseded without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repart.cli.database import number
from repart.controller.build import build_next
from repart.controller.settings import ControllerSettings
from repart.controller.window import merge_snapshots
from repart.storage import RegionConfig, make_engine, read_transaction, region_by_name, version_function
from tests.cli.helpers import flat, repart, repart_json, table_row
from tests.factories import (
    counted_snapshot,
    counter_document,
    row_counts,
    skewed_keys,
    strip_max_mean_load,
    window_max_mean_load,
)
from tests.factories import versions as version_rows

RECOMMENDATION_COLUMNS = ("b before", "max/mean before", "predicted b", "predicted max/mean")


def ingest_window(db_url: str, tmp_path: Path, region: str, seq: int) -> None:
    document = tmp_path / f"{region}-{seq}.json"
    document.write_text(json.dumps(counter_document(region, seq, skewed_keys(seed=seq))))
    result = repart(db_url, "snapshot", "ingest", str(document))
    assert result.exit_code == 0, result.output


def create(db_url: str, region: str, *options: str) -> None:
    created = repart(db_url, "region", "create", region, "--key-type", "str", "--channels", "4", *options)
    assert created.exit_code == 0, created.output


def tick(db_url: str, region: str) -> dict[str, object]:
    results = repart_json(db_url, "tick", "--region", region)
    assert len(results) == 1
    return results[0]  # type: ignore[no-any-return]


def versions(db_url: str, region: str) -> list[tuple[int, int, str]]:
    return [(v["version"], v["N"], v["status"]) for v in repart_json(db_url, "versions", "list", region)]


def mode_events(db_url: str, region: str) -> list[dict[str, object]]:
    return [e["data"] for e in repart_json(db_url, "events", "list", region, "--kind", "mode-changed")]


def test_the_first_tick_initializes_and_decides_on_the_waiting_windows(db_url: str, tmp_path: Path) -> None:
    create(db_url, "fx", "--max-channels", "8")
    ingest_window(db_url, tmp_path, "fx", 1)
    first = tick(db_url, "fx")
    assert first["action"] == "activated"
    assert str(first["reason"]).startswith("p(0): consistent hashing")
    assert versions(db_url, "fx") == [(1, 4, "applied"), (2, 4, "planned")]
    kinds = [e["kind"] for e in repart_json(db_url, "events", "list", "fx")]
    assert kinds == ["initialized", "activated"]
    assert tick(db_url, "fx")["action"] == "idle"


def test_a_scale_holds_the_region_until_resumed(db_url: str, tmp_path: Path) -> None:
    create(db_url, "fx", "--max-channels", "8")
    assert tick(db_url, "fx")["action"] == "initialized"
    scaled = repart_json(db_url, "scale", "fx", "--channels", "8", "--reason", "month-end peak")
    assert (scaled["mode"], scaled["version"]) == ("hold", 2)
    assert scaled["mode_reason"] == "operator scaled from 4 to 8 channels (version 1): month-end peak"

    # Today's defect: the next window made the fixed policy write "8 -> 4 channels". Held, nothing runs.
    ingest_window(db_url, tmp_path, "fx", 1)
    before = row_counts(db_url)
    held = tick(db_url, "fx")
    assert (held["action"], held["version"]) == ("held", None)
    assert held["reason"] == f"held: {scaled['mode_reason']}"
    assert row_counts(db_url) == before
    assert repart_json(db_url, "plans", "list", "fx")[0]["status"] == "pending"
    status = repart_json(db_url, "status", "fx")[0]
    assert (status["mode"], status["mode_reason"]) == ("hold", scaled["mode_reason"])

    resumed = repart_json(db_url, "resume", "fx")
    assert (resumed["mode"], resumed["mode_reason"]) == ("auto", "resumed by the operator")
    acted = tick(db_url, "fx")
    # Once resumed, the fixed policy goes back to 4, and says which pending plan it superseded.
    assert acted["action"] == "activated" and acted["n_channels"] == 4
    assert f"superseded pending plan(s) {scaled['plan_id']}, never applied" in str(acted["reason"])
    assert [(e["from"], e["to"]) for e in mode_events(db_url, "fx")] == [("auto", "hold"), ("hold", "auto")]


def test_a_rollback_is_not_rebuilt_away_by_the_next_tick(db_url: str, tmp_path: Path) -> None:
    create(db_url, "ticks", "--max-channels", "8", "--set", "rebalance_threshold=1.0")
    ingest_window(db_url, tmp_path, "ticks", 1)
    assert tick(db_url, "ticks")["action"] == "activated"
    plan = repart_json(db_url, "plans", "list", "ticks")[0]["id"]
    repart_json(db_url, "plans", "report", "ticks", str(plan), "--state", "applied")
    back = repart_json(db_url, "rollback", "ticks", "--to", "1")
    assert back["mode"] == "hold"
    ingest_window(db_url, tmp_path, "ticks", 2)
    assert tick(db_url, "ticks")["action"] == "held"
    assert [v[0] for v in versions(db_url, "ticks")] == [1, 2, 3]


def test_recommend_records_what_it_would_do_and_activates_nothing(db_url: str, tmp_path: Path) -> None:
    create(db_url, "dry", "--max-channels", "8", "--set", "rebalance_threshold=1.0")
    assert tick(db_url, "dry")["action"] == "initialized"
    updated = repart_json(db_url, "region", "update", "dry", "--mode", "recommend", "--reason", "first week")
    assert (updated["mode"], updated["mode_reason"]) == ("recommend", "first week")
    ingest_window(db_url, tmp_path, "dry", 1)
    result = tick(db_url, "dry")
    assert (result["action"], result["version"]) == ("recommended", None)
    assert versions(db_url, "dry") == [(1, 4, "applied")]
    assert repart_json(db_url, "plans", "list", "dry") == []
    (recommendation,) = repart_json(db_url, "plans", "list", "dry", "--recommended")
    assert (recommendation["considered_seq"], recommendation["n_before"], recommendation["n_next"]) == (
        1,
        4,
        4,
    )
    assert recommendation["predicted_b"] < recommendation["b_before"]
    assert recommendation["plan"]["explicit_moves"] + recommendation["plan"]["slot_moves"] > 0
    # max/mean load beside each b, on the window: of the applied p(0), and of the function it
    # recommends (rebuilt here: the same digest).
    window = counted_snapshot("dry", 1, skewed_keys(seed=1))
    engine = make_engine(db_url)
    try:
        config = read_transaction(
            engine, lambda session: RegionConfig.from_row(region_by_name(session, "dry"))
        )
        applied = version_function(version_rows(engine, "dry")[0])
    finally:
        engine.dispose()
    built = build_next(applied, merge_snapshots([window]), 4, ControllerSettings.from_config(config))
    assert built.function.digest == recommendation["digest"]
    assert recommendation["load_before"] == pytest.approx(window_max_mean_load(applied, window), rel=1e-9)
    assert recommendation["predicted_load"] == pytest.approx(
        window_max_mean_load(built.function, window), rel=1e-9
    )
    assert tick(db_url, "dry")["action"] == "idle"  # the window was decided on once
    people = repart(db_url, "plans", "list", "dry", "--recommended")
    assert people.exit_code == 0 and "nothing activated" in people.stdout
    row = table_row(people.stdout, str(recommendation["event_id"]), RECOMMENDATION_COLUMNS)
    assert [row[column] for column in RECOMMENDATION_COLUMNS] == [
        number(recommendation[field])
        for field in ("b_before", "load_before", "predicted_b", "predicted_load")
    ]
    assert "b and max/mean load: docs/concepts/metrics.md" in flat(people.stdout)
    strip_max_mean_load(db_url, "dry")  # as an older repart wrote the event
    (old,) = repart_json(db_url, "plans", "list", "dry", "--recommended")
    assert (old["load_before"], old["predicted_load"], old["b_before"]) == (
        None,
        None,
        recommendation["b_before"],
    )
    people = repart(db_url, "plans", "list", "dry", "--recommended")
    row = table_row(people.stdout, str(recommendation["event_id"]), RECOMMENDATION_COLUMNS)
    assert [row[column] for column in RECOMMENDATION_COLUMNS] == [
        number(recommendation["b_before"]),
        "-",
        number(recommendation["predicted_b"]),
        "-",
    ]

    repart_json(db_url, "region", "update", "dry", "--mode", "auto")
    ingest_window(db_url, tmp_path, "dry", 2)
    assert tick(db_url, "dry")["action"] == "activated"
    assert [e["to"] for e in mode_events(db_url, "dry")] == ["recommend", "auto"]


def test_hold_by_update_and_resume_to_the_previous_mode(db_url: str) -> None:
    create(db_url, "fx")
    repart_json(db_url, "region", "update", "fx", "--mode", "recommend")
    repart_json(db_url, "region", "update", "fx", "--mode", "hold", "--reason", "incident 42")
    assert tick(db_url, "fx")["action"] == "held"  # not even initialized
    assert repart_json(db_url, "resume", "fx")["mode"] == "recommend"
    assert tick(db_url, "fx")["action"] == "initialized"  # p(0) is the base every mode needs


def test_bad_mode_input_names_the_field_and_writes_nothing(db_url: str) -> None:
    create(db_url, "fx")
    before = row_counts(db_url)
    unknown = repart(db_url, "region", "update", "fx", "--mode", "sometimes")
    assert unknown.exit_code == 2
    assert "--mode" in unknown.stderr and "'auto', 'recommend', 'hold'" in unknown.stderr
    not_held = repart(db_url, "resume", "fx")
    assert (
        not_held.exit_code == 2
        and "must be 'hold', or the region backing off after failed ticks, to resume" in not_held.stderr
    )
    lone_reason = repart(db_url, "region", "update", "fx", "--reason", "why not")
    assert lone_reason.exit_code == 2 and "--reason" in lone_reason.stderr
    missing = repart(db_url, "resume", "bonds")
    assert missing.exit_code == 2 and "unknown region 'bonds'" in missing.stderr
    assert row_counts(db_url) == before
    assert "Traceback" not in unknown.output + not_held.output + lone_reason.output
