"""Folding a batch into the keyed state store, each channel on the executor that holds it.

A general update is given ``partition(df, key, version)``'s rows (Spark partition i holds exactly
channel i); a mergeable one ``route(df, key, version)``'s, which it reduces and places itself
(``_partials``). ``update_state`` then writes, per channel, one **delta** of what the batch
changes, and the driver commits every channel's delta as one new generation of the store (a
conditional put of its commit document), so a batch's update is all or nothing. No task reads or
writes a channel's whole state, so a batch costs what the batch touches, not what the store holds:

- a **mergeable** store (created with a merge: every state column a ``sum``, ``count``, ``min`` or
  ``max``) needs no state at all: Spark's own aggregate reduces the batch to one partial row per
  (channel, key) in the JVM, and a task only writes its channel's partials. Readers merge them with the
  base (``repart.state.resolve``).
- a **general** store takes ``combine(old, batch) -> new``: a task reads only the rows of the keys its
  batch touches (``StateStore.read_keys``: the key column of each file first, then the row groups
  holding matches), calls ``combine`` with them and the channel's batch rows (without ``channel_col``),
  and writes what it returns as upserts: the newest row of a key wins, and a key of ``old`` that
  ``combine`` leaves out is deleted by a tombstone.

Split mode: with a ``SplitFunction`` a split key's rows arrive on several channels, and each channel
keeps its own *partial* row for the key; ``StateStore.read_merged`` merges the partials.

Exactly once: given the job's ``batch_id``, the generation records the batch
(``repart.state.batches``), and a batch the store has absorbed already is not folded in again: a job
killed after the commit and run again on the same batch gets the recorded channel updates back,
without running a task.

A task that meets damaged state (a missing or truncated file: ``Corrupt``) or rows that break the
contract (``InvalidInput``) reports the error in its result row instead of failing the Spark job, and
the driver raises it with its class, field and path: the caller sees ``Corrupt`` naming the file, not
a Python traceback wrapped in a Spark exception.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from repart.errors import Corrupt, InvalidInput
from repart.partitioning.domain import Key
from repart.partitioning.routing import RoutingFunction
from repart.spark.batch_counts import (
    REGISTER_COLUMN,
    SLOT_COLUMN,
    ChannelCounts,
    KeyCounts,
    SlotCounts,
    channel_counts,
    counted_columns,
    merged_counts,
)
from repart.spark.keys import key_column
from repart.spark.route import route
from repart.spark.task_memory import TaskMemory
from repart.state.batches import ChannelUpdate, QueryBatch, absorbed_batch
from repart.state.files import DELETED_COLUMN
from repart.state.store import FileEntry, StateStore

__all__ = ["ChannelUpdate", "Combine", "Counting", "update_state"]

Combine = Callable[[pa.Table, pa.Table], pa.Table]
#: Each merge operation as the Spark aggregate that merges its partial values (a count's partials add
#: up); for a batch's rows the same, but that a count counts them.
PARTIALS_MERGED = {"sum": F.sum, "count": F.sum, "min": F.min, "max": F.max}
#: The batch rows a partial stands for (mergeable stores: the channel's input rows).
ROWS_COLUMN = "_rows"
#: Spark's setting under which a partitioning by channel does not cluster rows by (channel, key).
_ALL_CLUSTER_KEYS = "spark.sql.requireAllClusterKeysForDistribution"
_REPORT_FIELDS = [
    ("channel", pa.int32()),
    ("input_rows", pa.int64()),
    ("busy_seconds", pa.float64()),
    ("peak_bytes", pa.int64()),
    ("entries", pa.string()),
    ("error", pa.string()),
    ("counts", pa.binary()),
]
_REPORT_SCHEMA = pa.schema(_REPORT_FIELDS)
_REPORT_DDL = (
    "channel int, input_rows long, busy_seconds double, peak_bytes long, entries string, error string, "
    "counts binary"
)


@dataclass(frozen=True)
class Counting:
    """What the update's tasks count for the batch's snapshot: ε, the slot bits, and the keys every
    channel reports whatever their count (a split function's split keys)."""

    epsilon: float
    slot_bits: int
    always: frozenset[Key] = frozenset()

    @classmethod
    def of(cls, function: RoutingFunction, epsilon: float) -> Counting:
        """The counting of a batch routed by ``function``."""
        always = frozenset(function.split)
        return cls(epsilon, function.slot_bits, always)


def update_state(
    store: StateStore,
    partitioned: DataFrame,
    combine: Combine | None = None,
    *,
    version: int,
    function: RoutingFunction,
    batch_id: int | None = None,
    query: QueryBatch | None = None,
    sources: Mapping[str, str | None] | None = None,
    channel_col: str = "channel",
    counting: Counting | None = None,
) -> tuple[StateStore, list[ChannelUpdate], tuple[SlotCounts, KeyCounts] | None]:
    """Fold a batch into the store (module docstring), commit it as one generation, and count it.

    ``partitioned`` must come from ``repart.spark.partition(df, key, function)`` (partition i holds
    channel i; a row found on another partition is InvalidInput); for a mergeable store, whose update
    reduces the rows itself, ``repart.spark.route`` suffices (under a key-preserving ``function`` its
    ``channel_col`` is not read: the key decides the channel). ``function`` must be the
    layout the store is in: the store's version, digest and channel count (InvalidInput otherwise:
    apply the pending plan first). A mergeable store takes no ``combine``: each state column aggregates
    its source column of the batch (``sources``, a ``MergeSpec``'s; by default the column of the same
    name; a ``count`` has none) by the store's merge. A general store needs ``combine(old, batch)``,
    which gets the state rows of the keys the channel's batch touches and the channel's batch rows as
    Arrow tables and returns the new rows of those keys with the store's schema (InvalidInput
    ``combine`` for both or neither). ``batch_id`` (the job's id of the batch, growing from batch to
    batch) is recorded in the new generation, with the streaming ``query``'s name of it when a query
    runs the job; when the store has absorbed that batch already nothing runs and the recorded updates
    come back. ``counting``: the tasks also count the batch's slots and keys for its snapshot
    (``repart.spark.batch_counts``).

    Returns the store at its new generation, one ``ChannelUpdate`` per channel that had rows and, with
    ``counting``, the batch's slot and key counts (None when the batch was absorbed already and no task
    ran).
    """
    if store.layout.mergeable == (combine is not None):
        raise InvalidInput(
            "combine",
            "must be given for a general store and left out for a mergeable one (its merge reduces the "
            f"batch): the store at {store.url} is {'mergeable' if store.layout.mergeable else 'general'}",
        )
    if batch_id is not None and store.absorbed(batch_id):
        last = store.last_batch
        return store, list(last.channels) if last is not None and last.batch_id == batch_id else [], None
    if function.n_channels != store.n_channels or function.digest != store.function_digest:
        raise InvalidInput(
            "function",
            f"must be the store's layout: version {version} (N={function.n_channels}, digest "
            f"{function.digest[:12]}) is not the layout of the state store at {store.url} (version "
            f"{store.version}, N={store.n_channels}); apply the pending migration plan first",
        )
    if channel_col not in partitioned.columns:
        raise InvalidInput(
            "channel_col", f"must be a column; {channel_col!r} is not: partition the batch with repart first"
        )
    rows = (
        partitioned
        if combine is not None
        else _partials(partitioned, store, function, channel_col, sources or {})
    )
    if counting is not None:
        # A mergeable update counts its partials (one hash per channel and key), a general one its rows.
        key = key_column(rows, store.key_col)
        rows = rows.select("*", *counted_columns(key.value, key.hash, counting.slot_bits))
    task = _ChannelTask(store, combine, channel_col, counting)
    reports = rows.mapInArrow(task, _REPORT_DDL).collect()
    for row in reports:
        if row.error is not None:
            raise _error_from_report(json.loads(row.error))
    added = {
        row.channel: [FileEntry.from_dict(entry) for entry in json.loads(row.entries)] for row in reports
    }
    updates = [
        ChannelUpdate(
            channel=row.channel,
            input_rows=row.input_rows,
            state_rows=sum(entry.rows for entry in added[row.channel]),
            state_bytes=sum(entry.bytes for entry in added[row.channel]),
            busy_seconds=row.busy_seconds,
            peak_bytes=row.peak_bytes,
        )
        for row in sorted(reports, key=lambda row: row.channel)
    ]
    updated = store.commit(
        added,
        version=version,
        function_digest=function.digest,
        n_channels=function.n_channels,
        batch=None if batch_id is None else absorbed_batch(batch_id, updates, query),
    )
    if counting is None:
        return updated, updates, None
    parts = [ChannelCounts.from_bytes(row.counts) for row in reports]
    return updated, updates, merged_counts(parts, counting.epsilon, counting.slot_bits)


def _partials(
    partitioned: DataFrame,
    store: StateStore,
    function: RoutingFunction,
    channel_col: str,
    sources: Mapping[str, str | None],
) -> DataFrame:
    """The batch reduced in the JVM to one partial row per (channel, key) by the store's merge (each
    state column aggregating its source column; nulls skipped), with the batch rows each partial
    stands for (``_rows``), in partitions that hold one channel each.

    Under a key-preserving ``function`` a key's channel is a function of the key, so Spark reduces
    the batch by the key alone first (its partial aggregation shrinks the rows before the first
    shuffle), then routes the reduced rows and moves them to their channel's partition: the batch's
    rows are never routed one by one, and ``channel_col`` is not read (Spark prunes the routing of a
    ``route()`` caller). A split key's rows go to several channels, each by its row's hash, so under a
    split ``function`` the routed rows go to their channel's partition (``repartitionById``), where
    the aggregation by (channel, key) runs with no shuffle of its own: Spark takes the channel
    partitioning as a clustering by (channel, key) unless the session sets
    ``spark.sql.requireAllClusterKeysForDistribution``, and then the rows are aggregated first and
    the partials moved to their channel."""
    merge = store.merge or {}
    key = store.key_col
    read = {name: str(sources.get(name) or name) for name, op in merge.items() if op != "count"}
    missing = sorted(source for source in read.values() if source not in partitioned.columns)
    if key not in partitioned.columns or missing:
        raise InvalidInput(
            "partitioned",
            f"must hold the key column {key!r} and the columns the merge aggregates: "
            f"{missing or [key]} missing from {partitioned.columns}",
        )
    columns = [
        (F.count(F.lit(1)) if op == "count" else PARTIALS_MERGED[op](F.col(read[name]))).alias(name)
        for name, op in merge.items()
    ]
    rows = F.count(F.lit(1)).alias(ROWS_COLUMN)
    if not function.split:
        reduced = partitioned.groupBy(key).agg(*columns, rows)
        return route(reduced, key, function, channel_col=channel_col).repartitionById(
            store.n_channels, channel_col
        )
    if str(partitioned.sparkSession.conf.get(_ALL_CLUSTER_KEYS, "false")).strip().lower() == "true":
        reduced = partitioned.groupBy(channel_col, key).agg(*columns, rows)
        return reduced.repartitionById(store.n_channels, channel_col)
    placed = partitioned.repartitionById(store.n_channels, channel_col)
    return placed.groupBy(channel_col, key).agg(*columns, rows)


@dataclass(frozen=True)
class _ChannelTask:
    """The per-partition function shipped to executors (a picklable callable)."""

    store: StateStore
    combine: Combine | None
    channel_col: str
    counting: Counting | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        memory = TaskMemory.start()
        context = TaskContext.get()
        channel = context.partitionId() if context is not None else 0
        received = list(batches)
        rows = pa.Table.from_batches(received) if received else None
        if rows is None or rows.num_rows == 0:
            return
        started = time.perf_counter()
        partials = self.combine is None
        input_rows = int(pc.sum(rows.column(ROWS_COLUMN)).as_py()) if partials else rows.num_rows
        try:
            entries = self._fold(channel, rows)
        except (Corrupt, InvalidInput) as error:
            yield _report(channel, input_rows, 0.0, memory.peak(), [], _error_to_report(error), None)
            return
        counts = None if self.counting is None else self._counts(rows).to_bytes()
        seconds = time.perf_counter() - started
        yield _report(channel, input_rows, seconds, memory.peak(), entries, None, counts)

    def _counts(self, rows: pa.Table) -> ChannelCounts:
        """The channel's counts for the batch's snapshot (``repart.spark.batch_counts``)."""
        assert self.counting is not None
        tuples = rows.column(ROWS_COLUMN) if self.combine is None else None
        return channel_counts(rows, self.store.key_col, tuples, self.counting.epsilon, self.counting.always)

    def _fold(self, channel: int, rows: pa.Table) -> list[FileEntry]:
        """The channel's delta: its partials, or ``combine``'s upserts and tombstones."""
        channels = rows.column(self.channel_col).to_numpy()
        stray = channels != channel
        if stray.any():
            raise InvalidInput(
                "partitioned",
                f"must be the DataFrame repart.spark.partition() (general state) or route() (mergeable "
                f"state) returns: partition {channel} holds rows of channel {int(channels[stray.argmax()])}",
            )
        store, key = self.store, self.store.key_col
        if self.combine is None:
            partials = rows.select(store.schema.names).cast(store.schema)
            return store.write(channel, partials)
        batch = rows.drop_columns(
            [name for name in (self.channel_col, SLOT_COLUMN, REGISTER_COLUMN) if name in rows.column_names]
        )
        old = store.read_keys(channel, pc.unique(batch.column(key)))
        state = self.combine(old, batch)
        _check_combined(old, batch, state, key, channel)
        kept = pc.is_in(old.column(key), value_set=state.column(key).combine_chunks())
        gone = pc.filter(old.column(key), pc.invert(kept))
        return store.write(channel, _upserts(state.select(store.schema.names), gone, store))


def _upserts(state: pa.Table, gone: pa.ChunkedArray, store: StateStore) -> pa.Table:
    """``state``'s rows and a tombstone for each key of ``gone`` (every other column null), with
    ``_deleted`` telling them apart."""
    tombstones = pa.table(
        {
            name: gone if name == store.key_col else pa.nulls(len(gone), store.schema.field(name).type)
            for name in store.schema.names
        },
        schema=store.schema,
    )
    both = pa.concat_tables([state.cast(store.schema), tombstones])
    deleted = np.concatenate([np.zeros(state.num_rows, np.bool_), np.ones(len(gone), np.bool_)])
    return both.append_column(DELETED_COLUMN, pa.array(deleted))


def _report(
    channel: int,
    input_rows: int,
    busy: float,
    peak: int | None,
    entries: list[FileEntry],
    error: dict[str, Any] | None,
    counts: bytes | None,
) -> pa.RecordBatch:
    """A task's result row: its channel's new files, or the error it met, and the memory it added to
    its worker at its peak (``repart.spark.task_memory``)."""
    row = {
        "channel": channel,
        "input_rows": input_rows,
        "busy_seconds": busy,
        "peak_bytes": peak,
        "entries": json.dumps([entry.to_dict() for entry in entries]),
        "error": None if error is None else json.dumps(error),
        "counts": counts,
    }
    return pa.RecordBatch.from_pylist([row], schema=_REPORT_SCHEMA)


def _error_to_report(error: Corrupt | InvalidInput) -> dict[str, Any]:
    if isinstance(error, Corrupt):
        path = error.path
        message = str(error)
        if path is not None and message.startswith(f"{path}: "):
            message = message[len(path) + 2 :]
        return {"class": "Corrupt", "path": path, "message": message}
    return {"class": "InvalidInput", "field": error.field, "requirement": error.requirement}


def _error_from_report(report: dict[str, Any]) -> Corrupt | InvalidInput:
    if report["class"] == "Corrupt":
        return Corrupt(report["message"], path=report["path"])
    return InvalidInput(report["field"], report["requirement"])


def _check_combined(old: pa.Table, batch: pa.Table, state: pa.Table, key_col: str, channel: int) -> None:
    """InvalidInput unless ``combine`` kept one row per key and only keys of the channel's old state
    or its batch: any other key belongs to another channel, and storing it here would hide it from
    that channel and from every later migration."""
    keys = state.column(key_col)
    if pc.count_distinct(keys, mode="all").as_py() != state.num_rows:
        raise InvalidInput(
            "combine",
            f"must return one row per key: it returned several rows for one key on channel {channel}",
        )
    known = pa.concat_arrays(
        [chunk for table in (old, batch) for chunk in table.column(key_col).cast(keys.type).chunks]
    )
    unknown = pc.invert(pc.is_in(keys, value_set=pc.unique(known)))
    if pc.any(unknown).as_py():
        stray = pc.filter(keys, unknown)[0].as_py()
        raise InvalidInput(
            "combine",
            f"must return keys of the channel's state or batch: it returned key {stray!r}, which is "
            f"neither in channel {channel}'s state nor in its batch",
        )
