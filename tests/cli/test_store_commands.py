"""The database commands end to end: init, region, snapshot ingest, versions, plans, status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from repart.migration import plan_migration
from tests.cli.helpers import repart, repart_json
from tests.factories import add_versions, counter_document, row_counts, skewed_keys

VERSION_FIELDS = {"version", "N", "status", "digest", "algorithm", "explicit_size", "parent", "created_at"}
PLAN_FIELDS = {"id", "from_version", "to_version", "status", "predicted_m", "explicit_moves", "slot_moves"}


def create_trades(db_url: str, *options: str) -> None:
    result = repart(db_url, "region", "create", "trades", "--key-type", "str", "--channels", "4", *options)
    assert result.exit_code == 0, result.output


def write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document))
    return str(path)


# --- init ---------------------------------------------------------------------------------------


def test_init_creates_the_directory_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'dir' / 'r.db'}"
    first = repart_json(url, "init")
    again = repart(url, "init")
    assert again.exit_code == 0, again.output
    assert first["revision"] in again.stdout
    assert (tmp_path / "new" / "dir" / "r.db").exists()


def test_commands_refuse_a_missing_database(tmp_path: Path) -> None:
    result = repart(f"sqlite:///{tmp_path / 'missing.db'}", "region", "list")
    assert result.exit_code == 2
    assert "repart init" in result.stderr
    assert not (tmp_path / "missing.db").exists()


# --- region -------------------------------------------------------------------------------------


def test_region_create_list_show_update_round_trip(db_url: str) -> None:
    created = repart_json(
        db_url, "region", "create", "trades", "--key-type", "str", "--channels", "4", "--max-channels", "16",
        "--alpha", "1.3", "--utility", "apm", "--algorithm", "redist", "--tail-aware",
    )  # fmt: skip
    assert created["name"] == "trades"
    assert (created["n_channels_initial"], created["max_channels"], created["alpha"]) == (4, 16, 1.3)
    assert (created["utility"], created["algorithm"], created["tail_aware"]) == ("APM", "redist", True)
    assert repart_json(db_url, "region", "show", "trades") == created
    assert [r["name"] for r in repart_json(db_url, "region", "list")] == ["trades"]

    updated = repart_json(db_url, "region", "update", "trades", "--sigma", "0.2", "--no-tail-aware")
    assert (updated["sigma"], updated["tail_aware"], updated["alpha"]) == (0.2, False, 1.3)

    people = repart(db_url, "region", "list")
    assert people.exit_code == 0
    assert "trades" in people.stdout and "redist" in people.stdout
    shown = repart(db_url, "region", "show", "trades")
    assert "sigma" in shown.stdout and "0.2" in shown.stdout


@pytest.mark.parametrize(
    ("options", "option", "given"),
    [
        (["--alpha", "0.5"], "--alpha", "0.5"),
        (["--alpha", "1"], "--alpha", "1.0"),
        (["--resources", "XYZ"], "--resources", "'XYZ'"),
        (["--utility", "best"], "--utility", "'best'"),
        (["--algorithm", "magic"], "--algorithm", "'magic'"),
        (["--policy", "random"], "--policy", "'random'"),
        (["--min-channels", "8", "--max-channels", "4"], "--max-channels", "4"),
        (["--channels", "20", "--max-channels", "8"], "--channels", "20"),
        (["--key-type", "float"], "--key-type", "'float'"),
    ],
)
def test_region_create_rejects_bad_options(db_url: str, options: list[str], option: str, given: str) -> None:
    """The refused value's field is shown as its option, with what is accepted and what was given."""
    before = row_counts(db_url)
    args = ["region", "create", "bad"]
    if "--key-type" not in options:
        args += ["--key-type", "str"]
    result = repart(db_url, *args, *options)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {option} must be "), result.stderr
    assert result.stderr.rstrip().endswith(f"got {given}"), result.stderr
    assert "Traceback" not in result.output
    assert row_counts(db_url) == before


def test_region_update_rejects_bad_options_and_unknown_regions(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "8")
    before = row_counts(db_url)
    shown = repart_json(db_url, "region", "show", "trades")
    for args, field in [
        (["trades", "--channels", "9"], "--channels"),
        (["trades", "--alpha", "0.9"], "--alpha"),
        (["trades"], "nothing to update"),
        (["nope", "--alpha", "1.5"], "unknown region 'nope'"),
    ]:
        result = repart(db_url, "region", "update", *args)
        assert result.exit_code == 2, args
        assert field in result.stderr
    assert row_counts(db_url) == before
    assert repart_json(db_url, "region", "show", "trades") == shown


def test_region_create_refuses_a_duplicate_name(db_url: str) -> None:
    create_trades(db_url)
    result = repart(db_url, "region", "create", "trades", "--key-type", "int")
    assert result.exit_code == 3  # Conflict
    assert "already exists" in result.stderr


