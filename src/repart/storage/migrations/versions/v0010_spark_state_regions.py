"""Regions of Spark-managed state, and the lease a running streaming query holds on its region.

``regions.engine`` says who places a region's state: ``repart`` (repart's partition function, every
existing region) or ``spark-state`` (a Structured Streaming query's own state, placed by Spark over a
count of state partitions that repart chooses). ``query_leases`` holds, per region, the lease of the
streaming query that runs over its checkpoint: Spark has no checkpoint lock, so repart refuses to
repartition a checkpoint while a live lease names it.

The downgrade is refused (``Conflict``, before anything changes) while a ``spark-state`` region exists:
the older schema cannot tell it from a region of repart's own.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from repart.errors import Conflict

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.add_column(sa.Column("engine", sa.String(16), nullable=False, server_default="repart"))
        batch.create_check_constraint(op.f("ck_regions_engine"), "engine IN ('repart', 'spark-state')")
        batch.create_check_constraint(
            op.f("ck_regions_engine_split"), "engine = 'repart' OR split_scheme IS NULL"
        )
    op.create_table(
        "query_leases",
        sa.Column("region_id", sa.Integer(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["region_id"],
            ["regions.id"],
            name=op.f("fk_query_leases_region_id_regions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("region_id", name=op.f("pk_query_leases")),
    )


def downgrade() -> None:
    found = op.get_bind().execute(sa.text("SELECT count(*) FROM regions WHERE engine <> 'repart'")).scalar()
    if found:
        raise Conflict(
            f"revision 0010 cannot be downgraded: {found} region(s) control Spark-managed state, which "
            "revision 0009 cannot hold; delete them first (`repart region delete NAME --force`)"
        )
    op.drop_table("query_leases")
    with op.batch_alter_table("regions") as batch:
        batch.drop_constraint(op.f("ck_regions_engine_split"), type_="check")
        batch.drop_constraint(op.f("ck_regions_engine"), type_="check")
        batch.drop_column("engine")
