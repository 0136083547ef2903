"""The ``ControllerClient`` port: everything a job asks of the controller and tells it.

A job (``repart.spark``, the VWAP pipeline) talks to the controller only through this port; the SQL
implementation is ``repart.storage.client.SqlControllerClient``. A batch goes through it as follows:

1. ``applied_function(region)``: the version the region's state is laid out by (NotFound before the
   controller's first tick), and ``region_merge(region)``: how its partial state merges (split mode);
2. ``claim_next_plan(region)``: the plan to apply before writing state, moved to ``applying`` (a plan a
   job died applying is handed out again: the state store's commit log tells whether it committed);
3. ``report_plan(plan_id, "applied" | "failed", ...)``: its outcome; a failure carries the reason
   (the damaged file, the refused argument) for the operator;
4. ``submit_snapshot(snapshot)``: the batch's key frequencies (``repart.protocol.snapshot``), whose
   ``batch`` is the job's batch id;
5. ``report_batch(region, batch_id, payload, plan_id)``: what the batch did.

Every call is idempotent under the batch id the job chose (exactly-once batches): a snapshot of a batch
whose snapshot was already ingested is accepted as a no-op, a batch is reported once per (region,
batch id), and reporting a plan's outcome again is a no-op. A job killed anywhere in a batch and run
again on the same batch thus finishes it exactly once; the state store does the same for the update
(``repart.state.store.StateStore.absorbed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from repart.partitioning.routing import RoutingFunction
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import Snapshot

PlanOutcome = Literal["applied", "failed"]


class AppliedFunction(NamedTuple):
    """A region's applied version: its number and its function (a ``SplitFunction`` in split mode)."""

    version: int
    function: RoutingFunction


@dataclass(frozen=True)
class PlanToApply:
    """A stored plan of ``region`` from version ``from_version`` to ``to_version``; ``plan_json`` is the
    plan's canonical JSON document (``repart.migration.MigrationPlan.from_json`` reads it)."""

    plan_id: int
    region: str
    from_version: int
    to_version: int
    plan_json: str


class ControllerClient(Protocol):
    """What a job needs from the controller (module docstring)."""

    def applied_function(self, region: str) -> AppliedFunction:
        """The number and function of ``region``'s applied version; NotFound before the first tick."""
        ...

    def region_merge(self, region: str) -> MergeSpec | None:
        """How ``region``'s partial state rows merge (``repart.protocol.merge``), as the region declares
        it: a region in split mode always declares one, a key-preserving region may not (None).
        NotFound for an unknown region."""
        ...

    def claim_next_plan(self, region: str) -> PlanToApply | None:
        """The plan a job must apply before writing state, now ``applying``: one already being applied
        (a job died applying it and this one retries) or else the pending one. None when there is
        neither, or when the controller superseded the pending plan meanwhile."""
        ...

    def report_plan(
        self,
        plan_id: int,
        outcome: PlanOutcome,
        *,
        moved_rows: int | None = None,
        moved_bytes: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Record a claimed plan's outcome: ``applied`` with the rows and bytes that moved (None when
        unknown: the store had committed it before a job died), or ``failed`` with ``reason``. A retry
        that repeats the first report changes nothing; one with other numbers is a Conflict."""
        ...

    def submit_snapshot(self, snapshot: Snapshot) -> int:
        """Hand the controller a batch's snapshot; returns the stored snapshot's id. A snapshot whose
        ``batch`` was already ingested for the region is a no-op that returns the stored one's id (the
        same window; InvalidInput for another)."""
        ...

    def report_batch(
        self, region: str, batch_id: int, payload: Mapping[str, Any], plan_id: int | None
    ) -> int:
        """Record what batch ``batch_id`` did (``payload``: a JSON object; ``plan_id``: the plan it
        applied, InvalidInput naming ``plan_id`` unless it is a plan of ``region``); returns the report's
        id. A batch already reported keeps its first report."""
        ...
