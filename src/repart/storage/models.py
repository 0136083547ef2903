"""SQLAlchemy 2.0 typed ORM classes of the controller's records, mapped onto ``repart.storage.tables``.

Each class maps one table of the schema (``tables``, where every column is defined and described); its
``Mapped`` annotations name the table's columns with their Python types, so that type checkers know the
attributes (a test checks them against the tables), and its relationships give a snapshot its items,
slots and channels, a version its explicit entries and a plan its moves, in their stored order.
Versions are immutable once written: the ORM refuses to change their content (only ``status`` may
change) or to delete them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, relationship

from repart.errors import Conflict
from repart.storage import tables


class Base(DeclarativeBase):
    """Declarative base on the schema's metadata (``tables.metadata``)."""

    metadata = tables.metadata


class Region(Base):
    """A keyed, stateful stage of a pipeline, its controller configuration and its reconcile status
    (``tables.regions``)."""

    __table__ = tables.regions

    id: Mapped[int]
    name: Mapped[str]
    key_type: Mapped[str]
    n_channels_initial: Mapped[int]
    resources: Mapped[str]
    alpha: Mapped[float]
    sigma: Mapped[float]
    algorithm: Mapped[str]
    utility: Mapped[str]
    policy: Mapped[str]
    min_channels: Mapped[int]
    max_channels: Mapped[int]
    tail_aware: Mapped[bool]
    slot_bits: Mapped[int]
    consistent_method: Mapped[str]
    settings_json: Mapped[str]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    applied_version: Mapped[int | None]
    latest_version: Mapped[int | None]
    considered_seq: Mapped[int | None]
    last_change_at: Mapped[datetime | None]
    lease_token: Mapped[int]
    mode: Mapped[str]
    mode_reason: Mapped[str | None]
    previous_mode: Mapped[str | None]
    split_scheme: Mapped[str | None]
    merge: Mapped[str | None]
    tick_failures: Mapped[int]
    retry_at: Mapped[datetime | None]
    last_error: Mapped[str | None]
    engine: Mapped[str]


class Snapshot(Base):
    """One tumbling window's lossy counter and measurements (``tables.snapshots``)."""

    __table__ = tables.snapshots

    id: Mapped[int]
    region_id: Mapped[int]
    seq: Mapped[int]
    window_start: Mapped[datetime]
    window_end: Mapped[datetime]
    tuples: Mapped[int]
    distinct_estimate: Mapped[int]
    epsilon: Mapped[float]
    key_type: Mapped[str]
    slot_bits: Mapped[int]
    version: Mapped[int | None]
    ingested_at: Mapped[datetime]
    source: Mapped[str | None]
    batch: Mapped[int | None]
    interval_seconds: Mapped[float | None]
    input_rows_per_second: Mapped[float | None]
    processed_rows_per_second: Mapped[float | None]
    backlog_rows: Mapped[int | None]

    items: Mapped[list[SnapshotItem]] = relationship(
        order_by="SnapshotItem.idx", cascade="all, delete-orphan", passive_deletes=True
    )
    slots: Mapped[list[SnapshotSlot]] = relationship(
        order_by="SnapshotSlot.slot", cascade="all, delete-orphan", passive_deletes=True
    )
    channels: Mapped[list[SnapshotChannel]] = relationship(
        order_by="SnapshotChannel.channel", cascade="all, delete-orphan", passive_deletes=True
    )


class SnapshotItem(Base):
    """A retained lossy-counter entry ``(key, count, delta)`` (``tables.snapshot_items``)."""

    __table__ = tables.snapshot_items

    snapshot_id: Mapped[int]
    idx: Mapped[int]
    key_int: Mapped[int | None]
    key_utf8: Mapped[bytes | None]
    count: Mapped[int]
    delta: Mapped[int]


class SnapshotSlot(Base):
    """The tuple count of one slot with a non-zero count (``tables.snapshot_slots``)."""

    __table__ = tables.snapshot_slots

    snapshot_id: Mapped[int]
    slot: Mapped[int]
    count: Mapped[int]


class SnapshotChannel(Base):
    """What one channel measured during the window (``tables.snapshot_channels``)."""

    __table__ = tables.snapshot_channels

    snapshot_id: Mapped[int]
    channel: Mapped[int]
    tuples: Mapped[int]
    busy_seconds: Mapped[float]
    state_bytes: Mapped[int]


