"""Applying a migration plan to the files of a state store (DESIGN §6, §9).

``migrate_files`` takes the current generation's files and a plan and returns the next generation's
files; it never modifies a file. It looks only at the files of the channels that lose keys
(``plan.channels_losing_keys``) whose slot group holds a moved slot or the slot of an explicit or
pinned key, and at the files holding partials that a consolidation merges; of those:

- a file whose rows all keep their channel is kept (shared with the previous generation);
- a file whose rows all go to one other channel is **relocated**: hard-linked into that channel's
  directory, the same bytes (and filter), read but neither hashed nor written;
- any other file is **filtered**: only its footer and the row groups that may hold candidate rows
  (those of slots moved from its channel and of the plan's named keys) are read
  (``repart.state.partial``). Every slot that holds a row that leaves is hidden from the file by
  its entry's slot filter (``repart.state.filters``): the next generation lists the same file, its
  rows and checksum less those of the hidden slots. The hidden rows that leave go to their target;
  those of a hidden slot that stay (a pinned key's row in a moved slot, the neighbours of an
  explicitly moved key) are written again in their own channel (**restaged**). A file whose every
  seen row is hidden is dropped instead (its rows all written anew).

The rows that enter a channel (moved and restaged) are gathered per (channel, slot group) over all
files and written as one file each, sorted by slot: a scattered plan (every file loses a few rows to
one new channel) writes one incoming file per slot group and reads, of each file, its footer and the
row group or two that hold the moved slots; the rows taken from all files are verified and hashed
together (``repart.state.taken``). Its cost follows the moved rows, not the files that hold them;
the dead rows the filters leave behind are reclaimed by compaction (``repart.state.compact``).

Each row's destination is ``MigrationPlan.destination`` vectorized: explicit target, else a split
key's rule (stay on its candidates in ``b``, else its home in ``b``), else pinned (stay), else the slot
move of its slot from this channel, else stay. Every written file is read back and its checksum
compared with the rows that were meant for it; then per channel
``checksum_after = checksum_before − out + in`` and ``rows_after = rows_before − out + in``, and the
totals unchanged. A filtered entry's rows and checksum are its old ones less those of the rows read
from its hidden slots, so these checks hold only if the incoming files hold exactly the rows read.
Any difference is damaged state (``Corrupt``, DESIGN §12.4), raised before anything is committed.

A plan with consolidations (DESIGN §11.3) first gathers its pools (``repart.state.consolidate``):
the partials of each consolidated key on its sources and its home, and the one row each pool becomes,
merged with ``merge``, before anything is written. The files holding pooled rows are **rewritten**
without them (pooled rows are per key, not per slot, and few), and each result enters its home among
the incoming rows. In the checks the pooled rows leave their channel and the results enter their home
(the totals change by exactly that), and ``verify_pools`` checks every pooled key on its own: one
row left, on its home, the merge of its pool.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.errors import Corrupt
from repart.migration.plan import MigrationPlan
from repart.partitioning.domain import Key
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.checksum import U64, add_checksums, checksum
from repart.state.consolidate import Pools, gather_pools, verify_pools
from repart.state.files import (
    SLOT_COLUMN,
    FileEntry,
    Layout,
    channel_totals,
    link_part,
    make_durable,
    read_parquet,
    read_verified,
    write_part,
)
from repart.state.merge import Merge, MergeColumns
from repart.state.partial import SourceFile, read_wanted
from repart.state.taken import TakenRows

IntArray = npt.NDArray[np.int64]
#: The destination of a pooled row: not a channel, the pool of its key (``repart.state.consolidate``).
POOLED = -1
#: Threads reading the files a plan touches (pyarrow decodes without the GIL).
_READ_THREADS = 4


Incoming = dict[tuple[int, int], list[tuple[pa.Table, U64]]]


@dataclass
class Migration:
    """The next generation's files after a plan, and what moved: rows that changed channel, bytes
    written or linked for them, files dropped and written anew (rewritten), given a filter or a
    wider one (filtered) and hard-linked into another channel (relocated), and the rows read from
    files to split them. ``flows`` holds each channel's change in (rows, checksum)."""

    root: Path
    layout: Layout
    files: list[FileEntry] = field(default_factory=list)
    moved_rows: int = 0
    moved_bytes: int = 0
    rewritten_files: int = 0
    filtered_files: int = 0
    relocated_files: int = 0
    taken_rows: int = 0
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
        self.change(source, -rows, -digest)
        self.change(target, rows, digest)

    def change(self, channel: int, rows: int, digest: int) -> None:
        """``channel`` gains ``rows`` rows with checksum ``digest``; negative values: it loses them (as
        the pooled rows of a consolidation leave their channel, and its results enter their home)."""
        flow = self.flows[channel]
        flow[0] += rows
        flow[1] = (flow[1] + digest) % 2**64


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
        """True at the slots that hold an explicit, a pinned or a split key of the plan."""
        named = hash_keys([*self.plan.pinned_keys, *self.split_keys], self.layout.key_type)
        mask = np.zeros(2**self.layout.slot_bits, dtype=np.bool_)
        mask[slots_of_hashes(named, self.layout.slot_bits)] = True
        mask[self.explicit_sources[0]] = True
        return mask

    @cached_property
    def split_keys(self) -> list[Key]:
        """The plan's split keys, sorted."""
        return list(self.plan.target_candidates)

    @cached_property
    def split_homes(self) -> IntArray:
        """Each split key's home in ``b``, where its partials off its candidates go."""
        return np.array([row[0] for row in self.plan.target_candidates.values()], dtype=np.int64)

    def split_stays(self, channel: int) -> npt.NDArray[np.bool_]:
        """Per split key: whether ``channel`` is among its candidates in ``b`` (its partial there stays)."""
        return np.array([channel in row for row in self.plan.target_candidates.values()], dtype=np.bool_)

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
        if self.split_keys:
            split = pc.index_in(keys, value_set=self._value_set(self.split_keys))
            rows = np.flatnonzero(split.is_valid().to_numpy(zero_copy_only=False))
            index = split.to_numpy(zero_copy_only=False)[rows].astype(np.int64)
            destinations[rows] = np.where(self.split_stays(channel)[index], channel, self.split_homes[index])
        moves = self.plan.explicit_moves
        found = pc.index_in(keys, value_set=self._value_set([move.key for move in moves]))
        rows = np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))
        if rows.size:
            targets = np.array([move.target for move in moves], dtype=np.int64)
            destinations[rows] = targets[found.to_numpy(zero_copy_only=False)[rows].astype(np.int64)]
        return destinations

    def candidates(self, entry: FileEntry) -> npt.NDArray[np.bool_]:
        """Per slot of the entry's slot group, from its first: whether a row of the entry's channel in
        it may leave (the slot moves from that channel, or holds a key the plan names)."""
        first, last = self.layout.slot_range(entry.slot_group)
        sources, _ = self.slot_sources
        wanted: npt.NDArray[np.bool_] = (sources[first : last + 1] == entry.channel) | self.key_slots[
            first : last + 1
        ]
        return wanted

    @cached_property
    def touched(self) -> npt.NDArray[np.bool_]:
        """Per (channel, slot group) of the source function: whether the group holds a slot moved
        from the channel or the slot of a key the plan moves explicitly from it."""
        touched = np.zeros((self.plan.source_n_channels, self.layout.slot_groups), dtype=np.bool_)
        sources, _ = self.slot_sources
        moved = np.flatnonzero(sources >= 0)
        touched[sources[moved], moved >> self.layout.group_shift] = True
        key_slots, key_sources = self.explicit_sources
        touched[key_sources, key_slots >> self.layout.group_shift] = True
        return touched

    def touches(self, entry: FileEntry) -> bool:
        """Whether the file's slot group holds a slot moved from its channel or the slot of a key the
        plan moves explicitly from its channel: else no row of it can move (a key of an explicit move
        sits on the move's source, the channel the source function gave it)."""
        return entry.channel < self.touched.shape[0] and bool(self.touched[entry.channel, entry.slot_group])


