"""The controller's database schema as SQLAlchemy Core tables, defined once.

One table per record the controller keeps: regions (configuration), snapshots with their retained
items, sparse per-slot counts and per-channel measurements, versions with their explicit
entries, plans with their moves, batch reports from Spark jobs, the audit log of events, and
leases. Keys are stored so they round-trip exactly: an int key in ``key_int`` (BIGINT), a str key as
its UTF-8 bytes in ``key_utf8`` (PostgreSQL text cannot hold NUL characters, which are valid keys).
Timestamps are timezone-aware UTC on the way in and out, whatever the backend.

The ORM classes of ``repart.storage.models`` are mapped onto these tables. They are Core tables so
that a read which needs no objects, ``repart status`` (``repart.storage.overview``), can query them
without loading SQLAlchemy's ORM or mapping the classes. The schema is owned by the Alembic
revisions in ``repart.storage.migrations``; a test checks that this metadata and the migrated schema
agree.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
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
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

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
# Who places a region's state: repart's partition function, or Spark over a count of state partitions.
ENGINES = ("repart", "spark-state")
MOVE_KINDS = ("explicit", "slots")

#: Every table, with a naming convention, so constraint names agree across backends.
metadata = MetaData(naming_convention=NAMING_CONVENTION)


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

# A keyed, stateful stage of a pipeline and its controller configuration.
#
# ``settings_json`` holds the channel-count policy's parameters (target utilization, band, batch
# interval, stabilization, rebalance threshold, ...) as a JSON object.
#
# The reconcile status lives on the row, so that a tick reads it with one small query
# and persists its decision with a compare-and-set: ``applied_version`` (the number of the version
# with status ``applied``), ``latest_version`` (the newest version's number), ``considered_seq``
# (the newest window seq a decision considered) and ``last_change_at`` (when a version changing N
# was activated). All are None before the first version.
# ``mode`` is what the tick may do: ``auto`` act, ``recommend`` record what it would
# do without activating it, ``hold`` nothing; ``mode_reason`` says why, ``previous_mode`` is the mode
# ``resume`` returns to. The mode is part of the status a tick compares and sets.
# ``split_scheme`` puts the region in split mode (None keeps every key on one
# channel) and ``merge`` is the merge of a split key's partial state it requires
# (``repart.protocol.merge``).
# ``lease_token`` is the last fencing token issued for the region's lease (``repart.storage.leases``):
# it only grows, also across released leases.
# ``tick_failures`` counts the region's failed ticks in a row, ``retry_at`` is when the daemon ticks it
# again (exponential backoff, ``repart.controller.backoff``) and ``last_error`` the last failure's
# message; a successful tick or ``repart resume`` clears them.
# ``engine`` says who places the region's state (``ENGINES``): ``repart`` (its versions are partition
# functions) or ``spark-state`` (a Structured Streaming query's own state; its versions are counts of
# state partitions, never in split mode).
regions = Table(
    "regions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("key_type", String(3), nullable=False),
    Column("n_channels_initial", Integer, nullable=False),
    Column("resources", String(3), nullable=False),
    Column("alpha", Float, nullable=False),
    Column("sigma", Float, nullable=False),
    Column("algorithm", String(16), nullable=False),
    Column("utility", String(8), nullable=False),
    Column("policy", String(32), nullable=False),
    Column("min_channels", Integer, nullable=False),
    Column("max_channels", Integer, nullable=False),
    Column("tail_aware", Boolean, nullable=False),
    Column("slot_bits", Integer, nullable=False),
    Column("consistent_method", String(8), nullable=False),
    Column("settings_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=utc_now),
    Column("updated_at", UTCDateTime, nullable=False, default=utc_now, onupdate=utc_now),
    Column("applied_version", Integer),
    Column("latest_version", Integer),
    Column("considered_seq", BigInteger),
    Column("last_change_at", UTCDateTime),
    Column("lease_token", BigInteger, nullable=False, default=0),
    Column("mode", String(16), nullable=False, default="auto", server_default="auto"),
    Column("mode_reason", Text),
    Column("previous_mode", String(16)),
    Column("split_scheme", String(16)),
    Column("merge", Text),
    Column("tick_failures", Integer, nullable=False, default=0, server_default="0"),
    Column("retry_at", UTCDateTime),
    Column("last_error", Text),
    Column("engine", String(16), nullable=False, default="repart", server_default="repart"),
    CheckConstraint(_in("key_type", KEY_TYPES), name="key_type"),
    CheckConstraint("1 <= min_channels AND min_channels <= max_channels", name="channel_bounds"),
    CheckConstraint(
        "min_channels <= n_channels_initial AND n_channels_initial <= max_channels",
        name="initial_channels",
    ),
    CheckConstraint(_in("mode", REGION_MODES), name="mode"),
    CheckConstraint(f"split_scheme IS NULL OR {_in('split_scheme', SPLIT_SCHEMES)}", name="split_scheme"),
    CheckConstraint("split_scheme IS NULL OR merge IS NOT NULL", name="split_merge"),
    CheckConstraint("tick_failures >= 0", name="tick_failures"),
    CheckConstraint(_in("engine", ENGINES), name="engine"),
    CheckConstraint("engine = 'repart' OR split_scheme IS NULL", name="engine_split"),
)

# One tumbling window's lossy counter and measurements; ``version`` was active.
#
# ``batch`` is the id of the job's batch the window observed (None when the document has none),
# unique per region: a job that submits a batch's snapshot again after a crash finds it there
# (exactly-once batches, ``repart.storage.client``).
snapshots = Table(
    "snapshots",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("seq", BigInteger, nullable=False),
    Column("window_start", UTCDateTime, nullable=False),
    Column("window_end", UTCDateTime, nullable=False),
    Column("tuples", BigInteger, nullable=False),
    Column("distinct_estimate", BigInteger, nullable=False),
    Column("epsilon", Float, nullable=False),
    Column("key_type", String(3), nullable=False),
    Column("slot_bits", Integer, nullable=False),
    Column("version", Integer),
    Column("ingested_at", UTCDateTime, nullable=False, default=utc_now),
    Column("source", Text),
    Column("batch", BigInteger),
    # The batch's progress as the job reported it (``repart.protocol.snapshot.BatchProgress``).
    Column("interval_seconds", Float),
    Column("input_rows_per_second", Float),
    Column("processed_rows_per_second", Float),
    Column("backlog_rows", BigInteger),
    UniqueConstraint("region_id", "seq"),
    Index("ix_snapshots_region_id_batch", "region_id", "batch", unique=True),
    CheckConstraint("window_start < window_end", name="window_order"),
    CheckConstraint("tuples >= 0 AND distinct_estimate >= 0", name="counts"),
    CheckConstraint(_in("key_type", KEY_TYPES), name="key_type"),
)

# A retained lossy-counter entry ``(key, count, delta)``, in the snapshot's order.
snapshot_items = Table(
    "snapshot_items",
    metadata,
    Column("snapshot_id", Integer, ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("key_int", BigInteger),
    Column("key_utf8", LargeBinary),
    Column("count", BigInteger, nullable=False),
    Column("delta", BigInteger, nullable=False),
    CheckConstraint(_ONE_KEY, name="one_key"),
    CheckConstraint("count >= 0 AND delta >= 0", name="counts"),
)

# The tuple count of one slot with a non-zero count (the bincount, stored sparse).
snapshot_slots = Table(
    "snapshot_slots",
    metadata,
    Column("snapshot_id", Integer, ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("count", BigInteger, nullable=False),
    CheckConstraint("slot >= 0 AND count >= 0", name="values"),
)

# What one channel measured during the window, under the version then active.
snapshot_channels = Table(
    "snapshot_channels",
    metadata,
    Column("snapshot_id", Integer, ForeignKey("snapshots.id", ondelete="CASCADE"), primary_key=True),
    Column("channel", Integer, primary_key=True),
    Column("tuples", BigInteger, nullable=False),
    Column("busy_seconds", Float, nullable=False),
    Column("state_bytes", BigInteger, nullable=False),
    CheckConstraint("channel >= 0 AND tuples >= 0 AND busy_seconds >= 0 AND state_bytes >= 0", name="values"),
)

# A partition function of a region, numbered 1, 2, … per region; immutable except ``status`` (the ORM
# refuses other changes, ``repart.storage.models``).
versions = Table(
    "versions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("number", Integer, nullable=False),
    Column("parent_number", Integer),
    Column("n_channels", Integer, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("function_json", Text, nullable=False),
    Column("algorithm", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("report_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=utc_now),
    UniqueConstraint("region_id", "number"),
    ForeignKeyConstraint(["region_id", "parent_number"], ["versions.region_id", "versions.number"]),
    CheckConstraint(_in("status", VERSION_STATUSES), name="status"),
    CheckConstraint("number >= 1 AND n_channels >= 1", name="numbers"),
)

# One entry ``key → channel`` of a version's explicit map, in the canonical JSON's key order.
version_explicit = Table(
    "version_explicit",
    metadata,
    Column("version_id", Integer, ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("key_int", BigInteger),
    Column("key_utf8", LargeBinary),
    Column("channel", Integer, nullable=False),
    CheckConstraint(_ONE_KEY, name="one_key"),
    CheckConstraint("channel >= 0", name="channel"),
)

# A migration plan between two versions of a region and its status.
# ``pruned_at`` is when retention (``repart.storage.retention``) deleted the plan's moves: its JSON is
# then None and its ``plan_moves`` rows are gone; the row keeps the plan's summary.
plans = Table(
    "plans",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("from_version", Integer, nullable=False),
    Column("to_version", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("predicted_cost", Float),
    Column("predicted_m", Float),
    Column("explicit_moves", Integer, nullable=False),
    Column("slot_moves", Integer, nullable=False),
    Column("plan_json", Text),
    Column("digest", String(64), nullable=False),
    Column("moved_rows", BigInteger),
    Column("moved_bytes", BigInteger),
    Column("created_at", UTCDateTime, nullable=False, default=utc_now),
    Column("updated_at", UTCDateTime, nullable=False, default=utc_now, onupdate=utc_now),
    Column("pruned_at", UTCDateTime),
    ForeignKeyConstraint(["region_id", "from_version"], ["versions.region_id", "versions.number"]),
    ForeignKeyConstraint(["region_id", "to_version"], ["versions.region_id", "versions.number"]),
    UniqueConstraint("region_id", "to_version"),
    CheckConstraint(_in("status", PLAN_STATUSES), name="status"),
    CheckConstraint("explicit_moves >= 0 AND slot_moves >= 0", name="move_counts"),
    CheckConstraint("(plan_json IS NULL) = (pruned_at IS NOT NULL)", name="pruned"),
)

# One move of a plan: an explicit key ``(key, source, target, weight)`` or a slot range
# ``(first_slot..last_slot, source, target)``, in the plan JSON's order. A split plan's
# consolidations are in its JSON only.
plan_moves = Table(
    "plan_moves",
    metadata,
    Column("plan_id", Integer, ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("key_int", BigInteger),
    Column("key_utf8", LargeBinary),
    Column("first_slot", Integer),
    Column("last_slot", Integer),
    Column("source", Integer, nullable=False),
    Column("target", Integer, nullable=False),
    Column("weight", Float),
    CheckConstraint(
        f"(kind = 'explicit' AND {_ONE_KEY} AND first_slot IS NULL AND last_slot IS NULL)"
        " OR (kind = 'slots' AND key_int IS NULL AND key_utf8 IS NULL"
        " AND 0 <= first_slot AND first_slot <= last_slot)",
        name="shape",
    ),
    CheckConstraint("source >= 0 AND target >= 0 AND source <> target", name="channels"),
)

# What a Spark batch reported (moved rows, timings, …) as a JSON object, optionally for a plan; one
# report per (region, batch): a batch run again after a crash keeps its first report.
batch_reports = Table(
    "batch_reports",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("plan_id", Integer, ForeignKey("plans.id", ondelete="SET NULL")),
    Column("batch", BigInteger, nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("reported_at", UTCDateTime, nullable=False, default=utc_now),
    Index("ix_batch_reports_region_id_batch", "region_id", "batch", unique=True),
)

# An audit-log entry: what was decided, by which rule, with which numbers (``data_json``).
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="SET NULL"), index=True),
    Column("at", UTCDateTime, nullable=False, default=utc_now),
    Column("kind", String(32), nullable=False),
    Column("rule", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("data_json", Text, nullable=False),
)

# The lease of the one controller allowed to act on a region until ``expires_at``; ``token`` is its
# fencing token, which a write checks.
leases = Table(
    "leases",
    metadata,
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("token", BigInteger, nullable=False),
    Column("acquired_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# The lease of the Structured Streaming query that runs over a ``spark-state`` region's checkpoint
# (``repart.storage.query_leases``): Spark has no checkpoint lock, so a checkpoint is repartitioned only
# while no live lease names its region. ``holder`` names the driver (host, process id), ``expires_at``
# ends a lease its query stopped renewing (a killed driver).
query_leases = Table(
    "query_leases",
    metadata,
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), primary_key=True),
    Column("checkpoint", Text, nullable=False),
    Column("holder", String(200), nullable=False),
    Column("acquired_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# A bearer token of the HTTP API (``repart.storage.tokens``): only the SHA-256 of its secret is kept,
# with its scope (``job:REGION``, ``read`` or ``operator``), its expiry (None: never), when it was last
# used (to the minute) and when it was revoked (None: valid). A job token's region is ``region_id``: the
# token is deleted with its region (a job token without one was revoked when its region was found gone).
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("secret_sha256", String(64), nullable=False),
    Column("scope", String(200), nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=utc_now),
    Column("expires_at", UTCDateTime),
    Column("last_used_at", UTCDateTime),
    Column("revoked_at", UTCDateTime),
    Column("region_id", Integer, ForeignKey("regions.id", ondelete="CASCADE"), index=True),
    CheckConstraint(
        "scope NOT LIKE 'job:%' OR region_id IS NOT NULL OR revoked_at IS NOT NULL", name="job_region"
    ),
)
