"""Snapshots in the controller's database: ingest and load.

The document itself (``Snapshot``, ``Snapshot.from_document``) is ``repart.protocol.snapshot``'s.
``ingest_snapshot`` checks a parsed snapshot against its region (known region, same key type and slot
bits, a new window whose seq agrees with its time) before it writes anything, so a rejected snapshot
leaves the database unchanged; a Conflict found by the insert (a concurrent ingest of the same
window) leaves the caller's transaction to be rolled back. Every error names the field and the
accepted values.
``snapshot_summaries`` lists a region's windows without their items, and ``delete_snapshot`` removes
one ingested by mistake, unless a decision depends on it (see there).
"""

from __future__ import annotations

import itertools
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from typing import Any, cast

import numpy as np
from sqlalchemy import Connection, Integer, Select, Table, bindparam, delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput, NotFound
from repart.partitioning.domain import KeyType
from repart.protocol.counter_items import CounterItems
from repart.protocol.slot_columns import SlotColumns
from repart.protocol.snapshot import PROGRESS_FIELDS, BatchProgress, ChannelMeasurement, Snapshot
from repart.storage import models, tables
from repart.storage.events import NewEvent, record_event
from repart.storage.jsontext import load_object
from repart.storage.keys import key_from_columns
from repart.storage.region_names import region_id_by_name, unknown_region
from repart.storage.regions import region_by_name
from repart.validation import POSITIVE_INT, check

# Rows per executemany (per COPY on PostgreSQL) when a snapshot's items, slots and channels are inserted.
INSERT_CHUNK = 20_000
# The columns of each child table's rows, in the order ``_insert_children`` builds them.
ITEM_COLUMNS = ("snapshot_id", "idx", "key_int", "key_utf8", "count", "delta")
SLOT_COLUMNS = ("snapshot_id", "slot", "count")
CHANNEL_COLUMNS = ("snapshot_id", *(column.name for column in fields(ChannelMeasurement)))


def ingest_snapshot(session: Session, snapshot: Snapshot, *, source: str | None = None) -> int:
    """Store ``snapshot`` for its region and return its row id; nothing is written if it is rejected.

    Checks against the region: it exists (NotFound), the key type and slot bits are the region's,
    every channel is below the region's ``max_channels`` and the version, if given, exists
    (InvalidInput); the window's ``seq`` is new and its time range overlaps no window already ingested
    (InvalidInput: retrying cannot help; only a concurrent ingest of the same seq is a Conflict); and
    the seq agrees with the time: above every seq of a window that ends before it starts, below every
    seq of a window that starts after it ends (InvalidInput naming ``window.seq``; a job that restarts
    its seq from 0 is refused, not silently ignored by the tick).
    ``source`` records where the snapshot came from (a spool file, a job id).

    Exactly once: a snapshot whose ``batch`` the region already has is not stored again; the stored
    one's id is returned when it is the same window (the job ran the batch again after a crash), and
    InvalidInput naming ``batch`` is raised when it is another.

    A refusal by a check is raised before anything is written, and leaves the session usable; a
    Conflict (a concurrent ingest of the same window, which the region row's lock makes rare) leaves
    the transaction to be rolled back, as ``run_in_transaction`` does. An ingest is six statements:
    the region row locked, every window check in one query, the snapshot row, and its items, slots and
    channels (``_insert_children``).
    """
    # The region row's lock serializes ingests of one region, so the window checks below see every
    # window committed before (PostgreSQL; SQLite writes are serial anyway).
    region = session.execute(_REGION_LOCKED, {"name": snapshot.region}).first()
    if region is None:
        raise unknown_region(session, snapshot.region)
    window = _window_facts(session, region.id, snapshot)
    if window.batch_id is not None:
        if window.batch_seq != snapshot.seq:
            raise InvalidInput(
                "batch",
                f"must identify one window: batch {snapshot.batch} of region {snapshot.region!r} was "
                f"observed as window.seq {window.batch_seq}, got {snapshot.seq}",
            )
        return int(window.batch_id)
    if snapshot.key_type != region.key_type:
        raise InvalidInput("key_type", f"must be the region's {region.key_type!r}, got {snapshot.key_type!r}")
    if snapshot.slot_bits != region.slot_bits:
        raise InvalidInput("slot_bits", f"must be the region's {region.slot_bits}, got {snapshot.slot_bits}")
    if snapshot.channels and snapshot.channels[-1].channel >= region.max_channels:
        raise InvalidInput(
            "channels.channel",
            f"must be in [0, {region.max_channels - 1}] (the region's max_channels), "
            f"got {snapshot.channels[-1].channel}",
        )
    if snapshot.version is not None and not window.version_exists:
        raise InvalidInput(
            "version", f"must be a version of region {snapshot.region!r}; {snapshot.version} is not"
        )
    _check_new_window(session, region.id, snapshot, window)
    row = {
        "region_id": region.id,
        "seq": snapshot.seq,
        "window_start": snapshot.window_start,
        "window_end": snapshot.window_end,
        "tuples": snapshot.tuples,
        "distinct_estimate": snapshot.distinct_estimate,
        "epsilon": snapshot.epsilon,
        "key_type": snapshot.key_type,
        "slot_bits": snapshot.slot_bits,
        "version": snapshot.version,
        "batch": snapshot.batch,
        "source": source,
        **(snapshot.progress.to_document() if snapshot.progress else {}),
    }
    try:
        snapshot_id = session.scalar(_INSERT_SNAPSHOT, row)
    except IntegrityError:
        raise Conflict(
            f"window.seq {snapshot.seq} was already ingested for region {snapshot.region!r} (concurrently)"
        ) from None
    assert snapshot_id is not None
    _insert_children(session, snapshot_id, snapshot)
    return int(snapshot_id)


