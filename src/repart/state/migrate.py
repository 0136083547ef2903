"""Applying a migration plan to the files of a state store (Gedik's migration, as a listing change).

``migrate_files`` takes the current generation's entries and a plan and returns the next generation's
entries; it never modifies a file, and copies a row only where it must. It looks only at the entries of
the channels that lose keys (``plan.channels_losing_keys``) whose slot range holds a moved slot or the
slot of an explicit or pinned key, and at the files holding partials that a consolidation merges; of
those:

- an entry whose rows all keep their channel is kept;
- an entry whose seen rows all go to one other channel is **relocated**: the same file listed under
  that channel (with the same filter), nothing read but its footer and nothing written;
- any other entry is **filtered**: only its footer and the row groups that may hold candidate rows
  (those of slots moved from its channel and of the plan's named keys) are read
  (``repart.state.partial``). Every slot that holds a row that leaves is hidden from the entry by its
  slot filter (``repart.state.filters``). The rows of a hidden slot whose rows all go one way (the
  slot moves, and holds no key the plan names) are not copied: the file is **listed** under their new
  channel too, with a filter that hides every slot but those (a filter complementing the source's,
  within the entry's slots). Only the rows of slots that hold a named key (an explicitly moved or a
  pinned key and its neighbours) are written again, each in its own channel (**restaged**), keeping
  the ``seq`` and kind of the file they come from, so that newest-wins resolution is unchanged. An entry
  whose every seen row is restaged is dropped instead.

A scale-out 32 → 33 therefore writes no data file at all: each of the 32 channels' files is listed
under channel 32 too, each entry hiding the other's slots, and the reads of a channel pay for the
hidden rows until compaction (``repart.state.compact``) rewrites it.

Each row's destination is ``MigrationPlan.destination`` vectorized: explicit target, else a split
key's rule (stay on its candidates in ``b``, else its home in ``b``), else pinned (stay), else the slot
move of its slot from this channel, else stay. The rows taken from all files are verified and hashed
together (``repart.state.taken``). Then per channel ``checksum_after = checksum_before − out + in`` and
``rows_after = rows_before − out + in`` over the entries, and the totals unchanged; every written file
is read back, and every file given a filter has its ``_slot`` column read to check that each of its
entries' filters hides exactly the rows the entry says. Any difference is damaged state (``Corrupt``),
raised before anything is committed.

A plan with consolidations (split mode) first gathers its pools (``repart.state.consolidate``): the
partials of each consolidated key on its sources and its home, and the one row each pool becomes,
merged with ``merge``, before anything is written. The files holding pooled rows are **rewritten**
without them (pooled rows are per key, not per slot, and few), and each result enters its home among
the incoming rows. In the checks the pooled rows leave their channel and the results enter their home
(the totals change by exactly that), and ``verify_pools`` checks every pooled key on its own: one
row left, on its home, the merge of its pool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

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
    FileKindName,
    Layout,
    channel_totals,
    read_parquet,
    read_verified,
    relisted,
    write_part,
)
from repart.state.filters import SlotFilter
from repart.state.merge import Merge, MergeColumns
from repart.state.objects import Objects
from repart.state.partial import SourceFile, read_wanted
from repart.state.taken import Relisting, TakenRows

IntArray = npt.NDArray[np.int64]
#: The destination of a pooled row: not a channel, the pool of its key (``repart.state.consolidate``).
POOLED = -1
#: Threads reading the files a plan touches (pyarrow decodes without the GIL).
_READ_THREADS = 4

#: Rows entering a (channel, slot group), by the seq and kind of the files they come from.
Incoming = dict[tuple[int, int, int, FileKindName], list[tuple[pa.Table, U64]]]


@dataclass
class Migration:
    """The next generation's entries after a plan, and what moved: rows that changed channel, the bytes
    of their files' share, entries dropped and written anew (rewritten), given a filter or a wider one
    (filtered) and listed under another channel (relocated), and the rows read from files to split
    them. ``flows`` holds each channel's change in (rows, checksum)."""

    objects: Objects
    layout: Layout
    files: list[FileEntry] = field(default_factory=list)
    moved_rows: int = 0
    moved_bytes: int = 0
    rewritten_files: int = 0
    filtered_files: int = 0
    relocated_files: int = 0
    taken_rows: int = 0
    written: list[FileEntry] = field(default_factory=list)  # the files written
    flows: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, entry: FileEntry) -> None:
        """An entry of the next generation (kept, relisted or written by this migration)."""
        self.files.append(entry)

    def write(
        self, channel: int, group: int | None, rows: pa.Table, hashes: U64, seq: int, kind: FileKindName
    ) -> int:
        """Write a new file of the next generation; returns its size."""
        part = write_part(self.objects, channel, group, rows, hashes, self.layout, kind, seq)
        self.written.append(part)
        self.add(part)
        return part.bytes

    def keep_or_relist(self, entry: FileEntry, target: int) -> None:
        """Keep ``entry`` (all its rows stay) or list its file under ``target`` instead."""
        if target == entry.channel:
            self.add(entry)
            return
        self.relocated_files += 1
        self.add(relisted(entry, target))
        self.flow(entry.channel, target, entry.rows, entry.checksum)
        self.moved_bytes += entry.seen_bytes

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

    def listing(self) -> list[FileEntry]:
        """The next generation's entries, one per (file, channel): a file listed under a channel that
        already lists it (a row moved back where other slots of the file stayed) is one entry that
        lets through what both did."""
        by_identity: dict[tuple[str, int], FileEntry] = {}
        for entry in self.files:
            found = by_identity.get(entry.identity)
            by_identity[entry.identity] = entry if found is None else _united(found, entry, self.layout)
        return list(by_identity.values())


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
        """Whether the file's slot group (every group, for a delta) holds a slot moved from its channel
        or the slot of a key the plan moves explicitly from its channel: else no row of it can move (a
        key of an explicit move sits on the move's source, the channel the source function gave it)."""
        if entry.channel >= self.touched.shape[0]:
            return False
        groups = self.touched[entry.channel]
        return bool(groups.any() if entry.slot_group is None else groups[entry.slot_group])


