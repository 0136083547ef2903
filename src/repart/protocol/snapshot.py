"""The snapshot document: what a job emits per tumbling window, parsed and written.

A snapshot document (JSON Schema: ``snapshot.schema.json`` next to this module)::

    {"format": 1, "region": str, "window": {"seq": int, "start": ISO-8601, "end": ISO-8601},
     "tuples": int, "distinct_estimate": int, "epsilon": float, "key_type": "str" | "int",
     "items": [[key, count, delta], ...], "slot_bits": int,
     "slots": [[slot, count], ...],            (optional, sparse: slots with a count)
     "version": int,                           (optional: the version active during the window)
     "batch": int,                             (optional: the job's id of the batch it observed)
     "channels": [{"channel": int, "tuples": int, "busy_seconds": float, "state_bytes": int}, ...],
                                               (optional)
     "progress": {"interval_seconds": float, "input_rows_per_second": float,
                  "processed_rows_per_second": float, "backlog_rows": int}}
                                               (optional, each field optional: the batch's progress)

``progress`` is what the job knows of its own time (a Structured Streaming query's progress reports
these): ``interval_seconds`` the time the job had for this batch (its trigger interval, or the time
since the previous batch started), ``input_rows_per_second`` the rate rows arrived at,
``processed_rows_per_second`` the rate the batch processed them at, and ``backlog_rows`` the rows
still waiting when the batch ended. The channel-count policy measures utilization against that time.

This module (with ``repart.protocol.counter_items`` for the ``items`` field, which it holds as
columns) is the only place that parses or builds the document: ``Snapshot.from_document`` checks
everything a document can be checked for on its own and ``Snapshot.to_document`` writes it back, so
``Snapshot.from_document(s.to_document()) == s``. Whether a snapshot fits its region (known region,
key type, slot bits, a new window whose seq agrees with its time) is the store's check, at ingest.
Every error is an ``InvalidInput`` naming the document field (``window.seq``, ``items[3].count``).

``items`` are lossy-counter entries (Manku & Motwani): ``count >= 1`` underestimates the key's true
count by at most ``delta``, and ``delta`` is at most the number of buckets the counter closed,
``floor(tuples / ceil(1/epsilon))`` (``<= epsilon * tuples``; 0 for an exact counter, ``epsilon = 0``):
exactly the tables ``LossyCounter.from_entries`` accepts, so the controller merges windows with
``LossyCounter.merge``. A delta may exceed its count (a key first seen late in the window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from repart.errors import InvalidInput
from repart.partitioning.documents import (
    require_format,
    require_int,
    require_key_type,
    require_list,
    require_number,
    require_object,
)
from repart.partitioning.domain import KeyType, check_slot_bits
from repart.partitioning.frequency import FrequencyEstimate, bucket_width
from repart.protocol.counter_items import CounterEntry as CounterEntry
from repart.protocol.counter_items import CounterItems, parse_items
from repart.protocol.slot_columns import SlotColumns, checked_slots, parse_slots
from repart.validation import POSITIVE, REGION_NAME, check

FORMAT_VERSION = 1
REQUIRED_FIELDS = (
    "format",
    "region",
    "window",
    "tuples",
    "distinct_estimate",
    "epsilon",
    "key_type",
    "items",
    "slot_bits",
)
OPTIONAL_FIELDS = ("slots", "version", "batch", "channels", "progress")
WINDOW_FIELDS = ("seq", "start", "end")
CHANNEL_FIELDS = ("channel", "tuples", "busy_seconds", "state_bytes")
PROGRESS_FIELDS = ("interval_seconds", "input_rows_per_second", "processed_rows_per_second", "backlog_rows")


@dataclass(frozen=True, slots=True)
class ChannelMeasurement:
    """What one channel measured during the window."""

    channel: int
    tuples: int
    busy_seconds: float
    state_bytes: int


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """What the job reported of the batch's progress (see the module docstring); None where it did
    not report a field."""

    interval_seconds: float | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    backlog_rows: int | None = None

    def to_document(self) -> dict[str, Any]:
        """The reported fields as the document's ``progress`` object."""
        return {name: getattr(self, name) for name in PROGRESS_FIELDS if getattr(self, name) is not None}


