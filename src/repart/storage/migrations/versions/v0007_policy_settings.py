"""Channel-count decisions in the job's time: a batch's progress on its snapshot, and the policy's
settings in batches.

``snapshots`` gains the batch's progress as the job reports it (``interval_seconds``,
``input_rows_per_second``, ``processed_rows_per_second``, ``backlog_rows``; null when not reported).

A region's ``settings`` lose ``cooldown_seconds`` and ``hysteresis``, which this revision maps onto
their successors, so a region keeps the damping it was given:

- ``hysteresis`` h (the relative change of demand ignored) becomes the band of utilizations it
  ignored around the target u: ``utilization_band = [max(0, u·(1 - h)), u·(1 + h)]``, with
  ``target_utilization`` written down (0.8, the old default, when the region had none), since the
  new default differs.
- ``cooldown_seconds`` c (no change within c seconds of the last) becomes
  ``stabilization_batches = ceil(c / t)``, with t the median time between the region's last snapshots'
  ingestion (the daemon's 10 s interval when it has fewer than two).

Settings at zero, which damped nothing, are dropped. A target outside the default band needs no band
written: the default band widens to hold any target (``repart.controller.policy.default_band``). The
downgrade drops the new columns and leaves the settings as mapped: the old code refuses the new
settings by name, and the region is edited then.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OLD_TARGET_UTILIZATION = 0.8
DAEMON_INTERVAL_SECONDS = 10.0
INGEST_GAPS = 20


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("interval_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("input_rows_per_second", sa.Float(), nullable=True))
        batch.add_column(sa.Column("processed_rows_per_second", sa.Float(), nullable=True))
        batch.add_column(sa.Column("backlog_rows", sa.BigInteger(), nullable=True))
    connection = op.get_bind()
    regions = connection.execute(sa.text("SELECT id, settings_json FROM regions")).all()
    for region_id, settings_json in regions:
        settings = json.loads(settings_json)
        if "cooldown_seconds" not in settings and "hysteresis" not in settings:
            continue
        mapped = mapped_settings(settings, _batch_seconds(connection, region_id))
        connection.execute(
            sa.text("UPDATE regions SET settings_json = :settings WHERE id = :id"),
            {"settings": json.dumps(mapped), "id": region_id},
        )


def mapped_settings(settings: dict[str, Any], batch_seconds: float) -> dict[str, Any]:
    """``settings`` with ``cooldown_seconds`` and ``hysteresis`` replaced (module docstring)."""
    mapped = dict(settings)
    cooldown = float(mapped.pop("cooldown_seconds", 0.0))
    hysteresis = float(mapped.pop("hysteresis", 0.0))
    if hysteresis > 0:
        target = float(mapped.setdefault("target_utilization", OLD_TARGET_UTILIZATION))
        mapped["utilization_band"] = [max(0.0, target * (1 - hysteresis)), target * (1 + hysteresis)]
    if cooldown > 0:
        mapped["stabilization_batches"] = math.ceil(cooldown / batch_seconds)
    return mapped


def _batch_seconds(connection: sa.Connection, region_id: int) -> float:
    """The median time between the ingestion of the region's newest snapshots."""
    times = connection.execute(
        sa.text("SELECT ingested_at FROM snapshots WHERE region_id = :id ORDER BY seq DESC LIMIT :count"),
        {"id": region_id, "count": INGEST_GAPS + 1},
    ).scalars()
    moments = sorted(_moment(value) for value in times)
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    gaps = [gap for gap in gaps if gap > 0]
    return statistics.median(gaps) if gaps else DAEMON_INTERVAL_SECONDS


def _moment(value: Any) -> float:
    """A stored timestamp in seconds (SQLite returns text, PostgreSQL a datetime)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.timestamp()


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("backlog_rows")
        batch.drop_column("processed_rows_per_second")
        batch.drop_column("input_rows_per_second")
        batch.drop_column("interval_seconds")
