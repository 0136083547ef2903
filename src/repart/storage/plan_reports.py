"""What a job reports about a plan it claimed: ``applied`` (with the rows and bytes it moved) or
``failed`` (with a reason), the one implementation behind ``repart plans report``
(``repart.controller.service.report_plan``) and a job's ``SqlControllerClient.report_plan``.

A pending plan is taken through ``applying``; the plan's versions move along
(``repart.storage.plans.set_plan_status``). A failure is recorded as a ``plan-failed`` event on the
region, with the reason, in the same transaction. Jobs retry: a report that repeats the state the plan
is already in with the same numbers changes nothing (no second event); another state, or the same
state with other numbers, is a ``Conflict`` naming both. The plan is read under its row lock, so
reports of one plan sent at the same time are decided one after the other.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from repart.errors import Conflict, NotFound
from repart.storage import models
from repart.storage.events import NewEvent, record_event
from repart.storage.plans import set_plan_status
from repart.validation import Options, check

#: What a job may report about a plan.
PLAN_OUTCOMES = ("applied", "failed")
#: The rule of the ``plan-failed`` event a job's report records.
JOB_REPORT_RULE = "job-report"


def report_plan(
    session: Session,
    plan_id: int,
    state: str,
    *,
    moved_rows: int | None = None,
    moved_bytes: int | None = None,
    reason: str | None = None,
) -> tuple[models.Plan, bool]:
    """Record that a job applied plan ``plan_id`` or failed to (see the module docstring); returns the
    plan and whether it changed. InvalidInput naming ``state`` for another outcome, NotFound for an
    unknown plan, Conflict for a report the plan's state does not allow."""
    check("state", state, Options(PLAN_OUTCOMES))
    region_id = session.scalar(select(models.Plan.region_id).where(models.Plan.id == plan_id))
    if region_id is None:
        raise NotFound(f"plan {plan_id} does not exist")
    # The region row's lock, then the plan row's (the order a claim and a tick take them in), and the
    # plan read again under it: a report sent twice at once finds the first one's outcome and is a no-op.
    session.execute(select(models.Region.id).where(models.Region.id == region_id).with_for_update())
    row = session.scalars(
        select(models.Plan)
        .where(models.Plan.id == plan_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    repeated = row.status == state
    if repeated and (row.moved_rows, row.moved_bytes) == (moved_rows, moved_bytes):
        return row, False
    if row.status == "pending":
        set_plan_status(session, plan_id, "applying")
    try:
        changed = set_plan_status(session, plan_id, state, moved_rows=moved_rows, moved_bytes=moved_bytes)
    except Conflict as error:
        if not repeated:
            raise
        raise Conflict(
            f"plan {row.id} was already reported {row.status} with moved rows {row.moved_rows} and moved "
            f"bytes {row.moved_bytes}; a retry must repeat them, got moved rows {moved_rows} and moved "
            f"bytes {moved_bytes}"
        ) from error
    if state == "failed":
        region = session.get_one(models.Region, changed.region_id).name
        event = NewEvent(
            kind="plan-failed",
            rule=JOB_REPORT_RULE,
            message=reason or "the job reported the plan failed",
            data={"plan_id": plan_id, "to_version": changed.to_version},
        )
        record_event(session, region, event)
    return changed, True
