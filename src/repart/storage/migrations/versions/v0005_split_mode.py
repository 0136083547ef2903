"""Split mode: a region's split scheme and the merge of its partial state.

``regions.split_scheme`` (None: every key keeps one channel, as before) names the rule that picks a hot
key's candidate channels; ``regions.merge`` is the merge of a split key's partial state rows the
region declares (``column=sum|min|max,…``), required in split mode. Existing regions stay key-preserving.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SCHEMES = "'pkg', 'dchoices', 'wchoices', 'rr', 'fish', 'dkg'"


def upgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.add_column(sa.Column("split_scheme", sa.String(16), nullable=True))
        batch.add_column(sa.Column("merge", sa.Text(), nullable=True))
        batch.create_check_constraint(
            op.f("ck_regions_split_scheme"), f"split_scheme IS NULL OR split_scheme IN ({SCHEMES})"
        )
        batch.create_check_constraint(
            op.f("ck_regions_split_merge"), "split_scheme IS NULL OR merge IS NOT NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.drop_constraint(op.f("ck_regions_split_merge"), type_="check")
        batch.drop_constraint(op.f("ck_regions_split_scheme"), type_="check")
        batch.drop_column("merge")
        batch.drop_column("split_scheme")
