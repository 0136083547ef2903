"""SQLAlchemy 2.0 typed models of the controller's database (DESIGN §7).

One table per record the controller keeps: regions (configuration), snapshots with their retained
items, sparse per-slot counts and per-channel measurements (DESIGN §3), versions with their explicit
entries, plans with their moves (DESIGN §6), batch reports from Spark jobs, the audit log of events, and
leases. Keys are stored so they round-trip exactly: an int key in ``key_int`` (BIGINT), a str key as
its UTF-8 bytes in ``key_utf8`` (PostgreSQL text cannot hold NUL characters, which are valid keys).
Timestamps are timezone-aware UTC on the way in and out, whatever the backend.

The schema is owned by the Alembic revisions in ``repart.storage.migrations``; a test checks that this
metadata and the migrated schema agree. Versions are immutable once written: the ORM refuses to
change their content (only ``status`` may change) or to delete them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    event,
    inspect,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from repart.errors import Conflict
from repart.partitioning.domain import SPLIT_SCHEMES

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

KEY_TYPES = ("str", "int")
VERSION_STATUSES = ("planned", "applied", "superseded", "abandoned")
PLAN_STATUSES = ("pending", "applying", "applied", "failed", "superseded")
#: The statuses of a plan that a job has not finished applying yet.
OPEN_PLAN_STATUSES = ("pending", "applying")
REGION_MODES = ("auto", "recommend", "hold")
MOVE_KINDS = ("explicit", "slots")


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    Naive datetimes are rejected on the way in. SQLite stores the UTC wall time (it has no time zone
    type); PostgreSQL stores ``timestamptz``. Values read back are aware and in UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"timestamps must be timezone-aware, got the naive datetime {value.isoformat()}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


_ONE_KEY = "(key_int IS NULL) <> (key_utf8 IS NULL)"


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so constraint names agree across backends."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Region(Base):
    """A keyed, stateful stage of a pipeline and its controller configuration (DESIGN §8).

    ``settings_json`` holds the channel-count policy's parameters (target utilization, cooldown,
    hysteresis, rebalance threshold) as a JSON object.

    The reconcile status (DESIGN §12.2) lives on the row, so that a tick reads it with one small query
    and persists its decision with a compare-and-set: ``applied_version`` (the number of the version
    with status ``applied``), ``latest_version`` (the newest version's number), ``considered_seq``
    (the newest window seq a decision considered) and ``last_change_at`` (when a version changing N
    was activated: the channel-count policy's cooldown). All are None before the first version.
    ``mode`` is what the tick may do (DESIGN §12.3): ``auto`` act, ``recommend`` record what it would
    do without activating it, ``hold`` nothing; ``mode_reason`` says why, ``previous_mode`` is the mode
    ``resume`` returns to. The mode is part of the status a tick compares and sets.
    ``split_scheme`` puts the region in split mode (DESIGN §11.3: None keeps every key on one
    channel) and ``merge`` is the merge of a split key's partial state it requires
    (``repart.protocol.merge``).
    ``lease_token`` is the last fencing token issued for the region's lease (``repart.storage.leases``):
    it only grows, also across released leases.
    """

    __tablename__ = "regions"
    __table_args__ = (
        CheckConstraint(_in("key_type", KEY_TYPES), name="key_type"),
        CheckConstraint("1 <= min_channels AND min_channels <= max_channels", name="channel_bounds"),
        CheckConstraint(
            "min_channels <= n_channels_initial AND n_channels_initial <= max_channels",
            name="initial_channels",
        ),
        CheckConstraint(_in("mode", REGION_MODES), name="mode"),
        CheckConstraint(f"split_scheme IS NULL OR {_in('split_scheme', SPLIT_SCHEMES)}", name="split_scheme"),
        CheckConstraint("split_scheme IS NULL OR merge IS NOT NULL", name="split_merge"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    key_type: Mapped[str] = mapped_column(String(3))
    n_channels_initial: Mapped[int] = mapped_column(Integer)
    resources: Mapped[str] = mapped_column(String(3))
    alpha: Mapped[float] = mapped_column(Float)
    sigma: Mapped[float] = mapped_column(Float)
    algorithm: Mapped[str] = mapped_column(String(16))
    utility: Mapped[str] = mapped_column(String(8))
    policy: Mapped[str] = mapped_column(String(32))
    min_channels: Mapped[int] = mapped_column(Integer)
    max_channels: Mapped[int] = mapped_column(Integer)
    tail_aware: Mapped[bool] = mapped_column(Boolean)
    slot_bits: Mapped[int] = mapped_column(Integer)
    consistent_method: Mapped[str] = mapped_column(String(8))
    settings_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, onupdate=utc_now)
    applied_version: Mapped[int | None] = mapped_column(Integer)
    latest_version: Mapped[int | None] = mapped_column(Integer)
    considered_seq: Mapped[int | None] = mapped_column(BigInteger)
    last_change_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_token: Mapped[int] = mapped_column(BigInteger, default=0)
    mode: Mapped[str] = mapped_column(String(16), default="auto", server_default="auto")
    mode_reason: Mapped[str | None] = mapped_column(Text)
    previous_mode: Mapped[str | None] = mapped_column(String(16))
    split_scheme: Mapped[str | None] = mapped_column(String(16))
    merge: Mapped[str | None] = mapped_column(Text)


class Snapshot(Base):
    """One tumbling window's lossy counter and measurements (DESIGN §3); ``version`` was active.

    ``batch`` is the id of the job's batch the window observed (None when the document has none),
    unique per region: a job that submits a batch's snapshot again after a crash
    finds it there (exactly-once batches, ``repart.storage.client``).
    """

    __tablename__ = "snapshots"
    __table_args__ = (
        UniqueConstraint("region_id", "seq"),
        Index("ix_snapshots_region_id_batch", "region_id", "batch", unique=True),
        CheckConstraint("window_start < window_end", name="window_order"),
        CheckConstraint("tuples >= 0 AND distinct_estimate >= 0", name="counts"),
        CheckConstraint(_in("key_type", KEY_TYPES), name="key_type"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    window_end: Mapped[datetime] = mapped_column(UTCDateTime)
    tuples: Mapped[int] = mapped_column(BigInteger)
    distinct_estimate: Mapped[int] = mapped_column(BigInteger)
    epsilon: Mapped[float] = mapped_column(Float)
    key_type: Mapped[str] = mapped_column(String(3))
    slot_bits: Mapped[int] = mapped_column(Integer)
    version: Mapped[int | None] = mapped_column(Integer)
    ingested_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    source: Mapped[str | None] = mapped_column(Text)
    batch: Mapped[int | None] = mapped_column(BigInteger)

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
    """A retained lossy-counter entry ``(key, count, delta)``, in the snapshot's order."""

    __tablename__ = "snapshot_items"
    __table_args__ = (
        CheckConstraint(_ONE_KEY, name="one_key"),
        CheckConstraint("count >= 0 AND delta >= 0", name="counts"),
    )

    snapshot_id: Mapped[int] = mapped_column(ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    key_int: Mapped[int | None] = mapped_column(BigInteger)
    key_utf8: Mapped[bytes | None] = mapped_column(LargeBinary)
    count: Mapped[int] = mapped_column(BigInteger)
    delta: Mapped[int] = mapped_column(BigInteger)


class SnapshotSlot(Base):
    """The tuple count of one slot with a non-zero count (the bincount, stored sparse)."""

    __tablename__ = "snapshot_slots"
    __table_args__ = (CheckConstraint("slot >= 0 AND count >= 0", name="values"),)

    snapshot_id: Mapped[int] = mapped_column(ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class SnapshotChannel(Base):
    """What one channel measured during the window, under the version then active."""

    __tablename__ = "snapshot_channels"
    __table_args__ = (
        CheckConstraint(
            "channel >= 0 AND tuples >= 0 AND busy_seconds >= 0 AND state_bytes >= 0", name="values"
        ),
    )

    snapshot_id: Mapped[int] = mapped_column(ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True)
    channel: Mapped[int] = mapped_column(Integer, primary_key=True)
    tuples: Mapped[int] = mapped_column(BigInteger)
    busy_seconds: Mapped[float] = mapped_column(Float)
    state_bytes: Mapped[int] = mapped_column(BigInteger)


class Version(Base):
    """A partition function of a region, numbered 1, 2, … per region; immutable except ``status``."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("region_id", "number"),
        ForeignKeyConstraint(["region_id", "parent_number"], ["versions.region_id", "versions.number"]),
        CheckConstraint(_in("status", VERSION_STATUSES), name="status"),
        CheckConstraint("number >= 1 AND n_channels >= 1", name="numbers"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    parent_number: Mapped[int | None] = mapped_column(Integer)
    n_channels: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64))
    function_json: Mapped[str] = mapped_column(Text)
    algorithm: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    report_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    explicit: Mapped[list[VersionExplicit]] = relationship(
        order_by="VersionExplicit.idx", cascade="all, delete-orphan", passive_deletes=True
    )


VERSION_CONTENT = tuple(
    column.key for column in Version.__table__.columns if column.key not in ("id", "status")
)


class VersionExplicit(Base):
    """One entry ``key → channel`` of a version's explicit map, in the canonical JSON's key order."""

    __tablename__ = "version_explicit"
    __table_args__ = (
        CheckConstraint(_ONE_KEY, name="one_key"),
        CheckConstraint("channel >= 0", name="channel"),
    )

    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    key_int: Mapped[int | None] = mapped_column(BigInteger)
    key_utf8: Mapped[bytes | None] = mapped_column(LargeBinary)
    channel: Mapped[int] = mapped_column(Integer)


class Plan(Base):
    """A migration plan between two versions of a region (DESIGN §6) and its status (DESIGN §7)."""

    __tablename__ = "plans"
    __table_args__ = (
        ForeignKeyConstraint(["region_id", "from_version"], ["versions.region_id", "versions.number"]),
        ForeignKeyConstraint(["region_id", "to_version"], ["versions.region_id", "versions.number"]),
        UniqueConstraint("region_id", "to_version"),
        CheckConstraint(_in("status", PLAN_STATUSES), name="status"),
        CheckConstraint("explicit_moves >= 0 AND slot_moves >= 0", name="move_counts"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    from_version: Mapped[int] = mapped_column(Integer)
    to_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    predicted_cost: Mapped[float | None] = mapped_column(Float)
    predicted_m: Mapped[float | None] = mapped_column(Float)
    explicit_moves: Mapped[int] = mapped_column(Integer)
    slot_moves: Mapped[int] = mapped_column(Integer)
    plan_json: Mapped[str] = mapped_column(Text)
    digest: Mapped[str] = mapped_column(String(64))
    moved_rows: Mapped[int | None] = mapped_column(BigInteger)
    moved_bytes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, onupdate=utc_now)

    moves: Mapped[list[PlanMove]] = relationship(
        order_by="PlanMove.idx", cascade="all, delete-orphan", passive_deletes=True
    )


class PlanMove(Base):
    """One move of a plan: an explicit key ``(key, source, target, weight)`` or a slot range
    ``(first_slot..last_slot, source, target)``, in the plan JSON's order. A split plan's
    consolidations (DESIGN §11.3) are in its JSON only."""

    __tablename__ = "plan_moves"
    __table_args__ = (
        CheckConstraint(
            f"(kind = 'explicit' AND {_ONE_KEY} AND first_slot IS NULL AND last_slot IS NULL)"
            " OR (kind = 'slots' AND key_int IS NULL AND key_utf8 IS NULL"
            " AND 0 <= first_slot AND first_slot <= last_slot)",
            name="shape",
        ),
        CheckConstraint("source >= 0 AND target >= 0 AND source <> target", name="channels"),
    )

    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))
    key_int: Mapped[int | None] = mapped_column(BigInteger)
    key_utf8: Mapped[bytes | None] = mapped_column(LargeBinary)
    first_slot: Mapped[int | None] = mapped_column(Integer)
    last_slot: Mapped[int | None] = mapped_column(Integer)
    source: Mapped[int] = mapped_column(Integer)
    target: Mapped[int] = mapped_column(Integer)
    weight: Mapped[float | None] = mapped_column(Float)


class BatchReport(Base):
    """What a Spark batch reported (moved rows, timings, …) as a JSON object, optionally for a plan;
    one report per (region, batch): a batch run again after a crash keeps its first report."""

    __tablename__ = "batch_reports"
    __table_args__ = (Index("ix_batch_reports_region_id_batch", "region_id", "batch", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"))
    batch: Mapped[int] = mapped_column(BigInteger)
    payload_json: Mapped[str] = mapped_column(Text)
    reported_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class Event(Base):
    """An audit-log entry: what was decided, by which rule, with which numbers (``data_json``)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int | None] = mapped_column(ForeignKey("regions.id", ondelete="SET NULL"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    kind: Mapped[str] = mapped_column(String(32))
    rule: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    data_json: Mapped[str] = mapped_column(Text)


class Lease(Base):
    """The lease of the one controller allowed to act on a region until ``expires_at``; ``token`` is
    its fencing token, which a write checks (DESIGN §12.2)."""

    __tablename__ = "leases"

    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    token: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


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
