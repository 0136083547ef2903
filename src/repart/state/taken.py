"""The rows a migration takes out of files, verified, hashed and routed in bulk.

A scattered plan (a jump scale-out 32 -> 33) takes a slot or two from nearly every file: a few hundred
rows from each of a thousand files. Hashing, verifying and routing them file by file would cost a
few fixed-overhead calls per file and column; ``TakenRows`` gathers each file's taken rows with their
destinations as the migration reads them and ``settle`` treats them all at once: every row's ``_slot``
checked against its key's hash and its entry's slot range (``Corrupt`` naming the file of the first
row that differs), the row hashes (``repart.state.checksum``) computed in one pass, then summed per
file (the checksum its entry loses) and per (source, target) channel pair (the flows the migration's
checks expect). A taken row either stays in its file, which is then listed under its target for its
slot (``Relisting``: rows, checksum and slots per file and target), or is written again (restaged):
those rows are split per (target channel, slot group, seq and kind of their file) into the rows that
enter there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from repart.errors import Corrupt
from repart.partitioning.hashing import slots_of_hashes
from repart.state.checksum import U64, checksum
from repart.state.files import SLOT_COLUMN, FileEntry, FileKindName, Layout
from repart.state.objects import Objects

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Flow:
    """``rows`` rows with checksum ``digest`` leave channel ``source`` for channel ``target``."""

    source: int
    target: int
    rows: int
    digest: int


@dataclass(frozen=True)
class Relisting:
    """The taken rows of the ``index``-th file that stay in it and go to channel ``target``: their
    count, checksum and slots (sorted, distinct)."""

    index: int
    target: int
    rows: int
    digest: int
    slots: IntArray


@dataclass(frozen=True)
class Settled:
    """``TakenRows.settle``'s result: each file's taken checksum (in the order the files were added),
    the flows between channels, the files listed under a target, and the restaged rows entering each
    (channel, slot group, seq, kind) with their hashes."""

    checksums: list[int]
    flows: list[Flow]
    relistings: list[Relisting]
    incoming: list[tuple[int, int, int, FileKindName, pa.Table, U64]]


@dataclass
class TakenRows:
    """Rows taken out of files of one generation, with each row's destination channel."""

    objects: Objects
    layout: Layout
    entries: list[FileEntry] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    destinations: list[IntArray] = field(default_factory=list)
    relist: list[npt.NDArray[np.bool_]] = field(default_factory=list)

    def add(
        self, entry: FileEntry, rows: pa.Table, destinations: IntArray, relist: npt.NDArray[np.bool_]
    ) -> None:
        """``rows`` (file schema, at least one) taken out of ``entry``'s file, going to ``destinations``;
        where ``relist`` is true the row stays in the file, listed under its destination."""
        self.entries.append(entry)
        self.tables.append(rows)
        self.destinations.append(destinations)
        self.relist.append(relist)

    def settle(self) -> Settled:
        """Verify and hash every taken row and sum them up (module docstring)."""
        if not self.tables:
            return Settled([], [], [], [])
        layout = self.layout
        rows = pa.concat_tables(self.tables)
        sizes = np.array([table.num_rows for table in self.tables], dtype=np.int64)
        owner = np.repeat(np.arange(sizes.size), sizes)
        key_hash, hashes = layout.hashes(rows)
        slots = slots_of_hashes(key_hash, layout.slot_bits).astype(np.int64)
        ranges = np.array([layout.slot_range(entry.slot_group) for entry in self.entries], dtype=np.int64)
        outside = (slots < ranges[owner, 0]) | (slots > ranges[owner, 1])
        bad = (rows.column(SLOT_COLUMN).to_numpy() != slots) | outside
        if bad.any():
            path = self.entries[int(owner[np.argmax(bad)])].path
            raise Corrupt("state file: a row's _slot or slot group does not match its key", path=path)
        starts = np.cumsum(sizes) - sizes
        per_file = np.add.reduceat(hashes, starts, dtype=np.uint64)
        sources = np.array([entry.channel for entry in self.entries], dtype=np.int64)[owner]
        targets = np.concatenate(self.destinations)
        relist = np.concatenate(self.relist)
        restaged = np.flatnonzero(~relist)
        seqs = np.array([entry.seq for entry in self.entries], dtype=np.int64)[owner]
        kinds = np.array([entry.kind == "delta" for entry in self.entries], dtype=np.bool_)[owner]
        return Settled(
            [int(value) for value in per_file],
            _flows(sources, targets, hashes),
            _relistings(owner, targets, hashes, slots, np.flatnonzero(relist)),
            _incoming(
                rows.take(restaged),
                hashes[restaged],
                targets[restaged],
                slots[restaged] >> layout.group_shift,
                slots[restaged],
                seqs[restaged],
                kinds[restaged],
            ),
        )


def _relistings(
    owner: IntArray, targets: IntArray, hashes: U64, slots: IntArray, rows: IntArray
) -> list[Relisting]:
    """Per (file, target) of the relisted rows: their count, checksum and slots."""
    if not rows.size:
        return []
    order = rows[np.lexsort((targets[rows], owner[rows]))]
    files, target = owner[order], targets[order]
    starts = np.flatnonzero(np.concatenate([[True], (np.diff(files) != 0) | (np.diff(target) != 0)]))
    ends = np.append(starts[1:], order.size)
    return [
        Relisting(
            int(files[start]),
            int(target[start]),
            int(end - start),
            checksum(hashes[order[start:end]]),
            np.unique(slots[order[start:end]]),
        )
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


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
    rows: pa.Table,
    hashes: U64,
    targets: IntArray,
    groups: IntArray,
    slots: IntArray,
    seqs: IntArray,
    deltas: npt.NDArray[np.bool_],
) -> list[tuple[int, int, int, FileKindName, pa.Table, U64]]:
    """The restaged rows entering each (target channel, slot group, seq, kind), sorted by slot."""
    if not rows.num_rows:
        return []
    order = np.lexsort((slots, deltas, seqs, groups, targets))
    ordered, ordered_hashes = rows.take(order), hashes[order]
    keys = np.stack([targets[order], groups[order], seqs[order], deltas[order].astype(np.int64)])
    bounds = np.flatnonzero(np.any(np.diff(keys, axis=1) != 0, axis=0)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [order.size]])
    return [
        (
            int(keys[0, start]),
            int(keys[1, start]),
            int(keys[2, start]),
            "delta" if keys[3, start] else "base",
            ordered.slice(start, end - start),
            ordered_hashes[start:end],
        )
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
