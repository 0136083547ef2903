"""Operator actions on a region: roll back, scale, and explain the last decision.

The controller's loop (``repart.controller.tick``) decides on its own; these are the operator's
overrides and the audit view, built from the same pieces (settings, window merge, ``build``,
``plan_migration``, ``repart.storage.activate``):

- ``rollback``: rolling back to version v creates a *new* version with v's content (the
  same canonical JSON, so the same digest) and a plan from the currently *applied* version to it;
  older versions stay as they are. The event is ``rollback``, rule ``operator``.
- ``scale``: the tick's plan and activate steps with N chosen by the operator: the next function
  is built from the applied version with the region's algorithm and parameters on the latest merged
  window (without snapshots: the consistent hash alone on N, as p^(0) is). The event is ``scaled``,
  rule ``operator``.
- ``explain``: the newest decision event of the audit log with its numbers.

Both actions run as a tick does: they read in one read-only transaction, build and plan
outside any transaction, and write version, plan, event and the hold in one short write transaction
that compares and sets the region's status, so a build never holds SQLite's write lock and a change
made in between (a tick's activation, a job applying a plan) is a ``Conflict``. Every refusal (an
unknown version, N outside the region's bounds, a plan being applied, nothing to do) raises a
``RepartError`` (``InvalidInput`` naming the parameter, ``NotFound`` or ``Conflict``) and
writes nothing.
Event data follows tick's conventions: ``n_before``, ``n_next``, ``b_before``, ``load_before``,
``predicted_b``, ``predicted_load``, ``predicted_m``, ``plan_m``, ``algorithm``, ``candidates`` and
``window_seqs``, plus
``activated_version``, ``plan_id`` and ``superseded_plans`` added by ``activate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.controller.build import build_next
from repart.controller.settings import ControllerSettings
from repart.controller.state_step import repartition_plan, state_bytes
from repart.controller.tick import aware_now
from repart.controller.window import merge_snapshots, window_size
from repart.errors import Conflict, InvalidInput, NotFound
from repart.migration import plan_migration
from repart.partitioning import initial_function
from repart.partitioning.algorithms.builder import predict
from repart.partitioning.documents import json_number
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.build import split_imbalance
from repart.partitioning.state_partitions import StatePartitions, load_version_function
from repart.storage import (
    NewEvent,
    NewVersion,
    RegionConfig,
    RegionStatus,
    activate,
    applied_version,
    latest_snapshots,
    list_plans,
    list_versions,
    models,
    read_transaction,
    region_by_name,
    run_in_transaction,
    set_mode,
    stored_function,
)
from repart.storage.jsontext import load_object
from repart.storage.modes import OPERATOR_RULE
from repart.validation import Interval, check

ActionKind = Literal["rollback", "scaled"]
# The event kinds that record a decision about a region's function, newest of which ``explain`` shows.
EXPLAINED_KINDS = ("activated", "no-change", "rollback", "scaled", "initialized")
# A candidate build's figures (``BuildReport``) that ``explain`` lifts out of the event's data.
CANDIDATE_FIGURES = ("algorithm", "predicted_b", "predicted_load", "predicted_m", "objective")


@dataclass(frozen=True)
class ActionResult:
    """What ``rollback`` or ``scale`` stored for ``region``.

    ``action`` is the event kind (``rollback`` or ``scaled``), ``reason`` its message. ``version`` and
    ``plan_id`` are the new version's number and its pending plan, which goes from ``from_version``
    (the applied version) to it; ``n_channels`` and ``digest`` are the new version's, ``plan_m`` the
    plan's predicted migration cost m (None without snapshots to weigh the moves). ``mode`` is the
    region's mode afterwards (``hold``) and ``mode_reason`` why.
    """

    region: str
    action: ActionKind
    reason: str
    version: int
    plan_id: int
    from_version: int
    n_channels: int
    digest: str
    plan_m: float | None
    mode: str
    mode_reason: str


@dataclass(frozen=True)
class _StoredVersion:
    """The fields of a stored version the actions use (read in one transaction, used after it)."""

    number: int
    digest: str
    n_channels: int
    function_json: str
    algorithm: str
    report_json: str

    @classmethod
    def of(cls, row: models.Version) -> _StoredVersion:
        return cls(row.number, row.digest, row.n_channels, row.function_json, row.algorithm, row.report_json)


@dataclass(frozen=True)
class _Context:
    """What both actions start from, read in one read-only transaction: the region's settings and status,
    its versions, the applied one and its function, and the merged window."""

    config: RegionConfig
    settings: ControllerSettings
    status: RegionStatus
    versions: tuple[_StoredVersion, ...]
    applied: _StoredVersion
    current: RoutingFunction | StatePartitions
    estimate: FrequencyEstimate | None
    window_seqs: list[int]
    state_bytes: int | None = None


def rollback(
    engine: Engine, region: str, to_version: int, *, reason: str | None = None, now: datetime | None = None
) -> ActionResult:
    """Activate a new version with version ``to_version``'s function and a plan to it.

    The plan goes from the applied version and is weighed by the latest merged window when there are
    snapshots. The region is then held with the operator's ``reason``, so that the next
    tick does not undo the rollback; ``repart resume`` returns it to its mode. ``now``
    (timezone-aware; default: the current time) is the events' time. Raises
    NotFound naming the existing versions for an unknown version, ``InvalidInput("to_version")``
    when the version's function is the applied one, Conflict while a plan is being applied or when the
    region changed between the read and the write; nothing is written then. As a tick does, it reads in
    one read-only transaction, plans outside any, and writes in one short write transaction that
    compares and sets the region's status.
    """
    moment = aware_now(now)
    context = read_transaction(engine, lambda session: _read(session, region))
    return _rollback(engine, region, context, to_version, reason, moment)


def scale(
    engine: Engine, region: str, n_channels: int, *, reason: str | None = None, now: datetime | None = None
) -> ActionResult:
    """Activate the next function on ``n_channels`` channels with a plan to it (Plan/Activate).

    Built from the applied version with the region's algorithm and parameters on the latest merged
    window; without snapshots, the consistent hash alone on N with the applied function's consistent
    spec. The region is then held with ``reason``, and ``now`` is used, as for ``rollback``. Raises
    ``InvalidInput("n_channels")`` with the region's channel bounds for N outside them or equal to the
    applied N, Conflict while a plan is being applied or when the region changed between the read and
    the write; nothing is written then. The build runs outside any transaction, as for ``rollback``.
    """
    moment = aware_now(now)
    context = read_transaction(engine, lambda session: _read(session, region))
    return _scale(engine, region, context, n_channels, reason, moment)


def explain(session: Session, region: str) -> dict[str, Any]:
    """Why the region runs what it runs: its newest decision event as a JSON object.

    The event is the newest of kind ``activated``, ``no-change``, ``rollback``, ``scaled`` or
    ``initialized``. Besides its kind, rule, message, time and full ``data``, the numbers tick records
    are lifted out: the policy and its numbers, N before and next, b and max/mean load before (and the
    threshold), the predicted b, max/mean load and m, the plan's m, for ``auto`` every candidate
    algorithm's predicted b, max/mean load, m and objective, and in split mode b_lb, memory, D-Choices'
    d and the head: each split key with its candidates and weights; for a ``spark-state`` region the
    count's choice (``state_count``: the count taken, the policy's, their predicted busiest partition
    and b, the candidates, and the key no count balances) and the plan's predicted bytes. An older
    event without max/mean load has None for it. ``backoff`` is the region's failed ticks in a row,
    when the daemon ticks it again and the last failure (``repart.controller.backoff``), or None.
    NotFound when the region has no such event yet (naming its last failure when its ticks fail).
    """
    row = region_by_name(session, region)
    event = session.scalar(
        select(models.Event)
        .where(models.Event.region_id == row.id, models.Event.kind.in_(EXPLAINED_KINDS))
        .order_by(models.Event.id.desc())
        .limit(1)
    )
    backoff = backoff_summary(row)
    if event is None:
        failing = ""
        if backoff is not None:
            failures, error = backoff["tick_failures"], backoff["last_error"]
            failing = f"; its last {failures} tick(s) failed, the last with {error}"
        raise NotFound(
            f"region {region!r} has no decision to explain yet{failing}; run `repart tick --region {region}` "
            "to see its tick"
        )
    data = load_object(event.data_json)
    lifted = (
        "policy",
        "policy_numbers",
        "held_by",
        "n_before",
        "n_next",
        "b_before",
        "load_before",
        "threshold",
        "algorithm",
        "predicted_b",
        "predicted_load",
        "predicted_m",
        "plan_m",
        "b_lb",
        "memory",
        "split_keys",
        "d",
        "state_count",
        "predicted_bytes",
    )
    return {
        "region": region,
        "event_id": event.id,
        "kind": event.kind,
        "rule": event.rule,
        "message": event.message,
        "at": event.at.isoformat(),
        "version": data.get("activated_version"),
        "plan_id": data.get("plan_id"),
        **{name: data.get(name) for name in lifted},
        "candidates": [
            {name: candidate.get(name) for name in CANDIDATE_FIGURES}
            for candidate in data.get("candidates") or []
        ],
        "head": [
            {"key": key, "candidates": candidates, "weights": weights}
            for key, candidates, weights in data.get("head") or []
        ],
        "backoff": backoff,
        "data": data,
    }


def backoff_summary(row: models.Region) -> dict[str, Any] | None:
    """A region's backoff as JSON: its failed ticks in a row, when the daemon ticks it again and the last
    failure's message; None when its last tick did not fail."""
    if row.tick_failures == 0:
        return None
    return {
        "tick_failures": row.tick_failures,
        "retry_at": None if row.retry_at is None else row.retry_at.isoformat(),
        "last_error": row.last_error,
    }


