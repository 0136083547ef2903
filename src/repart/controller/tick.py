"""One controller iteration for one region: measure, analyze, plan, activate (DESIGN §8, Gedik §4.5).

Gedik §4.5 closes the adaptivity loop around the partitioning function: measure the key frequencies,
analyze whether the number of channels or the balance must change, plan the next function, and
activate it. ``tick`` runs that loop once for one region, in one database transaction that is retried
as a whole on a lock conflict (``run_in_transaction``):

1. The region's applied version. A region without versions gets p^(0), the consistent hash alone on
   ``n_channels_initial`` channels, activated without a plan (event ``initialized``).
2. **Measure**: the last ``x - 1`` snapshots, merged into the sliding estimate (DESIGN §3). No
   snapshots, or no snapshot newer than the one the previous decision considered: ``idle``. Every
   decision event records ``considered_seq``, the newest window it saw, so one window is decided on
   once.
3. **Analyze**: the region's channel-count policy on the window's channel measurements, and,
   independently, the rebalance trigger: b of the applied function on the estimate (DESIGN §4,
   Gedik Eq. 11) against the region's threshold. Neither fires: a ``no-change`` event, ``unchanged``.
4. **Plan**: the next function, built from the applied version with the region's algorithm and
   parameters, and the migration plan from the applied function to it (DESIGN §6). A build that
   reproduces the applied function is recorded as ``no-change``.
5. **Activate**: version, plan and an ``activated`` event, atomically (``repart.storage.activate``);
   the plan stays pending until a job applies it and supersedes any pending one. While a plan is
   being applied nothing is decided or written: ``blocked``.

``TickResult`` reports what happened and splits the time between computing (merging the window,
predicting, building, planning) and the database.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.controller.policy import Decision, RebalanceDecision, WindowLoad, needs_rebalance
from repart.controller.settings import ControllerSettings
from repart.controller.window import merge_snapshots, window_size
from repart.errors import Conflict
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import BuildReport, ConsistentSpec, PartitionFunction, build, initial_function
from repart.partitioning.algorithms.builder import predict
from repart.partitioning.consistent import ConsistentMethod
from repart.storage import (
    NewEvent,
    NewVersion,
    RegionConfig,
    Snapshot,
    activate,
    applied_version,
    latest_snapshots,
    list_plans,
    models,
    record_event,
    region_by_name,
    run_in_transaction,
    version_function,
)
from repart.storage.jsontext import load_object

TickAction = Literal["initialized", "idle", "unchanged", "activated", "blocked"]
# Event kinds that record a decision on a window, and so carry ``considered_seq``.
DECISION_KINDS = ("no-change", "activated")


@dataclass(frozen=True)
class TickResult:
    """What one tick did for ``region``.

    ``action`` is ``initialized`` (p^(0) activated), ``idle`` (no new snapshot to decide on),
    ``unchanged`` (decided to keep the applied function), ``activated`` (a new version and plan were
    stored) or ``blocked`` (a plan is being applied; nothing was written); ``reason`` says why in one
    sentence. ``version`` and ``plan_id`` are the activated version's number and plan id (None unless
    activated or initialized; p^(0) has no plan), ``n_channels`` the channel count the region runs
    with after the tick (the new version's when activated, else the applied version's).
    ``build_seconds`` is the time spent computing (merging the window, predicting b, building the
    function and its plan), ``storage_seconds`` the rest of the transaction's time: reading,
    writing, committing and any retries.
    """

    region: str
    action: TickAction
    reason: str
    version: int | None
    plan_id: int | None
    n_channels: int | None
    build_seconds: float
    storage_seconds: float


@dataclass(frozen=True)
class _Outcome:
    action: TickAction
    reason: str
    n_channels: int | None
    version: int | None = None
    plan_id: int | None = None


class _Stopwatch:
    """Accumulates the seconds spent computing, over every attempt of the transaction."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> _Stopwatch:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds += time.perf_counter() - self._started