def migrate_files(
    objects: Objects,
    files: Sequence[FileEntry],
    plan: MigrationPlan,
    layout: Layout,
    merge: MergeColumns | Merge | None = None,
) -> Migration:
    """The next generation's entries after ``plan`` (module docstring); writes only new files.

    ``merge`` merges the partials of a split key that a consolidation brings together; InvalidInput
    ``merge`` (before anything is written) when the plan needs it and it is None or breaks its contract.
    """
    routes = _Routes(plan, layout)
    pools = gather_pools(objects, files, plan, layout, merge)
    losing = set(plan.channels_losing_keys)
    migration = Migration(objects, layout)
    incoming: Incoming = defaultdict(list)
    taken = TakenRows(objects, layout)
    hiding: list[tuple[int, IntArray]] = []
    with ThreadPoolExecutor(_READ_THREADS) as pool:  # reads overlap the routing of the files read
        reads = {
            entry.identity: pool.submit(read_wanted, objects, entry, layout, routes.candidates(entry))
            for entry in files
            if entry.identity not in pools.tables and entry.channel in losing and routes.touches(entry)
        }
        for entry in files:
            pooled = pools.tables.get(entry.identity)
            if pooled is not None:
                _rewrite(migration, incoming, entry, *pooled, routes, pools)
            elif entry.identity in reads:
                _filter(migration, taken, hiding, *reads[entry.identity].result(), routes)
            else:
                migration.add(entry)
    settled = taken.settle()
    for index, hidden in hiding:
        rows = taken.tables[index].num_rows
        migration.add(taken.entries[index].without(hidden, rows, settled.checksums[index]))
        migration.filtered_files += 1
    for listing in settled.relistings:
        migration.add(_relisting_entry(taken.entries[listing.index], listing, layout))
        migration.moved_bytes += (
            taken.entries[listing.index].bytes
            * listing.rows
            // max(taken.entries[listing.index].file_rows, 1)
        )
    for flow in settled.flows:
        migration.flow(flow.source, flow.target, flow.rows, flow.digest)
    for target, group, seq, kind, table, hashes in settled.incoming:
        incoming[target, group, seq, kind].append((table, hashes))
    for home, group, result, result_hashes in pools.results():
        migration.change(home, result.num_rows, checksum(result_hashes))
        incoming[home, group, pools.seq, "base"].append((result, result_hashes))
    migration.moved_rows += pools.moved_rows
    for (target, group, seq, kind), pieces in sorted(incoming.items()):
        table = pa.concat_tables([piece for piece, _ in pieces])
        hashes = np.concatenate([piece_hashes for _, piece_hashes in pieces])
        order = np.argsort(table.column(SLOT_COLUMN).to_numpy(), kind="stable")
        migration.moved_bytes += migration.write(target, group, table.take(order), hashes[order], seq, kind)
    objects.sync([entry.path for entry in migration.written])
    migration.files = migration.listing()
    _verify_filters(objects, migration.files, layout)
    _verify(objects, files, migration, layout, plan.target_n_channels, pools.delta)
    verify_pools(objects, migration.files, pools, layout)
    return migration


