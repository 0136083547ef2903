"""Storage: the controller's SQL database (DESIGN §7).

SQLAlchemy 2.0 typed models (``models``), Alembic migrations (``migrations``, run by ``upgrade``),
engine setup with retried transactions (``engine``), and repository functions that take a ``Session``
and leave committing to the caller (``run_in_transaction`` is the usual way to get one). Snapshots
(parsed by ``repart.protocol``) are ingested by ``snapshots`` (DESIGN §3); every bad input raises
``repart.errors.InvalidInput`` naming the field, a clash with the stored state ``Conflict``, and
either leaves the database unchanged (DESIGN §10, §12.4).
"""

from repart.storage.activation import Activation, NewVersion, activate
from repart.storage.engine import (
    database_problem,
    database_url,
    is_retryable,
    make_engine,
    read_only,
    read_transaction,
    run_in_transaction,
)
from repart.storage.events import (
    EVENT_KINDS,
    NewEvent,
    batch_reports,
    list_events,
    record_batch_report,
    record_event,
    region_events,
)
from repart.storage.leases import Fence, acquire_lease, check_fence, current_lease, release_lease
from repart.storage.modes import resume, set_mode
from repart.storage.plans import get_plan, list_plans, set_plan_status
from repart.storage.regions import (
    DeletedRegion,
    RegionConfig,
    create_region,
    delete_region,
    list_regions,
    region_by_name,
    update_region,
)
from repart.storage.schema import current_revision, head_revision, upgrade
from repart.storage.snapshots import (
    DeletedSnapshot,
    SnapshotSummary,
    delete_snapshot,
    get_snapshot,
    ingest_snapshot,
    latest_snapshots,
    snapshot_summaries,
)
from repart.storage.status import RegionStatus, compare_and_set_status, set_applied_version
from repart.storage.versions import applied_version, get_version, list_versions, version_function

__all__ = [
    "EVENT_KINDS",
    "Activation",
    "DeletedRegion",
    "DeletedSnapshot",
    "Fence",
    "NewEvent",
    "NewVersion",
    "RegionConfig",
    "RegionStatus",
    "SnapshotSummary",
    "acquire_lease",
    "activate",
    "applied_version",
    "batch_reports",
    "check_fence",
    "compare_and_set_status",
    "create_region",
    "current_lease",
    "current_revision",
    "database_problem",
    "database_url",
    "delete_region",
    "delete_snapshot",
    "get_plan",
    "get_snapshot",
    "get_version",
    "head_revision",
    "ingest_snapshot",
    "is_retryable",
    "latest_snapshots",
    "list_events",
    "list_plans",
    "list_regions",
    "list_versions",
    "make_engine",
    "read_only",
    "read_transaction",
    "record_batch_report",
    "record_event",
    "region_by_name",
    "region_events",
    "release_lease",
    "resume",
    "run_in_transaction",
    "set_applied_version",
    "set_mode",
    "set_plan_status",
    "snapshot_summaries",
    "update_region",
    "upgrade",
    "version_function",
]