def _rollback(
    engine: Engine, region: str, context: _Context, to_version: int, reason: str | None, moment: datetime
) -> ActionResult:
    applied, rows = context.applied, context.versions
    target_row = next((row for row in rows if row.number == to_version), None)
    if target_row is None:
        numbers = ", ".join(str(row.number) for row in rows)
        raise NotFound(f"--to: region {region!r} has no version {to_version}; its versions are {numbers}")
    if target_row.digest == applied.digest:
        raise InvalidInput(
            "to_version",
            f"must have another function than the applied version {applied.number} of region {region!r} "
            f"(there is nothing to roll back), got version {to_version}",
        )
    target = load_version_function(target_row.function_json)
    data: dict[str, Any] = {"from_version": applied.number, "to_version": to_version}
    data |= _predictions(context, target)
    version = NewVersion(
        target_row.function_json,
        target_row.digest,
        target_row.n_channels,
        target_row.algorithm,
        load_object(target_row.report_json) | {"rollback_of": to_version},
        parent_number=applied.number,
    )
    message = f"operator rolled back from version {applied.number} to the function of version {to_version}"
    return _activate(engine, region, context, target, version, "rollback", message, data, reason, moment)


def _scale(
    engine: Engine, region: str, context: _Context, n_channels: int, reason: str | None, moment: datetime
) -> ActionResult:
    config, applied = context.config, context.applied
    n = check("n_channels", n_channels, Interval(int, config.min_channels, config.max_channels))
    if n == applied.n_channels:
        raise InvalidInput(
            "n_channels",
            f"must differ from the {n} channels region {region!r} already runs (applied version "
            f"{applied.number}), got {n}",
        )
    data: dict[str, Any] = {"from_version": applied.number}
    function: RoutingFunction | StatePartitions
    if isinstance(context.current, StatePartitions):
        function = StatePartitions(n, context.current.key_type)
        algorithm, report = "operator", {"n_partitions": n}
        data |= _predictions(context, function)
    elif context.estimate is None:
        consistent = context.current.home.consistent
        function = initial_function(n, config.key_type, config.slot_bits, consistent)
        algorithm, report = "consistent", {"algorithm": "consistent", "n_channels": n}
        data |= _predictions(context, function) | {"algorithm": "consistent"}
    else:
        built = build_next(context.current, context.estimate, n, context.settings)
        function, algorithm, report = built.function, built.algorithm, built.report
        data |= built.event_data | _predictions(context, function)  # the plan's m, consolidations included
    version = NewVersion(
        function.to_json(), function.digest, n, algorithm, report, parent_number=applied.number
    )
    message = f"operator scaled from {applied.n_channels} to {n} channels (version {applied.number})"
    return _activate(engine, region, context, function, version, "scaled", message, data, reason, moment)


