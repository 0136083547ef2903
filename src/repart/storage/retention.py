"""Plan retention: delete the moves of a region's old plans and keep their summary in the audit log.

A plan's moves (its ``plan_moves`` rows and its JSON) are what a job reads to migrate state; once the
plan is applied, superseded or failed and newer versions exist, nobody reads them again, yet they are
most of the database's growth. ``prune_plans`` deletes the moves of the plans a ``PlanRetention``
selects and keeps the plan row (its versions, status, predicted and reported numbers and digest),
marked by ``pruned_at``; each pruned plan's summary is written to the audit log as a ``plan-pruned``
event in the same transaction.

A plan is selected when it is older than ``keep_versions`` versions (its target version is not among
the region's ``keep_versions`` newest) or than ``older_than`` days (created before then), whichever
is given; both may be. Plans a job has not finished (``pending``, ``applying``) are never selected. The
plan that led to the applied version is kept: asked for explicitly (``strict``, what ``repart plans
prune`` does with its options), a retention that would select it is refused with ``InvalidInput``
naming the option and nothing is written; from a region's settings (the daemon), it is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session

from repart.errors import InvalidInput
from repart.storage import models
from repart.storage.events import NewEvent, record_event
from repart.storage.regions import region_by_name
from repart.storage.tables import OPEN_PLAN_STATUSES
from repart.storage.views import plan_summary
from repart.validation import Interval, check

#: The accepted retention limits: at least one version and at most 2^31 - 1 (a database integer); more
#: than 0 days and at most 36500 (a century, far within the dates a database stores).
KEEP_VERSIONS = Interval(int, 1, 2**31 - 1)
KEEP_DAYS = Interval(float, 0, 36500, closed="right")

#: The event rule of a prune asked for by an operator, and of one run by the daemon from the settings.
OPERATOR_RULE = "operator"
SETTINGS_RULE = "retention"


@dataclass(frozen=True)
class PlanRetention:
    """Which plans' moves to keep: those of the ``keep_versions`` newest versions (``KEEP_VERSIONS``:
    an integer in [1, 2^31 - 1]) and those younger than ``older_than`` days (``KEEP_DAYS``: in (0,
    36500]); None leaves a limit out. InvalidInput naming the field for a bad value, or when neither is
    given."""

    keep_versions: int | None = None
    older_than: float | None = None

    def __post_init__(self) -> None:
        if self.keep_versions is not None:
            check("keep_versions", self.keep_versions, KEEP_VERSIONS)
        if self.older_than is not None:
            check("older_than", self.older_than, KEEP_DAYS)
        if self.keep_versions is None and self.older_than is None:
            raise InvalidInput("keep_versions", "or older_than is required: which plans' moves to keep")


@dataclass(frozen=True)
class PrunedPlan:
    """A plan whose moves were pruned: its summary as the ``plan-pruned`` event records it, and the
    number of ``plan_moves`` rows deleted."""

    summary: dict[str, Any]
    deleted_moves: int


def prune_plans(
    session: Session, region: str, retention: PlanRetention, now: datetime, *, strict: bool, rule: str
) -> list[PrunedPlan]:
    """Prune the moves of the plans of ``region`` that ``retention`` selects at ``now`` (see the module
    docstring), oldest first, each with a ``plan-pruned`` event of ``rule``. With ``strict``, a retention
    that selects the applied version's plan raises InvalidInput naming ``keep_versions`` or
    ``older_than`` before anything is written. NotFound for an unknown region."""
    # The region row's lock first, as a plan's claim and activation take it: a job cannot report the
    # plan of a new applied version between the read of the applied version and the selection, and two
    # prunes of one region run one after the other.
    row = region_by_name(session, region, lock=True)
    selected = _selected(session, row, retention, now)
    applied = [plan for plan in selected if plan.to_version == row.applied_version]
    if applied and strict:
        raise _refusal(row, applied[0], retention, now)
    pruned: list[PrunedPlan] = []
    for plan in selected:
        if plan.to_version == row.applied_version or not _mark_pruned(session, plan.id, now):
            continue
        moves = delete(models.PlanMove).where(models.PlanMove.plan_id == plan.id)
        deleted = cast(CursorResult[Any], session.execute(moves)).rowcount
        session.refresh(plan)
        summary = {**plan_summary(plan), "deleted_moves": deleted}
        message = (
            f"pruned the moves of plan {plan.id} (version {plan.from_version} -> {plan.to_version}, "
            f"{plan.status}): {deleted} move rows"
        )
        record_event(session, region, NewEvent("plan-pruned", rule, message, summary), at=now)
        pruned.append(PrunedPlan(summary, deleted))
    session.flush()
    return pruned


def _mark_pruned(session: Session, plan_id: int, now: datetime) -> bool:
    """Mark plan ``plan_id`` pruned at ``now`` and drop its JSON, unless it already is; whether it was
    this call that marked it."""
    marked = session.execute(
        update(models.Plan)
        .where(models.Plan.id == plan_id, models.Plan.pruned_at.is_(None))
        .values(plan_json=None, pruned_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(cast(CursorResult[Any], marked).rowcount)


def prunable_plans(session: Session, region: str, retention: PlanRetention, now: datetime) -> list[int]:
    """The ids of the plans ``prune_plans`` would prune from the region's settings (the applied
    version's plan left out), oldest first: a read, so that a caller writes only when there is work."""
    row = region_by_name(session, region)
    return [
        plan.id for plan in _selected(session, row, retention, now) if plan.to_version != row.applied_version
    ]


def _selected(
    session: Session, row: models.Region, retention: PlanRetention, now: datetime
) -> list[models.Plan]:
    """The region's unpruned, finished plans beyond either limit of ``retention``, oldest first."""
    query = select(models.Plan).where(
        models.Plan.region_id == row.id,
        models.Plan.pruned_at.is_(None),
        models.Plan.status.not_in(OPEN_PLAN_STATUSES),
    )
    beyond = []
    if retention.keep_versions is not None and row.latest_version is not None:
        beyond.append(models.Plan.to_version <= row.latest_version - retention.keep_versions)
    if retention.older_than is not None:
        beyond.append(models.Plan.created_at < now - timedelta(days=retention.older_than))
    if not beyond:
        return []
    condition = beyond[0] if len(beyond) == 1 else beyond[0] | beyond[1]
    return list(session.scalars(query.where(condition).order_by(models.Plan.id)))


def _refusal(row: models.Region, plan: models.Plan, retention: PlanRetention, now: datetime) -> InvalidInput:
    """Why a strict prune may not select ``plan``, the applied version's: the option that selects it."""
    latest = row.latest_version
    if retention.keep_versions is not None and latest is not None:
        needed = latest - plan.to_version + 1
        if retention.keep_versions < needed:
            return InvalidInput(
                "keep_versions",
                f"must be at least {needed} to keep the plan of the applied version {plan.to_version} "
                f"(plan {plan.id}; the newest version is {latest}), got {retention.keep_versions}",
            )
    age_days = (now - plan.created_at).total_seconds() / 86400
    enough = math.ceil(age_days * 1000) / 1000  # rounded up: the least shown value that keeps the plan
    return InvalidInput(
        "older_than",
        f"must be at least {enough:.3f} days to keep the plan of the applied version {plan.to_version} "
        f"(plan {plan.id}, created {plan.created_at.isoformat()}), got {retention.older_than:g}",
    )