@dataclass(frozen=True)
class _WindowFacts:
    """What the checks of a new window need from the region's stored windows, read in one query."""

    batch_id: int | None  # the snapshot of the same batch, if stored
    batch_seq: int | None
    same_seq: bool  # a window of the same seq is stored
    overlapping_seq: int | None  # the seq of one stored window overlapping the new one
    before: int | None  # the highest seq of a window that ends before the new one starts
    after: int | None  # the lowest seq of a window that starts after the new one ends
    version_exists: bool


def _window_facts_query() -> Select[Any]:
    """The one query behind ``_WindowFacts``, with the new window's values as parameters (a batch or
    version of None matches nothing)."""
    table, versions = tables.snapshots, tables.versions
    mine = table.c.region_id == bindparam("region_id")
    start = bindparam("start", type_=table.c.window_start.type)
    end = bindparam("end", type_=table.c.window_end.type)
    batch = table.c.batch == bindparam("batch", type_=table.c.batch.type)
    overlapping = (
        select(table.c.seq)
        .where(mine, table.c.window_start < end, start < table.c.window_end)
        .order_by(table.c.seq)
        .limit(1)
    )
    version = select(versions.c.id).where(
        versions.c.region_id == bindparam("region_id"), versions.c.number == bindparam("version")
    )
    return select(
        select(table.c.id).where(mine, batch).scalar_subquery(),
        select(table.c.seq).where(mine, batch).scalar_subquery(),
        select(table.c.id).where(mine, table.c.seq == bindparam("seq")).exists(),
        overlapping.scalar_subquery(),
        select(func.max(table.c.seq)).where(mine, table.c.window_end <= start).scalar_subquery(),
        select(func.min(table.c.seq)).where(mine, table.c.window_start >= end).scalar_subquery(),
        version.exists(),
    )


