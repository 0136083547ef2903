"""``SqlControllerClient``: the ``ControllerClient`` port over the controller's database.

Each call is one short transaction (``run_in_transaction``). The plan life cycle is the storage
layer's (``repart.storage.plans``): a claim moves the plan ``pending → applying`` under a row lock, so a
plan the controller supersedes meanwhile is never applied, and the controller decides nothing while
state moves; the job's report moves it on to ``applied`` or ``failed`` through
``repart.storage.plan_reports``, as ``repart plans report`` does, with the same retry rules: a failure's
reason is recorded as a ``plan-failed`` event on the region, in the same transaction, and a retry must
repeat the first report (Conflict otherwise).

Exactly-once batches (``repart.protocol.client``): a snapshot row records the job's batch id (unique per
region), so a snapshot of a batch already ingested is a no-op (``ingest_snapshot``); a batch report is
unique per (region, batch id), so a batch is reported once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.errors import NotFound
from repart.protocol.client import AppliedFunction, PlanOutcome, PlanToApply
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import Snapshot
from repart.storage import models
from repart.storage.engine import read_transaction, run_in_transaction
from repart.storage.events import record_batch_report
from repart.storage.plan_reports import report_plan
from repart.storage.plans import list_plans, set_plan_status
from repart.storage.regions import region_by_name
from repart.storage.schema import check_revision
from repart.storage.snapshots import ingest_snapshot
from repart.storage.tables import OPEN_PLAN_STATUSES
from repart.storage.versions import applied_version, version_function

SOURCE = "repart job"


class SqlControllerClient:
    """The port over ``engine`` (module docstring); ``source`` is recorded with every snapshot.

    A database at another schema revision than the code's is refused at once (``check_revision``:
    InvalidInput naming ``db`` and both revisions), before a job's batch depends on it.
    """

    def __init__(self, engine: Engine, *, source: str = SOURCE) -> None:
        check_revision(engine)
        self.engine = engine
        self.source = source

    def applied_function(self, region: str) -> AppliedFunction:
        return read_transaction(self.engine, lambda session: applied_function(session, region))

    def region_merge(self, region: str) -> MergeSpec | None:
        return read_transaction(self.engine, lambda session: region_merge(session, region))

    def claim_next_plan(self, region: str) -> PlanToApply | None:
        return run_in_transaction(self.engine, lambda session: claim_next_plan(session, region))

    def report_plan(
        self,
        plan_id: int,
        outcome: PlanOutcome,
        *,
        moved_rows: int | None = None,
        moved_bytes: int | None = None,
        reason: str | None = None,
    ) -> None:
        run_in_transaction(
            self.engine,
            lambda session: report_plan(
                session, plan_id, outcome, moved_rows=moved_rows, moved_bytes=moved_bytes, reason=reason
            ),
        )

    def submit_snapshot(self, snapshot: Snapshot) -> int:
        return run_in_transaction(
            self.engine, lambda session: ingest_snapshot(session, snapshot, source=self.source)
        )

    def report_batch(
        self, region: str, batch_id: int, payload: Mapping[str, Any], plan_id: int | None
    ) -> int:
        return run_in_transaction(
            self.engine,
            lambda session: record_batch_report(session, region, batch_id, payload, plan_id=plan_id),
        )


def applied_function(session: Session, region: str) -> AppliedFunction:
    """The region's applied version (``ControllerClient.applied_function``); NotFound before the
    controller's first tick."""
    row = applied_version(session, region)
    if row is None:
        raise NotFound(
            f"region {region!r} has no applied version yet; "
            f"run `repart tick --region {region}` (or the daemon) first"
        )
    return AppliedFunction(row.number, version_function(row))


def region_merge(session: Session, region: str) -> MergeSpec | None:
    """How the region's partial state rows merge (``ControllerClient.region_merge``)."""
    text = region_by_name(session, region).merge
    return None if text is None else MergeSpec.parse(text)


def _next(session: Session, region: str) -> PlanToApply | None:
    """One plan being applied (a job died applying it) or else the pending one (there is at most
    one)."""
    for status in ("applying", "pending"):
        rows = list_plans(session, region, status)
        if rows:
            row = rows[-1]
            return PlanToApply(row.id, region, row.from_version, row.to_version, cast(str, row.plan_json))
    return None


def claim_next_plan(session: Session, region: str) -> PlanToApply | None:
    """The plan to apply (``ControllerClient.claim_next_plan``): ``_next``, moved to ``applying``
    under the region row's lock, then the plan row's (the order ``activate`` takes them in, so a tick
    that supersedes pending plans and a claim never interleave); None if the plan was superseded
    meanwhile."""
    session.execute(select(models.Region.id).where(models.Region.name == region).with_for_update())
    todo = _next(session, region)
    if todo is None:
        return None
    locked = session.scalar(
        select(models.Plan)
        .where(models.Plan.id == todo.plan_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if locked is None or locked.status not in OPEN_PLAN_STATUSES:
        return None
    if locked.status == "pending":
        set_plan_status(session, todo.plan_id, "applying")
    return todo
