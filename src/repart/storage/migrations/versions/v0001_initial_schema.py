"""Initial schema: regions, snapshots, versions, plans, batch reports, events, leases.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "regions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("key_type", sa.String(length=3), nullable=False),
        sa.Column("n_channels_initial", sa.Integer(), nullable=False),
        sa.Column("resources", sa.String(length=3), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("sigma", sa.Float(), nullable=False),
        sa.Column("algorithm", sa.String(length=16), nullable=False),
        sa.Column("utility", sa.String(length=8), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("min_channels", sa.Integer(), nullable=False),
        sa.Column("max_channels", sa.Integer(), nullable=False),
        sa.Column("tail_aware", sa.Boolean(), nullable=False),
        sa.Column("slot_bits", sa.Integer(), nullable=False),
        sa.Column("consistent_method", sa.String(length=8), nullable=False),
        sa.Column("settings_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("key_type IN ('str', 'int')", name=op.f("ck_regions_key_type")),
        sa.CheckConstraint(
            "1 <= min_channels AND min_channels <= max_channels", name=op.f("ck_regions_channel_bounds")
        ),
        sa.CheckConstraint(
            "min_channels <= n_channels_initial AND n_channels_initial <= max_channels",
            name=op.f("ck_regions_initial_channels"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regions")),
        sa.UniqueConstraint("name", name=op.f("uq_regions_name")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region_id", sa.Integer(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_events_region_id_regions"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_region_id"), "events", ["region_id"])
    op.create_table(
        "leases",
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_leases_region_id_regions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("region_id", name=op.f("pk_leases")),
    )
    op.create_table(
        "snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tuples", sa.BigInteger(), nullable=False),
        sa.Column("distinct_estimate", sa.BigInteger(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("key_type", sa.String(length=3), nullable=False),
        sa.Column("slot_bits", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.CheckConstraint("key_type IN ('str', 'int')", name=op.f("ck_snapshots_key_type")),
        sa.CheckConstraint("tuples >= 0 AND distinct_estimate >= 0", name=op.f("ck_snapshots_counts")),
        sa.CheckConstraint("window_start < window_end", name=op.f("ck_snapshots_window_order")),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_snapshots_region_id_regions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshots")),
        sa.UniqueConstraint("region_id", "seq", name=op.f("uq_snapshots_region_id_seq")),
    )
    op.create_index(op.f("ix_snapshots_region_id"), "snapshots", ["region_id"])
    op.create_table(
        "versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("parent_number", sa.Integer(), nullable=True),
        sa.Column("n_channels", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("function_json", sa.Text(), nullable=False),
        sa.Column("algorithm", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('planned', 'applied', 'superseded', 'abandoned')", name=op.f("ck_versions_status")
        ),
        sa.CheckConstraint("number >= 1 AND n_channels >= 1", name=op.f("ck_versions_numbers")),
        sa.ForeignKeyConstraint(
            ["region_id", "parent_number"],
            ["versions.region_id", "versions.number"],
            name=op.f("fk_versions_region_id_parent_number_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_versions_region_id_regions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_versions")),
        sa.UniqueConstraint("region_id", "number", name=op.f("uq_versions_region_id_number")),
    )
    op.create_index(op.f("ix_versions_region_id"), "versions", ["region_id"])
    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=False),
        sa.Column("to_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("predicted_cost", sa.Float(), nullable=True),
        sa.Column("predicted_m", sa.Float(), nullable=True),
        sa.Column("explicit_moves", sa.Integer(), nullable=False),
        sa.Column("slot_moves", sa.Integer(), nullable=False),
        sa.Column("plan_json", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("moved_rows", sa.BigInteger(), nullable=True),
        sa.Column("moved_bytes", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'applying', 'applied', 'failed', 'superseded')",
            name=op.f("ck_plans_status"),
        ),
        sa.CheckConstraint("explicit_moves >= 0 AND slot_moves >= 0", name=op.f("ck_plans_move_counts")),
        sa.ForeignKeyConstraint(
            ["region_id", "from_version"],
            ["versions.region_id", "versions.number"],
            name=op.f("fk_plans_region_id_from_version_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["region_id", "to_version"],
            ["versions.region_id", "versions.number"],
            name=op.f("fk_plans_region_id_to_version_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_plans_region_id_regions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plans")),
        sa.UniqueConstraint("region_id", "to_version", name=op.f("uq_plans_region_id_to_version")),
    )
    op.create_index(op.f("ix_plans_region_id"), "plans", ["region_id"])
    op.create_table(
        "snapshot_channels",
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.Integer(), nullable=False),
        sa.Column("tuples", sa.BigInteger(), nullable=False),
        sa.Column("busy_seconds", sa.Float(), nullable=False),
        sa.Column("state_bytes", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "channel >= 0 AND tuples >= 0 AND busy_seconds >= 0 AND state_bytes >= 0",
            name=op.f("ck_snapshot_channels_values"),
        ),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["snapshots.id"],
            name=op.f("fk_snapshot_channels_snapshot_id_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_id", "channel", name=op.f("pk_snapshot_channels")),
    )
    op.create_table(
        "snapshot_items",
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("key_int", sa.BigInteger(), nullable=True),
        sa.Column("key_utf8", sa.LargeBinary(), nullable=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("(key_int IS NULL) <> (key_utf8 IS NULL)", name=op.f("ck_snapshot_items_one_key")),
        sa.CheckConstraint("count >= 0 AND delta >= 0", name=op.f("ck_snapshot_items_counts")),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["snapshots.id"],
            name=op.f("fk_snapshot_items_snapshot_id_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_id", "idx", name=op.f("pk_snapshot_items")),
    )
    op.create_table(
        "snapshot_slots",
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("slot >= 0 AND count >= 0", name=op.f("ck_snapshot_slots_values")),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["snapshots.id"],
            name=op.f("fk_snapshot_slots_snapshot_id_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_id", "slot", name=op.f("pk_snapshot_slots")),
    )
    op.create_table(
        "version_explicit",
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("key_int", sa.BigInteger(), nullable=True),
        sa.Column("key_utf8", sa.LargeBinary(), nullable=True),
        sa.Column("channel", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "(key_int IS NULL) <> (key_utf8 IS NULL)", name=op.f("ck_version_explicit_one_key")
        ),
        sa.CheckConstraint("channel >= 0", name=op.f("ck_version_explicit_channel")),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["versions.id"],
            name=op.f("fk_version_explicit_version_id_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("version_id", "idx", name=op.f("pk_version_explicit")),
    )
    op.create_table(
        "batch_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("batch", sa.BigInteger(), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name=op.f("fk_batch_reports_plan_id_plans"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["region_id"], ["regions.id"], name=op.f("fk_batch_reports_region_id_regions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_reports")),
    )
    op.create_index(op.f("ix_batch_reports_region_id"), "batch_reports", ["region_id"])
    op.create_table(
        "plan_moves",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("key_int", sa.BigInteger(), nullable=True),
        sa.Column("key_utf8", sa.LargeBinary(), nullable=True),
        sa.Column("first_slot", sa.Integer(), nullable=True),
        sa.Column("last_slot", sa.Integer(), nullable=True),
        sa.Column("source", sa.Integer(), nullable=False),
        sa.Column("target", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=True),
        sa.CheckConstraint(
            "(kind = 'explicit' AND (key_int IS NULL) <> (key_utf8 IS NULL) AND first_slot IS NULL"
            " AND last_slot IS NULL) OR (kind = 'slots' AND key_int IS NULL AND key_utf8 IS NULL"
            " AND 0 <= first_slot AND first_slot <= last_slot)",
            name=op.f("ck_plan_moves_shape"),
        ),
        sa.CheckConstraint(
            "source >= 0 AND target >= 0 AND source <> target", name=op.f("ck_plan_moves_channels")
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name=op.f("fk_plan_moves_plan_id_plans"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("plan_id", "idx", name=op.f("pk_plan_moves")),
    )


def downgrade() -> None:
    op.drop_table("plan_moves")
    op.drop_index(op.f("ix_batch_reports_region_id"), table_name="batch_reports")
    op.drop_table("batch_reports")
    op.drop_table("version_explicit")
    op.drop_table("snapshot_slots")
    op.drop_table("snapshot_items")
    op.drop_table("snapshot_channels")
    op.drop_index(op.f("ix_plans_region_id"), table_name="plans")
    op.drop_table("plans")
    op.drop_index(op.f("ix_versions_region_id"), table_name="versions")
    op.drop_table("versions")
    op.drop_index(op.f("ix_snapshots_region_id"), table_name="snapshots")
    op.drop_table("snapshots")
    op.drop_table("leases")
    op.drop_index(op.f("ix_events_region_id"), table_name="events")
    op.drop_table("events")
    op.drop_table("regions")