# Statements of an ingest, built once (building and keying a statement costs more than running it).
_REGION = tables.regions.c
_REGION_LOCKED = (
    select(_REGION.id, _REGION.key_type, _REGION.slot_bits, _REGION.max_channels)
    .where(_REGION.name == bindparam("name"))
    .with_for_update()
)
_WINDOW_FACTS = _window_facts_query()
_INSERT_SNAPSHOT = insert(tables.snapshots).returning(tables.snapshots.c.id)


def _window_facts(session: Session, region_id: int, snapshot: Snapshot) -> _WindowFacts:
    parameters = {
        "region_id": region_id,
        "batch": snapshot.batch,
        "seq": snapshot.seq,
        "start": snapshot.window_start,
        "end": snapshot.window_end,
        "version": snapshot.version,
    }
    row = session.execute(_WINDOW_FACTS, parameters).one()
    return _WindowFacts(row[0], row[1], bool(row[2]), row[3], row[4], row[5], bool(row[6]))


def _check_new_window(session: Session, region_id: int, snapshot: Snapshot, window: _WindowFacts) -> None:
    if window.same_seq:
        raise InvalidInput(
            "window.seq",
            f"must be new: window.seq {snapshot.seq} was already ingested for region {snapshot.region!r}",
        )
    if window.overlapping_seq is not None:
        overlapping = session.execute(
            select(tables.snapshots.c.window_start, tables.snapshots.c.window_end).where(
                tables.snapshots.c.region_id == region_id, tables.snapshots.c.seq == window.overlapping_seq
            )
        ).one()
        raise InvalidInput(
            "window.start",
            f"must not overlap an ingested window: {snapshot.window_start.isoformat()} .. "
            f"{snapshot.window_end.isoformat()} overlaps "
            f"window seq {window.overlapping_seq} ({overlapping.window_start.isoformat()} .. "
            f"{overlapping.window_end.isoformat()}) of region {snapshot.region!r}",
        )
    before, after = window.before, window.after
    if (before is not None and snapshot.seq <= before) or (after is not None and snapshot.seq >= after):
        low = "-inf" if before is None else str(before)
        high = "inf" if after is None else str(after)
        raise InvalidInput(
            "window.seq",
            f"must be in ({low}, {high}) to agree with the window's time: the region's windows that end "
            f"before {snapshot.window_start.isoformat()} have seqs up to {low}, those that start after "
            f"{snapshot.window_end.isoformat()} from {high}; got {snapshot.seq}",
        )


def _insert_children(session: Session, snapshot_id: int, snapshot: Snapshot) -> None:
    """Insert the snapshot's items, slots and channels in chunks of ``INSERT_CHUNK`` rows.

    A window has up to millions of items: their rows are built from the item columns a chunk at a
    time (keys as ``repart.storage.keys`` stores them: a str as UTF-8 bytes in ``key_utf8``, an int in
    ``key_int``) and handed to the driver as plain tuples (``_insert_rows``), without SQLAlchemy's
    per-row parameter processing (most of an ingest's time with Core ``insert``) or ORM objects.
    """
    connection = session.connection()
    items = snapshot.item_columns
    text_keys = snapshot.key_type == "str"

    def item_rows(low: int, high: int) -> list[tuple[Any, ...]]:
        keys = items.keys[low:high]
        return list(
            zip(
                itertools.repeat(snapshot_id),
                range(low, low + len(keys)),
                itertools.repeat(None) if text_keys else keys,
                map(str.encode, cast(tuple[str, ...], keys)) if text_keys else itertools.repeat(None),
                items.counts[low:high].tolist(),
                items.deltas[low:high].tolist(),
            )
        )

    for low in range(0, len(items), INSERT_CHUNK):
        _insert_rows(connection, models.SnapshotItem, ITEM_COLUMNS, item_rows(low, low + INSERT_CHUNK))
    columns = snapshot.slot_columns
    slots = (
        []
        if columns is None
        else list(zip(itertools.repeat(snapshot_id), columns.slots.tolist(), columns.counts.tolist()))
    )
    for low in range(0, len(slots), INSERT_CHUNK):
        _insert_rows(connection, models.SnapshotSlot, SLOT_COLUMNS, slots[low : low + INSERT_CHUNK])
    channels = [(snapshot_id, *astuple(measured)) for measured in snapshot.channels or ()]
    if channels:
        _insert_rows(connection, models.SnapshotChannel, CHANNEL_COLUMNS, channels)