def _read(session: Session, region: str) -> _Context:
    """The region's settings, status, versions and merged window; refuses while a plan is applying."""
    row = region_by_name(session, region)
    config = RegionConfig.from_row(row)
    settings = ControllerSettings.from_config(config)
    applied = applied_version(session, region)
    if applied is None:
        raise NotFound(
            f"region {region!r} has no applied version yet; run `repart tick --region {region}` to "
            "initialize it"
        )
    applying = list_plans(session, region, "applying")
    if applying:
        raise Conflict(
            f"plan {applying[0].id} of region {region!r} is being applied; try again once it is applied "
            "or failed"
        )
    window = latest_snapshots(session, region, window_size(settings.counters))
    estimate = merge_snapshots(window) if window else None
    if estimate is not None and (not estimate.keys or estimate.total == 0):
        estimate = None
    return _Context(
        config,
        settings,
        RegionStatus.of(row),
        tuple(_StoredVersion.of(version) for version in list_versions(session, region)),
        _StoredVersion.of(applied),
        stored_function(applied),
        estimate,
        [snapshot.seq for snapshot in window],
        state_bytes(window[-1]) if window else None,
    )


def _predictions(context: _Context, target: RoutingFunction | StatePartitions) -> dict[str, Any]:
    """N before and next and, with a window, b and max/mean load before, and b, max/mean load and m
    of ``target`` (with a split function on either side, m is the migration plan's, consolidations
    included; a count of state partitions gets N alone: its plan moves the whole state)."""
    numbers: dict[str, Any] = {"n_before": context.applied.n_channels, "n_next": target.n_channels}
    current = context.current
    if (
        context.estimate is None
        or isinstance(current, StatePartitions)
        or isinstance(target, StatePartitions)
    ):
        return numbers
    params, estimate = context.settings.params, context.estimate
    before, after = split_imbalance(current, estimate, params), split_imbalance(target, estimate, params)
    if current.kind == target.kind == "preserve":  # key-preserving on both sides: each is its own home
        _, m = predict(current.home, target.home, estimate, params)
    else:
        plan_m = plan_migration(current, target, estimate, params.resources).m
        m = math.nan if plan_m is None else plan_m
    return numbers | {
        "window_seqs": context.window_seqs,
        "b_before": json_number(before.b),
        "load_before": before.max_mean_load,
        "predicted_b": json_number(after.b),
        "predicted_load": after.max_mean_load,
        "predicted_m": json_number(m),
    }