# --- snapshot ingest ----------------------------------------------------------------------------


def test_snapshot_ingest_good_and_bad_files(db_url: str, tmp_path: Path) -> None:
    create_trades(db_url)
    keys = skewed_keys()
    good = write(tmp_path / "good.json", counter_document("trades", 1, keys))
    later = write(tmp_path / "later.json", counter_document("trades", 2, keys))
    mixed = counter_document("trades", 3, keys)
    mixed["items"][0][0] = 7
    negative = counter_document("trades", 4, keys)
    negative["items"][0][1] = -1
    bad = {
        "format.json": counter_document("trades", 5, keys, format=2),
        "negative.json": negative,
        "mixed.json": mixed,
        "duplicate.json": counter_document("trades", 1, keys),
        "unknown.json": counter_document("bonds", 1, keys),
    }
    bad_files = [write(tmp_path / name, doc) for name, doc in bad.items()]
    missing = str(tmp_path / "missing.json")
    before = row_counts(db_url)

    result = repart(db_url, "snapshot", "ingest", good, *bad_files, later, missing, "--json")
    assert result.exit_code == 2
    outcomes = json.loads(result.stdout)
    assert [set(o) for o in outcomes] == [{"file", "status", "seq", "region", "error"}] * len(outcomes)
    by_file = {Path(o["file"]).name: o for o in outcomes}
    assert by_file["good.json"] == {
        "file": good, "status": "ingested", "seq": 1, "region": "trades", "error": None
    }  # fmt: skip
    assert by_file["later.json"]["status"] == "ingested"
    expected_errors = {
        "format.json": "format",
        "negative.json": "items[0].count",
        "mixed.json": "key",
        "duplicate.json": "window.seq 1 was already ingested",
        "unknown.json": "unknown region 'bonds'",
        "missing.json": "cannot read",
    }
    for name, words in expected_errors.items():
        assert by_file[name]["status"] == "rejected", name
        assert words in by_file[name]["error"], (name, by_file[name]["error"])
    assert "6 of 8 file(s) rejected" in result.stderr
    after = row_counts(db_url)
    assert after["snapshots"] == before["snapshots"] + 2


def test_snapshot_ingest_for_people(db_url: str, tmp_path: Path) -> None:
    create_trades(db_url)
    good = write(tmp_path / "a.json", counter_document("trades", 1, skewed_keys()))
    result = repart(db_url, "snapshot", "ingest", good)
    assert result.exit_code == 0, result.output
    assert "ingested" in result.stdout
    rejected = repart(db_url, "snapshot", "ingest", good)
    assert rejected.exit_code == 2
    assert "rejected" in rejected.stdout and "already ingested" in rejected.stdout
    assert "1 of 1 file(s) rejected" in rejected.stderr


# --- versions -----------------------------------------------------------------------------------


def test_versions_list_show_and_diff(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "16")
    functions = add_versions(db_url, "trades", (4, 6))
    listed = repart_json(db_url, "versions", "list", "trades")
    assert [set(v) >= VERSION_FIELDS for v in listed] == [True, True]
    assert [(v["version"], v["N"], v["status"], v["parent"]) for v in listed] == [
        (1, 4, "applied", None),
        (2, 6, "planned", None),
    ]
    assert [v["digest"] for v in listed] == [f.digest for f in functions]
    assert [v["explicit_size"] for v in listed] == [len(f.explicit) for f in functions]

    shown = repart_json(db_url, "versions", "show", "trades", "2")
    assert set(shown) >= VERSION_FIELDS | {"report", "function", "slot_overrides"}
    assert shown["function"] == json.loads(functions[1].to_json())
    assert shown["report"]["explicit_size"] == len(functions[1].explicit)

    diff = repart_json(db_url, "versions", "diff", "trades", "1", "2")
    expected = plan_migration(functions[0], functions[1])
    assert (diff["from_version"], diff["to_version"]) == (1, 2)
    assert len(diff["explicit_moves"]) == len(expected.explicit_moves)
    assert len(diff["slot_moves"]) == len(expected.slot_moves) > 0
    assert diff["channels_gaining_keys"] == list(expected.channels_gaining_keys)
    assert diff["channels_losing_keys"] == list(expected.channels_losing_keys)

    for args in (["list", "trades"], ["show", "trades", "1"], ["diff", "trades", "1", "2"]):
        people = repart(db_url, "versions", *args)
        assert people.exit_code == 0, people.output
    assert "slot-move runs" in repart(db_url, "versions", "diff", "trades", "1", "2").stdout


def test_versions_errors(db_url: str) -> None:
    create_trades(db_url)
    for args, words in [
        (["list", "bonds"], "unknown region 'bonds'"),
        (["show", "trades", "3"], "has no version 3"),
        (["diff", "trades", "1", "2"], "has no version 1"),
    ]:
        result = repart(db_url, "versions", *args)
        assert result.exit_code == 2
        assert words in result.stderr