def _insert_rows(
    connection: Connection, model: type[models.Base], columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    """Add ``rows`` (values of ``columns`` in order) to the model's table in the connection's
    transaction: with ``COPY … FROM STDIN`` on PostgreSQL (psycopg; an ``executemany`` sends a
    statement a row and takes 27 s for 1M items there) and one ``executemany`` of ``INSERT`` on
    SQLite."""
    table = cast(Table, model.__table__)
    preparer = connection.dialect.identifier_preparer
    target = f"{preparer.format_table(table)} ({', '.join(map(preparer.quote, columns))})"
    if connection.dialect.name == "postgresql":
        driver_connection: Any = connection.connection.dbapi_connection
        with driver_connection.cursor() as cursor, cursor.copy(f"COPY {target} FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    connection.exec_driver_sql(f"INSERT INTO {target} VALUES ({', '.join('?' * len(columns))})", rows)


def get_snapshot(session: Session, region: str, seq: int) -> Snapshot:
    """The snapshot of window ``seq`` of ``region``; NotFound if there is none."""
    snapshots = _load(session, region, seq=seq)
    if not snapshots:
        raise NotFound(f"region {region!r} has no snapshot with window.seq {seq}")
    return snapshots[0]


def latest_snapshots(session: Session, region: str, count: int) -> list[Snapshot]:
    """The newest ``count`` snapshots of ``region`` (highest ``seq``), oldest first."""
    check("count", count, POSITIVE_INT)
    return _load(session, region, limit=count)


def _load(
    session: Session, region: str, *, seq: int | None = None, limit: int | None = None
) -> list[Snapshot]:
    """Snapshots with their items, slots and channels, read as plain rows.

    A window's slot counts alone are up to 2^S rows, and a controller tick loads a window at every
    decision: every table is read with a Core query built once (``_NEWEST_SNAPSHOTS``,
    ``_SNAPSHOT_OF_SEQ``, ``_CHILDREN``), no ORM object is made, and the rows are grouped here.
    """
    region_id = region_id_by_name(session, region)
    if seq is None:
        found = session.execute(_NEWEST_SNAPSHOTS, {"region_id": region_id, "limit": limit})
    else:
        found = session.execute(_SNAPSHOT_OF_SEQ, {"region_id": region_id, "seq": seq})
    rows = list(reversed(found.all()))
    ids = [row.id for row in rows]
    items, slots, channels = (_children(session, query, ids) for query in _CHILDREN)
    return [
        _from_row(region, row, items.get(row.id, []), slots.get(row.id, []), channels.get(row.id, []))
        for row in rows
    ]


def _children_query(child: Table, order: str, columns: tuple[str, ...]) -> Select[Any]:
    """The rows of child table ``child`` of the snapshots whose ids are parameter ``ids``:
    ``(snapshot_id, column values…)`` by snapshot and ``order``."""
    return (
        select(child.c.snapshot_id, *(child.c[name] for name in columns))
        .where(child.c.snapshot_id.in_(bindparam("ids", expanding=True)))
        .order_by(child.c.snapshot_id, child.c[order])
    )


# The statements of ``_load``, built once (building a statement costs more than running it).
_SNAPSHOT = tables.snapshots.c
_NEWEST_SNAPSHOTS = (
    select(tables.snapshots)
    .where(_SNAPSHOT.region_id == bindparam("region_id"))
    .order_by(_SNAPSHOT.seq.desc())
    .limit(bindparam("limit", type_=Integer))
)
_SNAPSHOT_OF_SEQ = select(tables.snapshots).where(
    _SNAPSHOT.region_id == bindparam("region_id"), _SNAPSHOT.seq == bindparam("seq")
)
_CHILDREN = (
    _children_query(tables.snapshot_items, "idx", ("key_int", "key_utf8", "count", "delta")),
    _children_query(tables.snapshot_slots, "slot", ("slot", "count")),
    _children_query(
        tables.snapshot_channels, "channel", ("channel", "tuples", "busy_seconds", "state_bytes")
    ),
)


def _children(session: Session, query: Select[Any], ids: list[int]) -> dict[int, list[tuple[Any, ...]]]:
    """The rows of a ``_CHILDREN`` query as ``{snapshot_id: [(column values…), …]}``, in its order."""
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    if not ids:
        return grouped
    for snapshot_id, *values in session.execute(query, {"ids": ids}):
        grouped.setdefault(snapshot_id, []).append(tuple(values))
    return grouped


def _from_row(
    region: str,
    row: Any,
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
        items=CounterItems(
            tuple(key_from_columns(key_int, key_utf8) for key_int, key_utf8, _, _ in items),
            np.array([count for _, _, count, _ in items], dtype=np.int64),
            np.array([delta for _, _, _, delta in items], dtype=np.int64),
        ),
        slot_bits=row.slot_bits,
        slots=SlotColumns(
            np.array([slot for slot, _ in slots], dtype=np.int64),
            np.array([count for _, count in slots], dtype=np.int64),
        ),
        version=row.version,
        channels=tuple(ChannelMeasurement(*values) for values in channels) or None,
        batch=row.batch,
        progress=stored_progress(row),
    )


def stored_progress(row: models.Snapshot) -> BatchProgress | None:
    """The batch's progress as stored (None when the job reported none)."""
    progress = BatchProgress(*(getattr(row, name) for name in PROGRESS_FIELDS))
    return None if progress == BatchProgress() else progress


@dataclass(frozen=True)
class SnapshotSummary:
    """A stored window without its contents: its seq, time range and counts, ``items`` the number of
    lossy-counter entries it retained, the job's ``batch`` and ``version``, where it came from
    (``source``) and when it was ingested."""

    seq: int
    window_start: datetime
    window_end: datetime
    tuples: int
    distinct_estimate: int
    epsilon: float
    items: int
    batch: int | None
    version: int | None
    source: str | None
    ingested_at: datetime


@dataclass(frozen=True)
class DeletedSnapshot:
    """What ``delete_snapshot`` removed: the window, whether ``force`` was given, the decisions that
    depended on it (empty when none did) and the id of the ``snapshot-deleted`` event."""

    snapshot: SnapshotSummary
    forced: bool
    depended_on: tuple[str, ...]
    event_id: int


def snapshot_summaries(session: Session, region: str) -> list[SnapshotSummary]:
    """The snapshots of ``region`` by seq, without their items (NotFound for an unknown region)."""
    return _summaries(session, region_by_name(session, region).id)


def delete_snapshot(session: Session, region: str, seq: int, *, force: bool = False) -> DeletedSnapshot:
    """Delete window ``seq`` of ``region`` with its items, slots and channels, and record a
    ``snapshot-deleted`` event (rule ``operator``) with the window, ``forced`` and ``depended_on``.

    A decision depends on the window, and the delete is refused with Conflict unless ``force``, when
    (``snapshot_dependents``) the region's ``considered_seq`` is at least ``seq`` (the tick has decided
    on the windows up to it, so the window was, or was passed over as, part of a decided window), or an
    event of the region lists ``seq`` in its ``window_seqs`` (a tick's ``activated``, ``no-change`` or
    ``recommended`` decision, an operator's ``scaled`` or ``rollback``, whose plans are weighed by those
    windows). A forced delete leaves the region's status as it is: the window is not decided on again.
    NotFound names the seq and the region when there is no such window. Nothing is written on error.
    """
    row = region_by_name(session, region)
    # The region row's lock orders the delete with ingests and a tick's persist step.
    session.execute(select(models.Region.id).where(models.Region.id == row.id).with_for_update())
    found = _summaries(session, row.id, seq)
    if not found:
        raise NotFound(f"region {region!r} has no snapshot with window.seq {seq}; {_seqs(session, row.id)}")
    dependents = tuple(snapshot_dependents(session, row, seq))
    if dependents and not force:
        raise Conflict(
            f"snapshot window.seq {seq} of region {region!r} is one a decision depends on: "
            f"{'; '.join(dependents)}; deleting it anyway needs force "
            f"(`repart snapshot delete {region} --seq {seq} --force`)"
        )
    summary = found[0]
    table = models.Snapshot
    session.execute(delete(table).where(table.region_id == row.id, table.seq == seq))
    message = (
        f"deleted snapshot window.seq {seq} ({summary.window_start.isoformat()} .. "
        f"{summary.window_end.isoformat()}, {summary.tuples} tuples)"
    )
    if dependents:
        message += f", forced although {'; '.join(dependents)}"
    data = {
        "seq": seq,
        "window_start": summary.window_start.isoformat(),
        "window_end": summary.window_end.isoformat(),
        "tuples": summary.tuples,
        "items": summary.items,
        "batch": summary.batch,
        "source": summary.source,
        "forced": force,
        "depended_on": list(dependents),
    }
    event_id = record_event(session, region, NewEvent("snapshot-deleted", "operator", message, data))
    return DeletedSnapshot(summary, force, dependents, event_id)


def snapshot_dependents(session: Session, region: models.Region, seq: int) -> list[str]:
    """Why a decision of ``region`` depends on its window ``seq``, one phrase per reason (empty: none
    does); the rule is ``delete_snapshot``'s."""
    reasons = []
    if region.considered_seq is not None and seq <= region.considered_seq:
        reasons.append(
            f"the region's decisions have considered the windows up to seq {region.considered_seq}"
        )
    event = models.Event
    recorded = session.execute(
        select(event.id, event.kind, event.data_json)
        .where(event.region_id == region.id, event.data_json.contains('"window_seqs"'))
        .order_by(event.id)
    )
    using = []
    for event_id, kind, data_json in recorded:
        data = load_object(data_json)
        if seq in (data.get("window_seqs") or ()):
            version = data.get("activated_version")
            using.append(f"{event_id} ({kind}{'' if version is None else f', version {version}'})")
    if using:
        reasons.append(f"event(s) {', '.join(using)} decided on windows including it")
    return reasons


def _summaries(session: Session, region_id: int, seq: int | None = None) -> list[SnapshotSummary]:
    """The region's snapshots (only window ``seq`` if given) by seq, each with its item count."""
    table, item = models.Snapshot, models.SnapshotItem
    items = select(func.count()).where(item.snapshot_id == table.id).correlate(table).scalar_subquery()
    query = select(table, items).where(table.region_id == region_id)
    if seq is not None:
        query = query.where(table.seq == seq)
    return [
        SnapshotSummary(
            seq=row.seq,
            window_start=row.window_start,
            window_end=row.window_end,
            tuples=row.tuples,
            distinct_estimate=row.distinct_estimate,
            epsilon=row.epsilon,
            items=count,
            batch=row.batch,
            version=row.version,
            source=row.source,
            ingested_at=row.ingested_at,
        )
        for row, count in session.execute(query.order_by(table.seq))
    ]


def _seqs(session: Session, region_id: int) -> str:
    """The region's window seqs in a phrase, for a NotFound message."""
    table = models.Snapshot
    low, high, count = session.execute(
        select(func.min(table.seq), func.max(table.seq), func.count()).where(table.region_id == region_id)
    ).one()
    if not count:
        return "it has no snapshots"
    return f"it has {count} snapshot(s), window.seq {low} to {high}"
