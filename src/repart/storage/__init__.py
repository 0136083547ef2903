"""Storage: the controller's SQL database.

SQLAlchemy 2.0 typed models (``models``), Alembic migrations (``migrations``, run by ``upgrade``),
engine setup with retried transactions (``engine``), and repository functions that take a ``Session``
and leave committing to the caller (``run_in_transaction`` is the usual way to get one). Snapshots
(parsed by ``repart.protocol``) are ingested by ``snapshots``; every bad input raises
``repart.errors.InvalidInput`` naming the field, a clash with the stored state ``Conflict``, and
either leaves the database unchanged.

The names below load their module on first use (PEP 562), so that a command which needs only the
models and a query does not import the migration planner, numpy or Alembic: ``repart status`` and
``repart --help`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repart.lazy import lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; at run time __getattr__ loads them
    from repart.storage.activation import Activation as Activation
    from repart.storage.activation import NewVersion as NewVersion
    from repart.storage.activation import activate as activate
    from repart.storage.engine import database_problem as database_problem
    from repart.storage.engine import database_url as database_url
    from repart.storage.engine import is_retryable as is_retryable
    from repart.storage.engine import make_engine as make_engine
    from repart.storage.engine import read_connection as read_connection
    from repart.storage.engine import read_only as read_only
    from repart.storage.engine import read_transaction as read_transaction
    from repart.storage.engine import run_in_transaction as run_in_transaction
    from repart.storage.event_kinds import EVENT_KINDS as EVENT_KINDS
    from repart.storage.events import NewEvent as NewEvent
    from repart.storage.events import batch_reports as batch_reports
    from repart.storage.events import list_events as list_events
    from repart.storage.events import record_batch_report as record_batch_report
    from repart.storage.events import record_event as record_event
    from repart.storage.events import region_events as region_events
    from repart.storage.leases import Fence as Fence
    from repart.storage.leases import acquire_lease as acquire_lease
    from repart.storage.leases import check_fence as check_fence
    from repart.storage.leases import current_lease as current_lease
    from repart.storage.leases import release_lease as release_lease
    from repart.storage.modes import resume as resume
    from repart.storage.modes import set_mode as set_mode
    from repart.storage.plans import get_plan as get_plan
    from repart.storage.plans import list_plans as list_plans
    from repart.storage.plans import set_plan_status as set_plan_status
    from repart.storage.regions import CheckedRegion as CheckedRegion
    from repart.storage.regions import DeletedRegion as DeletedRegion
    from repart.storage.regions import RegionConfig as RegionConfig
    from repart.storage.regions import create_region as create_region
    from repart.storage.regions import delete_region as delete_region
    from repart.storage.regions import list_regions as list_regions
    from repart.storage.regions import region_by_name as region_by_name
    from repart.storage.regions import update_region as update_region
    from repart.storage.schema import check_revision as check_revision
    from repart.storage.schema import current_revision as current_revision
    from repart.storage.schema import head_revision as head_revision
    from repart.storage.schema import upgrade as upgrade
    from repart.storage.snapshots import DeletedSnapshot as DeletedSnapshot
    from repart.storage.snapshots import SnapshotSummary as SnapshotSummary
    from repart.storage.snapshots import delete_snapshot as delete_snapshot
    from repart.storage.snapshots import get_snapshot as get_snapshot
    from repart.storage.snapshots import ingest_snapshot as ingest_snapshot
    from repart.storage.snapshots import latest_snapshots as latest_snapshots
    from repart.storage.snapshots import snapshot_summaries as snapshot_summaries
    from repart.storage.status import RegionStatus as RegionStatus
    from repart.storage.status import compare_and_set_status as compare_and_set_status
    from repart.storage.status import set_applied_version as set_applied_version
    from repart.storage.versions import applied_version as applied_version
    from repart.storage.versions import get_version as get_version
    from repart.storage.versions import list_versions as list_versions
    from repart.storage.versions import stored_function as stored_function
    from repart.storage.versions import version_function as version_function

# Each public name and the module that defines it.
_EXPORTS = {
    "acquire_lease": "repart.storage.leases",
    "activate": "repart.storage.activation",
    "Activation": "repart.storage.activation",
    "applied_version": "repart.storage.versions",
    "batch_reports": "repart.storage.events",
    "check_fence": "repart.storage.leases",
    "CheckedRegion": "repart.storage.regions",
    "check_revision": "repart.storage.schema",
    "compare_and_set_status": "repart.storage.status",
    "create_region": "repart.storage.regions",
    "current_lease": "repart.storage.leases",
    "current_revision": "repart.storage.schema",
    "database_problem": "repart.storage.engine",
    "database_url": "repart.storage.engine",
    "delete_region": "repart.storage.regions",
    "delete_snapshot": "repart.storage.snapshots",
    "DeletedRegion": "repart.storage.regions",
    "DeletedSnapshot": "repart.storage.snapshots",
    "EVENT_KINDS": "repart.storage.event_kinds",
    "Fence": "repart.storage.leases",
    "get_plan": "repart.storage.plans",
    "get_snapshot": "repart.storage.snapshots",
    "get_version": "repart.storage.versions",
    "head_revision": "repart.storage.schema",
    "ingest_snapshot": "repart.storage.snapshots",
    "is_retryable": "repart.storage.engine",
    "latest_snapshots": "repart.storage.snapshots",
    "list_events": "repart.storage.events",
    "list_plans": "repart.storage.plans",
    "list_regions": "repart.storage.regions",
    "list_versions": "repart.storage.versions",
    "make_engine": "repart.storage.engine",
    "NewEvent": "repart.storage.events",
    "NewVersion": "repart.storage.activation",
    "read_connection": "repart.storage.engine",
    "read_only": "repart.storage.engine",
    "read_transaction": "repart.storage.engine",
    "record_batch_report": "repart.storage.events",
    "record_event": "repart.storage.events",
    "region_by_name": "repart.storage.regions",
    "region_events": "repart.storage.events",
    "RegionConfig": "repart.storage.regions",
    "RegionStatus": "repart.storage.status",
    "release_lease": "repart.storage.leases",
    "resume": "repart.storage.modes",
    "run_in_transaction": "repart.storage.engine",
    "set_applied_version": "repart.storage.status",
    "set_mode": "repart.storage.modes",
    "set_plan_status": "repart.storage.plans",
    "snapshot_summaries": "repart.storage.snapshots",
    "SnapshotSummary": "repart.storage.snapshots",
    "update_region": "repart.storage.regions",
    "upgrade": "repart.storage.schema",
    "stored_function": "repart.storage.versions",
    "version_function": "repart.storage.versions",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_attributes(__name__, _EXPORTS, globals())