@dataclass(frozen=True)
class Snapshot:
    """A snapshot. One read by ``from_document`` is validated; one built in code (as
    ``observe`` builds it) is validated by ``checked`` before it leaves the job: the constructor only
    holds the fields, in columns.

    ``items`` are held as columns (``CounterItems``; any sequence of ``CounterEntry`` given is turned
    into one). ``slots`` is sparse ``(slot, count)`` pairs sorted by slot, held as columns
    (``SlotColumns``; any sequence of pairs given is turned into one, InvalidInput naming a pair that
    is not two integers an int64 column holds), and ``channels`` is sorted by channel; each is None
    when the document has none (an empty list counts as none).
    """

    region: str
    seq: int
    window_start: datetime
    window_end: datetime
    tuples: int
    distinct_estimate: int
    epsilon: float
    key_type: KeyType
    items: Sequence[CounterEntry]
    slot_bits: int
    slots: Sequence[tuple[int, int]] | None = None
    version: int | None = None
    channels: tuple[ChannelMeasurement, ...] | None = None
    batch: int | None = None
    progress: BatchProgress | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", CounterItems.of(self.items))
        if self.slots is not None:
            slots = SlotColumns.of(self.slots)
            object.__setattr__(self, "slots", slots if len(slots) else None)

    @property
    def item_columns(self) -> CounterItems:
        """``items`` as the columns they are held in."""
        return cast(CounterItems, self.items)

    @property
    def slot_columns(self) -> SlotColumns | None:
        """``slots`` as the columns they are held in (None when the snapshot has none)."""
        return cast(SlotColumns | None, self.slots)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Snapshot:
        """The snapshot a document (parsed JSON) describes, checked field by field.

        InvalidInput naming the field for: a missing or unknown field, a format other than 1, an end
        not after the start (or a timestamp without a UTC offset, or one whose UTC time is outside
        years 1-9999), a count below 1 or not an integer, a delta above ``floor(tuples /
        ceil(1/epsilon))``, a key of the wrong type, mixed key types, duplicate keys, slots or
        channels, item counts summing to more than ``tuples``, slot counts not summing to ``tuples``,
        or a slot outside ``[0, 2**slot_bits)``.
        """
        return _parse(document)

    def checked(self) -> Snapshot:
        """This snapshot, if its document passes every check of ``from_document`` (InvalidInput naming
        the field otherwise): what the sinks run before a snapshot built in code is written or
        submitted, so that the spool and the controller never receive one a document could not hold.
        The slot histogram, the bulk of a large window, is checked on its columns rather than through
        a document (``repart.protocol.slot_columns.checked_slots``: the same checks)."""
        parsed = _parse(self.to_document(slots=False))
        columns = self.slot_columns
        if columns is None:
            return parsed
        return replace(parsed, slots=checked_slots(columns, parsed.slot_bits, parsed.tuples))

    def to_document(self, *, slots: bool = True) -> dict[str, Any]:
        """The snapshot as its JSON document (optional fields only when set; ``slots=False`` leaves the
        slot histogram out)."""
        items = self.item_columns
        document: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "region": self.region,
            "window": {
                "seq": self.seq,
                "start": self.window_start.isoformat(),
                "end": self.window_end.isoformat(),
            },
            "tuples": self.tuples,
            "distinct_estimate": self.distinct_estimate,
            "epsilon": self.epsilon,
            "key_type": self.key_type,
            "items": [
                [key, count, delta]
                for key, count, delta in zip(
                    items.keys, items.counts.tolist(), items.deltas.tolist(), strict=True
                )
            ],
            "slot_bits": self.slot_bits,
        }
        columns = self.slot_columns
        if slots and columns is not None:
            document["slots"] = columns.rows()
        if self.version is not None:
            document["version"] = self.version
        if self.batch is not None:
            document["batch"] = self.batch
        if self.channels is not None:
            document["channels"] = [
                {
                    "channel": measured.channel,
                    "tuples": measured.tuples,
                    "busy_seconds": measured.busy_seconds,
                    "state_bytes": measured.state_bytes,
                }
                for measured in self.channels
            ]
        if self.progress is not None:
            document["progress"] = self.progress.to_document()
        return document

    def to_estimate(self) -> FrequencyEstimate:
        """The window as a ``FrequencyEstimate``: item counts, ``total = tuples``, dense slot counts."""
        slot_counts = None
        columns = self.slot_columns
        if columns is not None:
            slot_counts = np.zeros(1 << self.slot_bits, dtype=np.float64)
            slot_counts[columns.slots] = columns.counts
        return FrequencyEstimate(
            keys=self.item_columns.keys,
            counts=self.item_columns.counts.astype(np.float64),
            total=self.tuples,
            epsilon=self.epsilon,
            distinct_estimate=self.distinct_estimate,
            slot_counts=slot_counts,
            slot_bits=self.slot_bits,
            key_type=self.key_type,
        )


