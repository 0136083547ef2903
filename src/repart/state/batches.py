"""Batch identity in the state store: which batch a generation absorbed (DESIGN §9, exactly once).

A job names each batch with an id of its own choosing that grows from batch to batch (the VWAP
pipeline uses its window's seq). The generation that folds a batch into the state records the id and
what each channel did (``ChannelUpdate``), as Delta Lake records an application's transaction
identifier in the commit that wrote it. Later generations carry the record along, so the store can
always answer whether a batch is in it: a batch whose id is at most the recorded one was absorbed, and
running it again must not add it a second time. A job killed after the commit and run again on the
same batch finds it absorbed, skips the update and reports the recorded channel measurements.
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
_CHANNEL_COLUMNS = ("channel", "input_rows", "state_rows", "state_bytes", "busy_seconds")


@dataclass(frozen=True)
class ChannelUpdate:
    """What one channel's task did with a batch: the batch rows it absorbed, the rows and bytes it wrote,
    and the seconds it was busy (reading, combining and writing), the channel measurement the
    controller reads; and the most Arrow memory the task held at its steps (``peak_bytes``: after
    receiving its rows, after reading and combining state, after writing; not recorded in the log)."""

    channel: int
    input_rows: int
    state_rows: int
    state_bytes: int
    busy_seconds: float
    peak_bytes: int = field(default=0, compare=False)


@dataclass(frozen=True)
class AbsorbedBatch:
    """The batch a generation absorbed: the job's ``batch_id`` and one ``ChannelUpdate`` per channel
    that had rows, by channel."""

    batch_id: int
    channels: tuple[ChannelUpdate, ...]

    def to_dict(self) -> dict[str, Any]:
        """The record as the generation document's ``batch`` object."""
        return {
            "id": self.batch_id,
            "channels": [
                [u.channel, u.input_rows, u.state_rows, u.state_bytes, u.busy_seconds] for u in self.channels
            ],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], name: str = "batch") -> AbsorbedBatch:
        """Parse and check a ``batch`` object; InvalidInput naming the field at fault."""
        fields = require_object(document, name, _BATCH_FIELDS)
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
        return absorbed_batch(require_int(fields["id"], f"{name}.id"), updates)


def absorbed_batch(batch_id: int, updates: list[ChannelUpdate]) -> AbsorbedBatch:
    """The record of batch ``batch_id`` (an integer ≥ 0) with its channel updates sorted by channel;
    InvalidInput for a bad id or a channel reported twice."""
    number = require_int(batch_id, "batch_id")
    ordered = tuple(sorted(updates, key=lambda update: update.channel))
    channels = [update.channel for update in ordered]
    if len(set(channels)) != len(channels):
        raise InvalidInput("channels", f"must report each channel once, got {channels}")
    return AbsorbedBatch(number, ordered)
