"""Plans: migrations between two versions, their moves and their status.

A plan is a ``repart.migration.MigrationPlan``: storage keeps its canonical JSON and digest in ``plans``
and its moves, explicit ``(key, source, target, weight)`` and slot ``(first_slot, last_slot, source,
target)``, as ``plan_moves`` rows, so a job can read the moves of its channels (a split plan's
consolidations, are read from its JSON). A plan's status moves

    pending → applying → applied | failed,    pending → superseded

(a new plan supersedes a pending one that no job has started). When a plan is applied its
target version becomes ``applied`` and the previously applied version ``superseded``; when it fails or
is superseded its target version is ``abandoned``; an applied plan's target becomes the region's
``applied_version`` (its status). Illegal changes raise Conflict naming both states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from repart.errors import Conflict, InvalidInput, NotFound
from repart.storage import models
from repart.storage.keys import key_columns
from repart.storage.regions import region_by_name
from repart.storage.status import set_applied_version
from repart.storage.versions import transition_version
from repart.validation import STORED_INT, Options, check

if TYPE_CHECKING:
    from repart.migration import MigrationPlan

PLAN_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"applying", "superseded"}),
    "applying": frozenset({"applied", "failed"}),
    "applied": frozenset(),
    "failed": frozenset(),
    "superseded": frozenset(),
}
# A count a job reports (moved rows or bytes): what a BIGINT column holds.
# What a plan's status change does to its target version.
_TARGET_STATUS = {"applied": "applied", "failed": "abandoned", "superseded": "abandoned"}


def move_rows(plan_id: int, plan: MigrationPlan) -> list[dict[str, Any]]:
    """``plan_moves`` rows for a plan's moves: its explicit moves by key, then its slot moves by first
    slot (the order of ``plan.to_json()``). A split plan's consolidations stay in its JSON."""
    rows: list[dict[str, Any]] = [
        {"kind": "explicit", "source": m.source, "target": m.target, "weight": m.weight, **key_columns(m.key)}
        for m in plan.explicit_moves
    ]
    rows.extend(
        {"kind": "slots", "first_slot": first, "last_slot": last, "source": source, "target": target}
        for first, last, source, target in plan.slot_moves.tolist()
    )
    for idx, row in enumerate(rows):
        row.update(plan_id=plan_id, idx=idx)
    return rows


def set_plan_status(
    session: Session,
    plan_id: int,
    status: str,
    *,
    moved_rows: int | None = None,
    moved_bytes: int | None = None,
) -> models.Plan:
    """Move a plan to ``status`` and its versions along (see the module doc).

    ``moved_rows`` and ``moved_bytes`` (what a job reports having moved) are recorded with ``applied``
    only. The plan row is locked (``SELECT … FOR UPDATE`` on PostgreSQL) so two jobs cannot both
    start it.
    """
    plan = session.scalar(select(models.Plan).where(models.Plan.id == plan_id).with_for_update())
    if plan is None:
        raise NotFound(f"plan {plan_id} does not exist")
    if (moved_rows is not None or moved_bytes is not None) and status != "applied":
        raise InvalidInput(
            "moved_rows", f"and moved_bytes are recorded when a plan is applied, not {status!r}"
        )
    rows = None if moved_rows is None else check("moved_rows", moved_rows, STORED_INT)
    size = None if moved_bytes is None else check("moved_bytes", moved_bytes, STORED_INT)
    with session.begin_nested():
        transition_plan(session, plan, status)
        if rows is not None:
            plan.moved_rows = rows
        if size is not None:
            plan.moved_bytes = size
    return plan


def transition_plan(session: Session, plan: models.Plan, status: str) -> None:
    """Move ``plan`` to ``status`` and its versions along; Conflict naming both states if the
    change is not allowed."""
    check("status", status, Options(tuple(PLAN_TRANSITIONS)))
    allowed = PLAN_TRANSITIONS[plan.status]
    if status not in allowed:
        raise Conflict(
            f"plan {plan.id} cannot go from {plan.status!r} to {status!r}; "
            f"allowed from {plan.status!r}: {', '.join(sorted(allowed)) or '(none)'}"
        )
    if status in _TARGET_STATUS:
        _move_versions(session, plan, status)
    plan.status = status
    session.flush()


def _move_versions(session: Session, plan: models.Plan, status: str) -> None:
    versions = {
        v.number: v
        for v in session.scalars(
            select(models.Version).where(
                models.Version.region_id == plan.region_id,
                (models.Version.number == plan.to_version) | (models.Version.status == "applied"),
            )
        )
    }
    if status == "applied":
        for previous in [v for v in versions.values() if v.status == "applied"]:
            transition_version(previous, "superseded")
        set_applied_version(session, plan.region_id, plan.to_version)
    transition_version(versions[plan.to_version], _TARGET_STATUS[status])


def get_plan(session: Session, plan_id: int) -> models.Plan:
    """Plan ``plan_id`` with its moves; NotFound if it does not exist."""
    plan = session.scalar(
        select(models.Plan).where(models.Plan.id == plan_id).options(selectinload(models.Plan.moves))
    )
    if plan is None:
        raise NotFound(f"plan {plan_id} does not exist")
    return plan


def list_plans(session: Session, region: str, status: str | None = None) -> list[models.Plan]:
    """The plans of ``region`` (only those with ``status`` if given), oldest first."""
    region_id = region_by_name(session, region).id
    query = select(models.Plan).where(models.Plan.region_id == region_id)
    if status is not None:
        query = query.where(models.Plan.status == status)
    return list(session.scalars(query.order_by(models.Plan.id)))
