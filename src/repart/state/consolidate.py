"""Consolidating split keys' partial state while a plan is applied.

A plan's consolidation ``(key, source, target)`` says that the key's partial row on ``source`` (a
channel outside its candidates in ``b``) must be merged into its home in ``b``, ``target``. For every
such key the **pool** is its partial rows on its consolidation sources and on its home; a key without a
row on any of its sources moves nothing and has no pool. A pool becomes one row on the key's home: the
row itself when the pool holds one (a partial that only moves), else the merge (``repart.state.merge``)
of the pool's rows, taken in a fixed order (by channel, then row hash) so that the result does not
depend on the order the files are read in. In a general store a channel's partial is the key's newest
row there, none when that row is a tombstone; a pool whose every partial is deleted becomes no row at
all: its rows (tombstones and the rows they delete) are dropped too, so that no row of the key is left
on a channel outside its candidates, where a later plan could move a tombstone apart from the row it
deletes. A pool of several rows needs the region's merge: without one the plan is refused (InvalidInput
``merge``), as it is when the merge breaks its contract (another schema, several rows for a key).

``gather_pools`` reads the files of the pools' (channel, slot group) pairs and computes the results
before ``repart.state.migrate`` writes anything, so a refused plan leaves nothing behind; the migration
then drops the pooled rows from their files and writes each result among the rows that enter its home.
``verify_pools`` checks the next generation by key and channel, independently of that routing: it reads
every file of those pairs and requires, for each pooled key, exactly one row on its pooled channels, on
its home, with the row hash of its result (none for a pool whose every partial is deleted). The key's
partials on its other candidates are untouched (the per-channel checksums cover their files), so its
merged state, over all its partials, is the same before and after.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.errors import Corrupt, InvalidInput
from repart.migration.plan import MigrationPlan
from repart.partitioning.domain import Key
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.checksum import U64, checksum, key_hashes
from repart.state.files import DELETED_COLUMN, SLOT_COLUMN, FileEntry, Layout, read_verified
from repart.state.merge import Merge, MergeColumns, merged
from repart.state.objects import Objects

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PoolScope:
    """Consolidated keys (sorted), their homes in ``b`` and slot groups, and per channel which of the
    keys have their partial on that channel pooled (the channel is a consolidation source of the key or
    its home)."""

    layout: Layout
    keys: list[Key]
    homes: IntArray
    groups: IntArray
    scope: Mapping[int, BoolArray]

    @classmethod
    def of(cls, plan: MigrationPlan, layout: Layout) -> PoolScope:
        """The scope of every key ``plan`` consolidates."""
        channels: dict[Key, set[int]] = {}
        homes: dict[Key, int] = {}
        for row in plan.consolidations:
            homes[row.key] = row.target
            channels.setdefault(row.key, {row.target}).add(row.source)
        keys = sorted(homes)
        return cls(
            layout,
            keys,
            np.array([homes[key] for key in keys], dtype=np.int64),
            _slot_groups(keys, layout),
            {
                channel: np.array([channel in channels[key] for key in keys], dtype=np.bool_)
                for channel in sorted(set[int]().union(*channels.values()))
            },
        )

    @property
    def pairs(self) -> frozenset[tuple[int, int]]:
        """The (channel, slot group) pairs whose files may hold a pooled row."""
        return frozenset(
            (channel, int(group))
            for channel, in_scope in self.scope.items()
            for group in np.unique(self.groups[in_scope]).tolist()
        )

    def may_hold(self, entry: FileEntry) -> bool:
        """Whether ``entry`` may hold a pooled row: its (channel, slot group) is a pair, or it is a
        delta (every slot group) of a channel in scope."""
        if entry.slot_group is None:
            return entry.channel in self.scope
        return (entry.channel, entry.slot_group) in self.pairs

    def narrowed(self, kept: BoolArray) -> PoolScope:
        """The scope of the keys where ``kept`` is True."""
        return PoolScope(
            self.layout,
            [key for key, keep in zip(self.keys, kept.tolist(), strict=True) if keep],
            self.homes[kept],
            self.groups[kept],
            {channel: in_scope[kept] for channel, in_scope in self.scope.items() if in_scope[kept].any()},
        )

    def index(self, keys: pa.ChunkedArray | pa.Array) -> IntArray:
        """The index of each key among the scope's keys, -1 where it is not one."""
        if not self.keys or len(keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        int_keys = self.layout.key_type == "int"
        value_set = pa.array(self.keys, type=pa.int64() if int_keys else pa.string())
        found = pc.index_in(keys.cast(pa.int64()) if int_keys else keys, value_set=value_set)
        return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def pooled(self, keys: pa.ChunkedArray | pa.Array, channel: int) -> BoolArray:
        """Which rows of ``channel`` (given by their keys) are pooled."""
        index = self.index(keys)
        in_scope = self.scope.get(channel)
        mask = np.zeros(len(keys), dtype=np.bool_)
        if in_scope is not None:
            rows = np.flatnonzero(index >= 0)
            mask[rows] = in_scope[index[rows]]
        return mask


@dataclass(frozen=True)
class Pools:
    """What a plan consolidates: the pooled keys' scope, the files holding pooled rows (as read and
    verified, so that the migration does not read them again), one result row per key that has a live
    partial (in the scope's key order, the file schema) with its row hash, how many pooled rows change
    channel, and the change of the store's (rows, checksum): the results in, the pooled rows out."""

    scope: PoolScope
    tables: Mapping[tuple[str, int], tuple[pa.Table, U64]]
    result: pa.Table
    hashes: U64
    moved_rows: int
    delta: tuple[int, int]
    #: The ``seq`` the results are written with: the newest of the rows they merge.
    seq: int = 0

    def results(self) -> Iterator[tuple[int, int, pa.Table, U64]]:
        """The result rows by (home, slot group): where they enter the next generation."""
        index = self.scope.index(self.result.column(self.scope.layout.key_col))
        homes, groups = self.scope.homes[index], self.scope.groups[index]
        for home, group in sorted(set(zip(homes.tolist(), groups.tolist(), strict=True))):
            rows = np.flatnonzero((homes == home) & (groups == group))
            yield home, group, self.result.take(rows), self.hashes[rows]


def gather_pools(
    objects: Objects,
    files: Sequence[FileEntry],
    plan: MigrationPlan,
    layout: Layout,
    merge: MergeColumns | Merge | None,
) -> Pools:
    """The pools of ``plan`` in the current generation's ``files`` and their results (module
    docstring). Only reads: InvalidInput ``merge`` when a pool of several rows has no merge or the
    merge breaks its contract; Corrupt naming a damaged file."""
    scope = PoolScope.of(plan, layout)
    read: dict[tuple[str, int], tuple[pa.Table, U64]] = {}
    pieces: list[tuple[pa.Table, U64, IntArray, IntArray]] = []
    for entry in files:
        if not scope.may_hold(entry):
            continue
        table, hashes = read_verified(objects, entry, layout)
        taken = np.flatnonzero(scope.pooled(table.column(layout.key_col), entry.channel))
        if taken.size:
            read[entry.identity] = table, hashes
            pieces.append(
                (
                    table.take(taken),
                    hashes[taken],
                    np.full(taken.size, entry.channel),
                    np.full(taken.size, entry.seq),
                )
            )
    if not pieces:
        return _nothing_pooled(scope)
    rows = pa.concat_tables([piece[0] for piece in pieces])
    hashes = np.concatenate([piece[1] for piece in pieces])
    channels = np.concatenate([piece[2] for piece in pieces])
    seqs = np.concatenate([piece[3] for piece in pieces])
    index = scope.index(rows.column(layout.key_col))
    order = np.lexsort((hashes, seqs, channels, index))
    rows, hashes, channels, seqs, index = (
        rows.take(order),
        hashes[order],
        channels[order],
        seqs[order],
        index[order],
    )
    live = np.ones(rows.num_rows, dtype=np.bool_) if layout.mergeable else _newest_live(rows, index, channels)
    off_home = channels != scope.homes[index]
    moving = np.zeros(len(scope.keys), dtype=np.bool_)
    moving[index[off_home]] = True  # a key with no row off its home has no pool
    if not moving.any():
        return _nothing_pooled(scope)
    scope = scope.narrowed(moving)
    kept = moving[index]
    rows, hashes, live, seqs = rows.filter(pa.array(kept)), hashes[kept], live[kept], seqs[kept]
    result = _results(rows.filter(pa.array(live)), scope, merge)
    _, result_hashes = layout.hashes(result)
    delta = (result.num_rows - rows.num_rows, (checksum(result_hashes) - checksum(hashes)) % 2**64)
    tables = {
        identity: (table, table_hashes)
        for identity, (table, table_hashes) in read.items()
        if (scope.index(table.column(layout.key_col)) >= 0).any()
    }
    moved = int(np.count_nonzero(off_home[kept]))
    return Pools(scope, tables, result, result_hashes, moved, delta, int(seqs.max()))


def _newest_live(rows: pa.Table, index: IntArray, channels: IntArray) -> npt.NDArray[np.bool_]:
    """In a general store, which pooled rows are a key's partial on a channel: its newest row there
    (``rows`` are ordered by key, channel and seq), unless that row is a tombstone."""
    last = np.ones(rows.num_rows, dtype=np.bool_)
    last[:-1] = (np.diff(index) != 0) | (np.diff(channels) != 0)
    deleted = rows.column(DELETED_COLUMN).to_numpy(zero_copy_only=False).astype(np.bool_)
    result: npt.NDArray[np.bool_] = last & ~deleted
    return result


def verify_pools(objects: Objects, files: Sequence[FileEntry], pools: Pools, layout: Layout) -> None:
    """Corrupt unless the next generation's ``files`` hold, for each pooled key, exactly one row on its
    pooled channels: on its home, with the row hash of its result (module docstring)."""
    scope = pools.scope
    if not scope.keys:
        return
    found: list[list[tuple[int, int]]] = [[] for _ in scope.keys]
    for entry in files:
        if not scope.may_hold(entry):
            continue
        table, hashes = read_verified(objects, entry, layout)
        keys = table.column(layout.key_col)
        rows = np.flatnonzero(scope.pooled(keys, entry.channel))
        for key_index, row_hash in zip(scope.index(keys)[rows].tolist(), hashes[rows].tolist(), strict=True):
            found[key_index].append((entry.channel, row_hash))
    expected: list[list[tuple[int, int]]] = [[] for _ in scope.keys]  # none where every partial is deleted
    result_index = scope.index(pools.result.column(layout.key_col)).tolist()
    for key_index, row_hash in zip(result_index, pools.hashes.tolist(), strict=True):
        expected[key_index].append((int(scope.homes[key_index]), int(row_hash)))
    for key_index, key in enumerate(scope.keys):
        if found[key_index] != expected[key_index]:
            held = sorted(channel for channel, _ in found[key_index])
            wanted = (
                f"one row on its home channel {expected[key_index][0][0]} equal to the merge of its partials"
                if expected[key_index]
                else "none: every partial of it is deleted"
            )
            raise Corrupt(
                f"verification failed for the consolidation of split key {key!r}: after the plan its "
                f"pooled channels hold {len(held)} rows of it (on channels {held}), expected {wanted}; "
                "nothing was committed"
            )


def _results(rows: pa.Table, scope: PoolScope, merge: MergeColumns | Merge | None) -> pa.Table:
    """One row per key of ``scope`` that has rows in ``rows`` (its live partials), in the scope's key
    order (the file schema): a pool's one row as it is, else the merge of its rows."""
    layout = scope.layout
    index = scope.index(rows.column(layout.key_col))
    counts = np.bincount(index, minlength=len(scope.keys))
    several = counts[index] > 1
    user = rows.select(layout.schema.names)
    parts = [user.filter(pa.array(~several))]
    if several.any():
        if merge is None:
            first = int(index[np.argmax(several)])
            raise InvalidInput(
                "merge",
                f"must be given (the region's MergeSpec or merge function): the plan consolidates the "
                f"partials of {int(np.count_nonzero(counts > 1))} split keys into a home that receives "
                f"several of them, such as key {scope.keys[first]!r} ({counts[first]} partials into "
                f"channel {int(scope.homes[first])})",
            )
        together = merged(user.filter(pa.array(several)), merge, layout.key_col)
        parts.append(pa.Table.from_arrays(together.columns, schema=user.schema))
    result = pa.concat_tables(parts)
    result = result.take(np.argsort(scope.index(result.column(layout.key_col)), kind="stable"))
    slots = _slots(result.column(layout.key_col), layout)
    result = result.append_column(rows.schema.field(SLOT_COLUMN), pa.array(slots.astype(np.int32)))
    return layout.normalized(result)


def _nothing_pooled(scope: PoolScope) -> Pools:
    empty = scope.narrowed(np.zeros(len(scope.keys), dtype=np.bool_))
    nothing = pa.Table.from_batches([], schema=scope.layout.file_schema)  # empty_table() imports pandas
    return Pools(empty, {}, nothing, np.empty(0, dtype=np.uint64), 0, (0, 0))


def _slot_groups(keys: Sequence[Key], layout: Layout) -> IntArray:
    if not keys:
        return np.empty(0, dtype=np.int64)
    slots = slots_of_hashes(hash_keys(list(keys), layout.key_type), layout.slot_bits).astype(np.int64)
    return slots >> layout.group_shift


def _slots(keys: pa.ChunkedArray, layout: Layout) -> IntArray:
    return slots_of_hashes(key_hashes(keys, layout.key_type), layout.slot_bits).astype(np.int64)
