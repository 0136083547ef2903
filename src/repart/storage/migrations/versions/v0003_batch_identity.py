"""Batch identity: exactly-once snapshots and batch reports.

``snapshots.batch`` records the id of the job's batch a snapshot observed, unique per region (several
NULLs allowed: snapshots from spool files carry none), so a job that submits a batch's snapshot again
after a crash finds it. ``batch_reports`` becomes unique per (region, batch): a batch is reported once.
Reports that an earlier job recorded twice for one batch (reruns before this revision) are reduced to
the first.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_reports = sa.table(
    "batch_reports",
    sa.column("id", sa.Integer()),
    sa.column("region_id", sa.Integer()),
    sa.column("batch", sa.BigInteger()),
)


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("batch", sa.BigInteger(), nullable=True))
    op.create_index("ix_snapshots_region_id_batch", "snapshots", ["region_id", "batch"], unique=True)
    first = sa.select(sa.func.min(_reports.c.id)).group_by(_reports.c.region_id, _reports.c.batch)
    op.execute(sa.delete(_reports).where(_reports.c.id.not_in(first)))
    op.create_index("ix_batch_reports_region_id_batch", "batch_reports", ["region_id", "batch"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_batch_reports_region_id_batch", table_name="batch_reports")
    op.drop_index("ix_snapshots_region_id_batch", table_name="snapshots")
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("batch")