def tick(engine: Engine, region: str, *, now: datetime | None = None) -> TickResult:
    """Run one measure → analyze → plan → activate iteration for ``region`` (see the module docstring).

    ``now`` (timezone-aware; default: the current time) is the time the channel-count policy's
    cooldown is measured to. Raises NotFound for an unknown region and ValueError naming the
    field for a region configuration the controller cannot act on (DESIGN §10); nothing is written
    then.
    """
    moment = aware_now(now)
    stopwatch = _Stopwatch()
    started = time.perf_counter()
    outcome = run_in_transaction(engine, lambda session: _tick(session, region, moment, stopwatch))
    elapsed = time.perf_counter() - started
    return TickResult(
        region=region,
        action=outcome.action,
        reason=outcome.reason,
        version=outcome.version,
        plan_id=outcome.plan_id,
        n_channels=outcome.n_channels,
        build_seconds=stopwatch.seconds,
        storage_seconds=max(0.0, elapsed - stopwatch.seconds),
    )


def _tick(session: Session, region: str, now: datetime, stopwatch: _Stopwatch) -> _Outcome:
    row = region_by_name(session, region)
    config = RegionConfig.from_row(row)
    settings = ControllerSettings.from_config(config)
    applied = applied_version(session, region)
    if applied is None:
        return _initialize(session, region, config)
    window = latest_snapshots(session, region, window_size(settings.counters))
    if not window:
        return _Outcome("idle", "no snapshots yet", applied.n_channels)
    newest = window[-1].seq
    considered = _considered_seq(session, row.id)
    if considered is not None and newest <= considered:
        return _Outcome(
            "idle", f"no snapshot newer than window seq {considered}, already decided on", applied.n_channels
        )
    applying = list_plans(session, region, "applying")
    if applying:
        return _Outcome(
            "blocked",
            f"plan {applying[0].id} is being applied; deciding again once it is applied or failed",
            applied.n_channels,
        )
    with stopwatch:
        estimate = merge_snapshots(window)
    seqs = [snapshot.seq for snapshot in window]
    base: dict[str, Any] = {"considered_seq": newest, "window_seqs": seqs}
    if not estimate.keys or estimate.total == 0:
        return _no_change(
            session,
            region,
            applied.n_channels,
            "empty-window",
            "the window holds no keys to build from",
            base,
        )
    current = version_function(applied)
    decision = settings.policy.decide(
        _load(window), applied.n_channels, now, _last_change_at(session, row.id)
    )
    with stopwatch:
        b_before, _ = predict(current, current, estimate, settings.params)
    rebalance = needs_rebalance(b_before, settings.rebalance_threshold)
    base |= {
        "policy": decision.rule,
        "policy_numbers": decision.numbers,
        "n_before": applied.n_channels,
        "n_next": decision.n_channels,
        "b_before": finite_or_none(b_before),
        "threshold": settings.rebalance_threshold,
    }
    if not decision.changed and not rebalance.rebalance:
        message = f"{decision.reason}; {rebalance.reason}"
        return _no_change(session, region, applied.n_channels, decision.rule, message, base)
    with stopwatch:
        result = build(current, estimate, decision.n_channels, settings.params, settings.algorithm)
    function = result.function
    if function.digest == current.digest:
        message = f"{_reason(decision, rebalance)}; the build reproduced the applied version {applied.number}"
        return _no_change(session, region, applied.n_channels, _rule(decision, rebalance), message, base)
    with stopwatch:
        plan = plan_migration(current, function, estimate, settings.params.resources)
    return _activate(session, region, applied, function, result.report, plan, decision, rebalance, base)


def _initialize(session: Session, region: str, config: RegionConfig) -> _Outcome:
    """Activate p^(0): the consistent hash alone on ``n_channels_initial`` channels, with no plan."""
    function = initial_function(
        config.n_channels_initial,
        config.key_type,
        config.slot_bits,
        ConsistentSpec(method=cast(ConsistentMethod, config.consistent_method)),
    )
    reason = f"p(0): consistent hashing ({config.consistent_method}) on {function.n_channels} channels"
    activation = activate(
        session,
        region,
        NewVersion(function.to_json(), function.digest, function.n_channels, "consistent"),
        None,
        NewEvent("initialized", "initial", reason, {"n_channels": function.n_channels}),
    )
    return _Outcome("initialized", reason, function.n_channels, activation.version_number, None)