def _parse(document: Mapping[str, Any]) -> Snapshot:
    doc = require_object(document, "the snapshot", REQUIRED_FIELDS, OPTIONAL_FIELDS)
    require_format(doc["format"], FORMAT_VERSION)
    region = check_region_name(doc["region"])
    window = require_object(doc["window"], "window", WINDOW_FIELDS)
    start = _timestamp(window["start"], "window.start")
    end = _timestamp(window["end"], "window.end")
    if end <= start:
        raise InvalidInput(
            "window.end", f"must be after window.start, got {window['start']} .. {window['end']}"
        )
    tuples = require_int(doc["tuples"], "tuples")
    epsilon = require_number(doc["epsilon"], "epsilon", 0.0, 1.0, high_open=True)
    key_type = cast(KeyType, require_key_type(doc["key_type"]))
    slot_bits = check_slot_bits(doc["slot_bits"])
    items = parse_items(doc["items"], key_type, tuples, closed_buckets(tuples, epsilon))
    distinct = require_int(doc["distinct_estimate"], "distinct_estimate", len(items))
    version, batch = doc.get("version"), doc.get("batch")
    return Snapshot(
        region=region,
        seq=require_int(window["seq"], "window.seq"),
        window_start=start,
        window_end=end,
        tuples=tuples,
        distinct_estimate=distinct,
        epsilon=epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=None if doc.get("slots") in (None, []) else parse_slots(doc["slots"], slot_bits, tuples),
        version=None if version is None else require_int(version, "version", 1),
        channels=None if doc.get("channels") in (None, []) else channel_measurements(doc["channels"]),
        batch=None if batch is None else require_int(batch, "batch"),
        progress=None if doc.get("progress") in (None, {}) else batch_progress(doc["progress"]),
    )


def batch_progress(value: object) -> BatchProgress:
    """The ``progress`` field: ``interval_seconds`` > 0, the two rates >= 0 and ``backlog_rows`` an
    integer >= 0, each optional (InvalidInput naming ``progress.<field>`` otherwise)."""
    row = require_object(value, "progress", (), PROGRESS_FIELDS)
    interval, rate_in, rate_done, backlog = (row.get(name) for name in PROGRESS_FIELDS)
    return BatchProgress(
        interval_seconds=None if interval is None else check("progress.interval_seconds", interval, POSITIVE),
        input_rows_per_second=None
        if rate_in is None
        else require_number(rate_in, "progress.input_rows_per_second"),
        processed_rows_per_second=None
        if rate_done is None
        else require_number(rate_done, "progress.processed_rows_per_second"),
        backlog_rows=None if backlog is None else require_int(backlog, "progress.backlog_rows"),
    )


def closed_buckets(tuples: int, epsilon: float) -> int:
    """``floor(tuples / w)`` with ``w = ceil(1/epsilon)``: the buckets a lossy counter of ``tuples``
    tuples has closed, the largest delta it can hold (Manku & Motwani; 0 for an exact counter)."""
    return tuples // bucket_width(epsilon)


def check_region_name(name: object) -> str:
    """``name`` if it is a region name (``repart.validation.REGION_NAME``); InvalidInput naming
    ``region`` otherwise."""
    return str(check("region", name, REGION_NAME))


def _timestamp(value: object, name: str) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.utcoffset() is not None:
                try:
                    return parsed.astimezone(UTC)
                except OverflowError:  # year 1 at +14:00 or year 9999 at -14:00 has no UTC time
                    pass
    raise InvalidInput(
        name, f"must be an ISO-8601 timestamp with a UTC offset in years 1-9999 UTC, got {value!r}"
    )


def channel_measurements(value: object) -> tuple[ChannelMeasurement, ...]:
    """The ``channels`` field: per-channel measurements (JSON objects with channel, tuples,
    busy_seconds, state_bytes), unique by channel, sorted by channel."""
    measured: dict[int, ChannelMeasurement] = {}
    for i, raw in enumerate(require_list(value, "channels")):
        name = f"channels[{i}]"
        row = require_object(raw, name, CHANNEL_FIELDS)
        channel = require_int(row["channel"], f"{name}.channel")
        if channel in measured:
            raise InvalidInput(name, f"repeats channel {channel}; channels must be unique")
        measured[channel] = ChannelMeasurement(
            channel=channel,
            tuples=require_int(row["tuples"], f"{name}.tuples"),
            busy_seconds=require_number(row["busy_seconds"], f"{name}.busy_seconds", 0.0),
            state_bytes=require_int(row["state_bytes"], f"{name}.state_bytes"),
        )
    return tuple(measured[channel] for channel in sorted(measured))
