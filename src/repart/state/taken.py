"""The rows a migration takes out of files, verified, hashed and routed in bulk (DESIGN §9).

A scattered plan (a jump scale-out 32 -> 33) takes a slot or two from nearly every file: a few hundred
rows from each of a thousand files. Hashing, verifying and routing them file by file would cost a
few fixed-overhead calls per file and column; ``TakenRows`` gathers each file's taken rows with their
destinations as the migration reads them and ``settle`` treats them all at once: every row's ``_slot``
checked against its key's hash and its file's slot group (``Corrupt`` naming the file of the first
row that differs), the row hashes (``repart.state.checksum``) computed in one pass, then summed per
file (the checksum its entry loses), per (source, target) channel pair (the flows the migration's
checks expect) and split per (target channel, slot group) into the rows that enter there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from repart.errors import Corrupt
from repart.partitioning.hashing import slots_of_hashes
from repart.state.checksum import U64, key_hashes, row_hashes
from repart.state.files import SLOT_COLUMN, FileEntry, Layout

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Flow:
    """``rows`` rows with checksum ``digest`` leave channel ``source`` for channel ``target``."""

    source: int
    target: int
    rows: int
    digest: int


@dataclass(frozen=True)
class Settled:
    """``TakenRows.settle``'s result: each file's taken checksum (in the order the files were added),
    the flows between channels, and the rows entering each (channel, slot group) with their hashes."""

    checksums: list[int]
    flows: list[Flow]
    incoming: list[tuple[int, int, pa.Table, U64]]


@dataclass
class TakenRows:
    """Rows taken out of files of one generation, with each row's destination channel."""

    root: Path
    layout: Layout
    entries: list[FileEntry] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    destinations: list[IntArray] = field(default_factory=list)

    def add(self, entry: FileEntry, rows: pa.Table, destinations: IntArray) -> None:
        """``rows`` (file schema, at least one) taken out of ``entry``'s file, going to ``destinations``."""
        self.entries.append(entry)
        self.tables.append(rows)
        self.destinations.append(destinations)

    def settle(self) -> Settled:
        """Verify and hash every taken row and sum them up (module docstring)."""
        if not self.tables:
            return Settled([], [], [])
        layout = self.layout
        rows = pa.concat_tables(self.tables)
        sizes = np.array([table.num_rows for table in self.tables], dtype=np.int64)
        owner = np.repeat(np.arange(sizes.size), sizes)
        key_hash = key_hashes(rows.column(layout.key_col), layout.key_type)
        slots = slots_of_hashes(key_hash, layout.slot_bits).astype(np.int64)
        groups = np.array([entry.slot_group for entry in self.entries], dtype=np.int64)[owner]
        bad = (rows.column(SLOT_COLUMN).to_numpy() != slots) | ((slots >> layout.group_shift) != groups)
        if bad.any():
            path = self.root / self.entries[int(owner[np.argmax(bad)])].path
            raise Corrupt("state file: a row's _slot or slot group does not match its key", path=str(path))
        hashes = row_hashes(rows, key_hash, layout.state_cols)
        starts = np.cumsum(sizes) - sizes
        per_file = np.add.reduceat(hashes, starts, dtype=np.uint64)
        sources = np.array([entry.channel for entry in self.entries], dtype=np.int64)[owner]
        targets = np.concatenate(self.destinations)
        return Settled(
            [int(value) for value in per_file],
            _flows(sources, targets, hashes),
            _incoming(rows, hashes, targets, groups, slots),
        )


def _flows(sources: IntArray, targets: IntArray, hashes: U64) -> list[Flow]:
    """Rows and checksum per (source, target) pair of the rows that change channel."""
    moving = np.flatnonzero(sources != targets)
    if not moving.size:
        return []
    order = moving[np.lexsort((targets[moving], sources[moving]))]
    source, target = sources[order], targets[order]
    starts = np.flatnonzero(np.concatenate([[True], (np.diff(source) != 0) | (np.diff(target) != 0)]))
    counts = np.diff(np.append(starts, order.size))
    digests = np.add.reduceat(hashes[order], starts, dtype=np.uint64)
    return [
        Flow(int(source[start]), int(target[start]), count, int(digest))
        for start, count, digest in zip(starts.tolist(), counts.tolist(), digests.tolist(), strict=True)
    ]


def _incoming(
    rows: pa.Table, hashes: U64, targets: IntArray, groups: IntArray, slots: IntArray
) -> list[tuple[int, int, pa.Table, U64]]:
    """The rows entering each (target channel, slot group), sorted by slot."""
    order = np.lexsort((slots, groups, targets))
    ordered, ordered_hashes = rows.take(order), hashes[order]
    ordered_targets, ordered_groups = targets[order], groups[order]
    bounds = np.flatnonzero(np.diff(ordered_targets) | np.diff(ordered_groups)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [order.size]])
    return [
        (
            int(ordered_targets[start]),
            int(ordered_groups[start]),
            ordered.slice(start, end - start),
            ordered_hashes[start:end],
        )
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
