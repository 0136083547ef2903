"""``repart snapshot export`` and ``repart replay``: a region's windows out, and replayed with candidate
settings; bad input is one line naming the field, exit 2, and leaves the database as it was."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from repart.cli.database import number
from repart.partitioning import initial_function
from repart.sim.traces import TRACE_SLOT_BITS, TraceSpec, trace_snapshots
from repart.storage import ingest_snapshot, make_engine, run_in_transaction
from tests.cli.helpers import flat, one_error, repart, repart_json, table_row
from tests.factories import window_max_mean_load

COST = 86_400 * 0.7 * 2 / 4_000
TRACE = TraceSpec(6, rows=4_000, keys=300, drift=4.0, cost_seconds_per_row=COST)


def dump(db_url: str) -> list[str]:
    """Every statement that recreates the SQLite database: its full content."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        return list(connection.iterdump())


@pytest.fixture
def recorded(db_url: str) -> str:
    """Region ``trace`` with six recorded windows of a growing trace."""
    created = repart(
        db_url,
        "region",
        "create",
        "trace",
        "--key-type",
        "int",
        "--channels",
        "2",
        "--max-channels",
        "12",
        "--slot-bits",
        str(TRACE_SLOT_BITS),
        "--policy",
        "target-utilization",
        "--algorithm",
        "consistent",
    )
    assert created.exit_code == 0, created.output
    engine = make_engine(db_url)
    try:
        for snapshot in trace_snapshots(TRACE):
            run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))
    finally:
        engine.dispose()
    return db_url


def test_export_writes_the_windows_that_replay_reads(recorded: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.json"
    written = repart_json(recorded, "snapshot", "export", "trace", "--out", str(out))
    assert written == {"region": "trace", "windows": 6, "out": str(out)}
    documents = json.loads(out.read_text(encoding="utf-8"))
    assert [document["window"]["seq"] for document in documents] == list(range(6))
    assert documents[0]["progress"] == {"interval_seconds": 86_400.0}
    before = dump(recorded)
    shown = repart_json(recorded, "replay", str(out), "--region", "trace", "--set", "scale_down_delay=2")
    assert [batch["seq"] for batch in shown["batches"]] == list(range(6))
    assert shown["batches"][0]["n_channels"] == 2
    assert shown["summary"]["changes"] >= 1 and shown["summary"]["batches"] == 6
    assert "cost per row" in shown["model"]
    capped = repart_json(recorded, "replay", str(out), "--region", "trace", "--max-channels", "2")
    assert capped["summary"]["changes"] == 0
    plot = tmp_path / "replay.png"
    table = repart(recorded, "replay", str(out), "--plot", str(plot))
    assert table.exit_code == 0, table.output
    assert "N over time" in table.output and plot.read_bytes().startswith(b"\x89PNG")
    assert dump(recorded) == before  # a replay writes nothing to the database


def test_each_batch_shows_max_mean_load_beside_b(recorded: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.json"
    repart_json(recorded, "snapshot", "export", "trace", "--out", str(out))
    # Capped at 2 channels, every batch runs p(0): the tick's window is the batch's and the one before.
    capped = repart_json(recorded, "replay", str(out), "--region", "trace", "--max-channels", "2")
    assert capped["summary"]["changes"] == 0
    snapshots = trace_snapshots(TRACE)
    p0 = initial_function(2, "int", TRACE_SLOT_BITS)
    for index, batch in enumerate(capped["batches"]):
        window = snapshots[max(0, index - 1) : index + 1]
        assert batch["load"] == pytest.approx(window_max_mean_load(p0, *window), rel=1e-9)
    people = repart(recorded, "replay", str(out), "--region", "trace", "--max-channels", "2")
    assert people.exit_code == 0, people.output
    for batch in capped["batches"]:
        row = table_row(people.output, str(batch["seq"]), ("seq", "b", "max/mean"))
        assert (row["b"], row["max/mean"]) == (number(batch["b"]), number(batch["load"]))
    assert "b and max/mean load: docs/concepts/metrics.md" in flat(people.output)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("[]", "WINDOWS"),
        ('{"format": 1}', "WINDOWS"),
        ("not json", "WINDOWS"),
        ("[{}]", "WINDOWS[0]"),
    ],
)
def test_a_file_that_is_not_a_snapshot_sequence_is_refused(
    recorded: str, tmp_path: Path, content: str, field: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    before = dump(recorded)
    result = repart(recorded, "replay", str(path))
    assert result.exit_code == 2
    assert one_error(result.output).startswith(f"error: {field} ")
    assert dump(recorded) == before


def test_a_bad_window_is_named_by_its_index_and_field(recorded: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.json"
    assert repart(recorded, "snapshot", "export", "trace", "--out", str(out)).exit_code == 0
    documents = json.loads(out.read_text(encoding="utf-8"))
    documents[3]["window"]["seq"] = -1
    out.write_text(json.dumps(documents), encoding="utf-8")
    result = repart(recorded, "replay", str(out))
    assert result.exit_code == 2
    assert one_error(result.output).startswith("error: WINDOWS[3].window.seq must be")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("region", "error: WINDOWS[3].region must be"),  # mixed regions
        ("seq", "error: WINDOWS[3].window.seq must differ"),  # the seq of WINDOWS[1] again
    ],
)
def test_mixed_regions_and_duplicate_seqs_name_the_window(
    recorded: str, tmp_path: Path, change: str, expected: str
) -> None:
    out = tmp_path / "windows.json"
    assert repart(recorded, "snapshot", "export", "trace", "--out", str(out)).exit_code == 0
    documents = json.loads(out.read_text(encoding="utf-8"))
    if change == "region":
        documents[3]["region"] = "other"
    else:
        documents[3]["window"]["seq"] = documents[1]["window"]["seq"]
    out.write_text(json.dumps(documents), encoding="utf-8")
    before = dump(recorded)
    result = repart(recorded, "replay", str(out))
    assert result.exit_code == 2
    assert one_error(result.output).startswith(expected)
    assert dump(recorded) == before


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("utilization_band=[0.75, 0.9]", "utilization_band"),  # does not contain the target 0.7
        ("batch_interval_seconds=0", "batch_interval_seconds"),
        ("batch_interval_seconds=-60", "batch_interval_seconds"),
        ("migration_budget=0", "migration_budget"),
        ("migration_budget=1.5", "migration_budget"),
        ("rebalance_payback_batches=0", "rebalance_payback_batches"),
        ("rebalance_payback_batches=2.5", "rebalance_payback_batches"),
        ("rebalance_payback_batches=1000001", "rebalance_payback_batches"),
    ],
)
def test_bad_candidate_settings_exit_2_and_write_nothing(
    recorded: str, tmp_path: Path, setting: str, field: str
) -> None:
    out = tmp_path / "windows.json"
    assert repart(recorded, "snapshot", "export", "trace", "--out", str(out)).exit_code == 0
    before = dump(recorded)
    for command in (
        ["replay", str(out), "--region", "trace", "--set", setting],
        ["region", "update", "trace", "--set", setting],
    ):
        result = repart(recorded, *command)
        assert result.exit_code == 2, result.output
        assert field in one_error(result.output)
    assert dump(recorded) == before


def test_replay_needs_exactly_one_source(recorded: str) -> None:
    result = repart(recorded, "replay")
    assert result.exit_code == 2 and "--trace" in one_error(result.output)
    unknown = repart(recorded, "replay", "--trace", "monthly")
    assert unknown.exit_code == 2 and one_error(unknown.output).startswith("error: --trace must be one of")
