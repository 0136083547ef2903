"""A job token names its region by id: ``api_tokens.region_id``, a foreign key that deletes a region's
tokens with it, so that a token never acts on another region later created under the same name.

Existing job tokens (``job:NAME``) get the id of the region named NAME; one whose region no longer
exists is revoked now.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("region_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_api_tokens_region_id_regions"), "regions", ["region_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index(op.f("ix_api_tokens_region_id"), ["region_id"])
    tokens = sa.table(
        "api_tokens",
        sa.column("id", sa.Integer()),
        sa.column("scope", sa.String()),
        sa.column("region_id", sa.Integer()),
        sa.column("revoked_at", sa.DateTime(timezone=True)),
    )
    regions = sa.table("regions", sa.column("id", sa.Integer()), sa.column("name", sa.String()))
    connection = op.get_bind()
    ids = {name: region_id for region_id, name in connection.execute(sa.select(regions.c.id, regions.c.name))}
    jobs = connection.execute(
        sa.select(tokens.c.id, tokens.c.scope, tokens.c.revoked_at).where(tokens.c.scope.like("job:%"))
    ).all()
    now = datetime.now(UTC)
    if connection.dialect.name == "sqlite":  # SQLite keeps the UTC wall time (tables.UTCDateTime)
        now = now.replace(tzinfo=None)
    for token_id, scope, revoked_at in jobs:
        region_id = ids.get(scope[len("job:") :])
        if region_id is not None:
            change = {"region_id": region_id}
        else:
            change = {"revoked_at": now if revoked_at is None else revoked_at}
        connection.execute(sa.update(tokens).where(tokens.c.id == token_id).values(**change))
    with op.batch_alter_table("api_tokens") as batch:
        batch.create_check_constraint(
            op.f("ck_api_tokens_job_region"),
            "scope NOT LIKE 'job:%' OR region_id IS NOT NULL OR revoked_at IS NOT NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint(op.f("ck_api_tokens_job_region"), type_="check")
        batch.drop_index(op.f("ix_api_tokens_region_id"))
        batch.drop_constraint(op.f("fk_api_tokens_region_id_regions"), type_="foreignkey")
        batch.drop_column("region_id")
