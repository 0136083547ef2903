"""Region modes: ``auto``, ``recommend`` or ``hold``, with the reason and the mode to resume.

``regions.mode`` is what the controller's tick may do with the region: act (``auto``), record what it
would do without activating it (``recommend``), or nothing (``hold``). ``mode_reason`` says why the
region is in its mode (an operator's words, or the action that held it), ``previous_mode`` is the mode
``repart resume`` returns to. Existing regions become ``auto``, as they ran before.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.add_column(sa.Column("mode", sa.String(16), nullable=False, server_default="auto"))
        batch.add_column(sa.Column("mode_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("previous_mode", sa.String(16), nullable=True))
        batch.create_check_constraint(op.f("ck_regions_mode"), "mode IN ('auto', 'recommend', 'hold')")


def downgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.drop_constraint(op.f("ck_regions_mode"), type_="check")
        batch.drop_column("previous_mode")
        batch.drop_column("mode_reason")
        batch.drop_column("mode")