# --- plans --------------------------------------------------------------------------------------


def test_plans_list_and_show(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "16")
    add_versions(db_url, "trades", (4, 6, 8))
    plans = repart_json(db_url, "plans", "list", "trades")
    assert [set(p) >= PLAN_FIELDS for p in plans] == [True, True]
    assert [(p["from_version"], p["to_version"], p["status"]) for p in plans] == [
        (1, 2, "superseded"),
        (1, 3, "pending"),
    ]
    assert all(p["predicted_m"] is not None and p["slot_moves"] > 0 for p in plans)

    shown = repart_json(db_url, "plans", "show", "trades", str(plans[1]["id"]))
    assert {k: shown[k] for k in PLAN_FIELDS} == {k: plans[1][k] for k in PLAN_FIELDS}
    assert len(shown["plan"]["slot_moves"]) == plans[1]["slot_moves"]
    assert len(shown["plan"]["explicit_moves"]) == plans[1]["explicit_moves"]
    assert shown["plan"]["channels_gaining_keys"]

    people = repart(db_url, "plans", "list", "trades")
    assert people.exit_code == 0 and "pending" in people.stdout
    assert repart(db_url, "plans", "show", "trades", str(plans[1]["id"])).exit_code == 0


def test_plans_report_applied_then_errors(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "16")
    add_versions(db_url, "trades", (4, 6))
    repart(db_url, "region", "create", "other", "--key-type", "str")
    plan_id = str(repart_json(db_url, "plans", "list", "trades")[0]["id"])

    before = row_counts(db_url)
    for args, words in [
        (["other", plan_id, "--state", "applied"], "is not a plan of region 'other'"),
        (["trades", "999", "--state", "applied"], "plan 999 does not exist"),
        (["trades", plan_id, "--state", "failed", "--moved-rows", "3"], "--moved-rows"),
        (["trades", plan_id, "--state", "applied", "--moved-rows", "-1"], "--moved-rows"),
    ]:
        result = repart(db_url, "plans", "report", *args)
        assert result.exit_code == 2, args
        assert words in result.stderr, result.stderr
    bad_state = repart(db_url, "plans", "report", "trades", plan_id, "--state", "done")
    assert bad_state.exit_code == 2
    assert repart_json(db_url, "plans", "list", "trades")[0]["status"] == "pending"
    assert row_counts(db_url) == before

    moved = ("--moved-rows", "120", "--moved-bytes", "4096")
    applied = repart_json(db_url, "plans", "report", "trades", plan_id, "--state", "applied", *moved)
    assert (applied["status"], applied["moved_rows"], applied["moved_bytes"]) == ("applied", 120, 4096)
    statuses = [v["status"] for v in repart_json(db_url, "versions", "list", "trades")]
    assert statuses == ["superseded", "applied"]

    again = repart(db_url, "plans", "report", "trades", plan_id, "--state", "failed")
    assert again.exit_code == 3  # Conflict
    assert "cannot go from 'applied'" in again.stderr


def test_plans_report_failed_abandons_the_target_version(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "16")
    add_versions(db_url, "trades", (4, 6))
    plan_id = str(repart_json(db_url, "plans", "list", "trades")[0]["id"])
    result = repart(db_url, "plans", "report", "trades", plan_id, "--state", "failed")
    assert result.exit_code == 0, result.output
    assert "failed" in result.stdout
    assert [v["status"] for v in repart_json(db_url, "versions", "list", "trades")] == [
        "applied",
        "abandoned",
    ]


# --- status -------------------------------------------------------------------------------------


def test_status(db_url: str) -> None:
    create_trades(db_url, "--max-channels", "16")
    repart(db_url, "region", "create", "idle", "--key-type", "int", "--channels", "2")
    add_versions(db_url, "trades", (4, 6))
    rows = {r["region"]: r for r in repart_json(db_url, "status")}
    assert rows["idle"] == {
        "region": "idle", "mode": "auto", "mode_reason": None, "applied_version": None, "N": 2,
        "pending_plan": None, "last_event": None, "backoff": None
    }  # fmt: skip
    trades = rows["trades"]
    assert (trades["applied_version"], trades["N"]) == (1, 4)
    assert trades["pending_plan"]["from_version"] == 1 and trades["pending_plan"]["to_version"] == 2
    assert trades["last_event"]["kind"] == "activate"
    assert [r["region"] for r in repart_json(db_url, "status", "trades")] == ["trades"]
    people = repart(db_url, "status")
    assert people.exit_code == 0 and "trades" in people.stdout and "activate" in people.stdout
    unknown = repart(db_url, "status", "bonds")
    assert unknown.exit_code == 2 and "unknown region 'bonds'" in unknown.stderr
