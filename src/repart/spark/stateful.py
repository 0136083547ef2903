"""Updating keyed state from a partitioned batch, each channel on the executor that holds it (DESIGN §9).

``partition(df, key, version)`` makes Spark partition i hold exactly channel i; ``update_state`` then
runs one task per channel (``mapInArrow``): the task reads its channel's current state from the store,
combines it with the channel's rows of the batch, writes the channel's new files and reports them.
The driver commits every channel's new files as one new generation of the store (an atomic manifest
swap), so a batch's state update is all or nothing. Channels with no rows in the batch keep their
files.

Split mode (DESIGN §11.3): with a ``SplitFunction`` a split key's rows arrive on several channels, and
each channel's ``combine`` folds them into that channel's own row for the key, so the store holds one
*partial* row per (key, channel): the per-channel check that ``combine`` returns one row per key is
exactly that invariant. ``StateStore.read_merged`` merges the partials into one row per key.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame

from repart.errors import Corrupt, InvalidInput
from repart.partitioning.split.function import StoredFunction
from repart.state.batches import ChannelUpdate, absorbed_batch
from repart.state.store import FileEntry, StateStore, write_channel_files

__all__ = ["ChannelUpdate", "Combine", "update_state"]

Combine = Callable[[pa.Table, pa.Table], pa.Table]
_REPORT_FIELDS = [
    ("channel", pa.int32()),
    ("input_rows", pa.int64()),
    ("busy_seconds", pa.float64()),
    ("entries", pa.string()),
    ("error", pa.string()),
]
_REPORT_SCHEMA = pa.schema(_REPORT_FIELDS)
_REPORT_DDL = "channel int, input_rows long, busy_seconds double, entries string, error string"


def update_state(
    store: StateStore,
    partitioned: DataFrame,
    combine: Combine,
    *,
    version: int,
    function: StoredFunction,
    batch_id: int | None = None,
    channel_col: str = "channel",
) -> tuple[StateStore, list[ChannelUpdate]]:
    """Fold a batch into the store: ``combine(old_state, batch_rows) -> new_state`` per channel.

    ``partitioned`` must come from ``repart.spark.partition(df, key, function)`` (partition i holds
    channel i; a row found on another partition is InvalidInput) and ``function`` must be the layout
    the store is in: the store's version, digest and channel count (InvalidInput otherwise: apply the
    pending plan first). ``combine`` gets the channel's state and its batch rows (without
    ``channel_col``) as Arrow tables and returns the channel's complete new state with the store's
    schema. With a ``SplitFunction`` a split key gets one partial row on each channel it reaches.
    ``batch_id`` (the job's id of the batch, growing from batch to batch) is recorded in the new
    generation; when the store has absorbed that batch already nothing runs and the recorded updates
    come back (module docstring). Returns the store at its new generation and one
    ``ChannelUpdate`` per channel that had rows.
    """
    if batch_id is not None and store.absorbed(batch_id):
        last = store.last_batch
        return store, list(last.channels) if last is not None and last.batch_id == batch_id else []
    if function.n_channels != store.n_channels or function.digest != store.function_digest:
        raise InvalidInput(
            "function",
            f"must be the store's layout: version {version} (N={function.n_channels}, digest "
            f"{function.digest[:12]}) is not the layout of the state store at {store.root} (version "
            f"{store.version}, N={store.n_channels}); apply the pending migration plan first",
        )
    if channel_col not in partitioned.columns:
        raise InvalidInput(
            "channel_col", f"must be a column; {channel_col!r} is not: partition the batch with repart first"
        )
    task = _ChannelTask(store, combine, channel_col)
    reports = partitioned.mapInArrow(task, _REPORT_DDL).collect()
    for row in reports:
        if row.error is not None:
            raise _error_from_report(json.loads(row.error))
    replaced = {
        row.channel: [FileEntry.from_dict(entry) for entry in json.loads(row.entries)] for row in reports
    }
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
    updated = store.commit(
        replaced,
        version=version,
        function_digest=function.digest,
        n_channels=function.n_channels,
        batch=None if batch_id is None else absorbed_batch(batch_id, updates),
    )
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
        try:
            entries = self._fold(channel, rows)
        except (Corrupt, InvalidInput) as error:
            yield _report(channel, rows.num_rows, 0.0, [], _error_to_report(error))
            return
        yield _report(channel, rows.num_rows, time.perf_counter() - started, entries, None)

    def _fold(self, channel: int, rows: pa.Table) -> list[FileEntry]:
        """The channel's batch rows folded into its state, written as new files."""
        channels = rows.column(self.channel_col).to_numpy()
        stray = channels != channel
        if stray.any():
            raise InvalidInput(
                "partitioned",
                f"must be the DataFrame repart.spark.partition() returns: partition {channel} holds rows "
                f"of channel {int(channels[stray.argmax()])}",
            )
        batch = rows.drop_columns([self.channel_col])
        old = self.store.read_channel(channel)
        state = self.combine(old, batch)
        _check_combined(old, batch, state, self.store.key_col, channel)
        return write_channel_files(
            self.store.root,
            channel,
            state,
            key_col=self.store.key_col,
            key_type=self.store.key_type,
            slot_bits=self.store.slot_bits,
            slot_groups=self.store.slot_groups,
        )


def _report(
    channel: int, input_rows: int, busy: float, entries: list[FileEntry], error: dict[str, Any] | None
) -> pa.RecordBatch:
    """A task's result row: its channel's new files, or the error it met."""
    row = {
        "channel": channel,
        "input_rows": input_rows,
        "busy_seconds": busy,
        "entries": json.dumps([entry.to_dict() for entry in entries]),
        "error": None if error is None else json.dumps(error),
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
