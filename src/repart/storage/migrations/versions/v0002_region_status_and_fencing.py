"""Region status on the region row and fencing tokens on leases.

The controller's tick reads a region's status with one small query and persists a decision with a
compare-and-set on it, so the status moves from the events and versions it was recomputed from to
columns of ``regions``: ``applied_version``, ``latest_version``, ``considered_seq`` and
``last_change_at``. ``regions.lease_token`` counts the fencing tokens issued for the region's lease and
``leases.token`` is the current holder's. Existing rows are backfilled from what the status was
computed from before: the applied and newest version, the ``considered_seq`` of the newest decision
event (``activated`` or ``no-change``), and the creation time of the newest version whose N differs from
its parent's.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_regions = sa.table(
    "regions",
    sa.column("id", sa.Integer()),
    sa.column("applied_version", sa.Integer()),
    sa.column("latest_version", sa.Integer()),
    sa.column("considered_seq", sa.BigInteger()),
    sa.column("last_change_at", sa.DateTime(timezone=True)),
)
_versions = sa.table(
    "versions",
    sa.column("region_id", sa.Integer()),
    sa.column("number", sa.Integer()),
    sa.column("parent_number", sa.Integer()),
    sa.column("n_channels", sa.Integer()),
    sa.column("status", sa.String()),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
_events = sa.table(
    "events",
    sa.column("id", sa.Integer()),
    sa.column("region_id", sa.Integer()),
    sa.column("kind", sa.String()),
    sa.column("data_json", sa.Text()),
)


def upgrade() -> None:
    with op.batch_alter_table("regions") as batch:
        batch.add_column(sa.Column("applied_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("latest_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("considered_seq", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("last_change_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lease_token", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("token", sa.BigInteger(), nullable=False, server_default="0"))
    _backfill(op.get_bind())


def _backfill(connection: sa.Connection) -> None:
    versions: dict[int, list[sa.Row[tuple[int, int, int | None, int, str, datetime]]]] = {}
    for row in connection.execute(sa.select(_versions)):
        versions.setdefault(row.region_id, []).append(row)
    considered: dict[int, int] = {}
    decisions = (
        sa.select(_events.c.region_id, _events.c.data_json)
        .where(_events.c.kind.in_(("activated", "no-change")), _events.c.region_id.is_not(None))
        .order_by(_events.c.id.desc())
    )
    for region_id, data_json in connection.execute(decisions):
        seq = json.loads(data_json).get("considered_seq")
        if region_id not in considered and isinstance(seq, int):
            considered[region_id] = seq
    for region_id in set(versions) | set(considered):
        rows = versions.get(region_id, [])
        channels = {row.number: row.n_channels for row in rows}
        changes = [
            row.created_at
            for row in rows
            if row.parent_number is not None and channels.get(row.parent_number) != row.n_channels
        ]
        connection.execute(
            sa.update(_regions)
            .where(_regions.c.id == region_id)
            .values(
                applied_version=next((row.number for row in rows if row.status == "applied"), None),
                latest_version=max((row.number for row in rows), default=None),
                considered_seq=considered.get(region_id),
                last_change_at=max(changes, default=None),
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("token")
    with op.batch_alter_table("regions") as batch:
        batch.drop_column("lease_token")
        batch.drop_column("last_change_at")
        batch.drop_column("considered_seq")
        batch.drop_column("latest_version")
        batch.drop_column("applied_version")