def migrate_files(
    root: str | os.PathLike[str],
    files: Sequence[FileEntry],
    plan: MigrationPlan,
    layout: Layout,
    merge: MergeColumns | Merge | None = None,
) -> Migration:
    """The next generation's files after ``plan`` (module docstring); writes only new files.

    ``merge`` merges the partials of a split key that a consolidation brings together; InvalidInput
    ``merge`` (before anything is written) when the plan needs it and it is None or breaks its contract.
    """
    routes = _Routes(plan, layout)
    pools = gather_pools(root, files, plan, layout, merge)
    losing = set(plan.channels_losing_keys)
    migration = Migration(Path(root), layout)
    incoming: Incoming = defaultdict(list)
    taken = TakenRows(Path(root), layout)
    hiding: list[tuple[int, IntArray]] = []
    with ThreadPoolExecutor(_READ_THREADS) as pool:  # reads overlap the routing of the files read
        reads = {
            entry.path: pool.submit(read_wanted, root, entry, layout, routes.candidates(entry))
            for entry in files
            if entry.path not in pools.tables and entry.channel in losing and routes.touches(entry)
        }
        for entry in files:
            pooled = pools.tables.get(entry.path)
            if pooled is not None:
                _rewrite(migration, incoming, entry, *pooled, routes, pools)
            elif entry.path in reads:
                _filter(migration, taken, hiding, *reads[entry.path].result(), routes)
            else:
                migration.add(entry)
    settled = taken.settle()
    filtered: list[FileEntry] = []
    for index, hidden in hiding:
        rows = taken.tables[index].num_rows
        filtered.append(taken.entries[index].without(hidden, rows, settled.checksums[index]))
        migration.add(filtered[-1])
    for flow in settled.flows:
        migration.flow(flow.source, flow.target, flow.rows, flow.digest)
    for target, group, table, hashes in settled.incoming:
        incoming[target, group].append((table, hashes))
    for home, group, result, result_hashes in pools.results():
        migration.change(home, result.num_rows, checksum(result_hashes))
        incoming[home, group].append((result, result_hashes))
    migration.moved_rows += pools.moved_rows
    for (target, group), pieces in sorted(incoming.items()):
        table = pa.concat_tables([piece for piece, _ in pieces])
        hashes = np.concatenate([piece_hashes for _, piece_hashes in pieces])
        order = np.argsort(table.column(SLOT_COLUMN).to_numpy(), kind="stable")
        migration.moved_bytes += migration.write(target, group, table.take(order), hashes[order])
    make_durable(root, migration.written)
    make_durable(root, [link for _, link in migration.links], links=True)
    _verify_filters(root, filtered)
    _verify(root, files, migration, layout, plan.target_n_channels, pools.delta)
    verify_pools(root, migration.files, pools, layout)
    return migration


