"""Audit and history on the command line: ``events list``, ``batches list``, ``snapshot list|delete``,
``region delete``, ``--version``, retried ``plans report`` and ``versions diff`` against ``plans show``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from repart import __version__ as repart_version
from repart.cli.app import app
from repart.controller.window import merge_snapshots
from repart.migration import plan_migration
from repart.partitioning import PartitionFunction
from repart.storage import (
    EVENT_KINDS,
    NewEvent,
    get_version,
    make_engine,
    models,
    record_batch_report,
    record_event,
    run_in_transaction,
    version_function,
)
from tests.cli.helpers import repart, repart_json, runner
from tests.factories import add_versions, counted_snapshot, ingest, row_counts, skewed_keys

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def create(db_url: str, name: str) -> None:
    result = repart(
        db_url, "region", "create", name, "--key-type", "str", "--channels", "4", "--max-channels", "16"
    )
    assert result.exit_code == 0, result.output


def in_session(db_url: str, work: Any) -> Any:
    engine = make_engine(db_url)
    try:
        return run_in_transaction(engine, work)
    finally:
        engine.dispose()


def window_file(tmp_path: Path, region: str, seq: int) -> str:
    """The document of window ``seq`` of ``region`` (skewed keys seeded by ``seq``), as a file."""
    path = tmp_path / f"{region}-{seq}.json"
    path.write_text(json.dumps(counted_snapshot(region, seq, skewed_keys(seq)).to_document()))
    return str(path)


def decided_region(db_url: str, tmp_path: Path) -> None:
    """Region ``ticks``: initialized, window 1 decided on (version 2 and plan 1 activated), window 2
    ingested and not decided on yet."""
    create(db_url, "ticks")
    assert repart_json(db_url, "tick")[0]["action"] == "initialized"
    assert repart(db_url, "snapshot", "ingest", window_file(tmp_path, "ticks", 1)).exit_code == 0
    assert repart_json(db_url, "tick")[0]["action"] == "activated"
    assert repart(db_url, "snapshot", "ingest", window_file(tmp_path, "ticks", 2)).exit_code == 0


def assert_error(result: Any, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.stderr, result.stderr


# --- events list --------------------------------------------------------------------------------


def add_events(db_url: str) -> list[tuple[str, datetime, dict[str, Any]]]:
    """Four events of ``trades`` a minute apart from T0 and one of ``other`` in between."""
    written: list[tuple[str, datetime, dict[str, Any]]] = [
        ("initialized", T0, {"n_channels": 4}),
        ("activated", T0 + timedelta(minutes=1), {"window_seqs": [1]}),
        ("no-change", T0 + timedelta(minutes=2), {"window_seqs": [1, 2]}),
        ("activated", T0 + timedelta(minutes=3), {"window_seqs": [2, 3]}),
    ]

    def work(session: Session) -> None:
        for index, (kind, at, data) in enumerate(written):
            record_event(session, "trades", NewEvent(kind, "test", f"event {index}", data), at=at)
            if index == 1:
                other = NewEvent("activated", "test", "not trades'", {})
                record_event(session, "other", other, at=at)

    in_session(db_url, work)
    return written


def test_events_list_oldest_first_filtered_by_kind_and_since(db_url: str) -> None:
    create(db_url, "trades")
    create(db_url, "other")
    written = add_events(db_url)
    listed = repart_json(db_url, "events", "list", "trades")
    assert [(e["kind"], e["created_at"], e["data"]) for e in listed] == [
        (kind, at.isoformat(), data) for kind, at, data in written
    ]
    assert [e["message"] for e in listed] == ["event 0", "event 1", "event 2", "event 3"]
    ids = [e["id"] for e in listed]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert set(listed[0]) == {"id", "kind", "rule", "message", "created_at", "data"}

    assert [e["id"] for e in repart_json(db_url, "events", "list", "trades", "--kind", "activated")] == [
        ids[1],
        ids[3],
    ]
    since = (T0 + timedelta(minutes=2)).isoformat()
    assert [e["id"] for e in repart_json(db_url, "events", "list", "trades", "--since", since)] == ids[2:]
    # The same instant written in another offset and with Z.
    for same in ("2026-03-01T14:02:00+02:00", "2026-03-01T12:02Z"):
        assert [e["id"] for e in repart_json(db_url, "events", "list", "trades", "--since", same)] == ids[2:]
    both = repart_json(db_url, "events", "list", "trades", "--kind", "activated", "--since", since)
    assert [e["id"] for e in both] == [ids[3]]
    assert repart_json(db_url, "events", "list", "trades", "--kind", "rollback") == []
    assert [e["message"] for e in repart_json(db_url, "events", "list", "other")] == ["not trades'"]

    people = repart(db_url, "events", "list", "trades")
    assert people.exit_code == 0
    assert all(f"event {index}" in people.stdout for index in range(4))


def test_events_list_bad_input_names_the_option(db_url: str) -> None:
    create(db_url, "trades")
    assert_error(repart(db_url, "events", "list", "bonds"), 2, "unknown region 'bonds'")
    unknown_kind = repart(db_url, "events", "list", "trades", "--kind", "activate")
    assert_error(
        unknown_kind, 2, "--kind must be one of", "'activated'", "'snapshot-deleted'", "got 'activate'"
    )
    for bad in ("yesterday", "2026-03-01T12:00:00", "2026-13-01T00:00Z"):
        assert_error(repart(db_url, "events", "list", "trades", "--since", bad), 2, "--since", repr(bad))


def test_every_listed_kind_is_accepted(db_url: str) -> None:
    create(db_url, "trades")
    for kind in EVENT_KINDS:
        assert repart_json(db_url, "events", "list", "trades", "--kind", kind) == []


# --- batches list -------------------------------------------------------------------------------


def test_batches_list_by_batch_id(db_url: str) -> None:
    create(db_url, "trades")
    create(db_url, "other")
    add_versions(db_url, "trades", (4, 6))
    plan_id = repart_json(db_url, "plans", "list", "trades")[0]["id"]
    payloads: dict[int, dict[str, Any]] = {
        7: {"rows": 70, "seconds": 1.5},
        3: {"rows": 30},
        5: {"rows": 50, "checksum": "ab"},
    }

    def work(session: Session) -> None:
        for batch, payload in payloads.items():
            record_batch_report(session, "trades", batch, payload, plan_id=plan_id if batch == 5 else None)
        record_batch_report(session, "other", 1, {"rows": 1})

    in_session(db_url, work)
    listed = repart_json(db_url, "batches", "list", "trades")
    assert [(r["batch"], r["plan_id"], r["payload"]) for r in listed] == [
        (3, None, payloads[3]),
        (5, plan_id, payloads[5]),
        (7, None, payloads[7]),
    ]
    assert all(datetime.fromisoformat(r["reported_at"]).utcoffset() == timedelta(0) for r in listed)
    assert [r["batch"] for r in repart_json(db_url, "batches", "list", "other")] == [1]
    people = repart(db_url, "batches", "list", "trades")
    assert people.exit_code == 0 and '"checksum":"ab"' in people.stdout
    assert_error(repart(db_url, "batches", "list", "bonds"), 2, "unknown region 'bonds'")


# --- snapshot list and delete -------------------------------------------------------------------


def test_snapshot_list_shows_each_window_without_its_items(db_url: str) -> None:
    create(db_url, "trades")
    create(db_url, "other")
    engine = make_engine(db_url)
    snapshots = [counted_snapshot("trades", seq, skewed_keys(seq, 5000), batch=10 + seq) for seq in (1, 2, 4)]
    try:
        ingest(engine, *snapshots, counted_snapshot("other", 1, skewed_keys(9)))
    finally:
        engine.dispose()
    listed = repart_json(db_url, "snapshot", "list", "trades")
    assert [
        (r["seq"], r["window_start"], r["window_end"], r["tuples"], r["distinct_estimate"], r["epsilon"])
        for r in listed
    ] == [
        (
            s.seq,
            s.window_start.isoformat(),
            s.window_end.isoformat(),
            s.tuples,
            s.distinct_estimate,
            s.epsilon,
        )
        for s in snapshots
    ]
    assert [(r["items"], r["batch"]) for r in listed] == [(len(s.items), s.batch) for s in snapshots]
    assert all(r["items"] > 0 for r in listed)
    people = repart(db_url, "snapshot", "list", "trades")
    assert people.exit_code == 0 and str(len(snapshots[2].items)) in people.stdout
    assert_error(repart(db_url, "snapshot", "list", "bonds"), 2, "unknown region 'bonds'")


def snapshot_rows(db_url: str) -> dict[int, int]:
    """Items stored per window seq of ``ticks``."""

    def work(session: Session) -> dict[int, int]:
        query = (
            select(models.Snapshot.seq, func.count(models.SnapshotItem.idx))
            .join(models.SnapshotItem, models.SnapshotItem.snapshot_id == models.Snapshot.id)
            .group_by(models.Snapshot.seq)
        )
        return {seq: count for seq, count in session.execute(query)}

    counts: dict[int, int] = in_session(db_url, work)
    return counts


def test_snapshot_delete_refuses_a_window_a_decision_depends_on(db_url: str, tmp_path: Path) -> None:
    decided_region(db_url, tmp_path)
    items = snapshot_rows(db_url)
    assert sorted(items) == [1, 2]
    before = row_counts(db_url)

    missing = repart(db_url, "snapshot", "delete", "ticks", "--seq", "9")
    assert_error(missing, 2, "region 'ticks' has no snapshot with window.seq 9", "window.seq 1 to 2")
    refused = repart(db_url, "snapshot", "delete", "ticks", "--seq", "1")
    assert_error(refused, 3, "window.seq 1", "considered the windows up to seq 1", "activated", "--force")
    assert row_counts(db_url) == before
    assert [s["seq"] for s in repart_json(db_url, "snapshot", "list", "ticks")] == [1, 2]
    assert_error(repart(db_url, "snapshot", "delete", "bonds", "--seq", "1"), 2, "unknown region 'bonds'")

    deleted = repart_json(db_url, "snapshot", "delete", "ticks", "--seq", "2")
    assert (deleted["seq"], deleted["forced"], deleted["depended_on"], deleted["items"]) == (
        2,
        False,
        [],
        items[2],
    )
    assert snapshot_rows(db_url) == {1: items[1]}
    after = row_counts(db_url)
    assert after["snapshots"] == before["snapshots"] - 1
    assert after["snapshot_items"] == before["snapshot_items"] - items[2]
    assert after["events"] == before["events"] + 1

    forced = repart_json(db_url, "snapshot", "delete", "ticks", "--seq", "1", "--force")
    assert forced["forced"] is True and len(forced["depended_on"]) == 2
    assert repart_json(db_url, "snapshot", "list", "ticks") == []
    assert row_counts(db_url)["snapshot_items"] == 0
    logged = repart_json(db_url, "events", "list", "ticks", "--kind", "snapshot-deleted")
    assert [(e["data"]["seq"], e["data"]["forced"], e["rule"]) for e in logged] == [
        (2, False, "operator"),
        (1, True, "operator"),
    ]
    assert logged[1]["data"]["depended_on"] == forced["depended_on"]
    assert [v["version"] for v in repart_json(db_url, "versions", "list", "ticks")] == [1, 2]


def test_snapshot_delete_refuses_a_window_an_operator_action_was_weighed_by(
    db_url: str, tmp_path: Path
) -> None:
    decided_region(db_url, tmp_path)
    scaled = repart(db_url, "scale", "ticks", "--channels", "8")
    assert scaled.exit_code == 0, scaled.output
    # Window 2 is newer than any tick's decision, but the scale's plan was weighed by it.
    refused = repart(db_url, "snapshot", "delete", "ticks", "--seq", "2")
    assert_error(refused, 3, "(scaled, version 3)")
    assert "considered the windows" not in refused.stderr
    assert [s["seq"] for s in repart_json(db_url, "snapshot", "list", "ticks")] == [1, 2]


def test_people_output_of_snapshot_delete(db_url: str, tmp_path: Path) -> None:
    decided_region(db_url, tmp_path)
    result = repart(db_url, "snapshot", "delete", "ticks", "--seq", "2")
    assert result.exit_code == 0, result.output
    assert "deleted snapshot seq 2 of ticks" in result.stdout


# --- region delete ------------------------------------------------------------------------------


def test_region_delete_refused_with_versions_unless_forced(db_url: str, tmp_path: Path) -> None:
    decided_region(db_url, tmp_path)
    create(db_url, "empty")
    create(db_url, "kept")
    add_versions(db_url, "kept", (4, 6))
    before = row_counts(db_url)

    assert_error(repart(db_url, "region", "delete", "bonds"), 2, "unknown region 'bonds'")
    refused = repart(db_url, "region", "delete", "ticks")
    assert_error(refused, 3, "region 'ticks' has 2 version(s) and 1 plan(s)", "--force")
    assert row_counts(db_url) == before

    assert repart_json(db_url, "region", "delete", "empty")["versions"] == 0
    deleted = repart_json(db_url, "region", "delete", "ticks", "--force")
    assert (deleted["versions"], deleted["plans"], deleted["snapshots"], deleted["forced"]) == (2, 1, 2, True)
    assert [r["name"] for r in repart_json(db_url, "region", "list")] == ["kept"]
    after = row_counts(db_url)
    kept_versions = len(repart_json(db_url, "versions", "list", "kept"))
    assert (after["regions"], after["versions"], after["plans"], after["snapshots"]) == (
        1,
        kept_versions,
        1,
        0,
    )
    assert after["snapshot_items"] == 0 and after["version_explicit"] == len_explicit(db_url, "kept")

    def region_deleted(session: Session) -> list[tuple[int | None, str]]:
        rows = session.scalars(select(models.Event).where(models.Event.kind == "region-deleted"))
        return [(row.region_id, json.loads(row.data_json)["region"]) for row in rows]

    assert in_session(db_url, region_deleted) == [(None, "empty"), (None, "ticks")]
    # The region's own events stay, without a region, and `events list` without a region reads them.
    assert after["events"] == before["events"] + 2
    orphans = repart_json(db_url, "events", "list")
    assert len(orphans) == after["events"] - len(repart_json(db_url, "events", "list", "kept"))
    deleted_kind = repart_json(db_url, "events", "list", "--kind", "region-deleted")
    assert [e["data"]["region"] for e in deleted_kind] == ["empty", "ticks"]


def len_explicit(db_url: str, region: str) -> int:
    """Explicit entries stored for the versions of ``region``."""
    return sum(v["explicit_size"] for v in repart_json(db_url, "versions", "list", region))


# --- --version ----------------------------------------------------------------------------------


def test_version_flag_prints_the_package_version() -> None:
    """One version: ``repart.__version__``, which the installed metadata was built from."""
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"repart {repart_version}\n"
    assert version("repart") == repart_version


# --- plans report, retried ----------------------------------------------------------------------


def test_plans_report_retried_with_the_same_numbers_is_a_no_op(db_url: str) -> None:
    create(db_url, "trades")
    add_versions(db_url, "trades", (4, 6))
    plan_id = str(repart_json(db_url, "plans", "list", "trades")[0]["id"])
    moved = ("--moved-rows", "120", "--moved-bytes", "4096")
    first = repart_json(db_url, "plans", "report", "trades", plan_id, "--state", "applied", *moved)
    assert (first["status"], first["changed"]) == ("applied", True)
    before = row_counts(db_url)

    again = repart_json(db_url, "plans", "report", "trades", plan_id, "--state", "applied", *moved)
    assert (again["status"], again["changed"], again["moved_rows"], again["moved_bytes"]) == (
        "applied",
        False,
        120,
        4096,
    )
    assert again["updated_at"] == first["updated_at"]
    people = repart(db_url, "plans", "report", "trades", plan_id, "--state", "applied", *moved)
    assert people.exit_code == 0 and "already reported applied" in people.stdout
    assert row_counts(db_url) == before

    for other in (("--moved-rows", "121", "--moved-bytes", "4096"), ("--moved-rows", "120"), ()):
        result = repart(db_url, "plans", "report", "trades", plan_id, "--state", "applied", *other)
        assert_error(result, 3, "already reported applied with moved rows 120 and moved bytes 4096")
    negative = repart(
        db_url, "plans", "report", "trades", plan_id, "--state", "applied", "--moved-rows", "-1"
    )
    assert_error(negative, 2, "--moved-rows")
    assert_error(
        repart(db_url, "plans", "report", "trades", plan_id, "--state", "failed"),
        3,
        "cannot go from 'applied'",
    )
    shown = repart_json(db_url, "plans", "show", "trades", plan_id)
    assert (shown["status"], shown["moved_rows"], shown["moved_bytes"]) == ("applied", 120, 4096)


def test_plans_report_failed_twice_is_a_no_op(db_url: str) -> None:
    create(db_url, "trades")
    add_versions(db_url, "trades", (4, 6))
    plan_id = str(repart_json(db_url, "plans", "list", "trades")[0]["id"])
    assert repart_json(db_url, "plans", "report", "trades", plan_id, "--state", "failed")["changed"] is True
    assert repart_json(db_url, "plans", "report", "trades", plan_id, "--state", "failed")["changed"] is False
    with_numbers = repart(
        db_url, "plans", "report", "trades", plan_id, "--state", "failed", "--moved-rows", "3"
    )
    assert_error(with_numbers, 2, "--moved-rows")
    assert_error(
        repart(db_url, "plans", "report", "trades", plan_id, "--state", "applied"),
        3,
        "cannot go from 'failed'",
    )


# --- versions diff and plans show ---------------------------------------------------------------


def test_versions_diff_gives_the_stored_plans_prediction(db_url: str, tmp_path: Path) -> None:
    decided_region(db_url, tmp_path)
    [plan] = repart_json(db_url, "plans", "list", "ticks")
    shown = repart_json(db_url, "plans", "show", "ticks", str(plan["id"]))["plan"]
    diff = repart_json(db_url, "versions", "diff", "ticks", "1", "2")
    assert (diff["plan_id"], diff["window_seqs"]) == (plan["id"], [])
    assert diff["predicted_m"] == shown["predicted_m"] == plan["predicted_m"]
    assert diff["predicted_m"] is not None and diff["predicted_m"] > 0
    assert diff["explicit_moves"] == shown["explicit_moves"]
    assert diff["slot_moves"] == shown["slot_moves"]
    assert sum(m["weight"] for m in diff["explicit_moves"]) > 0
    assert "weights: those of stored plan" in repart(db_url, "versions", "diff", "ticks", "1", "2").stdout


def test_versions_diff_without_a_stored_plan_is_weighed_by_the_latest_window(
    db_url: str, tmp_path: Path
) -> None:
    decided_region(db_url, tmp_path)
    diff = repart_json(db_url, "versions", "diff", "ticks", "2", "1")
    assert (diff["plan_id"], diff["window_seqs"]) == (None, [1, 2])

    def functions(session: Session) -> tuple[PartitionFunction, PartitionFunction]:
        return version_function(get_version(session, "ticks", 2)), version_function(
            get_version(session, "ticks", 1)
        )

    source, target = in_session(db_url, functions)
    window = [counted_snapshot("ticks", seq, skewed_keys(seq)) for seq in (1, 2)]
    expected = plan_migration(source, target, merge_snapshots(window))  # the region's resources: LCL
    assert diff["predicted_m"] == expected.m is not None
    assert [m["weight"] for m in diff["explicit_moves"]] == [m.weight for m in expected.explicit_moves]
    assert (
        "weights: from the latest window, seqs 1, 2"
        in repart(db_url, "versions", "diff", "ticks", "2", "1").stdout
    )


def test_versions_diff_without_a_window_has_no_prediction(db_url: str) -> None:
    create(db_url, "trades")
    add_versions(db_url, "trades", (4, 6, 8))
    diff = repart_json(db_url, "versions", "diff", "trades", "2", "3")
    assert (diff["plan_id"], diff["window_seqs"], diff["predicted_m"]) == (None, [], None)
    assert all(m["weight"] == 0.0 for m in diff["explicit_moves"])
    assert "m is unknown" in repart(db_url, "versions", "diff", "trades", "2", "3").stdout
