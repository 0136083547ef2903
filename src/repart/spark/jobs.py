"""Applying the controller's next plan to a job's state store.

A job routes with the region's **applied** version (the layout its state is in), applies the plan the
controller left for it before it writes state, and reports the plan's outcome through the
``ControllerClient`` port: ``pending → applying → applied`` with the rows and bytes that moved, or
``failed`` with the reason. The plan's id is recorded in the state store's commit log when the migration
commits, so a job that crashed after that commit but before its report finds the plan already applied
in the store and only reports it.

In split mode a plan may consolidate split keys' partial state: the job passes the
region's merge (its ``MergeSpec`` or merge function) through to the store, which merges the partials
that meet on a key's home.
"""

from __future__ import annotations

from typing import Protocol

from repart.errors import Corrupt, InvalidInput
from repart.migration import MigrationPlan
from repart.protocol.client import ControllerClient, PlanToApply
from repart.state.merge import Merge, MergeColumns


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
        self,
        plan: MigrationPlan,
        *,
        plan_id: int,
        region: str,
        from_version: int,
        to_version: int,
        merge: MergeColumns | Merge | None = None,
    ) -> AppliedMigration: ...


def apply_next_plan(
    client: ControllerClient, region: str, store: PlanApplier, merge: MergeColumns | Merge | None = None
) -> tuple[PlanToApply, AppliedMigration] | None:
    """Claim the region's next plan, apply it to ``store`` and report the outcome; None if there is no
    plan to apply. ``merge`` is how partial state rows merge, which a plan that consolidates split keys'
    partials needs (``StateStore.apply``): by default the region's (``client.region_merge``), or a
    function of the job's own for state a ``MergeSpec`` cannot describe; a plan that needs one when
    there is none is refused (InvalidInput).

    On success the plan becomes ``applied`` with the moved rows and bytes (unknown, None, when the store
    had already committed it: a job died between the store's commit and this report). When the store
    refuses the plan (``InvalidInput``: another region, version or layout, or a plan document it cannot
    read) or its state is damaged
    (``Corrupt``: a missing or truncated file, a checksum that does not match), nothing was committed:
    the plan becomes ``failed`` with the error as its reason (its version abandoned) and the error
    propagates. Any other error (a killed process, an I/O error that may have struck after the commit)
    leaves it ``applying``: the next job retries it, and the store's commit log tells whether it had
    committed.
    """
    if merge is None:  # read before the claim: a failure here leaves no plan claimed
        merge = client.region_merge(region)
    todo = client.claim_next_plan(region)
    if todo is None:
        return None
    try:
        result = store.apply(
            MigrationPlan.from_json(todo.plan_json),
            plan_id=todo.plan_id,
            region=region,
            from_version=todo.from_version,
            to_version=todo.to_version,
            merge=merge,
        )
    except (InvalidInput, Corrupt) as refused:
        try:
            client.report_plan(todo.plan_id, "failed", reason=f"{type(refused).__name__}: {refused}")
        except Exception as reporting:
            raise reporting from refused
        raise
    known = not result.already_applied
    client.report_plan(
        todo.plan_id,
        "applied",
        moved_rows=result.moved_rows if known else None,
        moved_bytes=result.moved_bytes if known else None,
    )
    return todo, result
