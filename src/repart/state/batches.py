"""Batch identity in the state store: which batch a generation absorbed (exactly once).

A job names each batch with an id of its own choosing that grows from batch to batch (the VWAP
pipeline uses its window's seq). The generation that folds a batch into the state records the id and
what each channel did (``ChannelUpdate``), as Delta Lake records an application's transaction
identifier in the commit that wrote it. Later generations carry the record along, so the store can
always answer whether a batch is in it: a batch whose id is at most the recorded one was absorbed, and
running it again must not add it a second time. A job killed after the commit and run again on the
same batch finds it absorbed, skips the update and reports the recorded channel measurements.

A Structured Streaming query numbers its batches itself, from 0, under a query id that stays the same
across restarts of one checkpoint; a new checkpoint gets a new id and starts again from 0. The store's
batch ids are one sequence across queries: ``sequence_of`` maps a query's (id, batch id) onto it, and
the record keeps the query's pair (``QueryBatch``), so a query that restarts at the batch it was on
finds it absorbed, and a new query continues after the last absorbed batch instead of being refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from repart.errors import InvalidInput
from repart.partitioning.documents import (
    require_int,
    require_list,
    require_number,
    require_object,
    require_row,
)

_BATCH_FIELDS = ("id", "channels")
_QUERY_FIELDS = ("id", "batch")
_CHANNEL_COLUMNS = ("channel", "input_rows", "state_rows", "state_bytes", "busy_seconds")


@dataclass(frozen=True)
class ChannelUpdate:
    """What one channel's task did with a batch: the batch rows it absorbed, the rows and bytes it wrote,
    and the seconds it was busy (reading, combining and writing), the channel measurement the
    controller reads; and the memory the task added to its Python worker at its peak (``peak_bytes``,
    ``repart.spark.task_memory``; None where it cannot be measured; not recorded in the log)."""

    channel: int
    input_rows: int
    state_rows: int
    state_bytes: int
    busy_seconds: float
    peak_bytes: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class QueryBatch:
    """A streaming query's own name of a batch: the query's id (Spark's ``StreamingQuery.id``) and the
    batch id ``foreachBatch`` passed."""

    query_id: str
    batch_id: int

    @classmethod
    def checked(cls, query_id: object, batch_id: int, field_name: str = "query_id") -> QueryBatch:
        """The pair, with the query id checked: a non-empty string (InvalidInput ``field_name``)."""
        if not isinstance(query_id, str) or not query_id:
            raise InvalidInput(field_name, f"must be a non-empty string (a query's id), got {query_id!r}")
        return cls(query_id, batch_id)


@dataclass(frozen=True)
class AbsorbedBatch:
    """The batch a generation absorbed: its ``batch_id`` in the store's sequence, one ``ChannelUpdate``
    per channel that had rows, by channel, and the streaming query's name of it (``query``), if a
    query wrote it."""

    batch_id: int
    channels: tuple[ChannelUpdate, ...]
    query: QueryBatch | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as the generation document's ``batch`` object."""
        document: dict[str, Any] = {
            "id": self.batch_id,
            "channels": [
                [u.channel, u.input_rows, u.state_rows, u.state_bytes, u.busy_seconds] for u in self.channels
            ],
        }
        if self.query is not None:
            document["query"] = {"id": self.query.query_id, "batch": self.query.batch_id}
        return document

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], name: str = "batch") -> AbsorbedBatch:
        """Parse and check a ``batch`` object; InvalidInput naming the field at fault."""
        fields = require_object(document, name, _BATCH_FIELDS, ("query",))
        updates = []
        for index, row in enumerate(require_list(fields["channels"], f"{name}.channels")):
            field = f"{name}.channels[{index}]"
            channel, input_rows, state_rows, state_bytes, busy = require_row(row, field, _CHANNEL_COLUMNS)
            updates.append(
                ChannelUpdate(
                    channel=require_int(channel, f"{field}.channel"),
                    input_rows=require_int(input_rows, f"{field}.input_rows"),
                    state_rows=require_int(state_rows, f"{field}.state_rows"),
                    state_bytes=require_int(state_bytes, f"{field}.state_bytes"),
                    busy_seconds=require_number(busy, f"{field}.busy_seconds"),
                )
            )
        query = None
        if "query" in fields:
            pair = require_object(fields["query"], f"{name}.query", _QUERY_FIELDS)
            batch = require_int(pair["batch"], f"{name}.query.batch")
            query = QueryBatch.checked(pair["id"], batch, f"{name}.query.id")
        return absorbed_batch(require_int(fields["id"], f"{name}.id"), updates, query)


def absorbed_batch(
    batch_id: int, updates: list[ChannelUpdate], query: QueryBatch | None = None
) -> AbsorbedBatch:
    """The record of batch ``batch_id`` (an integer ≥ 0) with its channel updates sorted by channel;
    InvalidInput for a bad id or a channel reported twice."""
    number = require_int(batch_id, "batch_id")
    ordered = tuple(sorted(updates, key=lambda update: update.channel))
    channels = [update.channel for update in ordered]
    if len(set(channels)) != len(channels):
        raise InvalidInput("channels", f"must report each channel once, got {channels}")
    return AbsorbedBatch(number, ordered, query)


def sequence_of(last: AbsorbedBatch | None, query: QueryBatch) -> int:
    """The store's batch id of a streaming query's batch, given the ``last`` batch the store absorbed.

    - The query that wrote ``last``: its batches follow on, ``last.batch_id`` plus the query's step
      (the batch it was on, when it restarts there, maps to ``last`` itself: absorbed already).
    - Another query (a new checkpoint, or the first query of a store): its batch continues the
      sequence after ``last``; into an empty store it keeps its own id.

    InvalidInput ``batch_id`` when the query's batch id goes back before ``last``'s: Structured
    Streaming only ever runs the last batch again, so an older one means two runs share a checkpoint.

    One writer at a time: only the last writer's pair is kept, so a query killed after its state commit
    must run its last batch again before another query or job writes the store (a query restarted
    from its checkpoint does so first).
    """
    if last is not None and last.query is not None and last.query.query_id == query.query_id:
        step = query.batch_id - last.query.batch_id
        if step < 0:
            raise InvalidInput(
                "batch_id",
                f"must not go back within query {query.query_id}: the store absorbed its batch "
                f"{last.query.batch_id} already, got batch {query.batch_id}",
            )
        return last.batch_id + step
    return query.batch_id if last is None else last.batch_id + 1
