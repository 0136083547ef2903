"""A snapshot's ``slots``: the sparse slot histogram held as columns, parsed and checked.

A window of a large batch fills tens of thousands of the 2^16 slots. ``SlotColumns`` holds them as two
read-only int64 arrays sorted by slot, ``slots`` and ``counts``, instead of a tuple of pairs; it is a
read-only sequence of ``(slot, count)`` pairs built on access, so code that iterates a snapshot's slots
is unchanged, while the job, the store and the controller's window merge work on the arrays.

``parse_slots`` reads the document's ``slots`` field and ``checked_slots`` checks columns built in
code (a job's counts): both take the bulk checks of ``_well_formed`` (no function call per slot) and
fall back to ``_checked_rows``, which names the first bad row, for a histogram the bulk checks refuse.
Both accept exactly the same histograms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, overload

import numpy as np

from repart.errors import InvalidInput
from repart.partitioning.documents import require_int, require_list, require_row
from repart.partitioning.domain import INT64_MAX, INT64_MIN
from repart.protocol.counter_items import IntArray, exact_sum, read_only


class SlotColumns(Sequence[tuple[int, int]]):
    """Slots with a tuple count, as columns sorted by slot: ``slots`` and ``counts`` (read-only int64
    arrays of the same length).

    Equal to another ``SlotColumns`` or to a sequence of ``(slot, count)`` pairs with the same pairs in
    the same order.
    """

    __slots__ = ("counts", "slots")

    def __init__(self, slots: IntArray, counts: IntArray) -> None:
        """The histogram with these columns; the arrays become read-only (the histogram owns them)."""
        if len(slots) != len(counts):
            raise ValueError(f"columns of different lengths: {len(slots)}, {len(counts)}")
        self.slots = read_only(slots)
        self.counts = read_only(counts)

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> SlotColumns:
        """``pairs`` as columns (``pairs`` itself when it is a ``SlotColumns`` already). InvalidInput
        naming the first bad pair (``slots[3].count``) for a pair that is not two integers (not bools
        or floats) in the int64 range, which is what an int64 column holds (a document's row check
        refuses such a pair too); the other checks are ``checked_slots``'s."""
        if isinstance(pairs, SlotColumns):
            return pairs
        rows = [require_row(pair, f"slots[{i}]", ("slot", "count")) for i, pair in enumerate(pairs)]
        slots = [require_int(row[0], f"slots[{i}].slot", INT64_MIN) for i, row in enumerate(rows)]
        counts = [require_int(row[1], f"slots[{i}].count", INT64_MIN) for i, row in enumerate(rows)]
        return cls(np.array(slots, dtype=np.int64), np.array(counts, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.slots)

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> SlotColumns: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int] | SlotColumns:
        if isinstance(index, slice):
            return SlotColumns(self.slots[index], self.counts[index])
        return int(self.slots[index]), int(self.counts[index])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.slots.tolist(), self.counts.tolist(), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SlotColumns):
            return np.array_equal(self.slots, other.slots) and np.array_equal(self.counts, other.counts)
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return tuple(self) == tuple(
                tuple(pair) if isinstance(pair, list | tuple) else pair for pair in other
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # the hash of the equal tuple of pairs

    def __reduce__(self) -> tuple[type[SlotColumns], tuple[IntArray, IntArray]]:
        return SlotColumns, (self.slots, self.counts)  # a copy's arrays are read-only too

    def __repr__(self) -> str:
        return f"SlotColumns({list(self)!r})"

    def rows(self) -> list[list[int]]:
        """The histogram as the document's ``[[slot, count], ...]`` rows."""
        return np.column_stack((self.slots, self.counts)).tolist()  # type: ignore[no-any-return]


def parse_slots(value: object, slot_bits: int, tuples: int) -> SlotColumns:
    """The ``slots`` field: a list of ``[slot, count]`` rows with unique slots in ``[0, 2^slot_bits)``
    and counts in [0, 2^63 - 1] summing to ``tuples``, sorted by slot; InvalidInput naming the first
    bad row (``slots[3].slot``) or ``slots`` otherwise."""
    rows = require_list(value, "slots")
    columns = _well_formed_rows(rows, slot_bits)
    return _summing_to(columns if columns is not None else _checked_rows(rows, slot_bits), tuples)


def checked_slots(columns: SlotColumns, slot_bits: int, tuples: int) -> SlotColumns:
    """``columns`` (built in code) sorted by slot, if a document holding them would pass
    ``parse_slots``: InvalidInput naming the first bad row or ``slots`` otherwise."""
    well_formed = _well_formed(columns.slots, columns.counts, slot_bits)
    return _summing_to(
        well_formed if well_formed is not None else _checked_rows(columns.rows(), slot_bits), tuples
    )


def _summing_to(columns: SlotColumns, tuples: int) -> SlotColumns:
    total = exact_sum(columns.counts)
    if total != tuples:
        raise InvalidInput(
            "slots", f"counts sum to {total}, but tuples is {tuples}; slots must count every tuple"
        )
    return columns


def _well_formed_rows(rows: list[Any], slot_bits: int) -> SlotColumns | None:
    """``rows`` as columns sorted by slot if every row is a ``[slot, count]`` list of two ints and the
    columns pass ``_well_formed``; None when any does not (then ``_checked_rows`` names the first bad
    row). Types and ranges are checked by C-level builtins before numpy converts the columns."""
    if not rows:
        return SlotColumns.of(())
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {2}:
        return None
    slots, counts = (tuple(map(itemgetter(column), rows)) for column in range(2))
    if set(map(type, slots)) != {int} or set(map(type, counts)) != {int}:
        return None
    if min(slots) < 0 or max(slots) >= 1 << slot_bits or min(counts) < 0 or max(counts) > INT64_MAX:
        return None
    return _well_formed(np.array(slots, dtype=np.int64), np.array(counts, dtype=np.int64), slot_bits)


def _well_formed(slots: IntArray, counts: IntArray, slot_bits: int) -> SlotColumns | None:
    """The int64 columns sorted by slot if every slot is unique and in ``[0, 2^slot_bits)`` and every
    count is at least 0; None otherwise."""
    if len(slots) == 0:
        return SlotColumns(slots, counts)
    if slots.min() < 0 or slots.max() >= 1 << slot_bits or counts.min() < 0:
        return None
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    if np.any(ordered[1:] == ordered[:-1]):
        return None
    return SlotColumns(ordered, counts[order])


def _checked_rows(rows: list[Any], slot_bits: int) -> SlotColumns:
    """``rows`` sorted by slot, each row checked in turn: InvalidInput naming the first bad one."""
    high = (1 << slot_bits) - 1
    pairs: dict[int, int] = {}
    for i, row in enumerate(rows):
        raw_slot, raw_count = require_row(row, f"slots[{i}]", ("slot", "count"))
        slot = require_int(raw_slot, f"slots[{i}].slot", 0, high)
        if slot in pairs:
            raise InvalidInput(f"slots[{i}]", f"repeats slot {slot}; slots must be unique")
        pairs[slot] = require_int(raw_count, f"slots[{i}].count")
    return SlotColumns.of(sorted(pairs.items()))
