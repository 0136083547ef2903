"""Snapshot documents: parsing, ingest round trip and every bad input (DESIGN §3, §10)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

from repart.errors import InvalidInput, NotFound
from repart.partitioning.frequency import LossyCounter
from repart.protocol.snapshot import OPTIONAL_FIELDS, REQUIRED_FIELDS, Snapshot
from repart.storage import get_snapshot, ingest_snapshot, latest_snapshots, run_in_transaction
from repart.storage import snapshots as snapshot_store
from tests.factories import add_region, row_counts, snapshot_document

INT_KEYS = [-(2**63), -1, 0, 1, 2**63 - 1]
STR_KEYS = ["", "AAPL", "naïve", "日本語", "emoji 🙂", "nul\x00inside", "x" * 3000]


def _ingest(engine: Engine, doc: dict[str, Any]) -> int:
    return run_in_transaction(
        engine, lambda s: ingest_snapshot(s, Snapshot.from_document(doc), source="test")
    )


def test_parse_returns_a_frozen_snapshot_in_utc() -> None:
    snapshot = Snapshot.from_document(
        snapshot_document(
            window={"seq": 3, "start": "2026-01-01T02:00:00+02:00", "end": "2026-01-01T00:01:00Z"}
        )
    )
    assert snapshot.window_start == datetime(2026, 1, 1, tzinfo=UTC)
    assert snapshot.seq == 3 and snapshot.key_type == "str"
    with pytest.raises(AttributeError):
        snapshot.tuples = 5  # type: ignore[misc]


@pytest.mark.parametrize(("key_type", "keys"), [("int", INT_KEYS), ("str", STR_KEYS)])
def test_ingest_round_trip_keeps_every_key_exact(engine: Engine, key_type: str, keys: list[Any]) -> None:
    add_region(engine, key_type=key_type)
    items = [[key, i + 1, 0] for i, key in enumerate(keys)]
    tuples = sum(range(1, len(keys) + 1)) + 5
    doc = snapshot_document(
        key_type=key_type,
        items=items,
        tuples=tuples,
        slots=[[0, tuples - 1], [65535, 1]],
        distinct_estimate=50,
    )
    parsed = Snapshot.from_document(doc)
    _ingest(engine, doc)
    loaded = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 1))
    assert loaded == parsed
    estimate, expected = loaded.to_estimate(), parsed.to_estimate()
    assert estimate.keys == tuple(keys)
    assert all(type(a) is type(b) for a, b in zip(estimate.keys, keys, strict=True))
    np.testing.assert_array_equal(estimate.counts, np.arange(1, len(keys) + 1))
    assert (estimate.total, estimate.epsilon, estimate.distinct_estimate) == (tuples, 0.01, 50)
    assert (estimate.slot_bits, estimate.key_type) == (16, key_type)
    assert estimate.slot_counts is not None and estimate.slot_counts.shape == (65536,)
    assert estimate.slot_counts[0] == tuples - 1 and estimate.slot_counts[65535] == 1
    np.testing.assert_array_equal(estimate.slot_counts, expected.slot_counts)


def test_optional_parts_may_be_missing(engine: Engine) -> None:
    add_region(engine)
    doc = {field: value for field, value in snapshot_document().items() if field not in OPTIONAL_FIELDS}
    assert set(doc) == set(REQUIRED_FIELDS)
    _ingest(engine, doc)
    snapshot = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 1))
    assert snapshot.slots is None and snapshot.channels is None and snapshot.version is None
    assert snapshot.batch is None
    estimate = snapshot.to_estimate()
    assert estimate.slot_counts is None and estimate.slot_bits == 16


@pytest.mark.parametrize(
    "progress",
    [
        {"interval_seconds": 30.0, "input_rows_per_second": 12.5, "processed_rows_per_second": 40.0},
        {"backlog_rows": 9_000_000_000},
    ],
)
def test_a_batchs_progress_is_stored_and_read_back(engine: Engine, progress: dict[str, Any]) -> None:
    add_region(engine)
    doc = snapshot_document(progress=progress)
    _ingest(engine, doc)
    snapshot = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 1))
    assert snapshot == Snapshot.from_document(doc)
    assert snapshot.to_document()["progress"] == progress


def test_lossy_counter_output_is_accepted_even_with_delta_above_count(engine: Engine) -> None:
    add_region(engine, key_type="int")
    rng = np.random.default_rng(7)
    stream = rng.zipf(1.3, 20_000) % 100_000
    counter = LossyCounter(0.01)
    counter.update(stream)
    keys, counts, deltas = counter.entries()
    assert np.any(deltas > counts)
    items = [[int(k), int(c), int(d)] for k, c, d in zip(keys, counts, deltas, strict=True)]
    doc = snapshot_document(
        key_type="int", items=items, tuples=counter.n, epsilon=0.01, slots=None, distinct_estimate=len(items)
    )
    _ingest(engine, doc)
    assert row_counts(engine)["snapshot_items"] == len(items)


def test_latest_snapshots_are_returned_oldest_first(engine: Engine) -> None:
    add_region(engine)
    for seq in range(1, 5):
        window = {"seq": seq, "start": f"2026-01-01T00:0{seq}:00Z", "end": f"2026-01-01T00:0{seq + 1}:00Z"}
        _ingest(engine, snapshot_document(window=window))
    latest = run_in_transaction(engine, lambda s: latest_snapshots(s, "trades", 2))
    assert [snapshot.seq for snapshot in latest] == [3, 4]


def _window(seq: int, start: str, end: str) -> dict[str, Any]:
    return {"seq": seq, "start": start, "end": end}


# (case, changes to a valid document, the field named, a fragment of the message where it is the point)
BAD_DOCUMENTS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("format", {"format": 2}, "format", None),
    ("format bool", {"format": True}, "format", None),
    ("unknown field", {"colour": "red"}, "the snapshot", "unknown field(s) ['colour']"),
    ("negative count", {"items": [["AAPL", -1, 0]]}, "items[0].count", None),
    ("zero count", {"items": [["AAPL", 0, 0]]}, "items[0].count", None),
    ("float count", {"items": [["AAPL", 4.0, 0]]}, "items[0].count", None),
    ("bool count", {"items": [["AAPL", True, 0]]}, "items[0].count", None),
    ("negative delta", {"items": [["AAPL", 4, -2]]}, "items[0].delta", None),
    (
        "delta above bound",
        {"items": [["AAPL", 4, 2]]},
        "items[0].delta",
        "floor(tuples / ceil(1/epsilon)) = 1",
    ),
    ("wrong key type", {"items": [[7, 4, 0]]}, "key_type", "the type of the items' keys"),
    ("unsupported key", {"items": [[1.5, 4, 0]]}, "items[0]", "of type float"),
    ("mixed keys", {"items": [["a", 1, 0], [2, 1, 0]]}, "items", "'str' keys or all 'int' keys, got both"),
    ("lone surrogate", {"items": [["\ud800", 1, 0]]}, "items[0]", "lone surrogate"),
    ("int key out of range", {"key_type": "int", "items": [[2**63, 1, 0]]}, "items[0]", "signed 64-bit"),
    ("item shape", {"items": [["AAPL", 1]]}, "items[0]", "[key, count, delta] row"),
    (
        "counts exceed tuples",
        {"items": [["A", 60, 0], ["B", 50, 0]]},
        "items",
        "sum to 110, more than tuples",
    ),
    ("duplicate keys", {"items": [["A", 1, 0], ["A", 2, 0]]}, "items[1]", "repeats the key 'A'"),
    (
        "end before start",
        {"window": _window(1, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z")},
        "window.end",
        None,
    ),
    (
        "naive timestamp",
        {"window": _window(1, "2026-01-01T00:00:00", "2026-01-01T00:01:00Z")},
        "window.start",
        "UTC offset",
    ),
    ("bad timestamp", {"window": _window(1, "yesterday", "2026-01-01T00:01:00Z")}, "window.start", None),
    (
        "negative seq",
        {"window": _window(-1, "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z")},
        "window.seq",
        None,
    ),
    ("missing window field", {"window": {"seq": 1, "start": "2026-01-01T00:00:00Z"}}, "window", "['end']"),
    ("slot out of range", {"slots": [[65536, 100]]}, "slots[0].slot", "[0, 65535]"),
    ("negative slot", {"slots": [[-1, 100]]}, "slots[0].slot", None),
    ("duplicate slots", {"slots": [[1, 50], [1, 50]]}, "slots[1]", "repeats slot 1"),
    ("slots not summing to tuples", {"slots": [[1, 50]]}, "slots", "sum to 50, but tuples is 100"),
    ("slot_bits", {"slot_bits": 9}, "slot_bits", None),
    ("epsilon", {"epsilon": 1.0}, "epsilon", None),
    ("key_type", {"key_type": "bytes"}, "key_type", None),
    ("distinct below items", {"distinct_estimate": 1}, "distinct_estimate", "[2, "),
    (
        "duplicate channels",
        {"channels": [{"channel": 1, "tuples": 1, "busy_seconds": 0, "state_bytes": 0}] * 2},
        "channels[1]",
        "repeats channel 1",
    ),
    (
        "negative busy seconds",
        {"channels": [{"channel": 1, "tuples": 1, "busy_seconds": -1.0, "state_bytes": 0}]},
        "channels[0].busy_seconds",
        None,
    ),
    ("version zero", {"version": 0}, "version", None),
    ("region empty", {"region": ""}, "region", None),
]


@pytest.mark.parametrize(
    ("changes", "field", "fragment"), [case[1:] for case in BAD_DOCUMENTS], ids=[c[0] for c in BAD_DOCUMENTS]
)
def test_bad_documents_are_rejected_and_nothing_is_written(
    engine: Engine, changes: dict[str, Any], field: str, fragment: str | None
) -> None:
    add_region(engine)
    before = row_counts(engine)
    with pytest.raises(InvalidInput) as raised:
        _ingest(engine, snapshot_document(**changes))
    assert raised.value.field == field
    assert fragment is None or fragment in str(raised.value)
    assert row_counts(engine) == before


def _ingested(engine: Engine) -> None:
    add_region(engine)
    _ingest(engine, snapshot_document())


# (case, changes to the ingested document, the error, the field named (InvalidInput), a message fragment)
REGION_MISMATCHES: list[tuple[str, dict[str, Any], type[Exception], str | None, str | None]] = [
    ("unknown region", {"region": "nope"}, NotFound, None, "unknown region 'nope'; known regions: trades"),
    (
        "seq already ingested",
        {"window": _window(1, "2026-02-01T00:00:00Z", "2026-02-01T00:01:00Z")},
        InvalidInput,
        "window.seq",
        "window.seq 1 was already ingested",
    ),
    (
        "overlapping window",
        {"window": _window(2, "2026-01-01T00:00:30Z", "2026-01-01T00:02:00Z")},
        InvalidInput,
        "window.start",
        "overlaps window seq 1",
    ),
    (
        "key type of another region",
        {"key_type": "int", "items": [[1, 1, 0]]},
        InvalidInput,
        "key_type",
        "the region's 'str'",
    ),
    (
        "slot bits of another region",
        {"slot_bits": 12, "slots": None},
        InvalidInput,
        "slot_bits",
        "the region's 16",
    ),
    (
        "channel above max",
        {"channels": [{"channel": 16, "tuples": 1, "busy_seconds": 0, "state_bytes": 0}]},
        InvalidInput,
        "channels.channel",
        "[0, 15]",
    ),
    ("unknown version", {"version": 3}, InvalidInput, "version", "version of region 'trades'; 3 is not"),
]


@pytest.mark.parametrize(
    ("changes", "error", "field", "fragment"),
    [c[1:] for c in REGION_MISMATCHES],
    ids=[c[0] for c in REGION_MISMATCHES],
)
def test_snapshots_that_do_not_fit_the_region_are_rejected(
    engine: Engine, changes: dict[str, Any], error: type[Exception], field: str | None, fragment: str | None
) -> None:
    _ingested(engine)
    before = row_counts(engine)
    with pytest.raises(error) as raised:
        _ingest(engine, snapshot_document(**changes))
    assert field is None or (isinstance(raised.value, InvalidInput) and raised.value.field == field)
    assert fragment is None or fragment in str(raised.value)
    assert row_counts(engine) == before


def test_a_document_error_is_invalid_input_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as raised:
        Snapshot.from_document(snapshot_document(format=0))
    assert raised.value.field == "format"


def _stored_items(engine: Engine) -> list[tuple[Any, ...]]:
    """The stored item rows ``(idx, key_int, key_utf8, count, delta)`` in idx order, read with SQL."""
    with engine.connect() as connection:
        query = "SELECT idx, key_int, key_utf8, count, delta FROM snapshot_items ORDER BY idx"
        return [tuple(row) for row in connection.exec_driver_sql(query)]


def _digest(rows: Iterable[tuple[Any, int, int]]) -> str:
    """SHA-256 over ``(key, count, delta)`` rows sorted by key (as text: str and int keys alike)."""
    digest = hashlib.sha256()
    for key, count, delta in sorted(rows, key=lambda row: repr(row[0])):
        digest.update(f"{key!r}\x00{count}\x00{delta}\n".encode())
    return digest.hexdigest()


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_a_window_of_several_insert_chunks_is_stored_exactly(
    engine: Engine, key_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_store, "INSERT_CHUNK", 1000)  # 3.5 chunks: full ones and a partial last one
    add_region(engine, key_type=key_type)
    rng = np.random.default_rng(5)
    count = 3500
    keys: list[Any] = (
        [f"user:{i:x}.{'é' * (i % 4)}" for i in range(count)]
        if key_type == "str"
        else (rng.choice(2**62, size=count, replace=False) - 2**61).tolist()
    )
    items = [
        [key, int(c), int(d)]
        for key, c, d in zip(keys, rng.integers(1, 50, count), rng.integers(0, 11, count), strict=True)
    ]
    tuples = 100 * count  # epsilon 0.01: a delta may be up to tuples / 100 (closed buckets)
    slots = [[slot, 1] for slot in range(2500)] + [[65535, tuples - 2500]]  # slots in 3 chunks too
    doc = snapshot_document(
        key_type=key_type, items=items, tuples=tuples, slots=slots, distinct_estimate=count
    )

    _ingest(engine, doc)

    stored = _stored_items(engine)
    assert len(stored) == count and [row[0] for row in stored] == list(range(count))
    as_keys = [(utf8.decode("utf-8") if utf8 is not None else key, c, d) for _, key, utf8, c, d in stored]
    assert [key for key, _, _ in as_keys] == keys  # document order, exact keys
    assert _digest(as_keys) == _digest((key, c, d) for key, c, d in items)
    assert row_counts(engine)["snapshot_slots"] == len(slots)
    loaded = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 1))
    assert loaded == Snapshot.from_document(doc)
