"""Slot filters: the slots of a state file that its generation entry no longer owns.

A migration that takes a few slots away from a file does not rewrite the file: the next generation
lists the same file with a **slot filter**, the slots whose rows left (in the spirit of Delta Lake's
deletion vectors, which hide rows of an immutable file by position; a state file is sorted by slot,
so hiding by slot is exact and small). Readers drop the rows whose ``_slot`` the filter holds. The
entry's ``rows`` and ``checksum`` describe what readers see, the rows the filter lets through; the
filter records how many rows it hides, so that ``verify`` can check both parts of the file and
compaction can tell how much of a channel's files is dead weight.

In a generation document a filter is ``{"rows": <hidden rows>, "slots": [[first, last], ...]}``:
the hidden slots as sorted, disjoint, non-adjacent runs inside the entry's slot group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.documents import require_int, require_list, require_object, require_row

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_FIELDS = ("rows", "slots")


@dataclass(frozen=True)
class SlotFilter:
    """The hidden slots of one file as runs ``(first, last)`` (sorted, disjoint, not adjacent) and the
    number of the file's rows in them (at least one: a filter only ever hides rows that left)."""

    runs: tuple[tuple[int, int], ...]
    rows: int

    @classmethod
    def of(cls, slots: IntArray, rows: int) -> SlotFilter:
        """The filter hiding ``slots`` (any order, repeats allowed), which hold ``rows`` rows."""
        unique = np.unique(np.asarray(slots, dtype=np.int64))
        breaks = np.flatnonzero(np.diff(unique) != 1) + 1
        firsts = np.concatenate([unique[:1], unique[breaks]])
        lasts = np.concatenate([unique[breaks - 1], unique[-1:]])
        return cls(tuple(zip(firsts.tolist(), lasts.tolist(), strict=True)), rows)

    @classmethod
    def complement(cls, seen: IntArray, first: int, last: int, rows: int) -> SlotFilter | None:
        """The filter hiding every slot of ``[first, last]`` but ``seen`` (sorted, distinct, within the
        range), which hides ``rows`` rows; None when it hides nothing."""
        if rows == 0:
            return None
        bounds = np.concatenate([[first - 1], np.asarray(seen, dtype=np.int64), [last + 1]])
        gaps = np.flatnonzero(np.diff(bounds) > 1)
        runs = tuple(zip((bounds[gaps] + 1).tolist(), (bounds[gaps + 1] - 1).tolist(), strict=True))
        return cls(runs, rows)

    @property
    def slots(self) -> IntArray:
        """Every hidden slot, ascending."""
        return np.concatenate([np.arange(first, last + 1, dtype=np.int64) for first, last in self.runs])

    @cached_property
    def _bounds(self) -> tuple[IntArray, IntArray]:
        """The runs' first and last slots as arrays (a scale-out's filter holds thousands of runs)."""
        bounds = np.array(self.runs, dtype=np.int64).reshape(-1, 2)
        return bounds[:, 0].copy(), bounds[:, 1].copy()

    def hides(self, slots: IntArray) -> BoolArray:
        """True where a row's slot is hidden."""
        firsts, lasts = self._bounds
        run = np.searchsorted(firsts, slots, side="right") - 1
        hidden: BoolArray = (run >= 0) & (slots <= lasts[np.maximum(run, 0)])
        return hidden

    def covers(self, lows: IntArray, highs: IntArray) -> BoolArray:
        """True where every slot of ``[lows[i], highs[i]]`` is hidden (runs are merged and not adjacent,
        so such a range lies within one run): a row group whose slots it covers need not be read."""
        firsts, lasts = self._bounds
        run = np.searchsorted(firsts, lows, side="right") - 1
        covered: BoolArray = (run >= 0) & (highs <= lasts[np.maximum(run, 0)])
        return covered

    def widened(self, slots: IntArray, rows: int) -> SlotFilter:
        """This filter with ``slots`` (holding ``rows`` more rows, none hidden yet) hidden too."""
        return SlotFilter.of(
            np.concatenate([self.slots, np.asarray(slots, dtype=np.int64)]), self.rows + rows
        )

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "slots": [list(run) for run in self.runs]}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], name: str) -> SlotFilter:
        """Parse and check a filter; InvalidInput naming ``name`` and the field at fault."""
        fields = require_object(document, name, _FIELDS)
        runs = require_list(fields["slots"], f"{name}.slots")
        if not runs:
            raise InvalidInput(f"{name}.slots", "must hold at least one run [first, last], got []")
        parsed = []
        previous = -2
        for index, run in enumerate(runs):
            field = f"{name}.slots[{index}]"
            first, last = (require_int(value, field) for value in require_row(run, field, ("first", "last")))
            if first > last or first <= previous + 1:
                raise InvalidInput(
                    field,
                    f"must be a run [first, last] with first <= last, after the previous run and not "
                    f"adjacent to it (runs sorted and merged), got {[first, last]}",
                )
            parsed.append((first, last))
            previous = last
        return cls(tuple(parsed), require_int(fields["rows"], f"{name}.rows", 1))

    def check_within(self, first: int, last: int, name: str) -> None:
        """InvalidInput ``name`` unless every hidden slot lies in ``[first, last]`` (its entry's slot
        group)."""
        if self.runs[0][0] < first or self.runs[-1][1] > last:
            raise InvalidInput(
                f"{name}.slots",
                f"must lie in the entry's slot group, slots [{first}, {last}], got runs from "
                f"{self.runs[0][0]} to {self.runs[-1][1]}",
            )
