"""Updating keyed state from a partitioned batch, each channel on the executor that holds it (DESIGN §9).

``partition(df, key, version)`` makes Spark partition i hold exactly channel i; ``update_state`` then
runs one task per channel (``mapInArrow``): the task reads its channel's current state from the store,
combines it with the channel's rows of the batch, writes the channel's new files and reports them.
The driver commits every channel's new files as one new generation of the store (an atomic manifest
swap), so a batch's state update is all or nothing. Channels with no rows in the batch keep their
files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame

from repart.partitioning import PartitionFunction
from repart.spark.errors import JobInputError, StateStoreError
from repart.state.store import FileEntry, StateStore, write_channel_files

Combine = Callable[[pa.Table, pa.Table], pa.Table]
_REPORT_SCHEMA = "channel int, input_rows long, busy_seconds double, entries string"


@dataclass(frozen=True)
class ChannelUpdate:
    """What one channel's task did: the batch rows it absorbed, its new state's rows and bytes, and
    the seconds it was busy (reading, combining and writing), the channel measurement of DESIGN §3."""

    channel: int
    input_rows: int
    state_rows: int
    state_bytes: int
    busy_seconds: float


def update_state(
    store: StateStore,
    partitioned: DataFrame,
    combine: Combine,
    *,
    version: int,
    function: PartitionFunction,
    channel_col: str = "channel",
) -> tuple[StateStore, list[ChannelUpdate]]:
    """Fold a batch into the store: ``combine(old_state, batch_rows) -> new_state`` per channel.

    ``partitioned`` must come from ``repart.spark.partition(df, key, function)`` (partition i holds
    channel i; a row found on another partition raises) and ``function`` must be the layout the store
    is in: the store's version, digest and channel count (StateStoreError otherwise: apply the pending
    plan first). ``combine`` gets the channel's state and its batch rows (without ``channel_col``) as
    Arrow tables and returns the channel's complete new state with the store's schema. Returns the
    store at its new generation and one ``ChannelUpdate`` per channel that had rows.
    """
    if function.n_channels != store.n_channels or function.digest != store.function_digest:
        raise StateStoreError(
            f"version {version} (N={function.n_channels}, digest {function.digest[:12]}) is not the layout "
            f"of the state store at {store.root} (version {store.version}, N={store.n_channels}); "
            "apply the pending migration plan first"
        )
    if channel_col not in partitioned.columns:
        raise JobInputError(
            f"channel_col: {channel_col!r} is not a column; partition the batch with repart first"
        )
    task = _ChannelTask(store, combine, channel_col)
    reports = partitioned.mapInArrow(task, _REPORT_SCHEMA).collect()
    replaced = {
        row.channel: [FileEntry.from_dict(entry) for entry in json.loads(row.entries)] for row in reports
    }
    updated = store.commit(
        replaced, version=version, function_digest=function.digest, n_channels=function.n_channels
    )
    updates = [
        ChannelUpdate(
            channel=row.channel,
            input_rows=row.input_rows,
            state_rows=sum(entry.rows for entry in replaced[row.channel]),
            state_bytes=sum(entry.bytes for entry in replaced[row.channel]),
            busy_seconds=row.busy_seconds,
        )
        for row in sorted(reports, key=lambda row: row.channel)
    ]
    return updated, updates


@dataclass(frozen=True)
class _ChannelTask:
    """The per-partition function shipped to executors (a picklable callable)."""

    store: StateStore
    combine: Combine
    channel_col: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        channel = context.partitionId() if context is not None else 0
        received = list(batches)
        rows = pa.Table.from_batches(received) if received else None
        if rows is None or rows.num_rows == 0:
            return
        started = time.perf_counter()
        channels = rows.column(self.channel_col).to_numpy()
        stray = channels != channel
        if stray.any():
            raise JobInputError(
                f"partition {channel} holds rows of channel {int(channels[stray.argmax()])}; "
                "update_state needs the DataFrame repart.spark.partition() returns"
            )
        batch = rows.drop_columns([self.channel_col])
        old = self.store.read_channel(channel)
        state = self.combine(old, batch)
        _check_combined(old, batch, state, self.store.key_col, channel)
        entries = write_channel_files(
            self.store.root,
            channel,
            state,
            key_col=self.store.key_col,
            key_type=self.store.key_type,
            slot_bits=self.store.slot_bits,
            slot_groups=self.store.slot_groups,
        )
        busy = time.perf_counter() - started
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "channel": channel,
                    "input_rows": rows.num_rows,
                    "busy_seconds": busy,
                    "entries": json.dumps([entry.to_dict() for entry in entries]),
                }
            ],
            schema=pa.schema(
                [
                    ("channel", pa.int32()),
                    ("input_rows", pa.int64()),
                    ("busy_seconds", pa.float64()),
                    ("entries", pa.string()),
                ]
            ),
        )


def _check_combined(old: pa.Table, batch: pa.Table, state: pa.Table, key_col: str, channel: int) -> None:
    """JobInputError unless ``combine`` kept one row per key and only keys of the channel's old state
    or its batch: any other key belongs to another channel, and storing it here would hide it from
    that channel and from every later migration."""
    keys = state.column(key_col)
    if pc.count_distinct(keys, mode="all").as_py() != state.num_rows:
        raise JobInputError(
            f"combine returned several rows for one key on channel {channel}; state holds one per key"
        )
    known = pa.concat_arrays(
        [chunk for table in (old, batch) for chunk in table.column(key_col).cast(keys.type).chunks]
    )
    unknown = pc.invert(pc.is_in(keys, value_set=pc.unique(known)))
    if pc.any(unknown).as_py():
        stray = pc.filter(keys, unknown)[0].as_py()
        raise JobInputError(
            f"combine returned key {stray!r}, which is neither in channel {channel}'s state nor in its batch"
        )
