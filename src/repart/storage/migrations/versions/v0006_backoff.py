"""Backoff of failing regions and retention of old plans' moves.

``regions.tick_failures`` counts a region's failed ticks in a row, ``regions.retry_at`` is when the
daemon ticks it again and ``regions.last_error`` the last failure's message (existing regions start
with no failures). ``plans.pruned_at`` is when retention deleted a plan's moves; a pruned plan's
``plan_json`` is None, so the column becomes nullable, and a check keeps the two in step (existing
plans are not pruned).

The downgrade is refused (``Conflict``, before anything changes) once a plan's moves were pruned: the
older schema needs every plan's JSON, and the pruned moves are gone.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from repart.errors import Conflict

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.add_column(sa.Column("tick_failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.create_check_constraint(op.f("ck_regions_tick_failures"), "tick_failures >= 0")
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True))
        batch.alter_column("plan_json", existing_type=sa.Text(), nullable=True)
        batch.create_check_constraint(
            op.f("ck_plans_pruned"), "(plan_json IS NULL) = (pruned_at IS NOT NULL)"
        )


def downgrade() -> None:
    pruned = op.get_bind().execute(sa.text("SELECT count(*) FROM plans WHERE pruned_at IS NOT NULL")).scalar()
    if pruned:
        raise Conflict(
            f"revision 0006 cannot be downgraded: the moves of {pruned} plan(s) were pruned, and revision "
            "0005 needs every plan's moves; stay at 0006 or restore a backup taken before the pruning"
        )
    with op.batch_alter_table("plans") as batch:
        batch.drop_constraint(op.f("ck_plans_pruned"), type_="check")
        batch.alter_column("plan_json", existing_type=sa.Text(), nullable=False)
        batch.drop_column("pruned_at")
    with op.batch_alter_table("regions") as batch:
        batch.drop_constraint(op.f("ck_regions_tick_failures"), type_="check")
        batch.drop_column("last_error")
        batch.drop_column("retry_at")
        batch.drop_column("tick_failures")