def _filter(
    migration: Migration,
    taken: TakenRows,
    hiding: list[tuple[int, IntArray]],
    source: SourceFile,
    table: pa.Table | None,
    routes: _Routes,
) -> None:
    """Keep, relocate, filter or drop a file of a losing channel (module docstring), given the rows of
    its row groups that may hold candidate rows (``read_wanted``). The rows it takes go to ``taken``;
    a file to filter is noted in ``hiding`` with its index in ``taken`` and the slots to hide."""
    entry, channel = source.entry, source.entry.channel
    if table is None:
        migration.add(entry)
        return
    slots = table.column(SLOT_COLUMN).to_numpy().astype(np.int64)
    by_slot = routes.by_slot(slots, channel)
    named = routes.key_slots[slots]
    candidates = (by_slot != channel) | named
    if entry.filter is not None:
        candidates &= ~entry.filter.hides(slots)
    rows = np.flatnonzero(candidates)
    if rows.size == entry.rows and not named[rows].any() and np.all(by_slot[rows] == by_slot[rows[0]]):
        migration.keep_or_link(entry, int(by_slot[rows[0]]))  # every seen row goes one way
        return
    slots, destinations, named = slots[rows], by_slot[rows], np.flatnonzero(named[rows])
    if named.size:  # rows of other slots go where their slot goes
        keys = table.column(migration.layout.key_col).take(rows[named])
        destinations[named] = routes.destinations(keys, slots[named], channel)
    hidden = np.unique(slots[destinations != channel])
    chosen = np.isin(slots, hidden)
    count = int(np.count_nonzero(chosen))
    if count == entry.rows and np.all(destinations == destinations[0]):
        migration.keep_or_link(entry, int(destinations[0]))
        return
    if not count:
        migration.add(entry)
        return
    migration.taken_rows += count
    if count == entry.rows:
        migration.rewritten_files += 1
    else:
        migration.filtered_files += 1
        hiding.append((len(taken.entries), hidden))
    taken.add(entry, _rows_at(table, rows[chosen]), destinations[chosen])


