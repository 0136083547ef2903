"""Snapshot documents: parsing, ingest round trip and every bad input (DESIGN §3, §10)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

import repart.storage
from repart.errors import InvalidInput, NotFound
from repart.partitioning.frequency import LossyCounter
from repart.protocol.snapshot import OPTIONAL_FIELDS, REQUIRED_FIELDS, Snapshot
from repart.storage import get_snapshot, ingest_snapshot, latest_snapshots, run_in_transaction

from .helpers import add_region, document, row_counts

INT_KEYS = [-(2**63), -1, 0, 1, 2**63 - 1]
STR_KEYS = ["", "AAPL", "naïve", "日本語", "emoji 🙂", "nul\x00inside", "x" * 3000]


def _ingest(engine: Engine, doc: dict[str, Any]) -> int:
    return run_in_transaction(
        engine, lambda s: ingest_snapshot(s, Snapshot.from_document(doc), source="test")
    )


def test_parse_returns_a_frozen_snapshot_in_utc() -> None:
    snapshot = Snapshot.from_document(
        document(window={"seq": 3, "start": "2026-01-01T02:00:00+02:00", "end": "2026-01-01T00:01:00Z"})
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
    doc = document(
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
    doc = document()
    for field in OPTIONAL_FIELDS:
        del doc[field]
    _ingest(engine, doc)
    snapshot = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 1))
    assert snapshot.slots is None and snapshot.channels is None and snapshot.version is None
    estimate = snapshot.to_estimate()
    assert estimate.slot_counts is None and estimate.slot_bits == 16


def test_lossy_counter_output_is_accepted_even_with_delta_above_count(engine: Engine) -> None:
    add_region(engine, key_type="int")
    rng = np.random.default_rng(7)
    stream = rng.zipf(1.3, 20_000) % 100_000
    counter = LossyCounter(0.01)
    counter.update(stream)
    keys, counts, deltas = counter.entries()
    assert np.any(deltas > counts)
    items = [[int(k), int(c), int(d)] for k, c, d in zip(keys, counts, deltas, strict=True)]
    doc = document(
        key_type="int", items=items, tuples=counter.n, epsilon=0.01, slots=None, distinct_estimate=len(items)
    )
    _ingest(engine, doc)
    assert row_counts(engine)["snapshot_items"] == len(items)


def test_latest_snapshots_are_returned_oldest_first(engine: Engine) -> None:
    add_region(engine)
    for seq in range(1, 5):
        window = {"seq": seq, "start": f"2026-01-01T00:0{seq}:00Z", "end": f"2026-01-01T00:0{seq + 1}:00Z"}
        _ingest(engine, document(window=window))
    latest = run_in_transaction(engine, lambda s: latest_snapshots(s, "trades", 2))
    assert [snapshot.seq for snapshot in latest] == [3, 4]


def _window(seq: int, start: str, end: str) -> dict[str, Any]:
    return {"seq": seq, "start": start, "end": end}


BAD_DOCUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("format", {"format": 2}, "format must be 1"),
    ("format bool", {"format": True}, "format must be 1"),
    ("unknown field", {"colour": "red"}, "unknown field.*colour"),
    ("negative count", {"items": [["AAPL", -1, 0]]}, r"items\[0\]\.count must be in \[0"),
    ("float count", {"items": [["AAPL", 4.0, 0]]}, r"items\[0\]\.count must be an integer"),
    ("bool count", {"items": [["AAPL", True, 0]]}, r"items\[0\]\.count must be an integer"),
    ("negative delta", {"items": [["AAPL", 4, -2]]}, r"items\[0\]\.delta must be in \[0"),
    ("delta above bound", {"items": [["AAPL", 4, 2]]}, r"items\[0\]\.delta must be <= epsilon \* tuples = 1"),
    ("wrong key type", {"items": [[7, 4, 0]]}, "key_type is 'str' but the items' keys are 'int'"),
    ("unsupported key", {"items": [[1.5, 4, 0]]}, r"items\[0\]: key 1.5 has unsupported type float"),
    ("mixed keys", {"items": [["a", 1, 0], [2, 1, 0]]}, "items: keys mix types 'str' and 'int'"),
    ("lone surrogate", {"items": [["\ud800", 1, 0]]}, r"items\[0\]: key .* has a lone surrogate"),
    (
        "int key out of range",
        {"key_type": "int", "items": [[2**63, 1, 0]]},
        r"items\[0\]: key .* outside the signed 64-bit range",
    ),
    (
        "item shape",
        {"items": [["AAPL", 1]]},
        r"items\[0\] must be a \[key, count, delta\] row \(a JSON array of 3 elements\)",
    ),
    (
        "counts exceed tuples",
        {"items": [["A", 60, 0], ["B", 50, 0]]},
        r"items counts sum to 110, more than tuples \(100\)",
    ),
    ("duplicate keys", {"items": [["A", 1, 0], ["A", 2, 0]]}, r"items\[1\] repeats the key 'A'"),
    (
        "end before start",
        {"window": _window(1, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z")},
        "window.end must be after",
    ),
    (
        "naive timestamp",
        {"window": _window(1, "2026-01-01T00:00:00", "2026-01-01T00:01:00Z")},
        "window.start must be an ISO-8601",
    ),
    (
        "bad timestamp",
        {"window": _window(1, "yesterday", "2026-01-01T00:01:00Z")},
        "window.start must be an ISO-8601",
    ),
    (
        "negative seq",
        {"window": _window(-1, "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z")},
        "window.seq must be in",
    ),
    (
        "missing window field",
        {"window": {"seq": 1, "start": "2026-01-01T00:00:00Z"}},
        r"missing field\(s\) \['end'\] in window",
    ),
    ("slot out of range", {"slots": [[65536, 100]]}, r"slots\[0\]\.slot must be in \[0, 65535\]"),
    ("negative slot", {"slots": [[-1, 100]]}, r"slots\[0\]\.slot must be in \[0, 65535\]"),
    ("duplicate slots", {"slots": [[1, 50], [1, 50]]}, r"slots\[1\] repeats slot 1"),
    ("slots not summing to tuples", {"slots": [[1, 50]]}, "slots counts sum to 50, but tuples is 100"),
    ("slot_bits", {"slot_bits": 9}, r"slot_bits must be in \[10, 20\]"),
    ("epsilon", {"epsilon": 1.0}, r"epsilon must be in \[0.0, 1.0\)"),
    ("key_type", {"key_type": "bytes"}, "key_type must be 'str' or 'int'"),
    ("distinct below items", {"distinct_estimate": 1}, r"distinct_estimate must be in \[2,"),
    (
        "duplicate channels",
        {"channels": [{"channel": 1, "tuples": 1, "busy_seconds": 0, "state_bytes": 0}] * 2},
        r"channels\[1\] repeats channel 1",
    ),
    (
        "negative busy seconds",
        {"channels": [{"channel": 1, "tuples": 1, "busy_seconds": -1.0, "state_bytes": 0}]},
        r"channels\[0\].busy_seconds must be in",
    ),
    ("version zero", {"version": 0}, "version must be in"),
    ("region empty", {"region": ""}, "region must be a non-empty string"),
]


@pytest.mark.parametrize(
    ("changes", "message"), [case[1:] for case in BAD_DOCUMENTS], ids=[c[0] for c in BAD_DOCUMENTS]
)
def test_bad_documents_are_rejected_and_nothing_is_written(
    engine: Engine, changes: dict[str, Any], message: str
) -> None:
    add_region(engine)
    before = row_counts(engine)
    with pytest.raises(InvalidInput, match=message):
        _ingest(engine, document(**changes))
    assert row_counts(engine) == before


def _ingested(engine: Engine) -> None:
    add_region(engine)
    _ingest(engine, document())


REGION_MISMATCHES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("unknown region", {"region": "nope"}, NotFound, "unknown region 'nope'; known regions: trades"),
    (
        "seq already ingested",
        {"window": _window(1, "2026-02-01T00:00:00Z", "2026-02-01T00:01:00Z")},
        InvalidInput,
        "window.seq 1 was already ingested",
    ),
    (
        "overlapping window",
        {"window": _window(2, "2026-01-01T00:00:30Z", "2026-01-01T00:02:00Z")},
        InvalidInput,
        "overlaps window seq 1",
    ),
    (
        "key type of another region",
        {"key_type": "int", "items": [[1, 1, 0]]},
        InvalidInput,
        "key_type must be the region's 'str'",
    ),
    (
        "slot bits of another region",
        {"slot_bits": 12, "slots": None},
        InvalidInput,
        "slot_bits must be the region's 16",
    ),
    (
        "channel above max",
        {"channels": [{"channel": 16, "tuples": 1, "busy_seconds": 0, "state_bytes": 0}]},
        InvalidInput,
        r"channel must be in \[0, 15\]",
    ),
    ("unknown version", {"version": 3}, InvalidInput, "version 3 does not exist in region 'trades'"),
]


@pytest.mark.parametrize(
    ("changes", "error", "message"), [c[1:] for c in REGION_MISMATCHES], ids=[c[0] for c in REGION_MISMATCHES]
)
def test_snapshots_that_do_not_fit_the_region_are_rejected(
    engine: Engine, changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    _ingested(engine)
    before = row_counts(engine)
    with pytest.raises(error, match=message):
        _ingest(engine, document(**changes))
    assert row_counts(engine) == before


def test_every_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="format"):
        Snapshot.from_document(document(format=0))


def test_json_schema_lists_the_fields_the_parser_accepts() -> None:
    path = Path(repart.storage.__file__).parent / "snapshot.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert tuple(schema["required"]) == REQUIRED_FIELDS
    assert set(schema["properties"]) == set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)
    assert schema["additionalProperties"] is False
    window = schema["properties"]["window"]
    assert set(window["required"]) == set(window["properties"]) == {"seq", "start", "end"}
    channel = schema["properties"]["channels"]["items"]
    assert (
        set(channel["required"])
        == set(channel["properties"])
        == {"channel", "tuples", "busy_seconds", "state_bytes"}
    )
    assert schema["properties"]["format"]["const"] == 1
    assert schema["properties"]["key_type"]["enum"] == ["str", "int"]
    bits = schema["properties"]["slot_bits"]
    assert (bits["minimum"], bits["maximum"]) == (10, 20)
