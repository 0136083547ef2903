"""A snapshot's ``items``: lossy-counter entries held as columns, parsed and checked.

A large window has millions of items (a 1M-item snapshot is ingested in under 10 s and
1 GB). ``CounterItems`` holds them as three columns, the keys in one tuple and counts and deltas in
int64 arrays (16 bytes an item beside the key), instead of an object per entry; it is a read-only
sequence of ``CounterEntry`` built on access, so code that iterates a snapshot's items is unchanged,
and the storage layer inserts from the columns directly.

``parse_items`` reads the document's ``items`` field. A list that passes the bulk checks of
``_well_formed_items`` (each value looked at once by C-level builtins and numpy, no function call per
item) is taken as it is; any other is checked row by row by ``_checked_items``, which names the first
bad row. Both accept exactly the same rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, overload

import numpy as np

from repart.errors import InvalidInput
from repart.partitioning.documents import (
    require_int,
    require_key,
    require_key_type,
    require_list,
    require_one_key_type,
    require_row,
)
from repart.partitioning.domain import INT64_MAX, INT64_MIN, Key, KeyType

IntArray = np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True, slots=True)
class CounterEntry:
    """A retained lossy-counter entry: ``count <= true count <= count + delta``."""

    key: Key
    count: int
    delta: int


class CounterItems(Sequence[CounterEntry]):
    """Lossy-counter entries in document order, as columns: ``keys`` (plain str or int keys),
    ``counts`` and ``deltas`` (read-only int64 arrays of the same length).

    Equal to another ``CounterItems`` or to a sequence of ``CounterEntry`` with the same entries in the
    same order.
    """

    __slots__ = ("counts", "deltas", "keys")

    def __init__(self, keys: tuple[Key, ...], counts: IntArray, deltas: IntArray) -> None:
        """The items with these columns; the arrays become read-only (the items own them)."""
        if not len(keys) == len(counts) == len(deltas):
            raise ValueError(f"columns of different lengths: {len(keys)}, {len(counts)}, {len(deltas)}")
        self.keys = keys
        self.counts = read_only(counts)
        self.deltas = read_only(deltas)

    @classmethod
    def of(cls, entries: Iterable[CounterEntry]) -> CounterItems:
        """``entries`` as columns (``entries`` itself when it is a ``CounterItems`` already)."""
        if isinstance(entries, CounterItems):
            return entries
        listed = list(entries)
        return cls(
            tuple(entry.key for entry in listed),
            np.array([entry.count for entry in listed], dtype=np.int64),
            np.array([entry.delta for entry in listed], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> CounterEntry: ...

    @overload
    def __getitem__(self, index: slice) -> CounterItems: ...

    def __getitem__(self, index: int | slice) -> CounterEntry | CounterItems:
        if isinstance(index, slice):
            return CounterItems(self.keys[index], self.counts[index], self.deltas[index])
        return CounterEntry(self.keys[index], int(self.counts[index]), int(self.deltas[index]))

    def __iter__(self) -> Iterator[CounterEntry]:
        return map(CounterEntry, self.keys, self.counts.tolist(), self.deltas.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CounterItems):
            return (
                self.keys == other.keys
                and np.array_equal(self.counts, other.counts)
                and np.array_equal(self.deltas, other.deltas)
            )
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.keys, self.counts.tobytes(), self.deltas.tobytes()))

    def __repr__(self) -> str:
        return f"CounterItems({list(self)!r})"

    def total_count(self) -> int:
        """Σ counts, exactly (``exact_sum``)."""
        return exact_sum(self.counts)


def exact_sum(values: IntArray) -> int:
    """Σ ``values`` (int64, each >= 0), exactly: the sums of the high and the low 32 bits of the
    values (each fits int64 for fewer than 2^31 values, where a million values near 2^63 would
    overflow one int64 sum)."""
    high = int((values >> 32).sum())
    low = int((values & 0xFFFFFFFF).sum())
    return (high << 32) + low


def read_only(values: IntArray) -> IntArray:
    """``values`` as a read-only int64 array (its holder owns it: an int64 array is made read-only,
    not copied)."""
    array = np.asarray(values, dtype=np.int64)
    array.flags.writeable = False
    return array


def parse_items(value: object, key_type: KeyType, tuples: int, closed: int) -> CounterItems:
    """The ``items`` field: a list of ``[key, count, delta]`` rows with unique keys of ``key_type``,
    ``count`` in [1, 2^63 - 1], ``delta`` in [0, ``closed``] and counts summing to at most ``tuples``;
    InvalidInput naming the first bad row (``items[3].count``) or ``items`` otherwise."""
    rows = require_list(value, "items")
    items = _well_formed_items(rows, key_type, closed)
    if items is None:
        items = _checked_items(rows, key_type, closed)
    total = items.total_count()
    if total > tuples:
        raise InvalidInput("items", f"counts sum to {total}, more than tuples ({tuples})")
    return items


def _well_formed_items(rows: list[Any], key_type: KeyType, closed: int) -> CounterItems | None:
    """The items of ``rows`` if every row is a ``[key, count, delta]`` list with a unique key of
    ``key_type``, ``count`` in [1, 2^63 - 1] and ``delta`` in [0, closed]; None when any is not (then
    ``_checked_items`` names the first bad row)."""
    if not rows:
        return CounterItems((), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {3}:
        return None
    keys, counts, deltas = (tuple(map(itemgetter(column), rows)) for column in range(3))
    if set(map(type, counts)) != {int} or set(map(type, deltas)) != {int}:
        return None
    if min(counts) < 1 or max(counts) > INT64_MAX or min(deltas) < 0 or max(deltas) > closed:
        return None
    if key_type == "str":
        if set(map(type, keys)) != {str}:
            return None
        try:  # only a non-ASCII key can hold a lone surrogate, which UTF-8 cannot encode
            "".join(itertools.filterfalse(str.isascii, keys)).encode("utf-8")
        except UnicodeEncodeError:
            return None
    elif set(map(type, keys)) != {int} or min(keys) < INT64_MIN or max(keys) > INT64_MAX:
        return None
    if not _distinct(keys):
        return None
    return CounterItems(keys, np.array(counts, dtype=np.int64), np.array(deltas, dtype=np.int64))


def _distinct(keys: tuple[Key, ...]) -> bool:
    """Whether no key repeats. The keys' hashes are sorted and compared first; only when two are equal
    (a repeated key, or two keys with one hash) is a set of the keys built (for a million keys the
    hashes take 8 MB and 0.1 s, a set 48 MB and 0.3 s)."""
    hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys))
    hashes.sort()
    return not np.any(hashes[1:] == hashes[:-1]) or len(set(keys)) == len(keys)


def _checked_items(rows: list[Any], key_type: KeyType, closed: int) -> CounterItems:
    """The items of ``rows``, each row checked in turn: InvalidInput naming the first bad one."""
    checked = [require_row(row, f"items[{i}]", ("key", "count", "delta")) for i, row in enumerate(rows)]
    keys = [require_key(row[0], f"items[{i}]") for i, row in enumerate(checked)]
    require_key_type(
        key_type,
        found=require_one_key_type(keys, "items"),
        found_in="the items' keys",
    )
    counts, deltas = [], []
    seen: dict[Key, int] = {}
    for i, (key, (_, raw_count, raw_delta)) in enumerate(zip(keys, checked, strict=True)):
        if key in seen:
            raise InvalidInput(
                f"items[{i}]", f"repeats the key {key!r} of items[{seen[key]}]; keys must be unique"
            )
        seen[key] = i
        counts.append(require_int(raw_count, f"items[{i}].count", 1))
        delta = require_int(raw_delta, f"items[{i}].delta")
        if delta > closed:
            raise InvalidInput(
                f"items[{i}].delta",
                f"must be <= floor(tuples / ceil(1/epsilon)) = {closed} (the buckets the counter closed, "
                f"at most epsilon * tuples), got {delta}",
            )
        deltas.append(delta)
    return CounterItems(tuple(keys), np.array(counts, dtype=np.int64), np.array(deltas, dtype=np.int64))