def _filter(
    migration: Migration,
    taken: TakenRows,
    hiding: list[tuple[int, IntArray]],
    source: SourceFile,
    table: pa.Table | None,
    routes: _Routes,
) -> None:
    """Keep, relocate, filter or drop an entry of a losing channel (module docstring), given the rows of
    its row groups that may hold candidate rows (``read_wanted``). The rows it takes go to ``taken``
    (with whether their slot is listed under their target or restaged); an entry to filter is noted in
    ``hiding`` with its index in ``taken`` and the slots to hide."""
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
        migration.keep_or_relist(entry, int(by_slot[rows[0]]))  # every seen row goes one way
        return
    slots, destinations, named_rows = slots[rows], by_slot[rows], named[rows]
    named_index = np.flatnonzero(named_rows)
    if named_index.size:  # rows of other slots go where their slot goes
        keys = table.column(migration.layout.key_col).take(rows[named_index])
        destinations[named_index] = routes.destinations(keys, slots[named_index], channel)
    hidden = np.unique(slots[destinations != channel])
    chosen = np.isin(slots, hidden)
    count = int(np.count_nonzero(chosen))
    if count == entry.rows and not named_rows.any() and np.all(destinations == destinations[0]):
        migration.keep_or_relist(entry, int(destinations[0]))
        return
    if not count:
        migration.add(entry)
        return
    migration.taken_rows += count
    relist = ~named_rows[chosen]  # a slot without a named key moves whole: listed, not copied
    if count < entry.rows:
        hiding.append((len(taken.entries), hidden))
    elif not relist.any():
        migration.rewritten_files += 1  # every seen row is restaged: the entry goes
    taken.add(entry, _rows_at(table, rows[chosen]), destinations[chosen], relist)


def _relisting_entry(source: FileEntry, listing: Relisting, layout: Layout) -> FileEntry:
    """``source``'s file listed under ``listing.target`` for the slots ``listing.slots`` alone."""
    first, last = layout.slot_range(source.slot_group)
    hidden_rows = source.file_rows - listing.rows
    filter_ = SlotFilter.complement(listing.slots, first, last, hidden_rows)
    return FileEntry(
        source.path, listing.target, source.slot_group, listing.rows, source.bytes, listing.digest,
        filter_, source.seq, source.kind,
    )  # fmt: skip


