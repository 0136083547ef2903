"""Snapshots: the JSON document a Spark job emits per tumbling window, parsed and stored (DESIGN §3).

A snapshot document (schema: ``snapshot.schema.json`` next to this module)::

    {"format": 1, "region": str, "window": {"seq": int, "start": ISO-8601, "end": ISO-8601},
     "tuples": int, "distinct_estimate": int, "epsilon": float, "key_type": "str" | "int",
     "items": [[key, count, delta], ...], "slot_bits": int,
     "slots": [[slot, count], ...],            (optional, sparse: slots with a count)
     "version": int,                           (optional: the version active during the window)
     "channels": [{"channel": int, "tuples": int, "busy_seconds": float, "state_bytes": int}, ...]}
                                               (optional)

``parse_snapshot`` checks everything a document can be checked for on its own; ``ingest_snapshot``
checks it against its region (known region, same key type and slot bits, a new window) and stores it
in one SAVEPOINT, so a rejected snapshot leaves the database unchanged. Every error names the field
and the accepted values (DESIGN §10).

``items`` are lossy-counter entries (Manku & Motwani): ``count`` underestimates the key's true count
by at most ``delta``, and ``delta`` is at most the counter's error bound ``epsilon * tuples``. A delta
may exceed its count (a key first seen late in the window), so that is not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repart.errors import Conflict, NotFound
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
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import Key, KeyType, check_slot_bits
from repart.storage import models
from repart.storage.errors import SnapshotError, StorageError
from repart.storage.keys import key_columns, key_from_columns
from repart.storage.regions import region_by_name

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
OPTIONAL_FIELDS = ("slots", "version", "channels")
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


def parse_snapshot(document: Mapping[str, Any]) -> Snapshot:
    """Validate a snapshot document (parsed JSON) and return it as a ``Snapshot``.

    Raises SnapshotError naming the field for: a missing or unknown field, a format other than 1,
    an end not after the start (or a timestamp without a UTC offset), a negative or non-integer
    count, a delta above ``epsilon * tuples``, a key of the wrong type, mixed key types, duplicate
    keys, slots or channels, item counts summing to more than ``tuples``, slot counts not summing to
    ``tuples``, or a slot outside ``[0, 2**slot_bits)``.
    """
    doc = require_object(document, "the snapshot", REQUIRED_FIELDS, OPTIONAL_FIELDS, error=SnapshotError)
    require_format(doc["format"], FORMAT_VERSION, error=SnapshotError)
    region = doc["region"]
    if not isinstance(region, str) or not region:
        raise SnapshotError(f"region must be a non-empty string (a region name), got {region!r}")
    window = require_object(doc["window"], "window", WINDOW_FIELDS, error=SnapshotError)
    start = _timestamp(window["start"], "window.start")
    end = _timestamp(window["end"], "window.end")
    if end <= start:
        raise SnapshotError(
            f"window.end must be after window.start, got {window['start']} .. {window['end']}"
        )
    tuples = require_int(doc["tuples"], "tuples", error=SnapshotError)
    epsilon = require_number(doc["epsilon"], "epsilon", 0.0, 1.0, high_open=True, error=SnapshotError)
    key_type = cast(KeyType, require_key_type(doc["key_type"], error=SnapshotError))
    try:
        slot_bits = check_slot_bits(doc["slot_bits"])
    except ValueError as error:
        raise SnapshotError(str(error)) from None
    items = _items(doc["items"], key_type, tuples, epsilon)
    distinct = require_int(doc["distinct_estimate"], "distinct_estimate", len(items), error=SnapshotError)
    version = doc.get("version")
    return Snapshot(
        region=region,
        seq=require_int(window["seq"], "window.seq", error=SnapshotError),
        window_start=start,
        window_end=end,
        tuples=tuples,
        distinct_estimate=distinct,
        epsilon=epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=None if doc.get("slots") in (None, []) else _slots(doc["slots"], slot_bits, tuples),
        version=None if version is None else require_int(version, "version", 1, error=SnapshotError),
        channels=None if doc.get("channels") in (None, []) else _channels(doc["channels"]),
    )


def _timestamp(value: object, name: str) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.utcoffset() is not None:
                return parsed.astimezone(UTC)
    raise SnapshotError(f"{name} must be an ISO-8601 timestamp with a UTC offset, got {value!r}")


def _items(value: object, key_type: KeyType, tuples: int, epsilon: float) -> tuple[CounterEntry, ...]:
    rows = [
        require_row(row, f"items[{i}]", ("key", "count", "delta"), error=SnapshotError)
        for i, row in enumerate(require_list(value, "items", error=SnapshotError))
    ]
    keys = [require_key(row[0], f"items[{i}]", error=SnapshotError) for i, row in enumerate(rows)]
    require_key_type(
        key_type,
        found=require_one_key_type(keys, "items", error=SnapshotError),
        found_in="the items' keys",
        error=SnapshotError,
    )
    bound = epsilon * tuples
    entries = []
    seen: dict[Key, int] = {}
    for i, (key, (_, raw_count, raw_delta)) in enumerate(zip(keys, rows, strict=True)):
        if key in seen:
            raise SnapshotError(
                f"items[{i}] repeats the key {key!r} of items[{seen[key]}]; keys must be unique"
            )
        seen[key] = i
        count = require_int(raw_count, f"items[{i}] count", error=SnapshotError)
        delta = require_int(raw_delta, f"items[{i}] delta", error=SnapshotError)
        if delta > bound * (1 + 1e-12):
            raise SnapshotError(
                f"items[{i}] delta must be <= epsilon * tuples = {bound:g} (the counter's error bound), "
                f"got {delta}"
            )
        entries.append(CounterEntry(key, count, delta))
    total = sum(entry.count for entry in entries)
    if total > tuples:
        raise SnapshotError(f"items counts sum to {total}, more than tuples ({tuples})")
    return tuple(entries)


def _slots(value: object, slot_bits: int, tuples: int) -> tuple[tuple[int, int], ...]:
    high = (1 << slot_bits) - 1
    pairs: dict[int, int] = {}
    for i, row in enumerate(require_list(value, "slots", error=SnapshotError)):
        raw_slot, raw_count = require_row(row, f"slots[{i}]", ("slot", "count"), error=SnapshotError)
        slot = require_int(raw_slot, f"slots[{i}] slot", 0, high, error=SnapshotError)
        if slot in pairs:
            raise SnapshotError(f"slots[{i}] repeats slot {slot}; slots must be unique")
        pairs[slot] = require_int(raw_count, f"slots[{i}] count", error=SnapshotError)
    total = sum(pairs.values())
    if total != tuples:
        raise SnapshotError(
            f"slots counts sum to {total}, but tuples is {tuples}; slots must count every tuple"
        )
    return tuple(sorted(pairs.items()))


def _channels(value: object) -> tuple[ChannelMeasurement, ...]:
    measured: dict[int, ChannelMeasurement] = {}
    for i, raw in enumerate(require_list(value, "channels", error=SnapshotError)):
        name = f"channels[{i}]"
        row = require_object(raw, name, CHANNEL_FIELDS, error=SnapshotError)
        channel = require_int(row["channel"], f"{name}.channel", error=SnapshotError)
        if channel in measured:
            raise SnapshotError(f"{name} repeats channel {channel}; channels must be unique")
        measured[channel] = ChannelMeasurement(
            channel=channel,
            tuples=require_int(row["tuples"], f"{name}.tuples", error=SnapshotError),
            busy_seconds=require_number(
                row["busy_seconds"], f"{name}.busy_seconds", 0.0, error=SnapshotError
            ),
            state_bytes=require_int(row["state_bytes"], f"{name}.state_bytes", error=SnapshotError),
        )
    return tuple(measured[channel] for channel in sorted(measured))


def ingest_snapshot(session: Session, snapshot: Snapshot, *, source: str | None = None) -> int:
    """Store ``snapshot`` for its region and return its row id; nothing is written if it is rejected.

    Checks against the region: it exists (NotFound), the key type and slot bits are the region's,
    every channel is below the region's ``max_channels`` and the version, if given, exists
    (SnapshotError); the window's ``seq`` is new and its time range overlaps no window already ingested
    (Conflict). ``source`` records where the snapshot came from (a spool file, a job id).
    """
    region = region_by_name(session, snapshot.region)
    if snapshot.key_type != region.key_type:
        raise SnapshotError(f"key_type must be the region's {region.key_type!r}, got {snapshot.key_type!r}")
    if snapshot.slot_bits != region.slot_bits:
        raise SnapshotError(f"slot_bits must be the region's {region.slot_bits}, got {snapshot.slot_bits}")
    if snapshot.channels and snapshot.channels[-1].channel >= region.max_channels:
        raise SnapshotError(
            f"channels: channel must be in [0, {region.max_channels - 1}] (the region's max_channels), "
            f"got {snapshot.channels[-1].channel}"
        )
    if snapshot.version is not None and not _version_exists(session, region.id, snapshot.version):
        raise SnapshotError(f"version {snapshot.version} does not exist in region {region.name!r}")
    _check_new_window(session, region.id, snapshot)
    try:
        with session.begin_nested():
            row = models.Snapshot(
                region_id=region.id,
                seq=snapshot.seq,
                window_start=snapshot.window_start,
                window_end=snapshot.window_end,
                tuples=snapshot.tuples,
                distinct_estimate=snapshot.distinct_estimate,
                epsilon=snapshot.epsilon,
                key_type=snapshot.key_type,
                slot_bits=snapshot.slot_bits,
                version=snapshot.version,
                source=source,
            )
            session.add(row)
            session.flush()
            _insert_children(session, row.id, snapshot)
    except IntegrityError:
        raise Conflict(
            f"window.seq {snapshot.seq} was already ingested for region {region.name!r} (concurrently)"
        ) from None
    return row.id


def _version_exists(session: Session, region_id: int, number: int) -> bool:
    query = select(models.Version.id).where(
        models.Version.region_id == region_id, models.Version.number == number
    )
    return session.scalar(query) is not None


def _check_new_window(session: Session, region_id: int, snapshot: Snapshot) -> None:
    table = models.Snapshot
    if session.scalar(select(table.id).where(table.region_id == region_id, table.seq == snapshot.seq)):
        raise Conflict(f"window.seq {snapshot.seq} was already ingested for region {snapshot.region!r}")
    overlapping = session.scalars(
        select(table)
        .where(
            table.region_id == region_id,
            table.window_start < snapshot.window_end,
            snapshot.window_start < table.window_end,
        )
        .limit(1)
    ).first()
    if overlapping is not None:
        raise Conflict(
            f"window {snapshot.window_start.isoformat()} .. {snapshot.window_end.isoformat()} overlaps "
            f"window seq {overlapping.seq} ({overlapping.window_start.isoformat()} .. "
            f"{overlapping.window_end.isoformat()}) already ingested for region {snapshot.region!r}"
        )


def _insert_children(session: Session, snapshot_id: int, snapshot: Snapshot) -> None:
    if snapshot.items:
        session.execute(
            insert(models.SnapshotItem),
            [
                {
                    "snapshot_id": snapshot_id,
                    "idx": i,
                    "count": item.count,
                    "delta": item.delta,
                    **key_columns(item.key),
                }
                for i, item in enumerate(snapshot.items)
            ],
        )
    if snapshot.slots:
        session.execute(
            insert(models.SnapshotSlot),
            [{"snapshot_id": snapshot_id, "slot": slot, "count": count} for slot, count in snapshot.slots],
        )
    if snapshot.channels:
        session.execute(
            insert(models.SnapshotChannel),
            [{"snapshot_id": snapshot_id, **asdict(measured)} for measured in snapshot.channels],
        )


def get_snapshot(session: Session, region: str, seq: int) -> Snapshot:
    """The snapshot of window ``seq`` of ``region``; NotFound if there is none."""
    snapshots = _load(session, region, seq=seq)
    if not snapshots:
        raise NotFound(f"region {region!r} has no snapshot with window.seq {seq}")
    return snapshots[0]


def latest_snapshots(session: Session, region: str, count: int) -> list[Snapshot]:
    """The newest ``count`` snapshots of ``region`` (highest ``seq``), oldest first."""
    require_int(count, "count", 1, error=StorageError)
    return _load(session, region, limit=count)


def _load(
    session: Session, region: str, *, seq: int | None = None, limit: int | None = None
) -> list[Snapshot]:
    """Snapshots with their items, slots and channels, read as plain rows.

    A window's slot counts alone are up to 2^S rows; building ORM objects for them would dominate a
    controller tick, so the child tables are read with one Core query each and grouped here.
    """
    region_id = region_by_name(session, region).id
    table = models.Snapshot
    query = select(table).where(table.region_id == region_id).order_by(table.seq.desc())
    if seq is not None:
        query = query.where(table.seq == seq)
    rows = list(reversed(session.scalars(query.limit(limit)).all()))
    ids = [row.id for row in rows]
    items = _children(session, models.SnapshotItem, ids, "idx", ("key_int", "key_utf8", "count", "delta"))
    slots = _children(session, models.SnapshotSlot, ids, "slot", ("slot", "count"))
    channels = _children(
        session, models.SnapshotChannel, ids, "channel", ("channel", "tuples", "busy_seconds", "state_bytes")
    )
    return [
        _from_row(region, row, items.get(row.id, []), slots.get(row.id, []), channels.get(row.id, []))
        for row in rows
    ]


def _children(
    session: Session, child: Any, ids: list[int], order: str, columns: tuple[str, ...]
) -> dict[int, list[tuple[Any, ...]]]:
    """Rows of a child table of ``snapshots`` as ``{snapshot_id: [(column values…), …]}``, in ``order``."""
    query = (
        select(child.snapshot_id, *(getattr(child, name) for name in columns))
        .where(child.snapshot_id.in_(ids))
        .order_by(child.snapshot_id, getattr(child, order))
    )
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for snapshot_id, *values in session.execute(query):
        grouped.setdefault(snapshot_id, []).append(tuple(values))
    return grouped


def _from_row(
    region: str,
    row: models.Snapshot,
    items: list[tuple[Any, ...]],
    slots: list[tuple[Any, ...]],
    channels: list[tuple[Any, ...]],
) -> Snapshot:
    return Snapshot(
        region=region,
        seq=row.seq,
        window_start=row.window_start,
        window_end=row.window_end,
        tuples=row.tuples,
        distinct_estimate=row.distinct_estimate,
        epsilon=row.epsilon,
        key_type=cast(KeyType, row.key_type),
        items=tuple(
            CounterEntry(key_from_columns(key_int, key_utf8), count, delta)
            for key_int, key_utf8, count, delta in items
        ),
        slot_bits=row.slot_bits,
        slots=tuple((slot, count) for slot, count in slots) or None,
        version=row.version,
        channels=tuple(ChannelMeasurement(*values) for values in channels) or None,
    )