def _activate(
    engine: Engine,
    region: str,
    context: _Context,
    function: RoutingFunction | StatePartitions,
    version: NewVersion,
    kind: ActionKind,
    message: str,
    data: dict[str, Any],
    reason: str | None,
    moment: datetime,
) -> ActionResult:
    """Plan from the applied function to ``function`` (outside any transaction), then store version,
    plan and event and hold the region with the operator's ``reason`` in one write transaction, if the
    region's status is still the one ``context`` read (Conflict otherwise, and nothing is written)."""
    current = context.current
    if isinstance(current, StatePartitions) and isinstance(function, StatePartitions):
        plan = repartition_plan(current, function, context.config.slot_bits, context.state_bytes)
    elif not isinstance(current, StatePartitions) and not isinstance(function, StatePartitions):
        plan = plan_migration(current, function, context.estimate, context.settings.params.resources)
    else:  # a region's engine is fixed once it has versions
        raise TypeError("a region's versions are all of one kind")
    plan_m = None if plan.m is None else json_number(plan.m)
    event = NewEvent(kind, OPERATOR_RULE, message, data | {"plan_m": plan_m})
    held_for = message + (f": {reason}" if reason else "")

    def write(session: Session) -> ActionResult:
        activation = activate(session, region, version, plan, event, expected=context.status, at=moment)
        assert activation.plan_id is not None  # a region with an applied version always gets a plan
        set_mode(session, region, "hold", held_for, at=moment)
        superseded = ", ".join(str(plan_id) for plan_id in activation.superseded_plans)
        return ActionResult(
            region=region,
            action=kind,
            reason=message
            + (f"; superseded pending plan(s) {superseded}, never applied" if superseded else ""),
            version=activation.version_number,
            plan_id=activation.plan_id,
            from_version=context.applied.number,
            n_channels=function.n_channels,
            digest=function.digest,
            plan_m=plan_m,
            mode="hold",
            mode_reason=held_for,
        )

    return run_in_transaction(engine, write)