def _united(a: FileEntry, b: FileEntry, layout: Layout) -> FileEntry:
    """One entry of a file under one channel that lets through the rows ``a`` and ``b`` do (their seen
    slots are disjoint: each was owned by one channel)."""
    rows = a.rows + b.rows
    digest = add_checksums(a.checksum, b.checksum)
    if a.filter is None or b.filter is None:
        raise Corrupt(f"the plan lists file {a.path} twice under channel {a.channel}, once without a filter")
    hidden = np.intersect1d(a.filter.slots, b.filter.slots)
    hidden_rows = a.file_rows - rows
    filter_ = SlotFilter.of(hidden, hidden_rows) if hidden.size and hidden_rows else None
    return FileEntry(
        a.path, a.channel, a.slot_group, rows, a.bytes, digest, filter_, max(a.seq, b.seq), a.kind
    )


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
    """Rewrite an entry holding pooled rows (the rows it lets through, ``table``): the pooled rows leave
    for their pool, the others stay (written as a new file of its channel) or go to their target."""
    slots = table.column(SLOT_COLUMN).to_numpy().astype(np.int64)
    keys = table.column(migration.layout.key_col)
    destinations = routes.destinations(keys, slots, entry.channel)
    destinations[pools.scope.pooled(keys, entry.channel)] = POOLED
    targets = np.unique(destinations)
    if targets.size == 1 and targets[0] != POOLED:
        migration.keep_or_relist(entry, int(targets[0]))
        return
    migration.rewritten_files += 1
    migration.taken_rows += table.num_rows
    for target in targets.tolist():
        rows = np.flatnonzero(destinations == target)
        if target == POOLED:
            migration.change(entry.channel, -rows.size, -checksum(hashes[rows]))
        elif target == entry.channel:
            migration.write(target, entry.slot_group, table.take(rows), hashes[rows], entry.seq, entry.kind)
        else:
            migration.flow(entry.channel, target, rows.size, checksum(hashes[rows]))
            groups = slots[rows] >> migration.layout.group_shift
            for group in np.unique(groups).tolist():
                part = rows[groups == group]
                incoming[target, group, entry.seq, entry.kind].append((table.take(part), hashes[part]))


def _verify_filters(objects: Objects, entries: Sequence[FileEntry], layout: Layout) -> None:
    """Check every filtered entry of a file the plan filtered or listed again against the file's
    ``_slot`` column, independently of the row groups the migration chose to read: each filter hides
    exactly ``filter.rows`` of the file's rows, and the file holds ``rows + filter.rows`` rows. A row
    group the migration missed would leave rows hidden that never moved; Corrupt, naming the file,
    before anything is committed."""
    by_path: dict[str, list[FileEntry]] = defaultdict(list)
    for entry in entries:
        if entry.filter is not None:
            by_path[entry.path].append(entry)

    def slot_column(path: str) -> npt.NDArray[np.int64]:
        table = read_parquet(objects, path, layout, [SLOT_COLUMN])
        return np.asarray(table.column(SLOT_COLUMN).to_numpy(), dtype=np.int64)

    paths = sorted(by_path)
    with ThreadPoolExecutor(_READ_THREADS) as pool:  # pyarrow decodes without the GIL
        for path, slots in zip(paths, pool.map(slot_column, paths), strict=True):
            for entry in by_path[path]:
                assert entry.filter is not None
                hidden = int(np.count_nonzero(entry.filter.hides(slots)))
                if hidden != entry.filter.rows or slots.size != entry.file_rows:
                    raise Corrupt(
                        f"verification failed: the filter of the file's entry under channel {entry.channel} "
                        f"hides {hidden} of its {slots.size} rows, but the entry says {entry.filter.rows} of "
                        f"{entry.file_rows}; nothing was committed",
                        path=path,
                    )


def _verify(
    objects: Objects,
    before: Sequence[FileEntry],
    migration: Migration,
    layout: Layout,
    n_channels: int,
    delta: tuple[int, int],
) -> None:
    """Read back every written file, then check rows and checksums per channel and in total, which
    changes by ``delta`` alone: the consolidations' results less the rows they pool, as
    ``gather_pools`` found them."""
    for entry in migration.written:
        read_verified(objects, entry, layout)
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