def _activate(
    session: Session,
    region: str,
    applied: models.Version,
    function: PartitionFunction,
    report: BuildReport,
    plan: MigrationPlan,
    decision: Decision,
    rebalance: RebalanceDecision,
    data: dict[str, Any],
) -> _Outcome:
    """Store the version, its plan and the ``activated`` event; ``blocked`` if storage refuses."""
    reason = _reason(decision, rebalance)
    stored_report = report_json(report)
    event_data = data | {
        "algorithm": report.algorithm,
        "predicted_b": stored_report["predicted_b"],
        "predicted_m": stored_report["predicted_m"],
        "plan_m": None if plan.m is None else finite_or_none(plan.m),
        "candidates": stored_report["candidates"],
    }
    try:
        activation = activate(
            session,
            region,
            NewVersion(
                function.to_json(),
                function.digest,
                function.n_channels,
                report.algorithm.split(":")[0],
                stored_report,
                parent_number=applied.number,
            ),
            plan,
            NewEvent("activated", _rule(decision, rebalance), reason, event_data),
        )
    except Conflict as error:
        return _Outcome("blocked", str(error), applied.n_channels)
    return _Outcome("activated", reason, function.n_channels, activation.version_number, activation.plan_id)


def _no_change(
    session: Session, region: str, n_channels: int, rule: str, message: str, data: dict[str, Any]
) -> _Outcome:
    record_event(session, region, NewEvent("no-change", rule, message, data))
    return _Outcome("unchanged", message, n_channels)


def _load(window: list[Snapshot]) -> WindowLoad | None:
    """The pooled channel measurements of the window, or None when no snapshot carries any."""
    if not any(snapshot.channels for snapshot in window):
        return None
    return WindowLoad.from_snapshots(window)


def _rule(decision: Decision, rebalance: RebalanceDecision) -> str:
    """The trigger(s) of a rebuild: the policy's rule if it changes N, and/or the imbalance trigger."""
    rules = [decision.rule] if decision.changed else []
    if rebalance.rebalance:
        rules.append(rebalance.rule)
    return "+".join(rules)


def _reason(decision: Decision, rebalance: RebalanceDecision) -> str:
    return f"{decision.reason}; {rebalance.reason}"


def last_considered_seq(session: Session, region: str) -> int | None:
    """The newest window seq a decision of ``region`` considered (None before its first decision): a job
    that waits for the controller to act on the window it just reported polls this."""
    return _considered_seq(session, region_by_name(session, region).id)


def _considered_seq(session: Session, region_id: int) -> int | None:
    """The newest window seq the region's last decision event considered, if any."""
    text = session.scalar(
        select(models.Event.data_json)
        .where(models.Event.region_id == region_id, models.Event.kind.in_(DECISION_KINDS))
        .order_by(models.Event.id.desc())
        .limit(1)
    )
    if text is None:
        return None
    seq = load_object(text).get("considered_seq")
    return seq if isinstance(seq, int) else None


def _last_change_at(session: Session, region_id: int) -> datetime | None:
    """When the newest version whose N differs from its parent's was created (the policy's cooldown)."""
    table = models.Version
    rows = session.execute(
        select(table.number, table.parent_number, table.n_channels, table.created_at).where(
            table.region_id == region_id
        )
    ).all()
    channels = {row.number: row.n_channels for row in rows}
    changes = [
        row.created_at
        for row in rows
        if row.parent_number is not None and channels.get(row.parent_number, row.n_channels) != row.n_channels
    ]
    return max(changes, default=None)


def aware_now(now: datetime | None) -> datetime:
    """``now`` (the current UTC time when None); ValueError for a naive datetime."""
    moment = datetime.now(UTC) if now is None else now
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {moment.isoformat()}")
    return moment


def finite_or_none(value: float | np.floating[Any]) -> float | None:
    """``value`` as a JSON number, or None (null) when it is infinite or NaN."""
    number = float(value)
    return number if math.isfinite(number) else None


def report_json(report: BuildReport) -> dict[str, Any]:
    """A build report as a JSON object: non-finite numbers as null, candidates as nested reports."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(report):
        value = getattr(report, field.name)
        if field.name == "candidates":
            out[field.name] = [report_json(candidate) for candidate in value]
        elif isinstance(value, float | np.floating):
            out[field.name] = finite_or_none(value)
        elif isinstance(value, np.integer):
            out[field.name] = int(value)
        else:
            out[field.name] = value
    return out
