"""What a batch job asks of the controller's database, and what it tells it (DESIGN §6, §7, §9).

A job routes with the region's **applied** version (the layout its state is in), applies the plan the
controller left for it before it writes state, and reports the plan's outcome: ``pending → applying →
applied`` with the rows and bytes that moved, or ``failed``. The plan's id is recorded in the state
store's manifest when the migration commits, so a job that crashed after that commit but before its
report finds the plan already applied in the store and only reports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.errors import NotFound
from repart.migration import MigrationPlan
from repart.partitioning import PartitionFunction
from repart.spark.errors import StateStoreError
from repart.storage import (
    applied_version,
    list_plans,
    models,
    run_in_transaction,
    set_plan_status,
    version_function,
)


@dataclass(frozen=True)
class PlanToApply:
    """A stored plan of ``region`` from version ``from_version`` to ``to_version``."""

    plan_id: int
    region: str
    from_version: int
    to_version: int
    plan: MigrationPlan

    @classmethod
    def from_row(cls, region: str, row: models.Plan) -> PlanToApply:
        return cls(row.id, region, row.from_version, row.to_version, MigrationPlan.from_json(row.plan_json))


class AppliedMigration(Protocol):
    """What applying a plan to the state store reports (``repart.state.store.ApplyResult``)."""

    @property
    def moved_rows(self) -> int: ...

    @property
    def moved_bytes(self) -> int: ...

    @property
    def already_applied(self) -> bool: ...


class PlanApplier(Protocol):
    """A state store that can apply a migration plan (``repart.state.store.StateStore``)."""

    def apply(
        self, plan: MigrationPlan, *, plan_id: int, region: str, from_version: int, to_version: int
    ) -> AppliedMigration: ...


def applied_function(engine: Engine, region: str) -> tuple[int, PartitionFunction]:
    """The number and function of ``region``'s applied version; NotFound before the first tick."""

    def work(session: Session) -> tuple[int, PartitionFunction]:
        row = applied_version(session, region)
        if row is None:
            raise NotFound(
                f"region {region!r} has no applied version yet; "
                f"run `repart tick {region}` (or the daemon) first"
            )
        return row.number, version_function(row)

    return run_in_transaction(engine, work)


def next_plan(engine: Engine, region: str) -> PlanToApply | None:
    """The plan a job must apply before writing state: one being applied (a job died applying it and
    this one retries) or else the pending one (there is at most one, DESIGN §8); None when neither."""
    return run_in_transaction(engine, lambda session: _next(session, region))


def apply_next_plan(
    engine: Engine, region: str, store: PlanApplier
) -> tuple[PlanToApply, AppliedMigration] | None:
    """Apply the region's next plan (``next_plan``) to ``store`` and report the outcome; None if there
    is no plan to apply.

    The plan is claimed first: picked and moved to ``applying`` in one transaction that locks its row,
    so a plan the controller supersedes meanwhile is never applied, and the controller decides nothing
    while state moves. On success it becomes ``applied`` with the moved rows and bytes (unknown, NULL,
    when the store had already committed it: a job died between the store's commit and this report).
    When the store refuses the plan or its checks fail (``StateStoreError``: nothing was committed) it
    becomes ``failed`` (its version abandoned) and the error propagates. Any other error (a killed
    process, an I/O error that may have struck after the commit) leaves it ``applying``: the next job
    retries it, and the store's manifest tells whether it had committed.
    """
    todo = run_in_transaction(engine, lambda session: _claim(session, region))
    if todo is None:
        return None
    try:
        result = store.apply(
            todo.plan,
            plan_id=todo.plan_id,
            region=region,
            from_version=todo.from_version,
            to_version=todo.to_version,
        )
    except StateStoreError as refused:
        try:
            run_in_transaction(engine, lambda session: set_plan_status(session, todo.plan_id, "failed"))
        except Exception as reporting:
            raise reporting from refused
        raise
    known = not result.already_applied
    run_in_transaction(
        engine,
        lambda session: set_plan_status(
            session,
            todo.plan_id,
            "applied",
            moved_rows=result.moved_rows if known else None,
            moved_bytes=result.moved_bytes if known else None,
        ),
    )
    return todo, result


def _next(session: Session, region: str) -> PlanToApply | None:
    for status in ("applying", "pending"):
        rows = list_plans(session, region, status)
        if rows:
            return PlanToApply.from_row(region, rows[-1])
    return None


def _claim(session: Session, region: str) -> PlanToApply | None:
    """``_next``, moved to ``applying`` under a row lock; None if it was superseded meanwhile."""
    todo = _next(session, region)
    if todo is None:
        return None
    locked = session.scalar(
        select(models.Plan)
        .where(models.Plan.id == todo.plan_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if locked is None or locked.status not in ("pending", "applying"):
        return None
    if locked.status == "pending":
        set_plan_status(session, todo.plan_id, "applying")
    return todo
