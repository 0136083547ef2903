"""The snapshot document: what a job emits per tumbling window, parsed and written (DESIGN §3, §12.1).

A snapshot document (JSON Schema: ``snapshot.schema.json`` next to this module)::

    {"format": 1, "region": str, "window": {"seq": int, "start": ISO-8601, "end": ISO-8601},
     "tuples": int, "distinct_estimate": int, "epsilon": float, "key_type": "str" | "int",
     "items": [[key, count, delta], ...], "slot_bits": int,
     "slots": [[slot, count], ...],            (optional, sparse: slots with a count)
     "version": int,                           (optional: the version active during the window)
     "batch": int,                             (optional: the job's id of the batch it observed)
     "channels": [{"channel": int, "tuples": int, "busy_seconds": float, "state_bytes": int}, ...]}
                                               (optional)

This module is the only place that parses or builds the document: ``Snapshot.from_document`` checks
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

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from repart.errors import InvalidInput
from repart.partitioning.documents import (
    require_format,
    require_int,
    require_key,
    require_key_type,
    require_list,
    require_number,
    require_object,
    require_one_key_type,
    require_row,
)
from repart.partitioning.frequency import FrequencyEstimate, bucket_width
from repart.partitioning.hashing import Key, KeyType, check_slot_bits
from repart.validation import REGION_NAME, check

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
OPTIONAL_FIELDS = ("slots", "version", "batch", "channels")
WINDOW_FIELDS = ("seq", "start", "end")
CHANNEL_FIELDS = ("channel", "tuples", "busy_seconds", "state_bytes")


@dataclass(frozen=True, slots=True)
class CounterEntry:
    """A retained lossy-counter entry: ``count <= true count <= count + delta``."""

    key: Key
    count: int
    delta: int


@dataclass(frozen=True, slots=True)
class ChannelMeasurement:
    """What one channel measured during the window."""

    channel: int
    tuples: int
    busy_seconds: float
    state_bytes: int


@dataclass(frozen=True)
class Snapshot:
    """A validated snapshot (DESIGN §3).

    ``slots`` is sparse ``(slot, count)`` pairs sorted by slot and ``channels`` is sorted by channel;
    each is None when the document has none (an empty list counts as none).
    """

    region: str
    seq: int
    window_start: datetime
    window_end: datetime
    tuples: int
    distinct_estimate: int
    epsilon: float
    key_type: KeyType
    items: tuple[CounterEntry, ...]
    slot_bits: int
    slots: tuple[tuple[int, int], ...] | None = None
    version: int | None = None
    channels: tuple[ChannelMeasurement, ...] | None = None
    batch: int | None = None

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

    def to_document(self) -> dict[str, Any]:
        """The snapshot as its JSON document (optional fields only when set)."""
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
            "items": [[item.key, item.count, item.delta] for item in self.items],
            "slot_bits": self.slot_bits,
        }
        if self.slots is not None:
            document["slots"] = [[slot, count] for slot, count in self.slots]
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
        return document

    def to_estimate(self) -> FrequencyEstimate:
        """The window as a ``FrequencyEstimate``: item counts, ``total = tuples``, dense slot counts."""
        slot_counts = None
        if self.slots is not None:
            slot_counts = np.zeros(1 << self.slot_bits, dtype=np.float64)
            for slot, count in self.slots:
                slot_counts[slot] = count
        return FrequencyEstimate(
            keys=tuple(item.key for item in self.items),
            counts=np.array([item.count for item in self.items], dtype=np.float64),
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
    items = _items(doc["items"], key_type, tuples, epsilon)
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
        slots=None if doc.get("slots") in (None, []) else _slots(doc["slots"], slot_bits, tuples),
        version=None if version is None else require_int(version, "version", 1),
        channels=None if doc.get("channels") in (None, []) else channel_measurements(doc["channels"]),
        batch=None if batch is None else require_int(batch, "batch"),
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


def _items(value: object, key_type: KeyType, tuples: int, epsilon: float) -> tuple[CounterEntry, ...]:
    """The ``items`` field, checked row by row (``_checked_items``) unless the whole list passes the
    bulk checks of ``_well_formed_items`` (a large window has millions of items: the bulk checks look
    at each value once, with no per-item function calls, and accept exactly what the row checks do)."""
    rows = require_list(value, "items")
    closed = closed_buckets(tuples, epsilon)
    entries = _well_formed_items(rows, key_type, closed)
    if entries is None:
        entries = _checked_items(rows, key_type, closed)
    total = sum(entry.count for entry in entries)
    if total > tuples:
        raise InvalidInput("items", f"counts sum to {total}, more than tuples ({tuples})")
    return entries


def _well_formed_items(rows: list[Any], key_type: KeyType, closed: int) -> tuple[CounterEntry, ...] | None:
    """The items of ``rows`` if every row is a ``[key, count, delta]`` list with a unique key of
    ``key_type``, ``count`` in [1, 2^63 - 1] and ``delta`` in [0, closed]; None when any is not (then
    ``_checked_items`` names the first bad row)."""
    if not all(type(row) is list and len(row) == 3 for row in rows):
        return None
    keys, counts, deltas = ([row[i] for row in rows] for i in range(3))
    if key_type == "str":
        if not all(type(key) is str for key in keys):
            return None
        try:
            "".join(keys).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return None
    elif not all(type(key) is int and -(2**63) <= key < 2**63 for key in keys):
        return None
    if not (all(type(count) is int for count in counts) and all(type(delta) is int for delta in deltas)):
        return None
    if rows and (min(counts) < 1 or max(counts) >= 2**63 or min(deltas) < 0 or max(deltas) > closed):
        return None
    if len(set(keys)) != len(keys):
        return None
    return tuple(map(CounterEntry, keys, counts, deltas))


def _checked_items(rows: list[Any], key_type: KeyType, closed: int) -> tuple[CounterEntry, ...]:
    """The items of ``rows``, each row checked in turn: InvalidInput naming the first bad one."""
    checked = [require_row(row, f"items[{i}]", ("key", "count", "delta")) for i, row in enumerate(rows)]
    keys = [require_key(row[0], f"items[{i}]") for i, row in enumerate(checked)]
    require_key_type(
        key_type,
        found=require_one_key_type(keys, "items"),
        found_in="the items' keys",
    )
    entries = []
    seen: dict[Key, int] = {}
    for i, (key, (_, raw_count, raw_delta)) in enumerate(zip(keys, checked, strict=True)):
        if key in seen:
            raise InvalidInput(
                f"items[{i}]", f"repeats the key {key!r} of items[{seen[key]}]; keys must be unique"
            )
        seen[key] = i
        count = require_int(raw_count, f"items[{i}].count", 1)
        delta = require_int(raw_delta, f"items[{i}].delta")
        if delta > closed:
            raise InvalidInput(
                f"items[{i}].delta",
                f"must be <= floor(tuples / ceil(1/epsilon)) = {closed} (the buckets the counter closed, "
                f"at most epsilon * tuples), got {delta}",
            )
        entries.append(CounterEntry(key, count, delta))
    return tuple(entries)


def _slots(value: object, slot_bits: int, tuples: int) -> tuple[tuple[int, int], ...]:
    high = (1 << slot_bits) - 1
    pairs: dict[int, int] = {}
    for i, row in enumerate(require_list(value, "slots")):
        raw_slot, raw_count = require_row(row, f"slots[{i}]", ("slot", "count"))
        slot = require_int(raw_slot, f"slots[{i}].slot", 0, high)
        if slot in pairs:
            raise InvalidInput(f"slots[{i}]", f"repeats slot {slot}; slots must be unique")
        pairs[slot] = require_int(raw_count, f"slots[{i}].count")
    total = sum(pairs.values())
    if total != tuples:
        raise InvalidInput(
            "slots", f"counts sum to {total}, but tuples is {tuples}; slots must count every tuple"
        )
    return tuple(sorted(pairs.items()))


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