def _rows_at(table: pa.Table, rows: IntArray) -> pa.Table:
    """``table.take(rows)`` for ascending ``rows``, as zero-copy slices of their runs: the rows of a
    file's hidden slots are contiguous (files are sorted by slot), so there are few runs."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([rows[:1], rows[breaks]]).tolist()
    ends = np.concatenate([rows[breaks - 1], rows[-1:]]).tolist()
    return pa.concat_tables(
        [table.slice(start, end - start + 1) for start, end in zip(starts, ends, strict=True)]
    )


def _rewrite(
    migration: Migration,
    incoming: Incoming,
    entry: FileEntry,
    table: pa.Table,
    hashes: U64,
    routes: _Routes,
    pools: Pools,
) -> None:
    """Rewrite a file holding pooled rows (the rows it lets through, ``table``): the pooled rows leave
    for their pool, the others stay (written as a new file of its channel) or go to their target."""
    slots = table.column(SLOT_COLUMN).to_numpy().astype(np.int64)
    keys = table.column(migration.layout.key_col)
    destinations = routes.destinations(keys, slots, entry.channel)
    destinations[pools.scope.pooled(keys, entry.channel)] = POOLED
    targets = np.unique(destinations)
    if targets.size == 1 and targets[0] != POOLED:
        migration.keep_or_link(entry, int(targets[0]))
        return
    migration.rewritten_files += 1
    migration.taken_rows += table.num_rows
    for target in targets.tolist():
        rows = np.flatnonzero(destinations == target)
        if target == POOLED:
            migration.change(entry.channel, -rows.size, -checksum(hashes[rows]))
        elif target == entry.channel:
            migration.write(target, entry.slot_group, table.take(rows), hashes[rows])
        else:
            migration.flow(entry.channel, target, rows.size, checksum(hashes[rows]))
            incoming[target, entry.slot_group].append((table.take(rows), hashes[rows]))


def _verify_filters(root: str | os.PathLike[str], filtered: Sequence[FileEntry]) -> None:
    """Check every entry the plan gave a wider filter against its file's ``_slot`` column, independently
    of the row groups the migration chose to read: the filter hides exactly ``filter.rows`` of the
    file's rows, and the file holds ``rows + filter.rows`` rows. A row group the migration missed
    would leave rows hidden that never moved; Corrupt, naming the file, before anything is committed."""

    def slot_column(entry: FileEntry) -> npt.NDArray[np.int64]:
        table = read_parquet(Path(root) / entry.path, [SLOT_COLUMN])
        return np.asarray(table.column(SLOT_COLUMN).to_numpy(), dtype=np.int64)

    with ThreadPoolExecutor(_READ_THREADS) as pool:  # pyarrow decodes without the GIL
        for entry, slots in zip(filtered, pool.map(slot_column, filtered), strict=True):
            assert entry.filter is not None  # ``FileEntry.without`` always sets one
            hidden = int(np.count_nonzero(entry.filter.hides(slots)))
            if hidden != entry.filter.rows or slots.size != entry.file_rows:
                raise Corrupt(
                    f"verification failed: the file's filter hides {hidden} of its {slots.size} rows, but "
                    f"its entry says {entry.filter.rows} of {entry.file_rows}; nothing was committed",
                    path=entry.path,
                )


def _verify(
    root: str | os.PathLike[str],
    before: Sequence[FileEntry],
    migration: Migration,
    layout: Layout,
    n_channels: int,
    delta: tuple[int, int],
) -> None:
    """Read back every rewritten file, check that every link is its source's inode, then check rows
    and checksums per channel and in total, which changes by ``delta`` alone: the consolidations'
    results less the rows they pool, as ``gather_pools`` found them."""
    for entry in migration.written:
        read_verified(root, entry, layout)
    for source, link in migration.links:
        if not os.path.samefile(Path(root) / source.path, Path(root) / link.path):
            raise Corrupt(f"relocated file is not a link to {source.path!r}", path=link.path)
    old, new = channel_totals(before), channel_totals(migration.files)
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
    rows, digest = _total(old.values())
    if _total(new.values()) != (rows + delta[0], add_checksums(digest, delta[1])):
        raise Corrupt(
            "verification failed: the plan changed the total (rows, checksum) by more than its "
            "consolidations merged; nothing was committed"
        )


def _total(per_channel: Iterable[tuple[int, int]]) -> tuple[int, int]:
    rows, digest = 0, 0
    for channel_rows, channel_digest in per_channel:
        rows, digest = rows + channel_rows, add_checksums(digest, channel_digest)
    return rows, digest
