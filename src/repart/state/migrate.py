"""Applying a migration plan to the files of a state store (DESIGN §6, §9).

``migrate_files`` takes the current generation's files and a plan and returns the next generation's
files; it never modifies a file. It looks only at the files of the channels that lose keys
(``plan.channels_losing_keys``) whose slot group holds a moved slot or the slot of an explicit or
pinned key, and of those:

- a file whose rows all keep their channel is kept (shared with the previous generation);
- a file whose rows all go to one other channel is **relocated**: hard-linked into that channel's
  directory, the same bytes, not even read when its slots alone decide that;
- any other file is **rewritten**: read and verified against its entry, split by destination; the
  rows that stay are written as a new file of its channel. The rows that leave are gathered per
  (target channel, slot group) over all rewritten files and written as one file each, sorted by
  slot: a scattered plan (every file loses a few rows to one new channel) writes one incoming file
  per slot group, not one per source file.

Each row's destination is ``MigrationPlan.destination`` vectorized: explicit target, else pinned (stay),
else the slot move of its slot from this channel, else stay. Every written file is read back and its
checksum compared with the rows that were meant for it; then per channel
``checksum_after = checksum_before − out + in`` and ``rows_after = rows_before − out + in``, and the
totals unchanged. Any difference is damaged state (``Corrupt``, DESIGN §12.4), raised before anything
is committed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.errors import Corrupt
from repart.migration.plan import MigrationPlan
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.checksum import U64, add_checksums, checksum
from repart.state.files import (
    SLOT_COLUMN,
    FileEntry,
    Layout,
    link_part,
    make_durable,
    read_slots,
    read_verified,
    write_part,
)

IntArray = npt.NDArray[np.int64]


@dataclass
class Migration:
    """The next generation's files after a plan, and what moved: rows and bytes that changed channel,
    files split (rewritten) and files hard-linked into another channel (relocated)."""

    root: Path
    layout: Layout
    files: list[FileEntry] = field(default_factory=list)
    moved_rows: int = 0
    moved_bytes: int = 0
    rewritten_files: int = 0
    relocated_files: int = 0
    written: list[FileEntry] = field(default_factory=list)  # the files written (not linked)
    links: list[tuple[FileEntry, FileEntry]] = field(default_factory=list)
    flows: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, entry: FileEntry) -> None:
        """A file of the next generation (kept, linked or written by this migration)."""
        self.files.append(entry)

    def write(self, channel: int, group: int, rows: pa.Table, hashes: U64) -> int:
        """Write a new file of the next generation; returns its size."""
        part = write_part(self.root, channel, group, rows, hashes, self.layout)
        self.written.append(part)
        self.add(part)
        return part.bytes

    def keep_or_link(self, entry: FileEntry, target: int) -> None:
        """Keep ``entry`` (all its rows stay) or relocate it to ``target`` as a hard link."""
        if target == entry.channel:
            self.add(entry)
            return
        link = link_part(self.root, entry, target)
        self.relocated_files += 1
        self.links.append((entry, link))
        self.add(link)
        self.flow(entry.channel, target, entry.rows, entry.checksum)
        self.moved_bytes += entry.bytes

    def flow(self, source: int, target: int, rows: int, digest: int) -> None:
        """``rows`` rows with checksum ``digest`` leave ``source`` for ``target``."""
        self.moved_rows += rows
        for channel, sign in ((source, -1), (target, 1)):
            flow = self.flows[channel]
            flow[0] += sign * rows
            flow[1] = (flow[1] + sign * digest) % 2**64


@dataclass(frozen=True)
class _Routes:
    """A plan in array form for one store layout."""

    plan: MigrationPlan
    layout: Layout

    @cached_property
    def slot_sources(self) -> tuple[IntArray, IntArray]:
        """Per slot: the source and target channel of the slot move that holds it (-1 where none)."""
        size = 2**self.layout.slot_bits
        sources, targets = np.full(size, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64)
        first, last, source, target = self.plan.slot_moves.T
        lengths = last - first + 1
        slots = np.arange(int(lengths.sum())) + np.repeat(first - np.cumsum(lengths) + lengths, lengths)
        sources[slots], targets[slots] = np.repeat(source, lengths), np.repeat(target, lengths)
        return sources, targets

    @cached_property
    def explicit_sources(self) -> tuple[IntArray, IntArray]:
        """The slots of the explicitly moved keys and their source channels."""
        moves = self.plan.explicit_moves
        slots = slots_of_hashes(
            hash_keys([move.key for move in moves], self.layout.key_type), self.layout.slot_bits
        )
        return slots, np.array([move.source for move in moves], dtype=np.int64)

    @cached_property
    def key_slots(self) -> npt.NDArray[np.bool_]:
        """True at the slots that hold an explicit or a pinned key of the plan."""
        pinned = hash_keys(list(self.plan.pinned_keys), self.layout.key_type)
        mask = np.zeros(2**self.layout.slot_bits, dtype=np.bool_)
        mask[slots_of_hashes(pinned, self.layout.slot_bits)] = True
        mask[self.explicit_sources[0]] = True
        return mask

    def _value_set(self, keys: Sequence[object]) -> pa.Array:
        return pa.array(keys, type=pa.int64() if self.layout.key_type == "int" else pa.string())

    def by_slot(self, slots: IntArray, channel: int) -> IntArray:
        """Destinations that the slot moves alone give rows of ``channel`` in ``slots``."""
        sources, targets = self.slot_sources
        return np.where(sources[slots] == channel, targets[slots], channel)

    def destinations(self, keys: pa.ChunkedArray, slots: IntArray, channel: int) -> IntArray:
        """``plan.destination`` of every row of ``channel`` (keys with their slots), vectorized."""
        destinations = self.by_slot(slots, channel)
        if self.layout.key_type == "int":
            keys = keys.cast(pa.int64())  # int8..int64 columns: compare as the int64 keys of the plan
        pinned = pc.is_in(keys, value_set=self._value_set(self.plan.pinned_keys))
        destinations[pinned.to_numpy(zero_copy_only=False)] = channel
        moves = self.plan.explicit_moves
        found = pc.index_in(keys, value_set=self._value_set([move.key for move in moves]))
        rows = np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))
        if rows.size:
            targets = np.array([move.target for move in moves], dtype=np.int64)
            destinations[rows] = targets[found.to_numpy(zero_copy_only=False)[rows].astype(np.int64)]
        return destinations

    def touches(self, entry: FileEntry) -> bool:
        """Whether the file's slot group holds a slot moved from its channel or the slot of a key the
        plan moves explicitly from its channel: else no row of it can move (a key of an explicit move
        sits on the move's source, the channel the source function gave it)."""
        first, last = self.layout.slot_range(entry.slot_group)
        slot_sources, _ = self.slot_sources
        key_slots, key_sources = self.explicit_sources
        in_range = (key_slots >= first) & (key_slots <= last)
        return bool(
            np.any(slot_sources[first : last + 1] == entry.channel)
            or np.any(key_sources[in_range] == entry.channel)
        )


def migrate_files(
    root: str | os.PathLike[str], files: Sequence[FileEntry], plan: MigrationPlan, layout: Layout
) -> Migration:
    """The next generation's files after ``plan`` (module docstring); writes only new files."""
    routes = _Routes(plan, layout)
    losing = set(plan.channels_losing_keys)
    migration = Migration(Path(root), layout)
    incoming: dict[tuple[int, int], list[tuple[pa.Table, U64]]] = defaultdict(list)
    for entry in files:
        if entry.channel not in losing or not routes.touches(entry):
            migration.add(entry)
            continue
        by_slot = np.unique(routes.by_slot(slots := read_slots(root, entry), entry.channel))
        if by_slot.size == 1 and not routes.key_slots[slots].any():
            migration.keep_or_link(entry, int(by_slot[0]))
            continue
        table, hashes = read_verified(root, entry, layout)
        slots = table.column(SLOT_COLUMN).to_numpy().astype(np.int64)
        destinations = routes.destinations(table.column(layout.key_col), slots, entry.channel)
        targets = np.unique(destinations)
        if targets.size == 1:
            migration.keep_or_link(entry, int(targets[0]))
            continue
        migration.rewritten_files += 1
        for target in targets.tolist():
            rows = np.flatnonzero(destinations == target)
            if target == entry.channel:
                migration.write(target, entry.slot_group, table.take(rows), hashes[rows])
            else:
                migration.flow(entry.channel, target, rows.size, checksum(hashes[rows]))
                incoming[target, entry.slot_group].append((table.take(rows), hashes[rows]))
    for (target, group), pieces in sorted(incoming.items()):
        table = pa.concat_tables([piece for piece, _ in pieces])
        hashes = np.concatenate([piece_hashes for _, piece_hashes in pieces])
        order = np.argsort(table.column(SLOT_COLUMN).to_numpy(), kind="stable")
        migration.moved_bytes += migration.write(target, group, table.take(order), hashes[order])
    make_durable(root, migration.written)
    make_durable(root, [link for _, link in migration.links], links=True)
    _verify(root, files, migration, layout, plan.target_n_channels)
    return migration


def _verify(
    root: str | os.PathLike[str],
    before: Sequence[FileEntry],
    migration: Migration,
    layout: Layout,
    n_channels: int,
) -> None:
    """Read back every rewritten file, check that every link is its source's inode, then check rows
    and checksums per channel and in total."""
    for entry in migration.written:
        read_verified(root, entry, layout)
    for source, link in migration.links:
        if not os.path.samefile(Path(root) / source.path, Path(root) / link.path):
            raise Corrupt(f"relocated file is not a link to {source.path!r}", path=link.path)
    old, new = _totals(before), _totals(migration.files)
    for channel in sorted(old.keys() | new.keys() | migration.flows.keys()):
        rows, digest = old.get(channel, (0, 0))
        flow_rows, flow_digest = migration.flows.get(channel, (0, 0))
        wanted = (rows + flow_rows, add_checksums(digest, flow_digest))
        if new.get(channel, (0, 0)) != wanted:
            raise Corrupt(
                f"verification failed for channel {channel}: after the plan it holds "
                f"{new.get(channel, (0, 0))} (rows, checksum), expected {wanted}; nothing was committed"
            )
        if channel >= n_channels and wanted[0]:
            raise Corrupt(
                f"channel {channel} keeps {wanted[0]} rows after the plan, but the target function has "
                f"{n_channels} channels: the state does not match the plan's source; nothing was committed"
            )
    if _total(old.values()) != _total(new.values()):
        raise Corrupt(
            "verification failed: the plan changed the total (rows, checksum); nothing was committed"
        )


def _total(per_channel: Iterable[tuple[int, int]]) -> tuple[int, int]:
    rows, digest = 0, 0
    for channel_rows, channel_digest in per_channel:
        rows, digest = rows + channel_rows, add_checksums(digest, channel_digest)
    return rows, digest


def _totals(files: Sequence[FileEntry]) -> dict[int, tuple[int, int]]:
    totals: dict[int, tuple[int, int]] = {}
    for entry in files:
        rows, digest = totals.get(entry.channel, (0, 0))
        totals[entry.channel] = (rows + entry.rows, add_checksums(digest, entry.checksum))
    return totals
