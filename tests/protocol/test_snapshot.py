"""The snapshot document (DESIGN §3, §12.1): one parser and one writer, and they agree."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import repart.protocol
from repart.errors import InvalidInput
from repart.partitioning.domain import Key, KeyType
from repart.protocol.counter_items import _checked_items, _well_formed_items
from repart.protocol.slot_columns import SlotColumns, _checked_rows, _well_formed_rows, checked_slots
from repart.protocol.snapshot import (
    CHANNEL_FIELDS,
    OPTIONAL_FIELDS,
    PROGRESS_FIELDS,
    REQUIRED_FIELDS,
    BatchProgress,
    ChannelMeasurement,
    CounterEntry,
    Snapshot,
    check_region_name,
    closed_buckets,
)
from tests.factories import small_snapshot, snapshot_document

CHANNEL_ROW = {"channel": 0, "tuples": 1, "busy_seconds": 0.0, "state_bytes": 0}
MOMENTS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """Valid snapshots: unique keys of one type, counts within tuples, deltas within ε·tuples, slot
    counts summing to tuples, unique channels in order."""
    key_type: KeyType = draw(st.sampled_from(["str", "int"]))
    keys: st.SearchStrategy[Key] = (
        st.text(min_size=1, max_size=8) if key_type == "str" else st.integers(-(2**63), 2**63 - 1)
    )
    unique_keys = draw(st.lists(keys, max_size=6, unique=True))
    tuples = draw(st.integers(0, 10**6))
    epsilon = draw(st.floats(0.0, 0.5))
    bound = closed_buckets(tuples, epsilon)
    unique_keys = unique_keys[:tuples]  # every item counts at least one tuple
    counts = draw(st.lists(st.integers(1, 1000), min_size=len(unique_keys), max_size=len(unique_keys)))
    while sum(counts) > tuples:
        counts = [max(1, count // 2) for count in counts]
    items = tuple(
        CounterEntry(key, count, draw(st.integers(0, bound)))
        for key, count in zip(unique_keys, counts, strict=True)
    )
    slot_bits = draw(st.integers(10, 20))
    slots = None
    if tuples and draw(st.booleans()):
        first = draw(st.integers(0, tuples))
        chosen = draw(st.lists(st.integers(0, (1 << slot_bits) - 1), min_size=2, max_size=2, unique=True))
        slots = tuple(sorted(pair for pair in zip(chosen, (first, tuples - first), strict=True) if pair[1]))
    channels = draw(
        st.none()
        | st.lists(st.integers(0, 63), min_size=1, max_size=4, unique=True).map(
            lambda ids: tuple(ChannelMeasurement(i, 10 * i, 0.5 * i, 1000 + i) for i in sorted(ids))
        )
    )
    progress = draw(
        st.none()
        | st.builds(
            BatchProgress,
            interval_seconds=st.none() | st.floats(1e-3, 1e6),
            input_rows_per_second=st.none() | st.floats(0, 1e9),
            processed_rows_per_second=st.none() | st.floats(0, 1e9),
            backlog_rows=st.integers(0, 10**12),
        )
    )
    start = draw(MOMENTS)
    return Snapshot(
        region=draw(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)),
        seq=draw(st.integers(0, 2**63 - 1)),
        window_start=start,
        window_end=start + timedelta(seconds=draw(st.integers(1, 3600))),
        tuples=tuples,
        distinct_estimate=len(items) + draw(st.integers(0, 100)),
        epsilon=epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=slots or None,
        version=draw(st.none() | st.integers(1, 2**63 - 1)),
        channels=channels,
        batch=draw(st.none() | st.integers(0, 2**63 - 1)),
        progress=progress,
    )


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_a_document_reads_back_as_the_snapshot_it_was_written_from(snapshot: Snapshot) -> None:
    text = json.dumps(snapshot.to_document())
    assert Snapshot.from_document(json.loads(text)) == snapshot


def test_optional_fields_are_written_only_when_set() -> None:
    bare = small_snapshot(slots=None, channels=None)
    assert set(bare.to_document()) == set(REQUIRED_FIELDS)
    full = small_snapshot(version=3, batch=17, progress=BatchProgress(10.0, 5.0, 6.0, 0))
    assert set(full.to_document()) == set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)


@pytest.mark.parametrize(
    ("field", "moment"),
    [
        ("window.start", "0001-01-01T00:00:00+14:00"),  # before 0001-01-01 UTC
        ("window.end", "9999-12-31T23:59:59-14:00"),  # after 9999-12-31 UTC
    ],
)
def test_a_time_outside_the_representable_utc_range_is_invalid_input(field: str, moment: str) -> None:
    window = {"seq": 1, "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:01:00+00:00"}
    window[field.split(".")[1]] = moment
    if field == "window.start":
        window["end"] = "0001-01-02T00:00:00+00:00"
    with pytest.raises(InvalidInput) as raised:
        Snapshot.from_document(snapshot_document(window=window))
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"region": "../escape"}, "region"),
        ({"region": ""}, "region"),
        ({"distinct_estimate": None}, "distinct_estimate"),
        ({"batch": -1}, "batch"),
        ({"batch": 1.5}, "batch"),
        ({"items": [["AAPL", 40, 0], ["AAPL", 1, 0]]}, "items[1]"),
        ({"items": [["AAPL", 99, 0], ["MSFT", 2, 0]]}, "items"),
        ({"items": [["AAPL", 40, 2]]}, "items[0].delta"),
        ({"items": [["AAPL", 0, 0]]}, "items[0].count"),
        ({"slots": [[5, 60], [5, 40]]}, "slots[1]"),
        ({"slots": [[5, 60]]}, "slots"),
        ({"channels": [CHANNEL_ROW, CHANNEL_ROW]}, "channels[1]"),
    ],
)
def test_a_bad_field_is_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        Snapshot.from_document(snapshot_document(**changes))
    assert raised.value.field == field


def test_region_names_cannot_leave_the_spool_directory() -> None:
    assert check_region_name("trades.eu-1_a") == "trades.eu-1_a"
    for name in ("../x", "a/b", ".hidden", "x" * 129, 7):
        with pytest.raises(InvalidInput):
            check_region_name(name)


def test_json_schema_lists_the_fields_the_parser_accepts() -> None:
    path = Path(repart.protocol.__file__).parent / "snapshot.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert tuple(schema["required"]) == REQUIRED_FIELDS
    assert set(schema["properties"]) == set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)
    assert schema["additionalProperties"] is False
    window = schema["properties"]["window"]
    assert set(window["required"]) == set(window["properties"]) == {"seq", "start", "end"}
    progress = schema["properties"]["progress"]
    assert set(progress["properties"]) == set(PROGRESS_FIELDS)
    channel = schema["properties"]["channels"]["items"]
    assert set(channel["required"]) == set(channel["properties"]) == set(CHANNEL_FIELDS)
    assert schema["properties"]["format"]["const"] == 1
    assert schema["properties"]["key_type"]["enum"] == ["str", "int"]
    bits = schema["properties"]["slot_bits"]
    assert (bits["minimum"], bits["maximum"]) == (10, 20)


ROW_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.integers(-(2**64), 2**64),
    st.text(max_size=3),
    st.sampled_from(["\ud800", True, None, 1.0, []]),
)
SPOILED_ROWS: st.SearchStrategy[Any] = st.one_of(
    ROW_VALUES,
    st.lists(ROW_VALUES, min_size=1, max_size=4),
    st.tuples(ROW_VALUES, ROW_VALUES, ROW_VALUES).map(list),
    st.tuples(ROW_VALUES, ROW_VALUES).map(list),
)


@st.composite
def rows_maybe_spoiled(draw: st.DrawFn, row: st.SearchStrategy[list[Any]]) -> list[Any]:
    """Up to 6 rows drawn from ``row`` (valid ones, perhaps repeating a key or slot), one of them
    replaced by a bad value half of the time: both the bulk checks' accepting and refusing paths."""
    rows: list[Any] = draw(st.lists(row, max_size=6))
    spoiled: bool = draw(st.booleans())
    if rows and spoiled:
        rows[draw(st.integers(0, len(rows) - 1))] = draw(SPOILED_ROWS)
    return rows


