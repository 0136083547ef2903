"""A snapshot's items as columns: a sequence of CounterEntry, compared and summed exactly."""

from __future__ import annotations

import numpy as np
import pytest

from repart.errors import InvalidInput
from repart.partitioning.domain import INT64_MAX
from repart.protocol.counter_items import CounterEntry, CounterItems, parse_items
from tests.factories import small_snapshot

ENTRIES = (CounterEntry("a", 3, 0), CounterEntry("b", 2, 1), CounterEntry("c", 1, 2))


def test_items_are_a_read_only_sequence_of_entries() -> None:
    items = CounterItems.of(ENTRIES)
    assert len(items) == 3 and tuple(items) == ENTRIES
    assert items[0] == ENTRIES[0] and items[-1] == ENTRIES[-1]
    assert type(items[1].count) is int and type(items[1].delta) is int
    assert items[1:] == ENTRIES[1:] and isinstance(items[1:], CounterItems)
    assert items == ENTRIES and items == list(ENTRIES) and items != ENTRIES[:2]
    assert CounterItems.of(items) is items
    assert hash(items) == hash(CounterItems.of(list(ENTRIES)))
    with pytest.raises(ValueError, match="read-only"):
        items.counts[0] = 7
    with pytest.raises(IndexError):
        items[3]


def test_a_snapshot_holds_its_items_as_columns() -> None:
    snapshot = small_snapshot(items=ENTRIES)
    assert isinstance(snapshot.items, CounterItems) and snapshot.item_columns is snapshot.items
    assert snapshot.item_columns.keys == ("a", "b", "c")
    np.testing.assert_array_equal(snapshot.item_columns.counts, [3, 2, 1])
    assert snapshot == small_snapshot(items=list(ENTRIES))


def test_the_count_total_is_exact_beyond_int64() -> None:
    counts = [INT64_MAX, INT64_MAX, INT64_MAX - 5, 1]
    items = CounterItems(("a", "b", "c", "d"), np.array(counts, dtype=np.int64), np.zeros(4, dtype=np.int64))
    assert items.total_count() == sum(counts)
    rows = [[key, count, 0] for key, count in zip("abcd", counts, strict=True)]
    with pytest.raises(InvalidInput) as raised:
        parse_items(rows, "str", INT64_MAX, 0)
    assert raised.value.field == "items"
    assert f"counts sum to {sum(counts)}, more than tuples ({INT64_MAX})" in str(raised.value)


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        CounterItems(("a",), np.array([1, 2], dtype=np.int64), np.array([0], dtype=np.int64))