class Version(Base):
    """A partition function of a region, numbered 1, 2, … per region; immutable except ``status``
    (``tables.versions``)."""

    __table__ = tables.versions

    id: Mapped[int]
    region_id: Mapped[int]
    number: Mapped[int]
    parent_number: Mapped[int | None]
    n_channels: Mapped[int]
    digest: Mapped[str]
    function_json: Mapped[str]
    algorithm: Mapped[str]
    status: Mapped[str]
    report_json: Mapped[str]
    created_at: Mapped[datetime]

    explicit: Mapped[list[VersionExplicit]] = relationship(
        order_by="VersionExplicit.idx", cascade="all, delete-orphan", passive_deletes=True
    )


# What a version may not change once written: every column but its id and status.
VERSION_CONTENT = tuple(
    column.key for column in tables.versions.columns if column.key not in ("id", "status")
)


class VersionExplicit(Base):
    """One entry ``key → channel`` of a version's explicit map (``tables.version_explicit``)."""

    __table__ = tables.version_explicit

    version_id: Mapped[int]
    idx: Mapped[int]
    key_int: Mapped[int | None]
    key_utf8: Mapped[bytes | None]
    channel: Mapped[int]


class Plan(Base):
    """A migration plan between two versions of a region and its status (``tables.plans``)."""

    __table__ = tables.plans

    id: Mapped[int]
    region_id: Mapped[int]
    from_version: Mapped[int]
    to_version: Mapped[int]
    status: Mapped[str]
    predicted_cost: Mapped[float | None]
    predicted_m: Mapped[float | None]
    explicit_moves: Mapped[int]
    slot_moves: Mapped[int]
    plan_json: Mapped[str | None]
    digest: Mapped[str]
    moved_rows: Mapped[int | None]
    moved_bytes: Mapped[int | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    pruned_at: Mapped[datetime | None]

    moves: Mapped[list[PlanMove]] = relationship(
        order_by="PlanMove.idx", cascade="all, delete-orphan", passive_deletes=True
    )


class PlanMove(Base):
    """One move of a plan: an explicit key or a slot range (``tables.plan_moves``)."""

    __table__ = tables.plan_moves

    plan_id: Mapped[int]
    idx: Mapped[int]
    kind: Mapped[str]
    key_int: Mapped[int | None]
    key_utf8: Mapped[bytes | None]
    first_slot: Mapped[int | None]
    last_slot: Mapped[int | None]
    source: Mapped[int]
    target: Mapped[int]
    weight: Mapped[float | None]


class BatchReport(Base):
    """What a Spark batch reported, optionally for a plan (``tables.batch_reports``)."""

    __table__ = tables.batch_reports

    id: Mapped[int]
    region_id: Mapped[int]
    plan_id: Mapped[int | None]
    batch: Mapped[int]
    payload_json: Mapped[str]
    reported_at: Mapped[datetime]


class Event(Base):
    """An audit-log entry (``tables.events``)."""

    __table__ = tables.events

    id: Mapped[int]
    region_id: Mapped[int | None]
    at: Mapped[datetime]
    kind: Mapped[str]
    rule: Mapped[str]
    message: Mapped[str]
    data_json: Mapped[str]


class ApiToken(Base):
    """A bearer token of the HTTP API, by its secret's hash (``tables.api_tokens``)."""

    __table__ = tables.api_tokens

    id: Mapped[int]
    secret_sha256: Mapped[str]
    scope: Mapped[str]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    region_id: Mapped[int | None]


class Lease(Base):
    """The lease of the one controller allowed to act on a region (``tables.leases``)."""

    __table__ = tables.leases

    region_id: Mapped[int]
    holder: Mapped[str]
    token: Mapped[int]
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class QueryLease(Base):
    """The lease of the streaming query running over a ``spark-state`` region's checkpoint
    (``tables.query_leases``)."""

    __table__ = tables.query_leases

    region_id: Mapped[int]
    checkpoint: Mapped[str]
    holder: Mapped[str]
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


@event.listens_for(Version, "before_update")
def _refuse_version_change(_mapper: Mapper[Any], _connection: Any, target: Version) -> None:
    state = inspect(target)
    changed = [name for name in VERSION_CONTENT if state.attrs[name].history.has_changes()]
    if changed:
        raise Conflict(
            f"version {target.number} is immutable once written; only status may change, "
            f"not {', '.join(changed)}"
        )


@event.listens_for(Version, "before_delete")
def _refuse_version_delete(_mapper: Mapper[Any], _connection: Any, target: Version) -> None:
    raise Conflict(f"version {target.number} is immutable once written; it cannot be deleted")


@event.listens_for(VersionExplicit, "before_update")
@event.listens_for(VersionExplicit, "before_delete")
def _refuse_explicit_change(_mapper: Mapper[Any], _connection: Any, target: VersionExplicit) -> None:
    raise Conflict("the explicit entries of a version are immutable once written")