ITEM_KEYS = {"str": st.text(max_size=3), "int": st.integers(-(2**63), 2**63 - 1)}


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(["str", "int"]), st.integers(0, 3), st.integers(0, 9))
def test_the_bulk_item_checks_accept_exactly_what_the_row_checks_accept(
    data: st.DataObject, written: str, closed: int, other_type: int
) -> None:
    key_type = ({"str", "int"} - {written}).pop() if other_type == 0 else written  # a tenth: mismatched
    item = st.tuples(ITEM_KEYS[written], st.integers(1, 2**63 - 1), st.integers(0, closed)).map(list)
    rows = data.draw(rows_maybe_spoiled(item))
    bulk = _well_formed_items(rows, key_type, closed)  # type: ignore[arg-type]
    try:
        checked = _checked_items(rows, key_type, closed)  # type: ignore[arg-type]
    except InvalidInput:
        assert bulk is None
    else:
        assert bulk == checked


@settings(max_examples=300, deadline=None)
@given(rows_maybe_spoiled(st.tuples(st.integers(0, 1023), st.integers(0, 2**63 - 1)).map(list)))
def test_the_bulk_slot_checks_accept_exactly_what_the_row_checks_accept(rows: list[Any]) -> None:
    bulk = _well_formed_rows(rows, 10)
    try:
        checked = _checked_rows(rows, 10)
    except InvalidInput:
        assert bulk is None
    else:
        assert bulk == checked


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 1026), st.integers(-3, 2**63 - 1)), max_size=6))
def test_slot_columns_built_in_code_pass_exactly_the_rows_a_document_passes(
    pairs: list[tuple[int, int]],
) -> None:
    rows = [list(pair) for pair in pairs]
    tuples = sum(count for _, count in pairs)
    try:
        expected: SlotColumns | InvalidInput = _checked_rows(rows, 10)
        if sum(count for _, count in expected) != tuples:
            raise InvalidInput("slots", "sum")
    except InvalidInput as error:
        expected = error
    try:
        got: SlotColumns | InvalidInput = checked_slots(SlotColumns.of(pairs), 10, tuples)
    except InvalidInput as error:
        got = error
    if isinstance(expected, InvalidInput):
        assert isinstance(got, InvalidInput)
        assert got.field == expected.field
    else:
        assert got == expected
        assert list(got.slots) == sorted(got.slots)


@pytest.mark.parametrize(
    ("slots", "field"),
    [(((5, 60), (5, 40)), "slots[1]"), (((1024, 100),), "slots[0].slot"), (((5, 60),), "slots")],
)
def test_a_bad_slot_built_in_code_is_named_as_a_document_would_name_it(
    slots: tuple[tuple[int, int], ...], field: str
) -> None:
    snapshot = small_snapshot(slots=None, channels=None)
    built = Snapshot(**{**snapshot.__dict__, "tuples": 100, "items": (), "slot_bits": 10, "slots": slots})
    with pytest.raises(InvalidInput) as raised:
        built.checked()
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("progress", "field"),
    [
        ({"interval_seconds": 0}, "progress.interval_seconds"),
        ({"interval_seconds": -1.5}, "progress.interval_seconds"),
        ({"input_rows_per_second": -1}, "progress.input_rows_per_second"),
        ({"processed_rows_per_second": "fast"}, "progress.processed_rows_per_second"),
        ({"backlog_rows": 1.5}, "progress.backlog_rows"),
        ({"lag": 3}, "progress"),
        ([1, 2], "progress"),
    ],
)
def test_bad_progress_is_refused_naming_the_field(progress: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Snapshot.from_document(snapshot_document(progress=progress))
    assert caught.value.field == field


def test_progress_reads_back_with_only_the_reported_fields() -> None:
    document = snapshot_document(progress={"interval_seconds": 60, "backlog_rows": 12})
    snapshot = Snapshot.from_document(document)
    assert snapshot.progress == BatchProgress(interval_seconds=60.0, backlog_rows=12)
    assert snapshot.to_document()["progress"] == {"interval_seconds": 60.0, "backlog_rows": 12}


@pytest.mark.parametrize(
    ("slots", "field"),
    [
        (((1.5, 10),), "slots[0].slot"),
        (((True, 10),), "slots[0].slot"),
        (((3, "3"),), "slots[0].count"),
        (((3, 2**63),), "slots[0].count"),
        (((3, 1), (4,)), "slots[1]"),
    ],
)
def test_slots_given_in_code_must_be_integer_pairs_an_int64_column_holds(
    slots: tuple[Any, ...], field: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        SlotColumns.of(slots)
    assert raised.value.field == field


def test_slot_columns_equal_hash_and_pickle_as_their_pairs() -> None:
    columns = SlotColumns.of(((1, 5), (7, 2)))
    assert columns == ((1, 5), (7, 2)) == columns
    assert columns == [[1, 5], [7, 2]]
    assert columns != [1, 2] and columns != ((1, 5),)
    assert hash(columns) == hash(((1, 5), (7, 2)))
    copied = pickle.loads(pickle.dumps(columns))
    assert copied == columns
    assert not copied.slots.flags.writeable and not copied.counts.flags.writeable
