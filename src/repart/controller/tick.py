"""One controller iteration for one region, as a fenced reconcile loop (Gedik §4.5).

Gedik §4.5 closes the adaptivity loop around the partitioning function: measure the key frequencies,
analyze whether the number of channels or the balance must change, plan the next function, and
activate it. ``tick`` runs that loop once for one region in three steps, as controller-runtime's
reconcile loop does:

1. **Read** (``read_tick_input``, one read-only transaction: never the write lock). First the status check:
   one small query reads the region row, whose status columns (``repart.storage.status``) say which
   version is applied and which window seq was last decided on, together with the newest snapshot's
   seq, and the region's mode. A region in ``hold`` is ``held``; one without versions
   is initialized; one with no snapshot newer than the one last considered is ``idle``, and one with
   a plan being applied is ``blocked``: none of them loads the window. Otherwise the applied function
   and the last ``x - 1`` snapshots (the sliding window) are loaded.
2. **Decide** (``decide``, a pure function of what was read and the ``now`` passed in):
   initialize with p^(0) (the consistent hash alone on ``n_channels_initial`` channels); or
   **analyze** with the channel-count policy and, independently, the rebalance trigger (b of the
   applied function on the merged window against the region's threshold, Gedik Eq. 11):
   neither fires, or the build reproduces the applied function: ``unchanged`` (a ``no-change`` event);
   else **plan**: the next function built from the applied version with the region's algorithm and
   parameters, and the migration plan to it: ``activated``, or in ``recommend`` mode
   ``recommended`` (the same candidate and plan, recorded as an event and not activated). In split
   mode the build is a split function by the region's scheme and b spreads the split
   keys by their weights; a region whose applied function is of the other kind (it entered or left
   split mode) rebuilds whatever b is (rule ``split-mode``).
3. **Persist** (``persist``, one short write transaction; nothing is computed in it): with a lease,
   its fencing token is checked first (``repart.storage.check_fence``: a controller paused past its
   lease cannot write); then the region's status is compared and set, so a decision made on a status
   that changed since the read (another controller's activation, an operator's rollback, a job
   applying a plan) is refused with ``Conflict`` and writes nothing; then version, plan and event are
   written (``repart.storage.activate``), or the ``no-change`` or ``recommended`` event. A region
   backing off after failed ticks (``repart.storage.backoff``) has its backoff ended in that
   transaction, or, when the tick has nothing else to write, in a short one of its own: a successful
   tick ends a backoff whoever runs it.

A region's first tick runs these steps twice when windows are already waiting: once to write p^(0),
once to decide on the windows. Every decision records ``considered_seq``, the newest window seq it
saw (on the region row and in its event), so one window is decided on once. ``TickResult`` reports
what happened and the seconds of each step.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

from sqlalchemy import Engine, bindparam, func, select
from sqlalchemy.orm import Session

from repart.controller.policy import Decision, RebalanceDecision, needs_rebalance
from repart.controller.settings import ControllerSettings
from repart.controller.signal import BatchLoad
from repart.controller.state_step import dominant_key_note, state_choice_note, state_step, step_data
from repart.controller.steps import build_step
from repart.controller.window import merge_snapshots, window_size
from repart.errors import InvalidInput
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import ConsistentSpec, initial_function
from repart.partitioning.documents import json_number
from repart.partitioning.domain import ConsistentMethod
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.build import split_imbalance
from repart.partitioning.state_partitions import StatePartitions, load_version_function
from repart.partitioning.utility import function_cost
from repart.protocol.snapshot import ChannelMeasurement, Snapshot
from repart.storage import (
    Fence,
    NewEvent,
    NewVersion,
    RegionConfig,
    RegionStatus,
    activate,
    check_fence,
    compare_and_set_status,
    latest_snapshots,
    models,
    read_transaction,
    record_event,
    region_by_name,
    run_in_transaction,
    tables,
)
from repart.storage.backoff import clear_backoff
from repart.storage.snapshots import stored_progress

TickAction = Literal["initialized", "idle", "unchanged", "activated", "recommended", "blocked", "held"]


@dataclass(frozen=True)
class TickResult:
    """What one tick did for ``region``.

    ``action`` is ``initialized`` (p^(0) activated, and no window waiting), ``idle`` (no new snapshot
    to decide on), ``unchanged`` (decided to keep the applied function), ``activated`` (a new version
    and plan were stored), ``recommended`` (the region is in ``recommend`` mode: what would have been
    activated was recorded as a ``recommended`` event), ``blocked`` (a plan is being applied; nothing
    was written) or ``held`` (the region is in ``hold`` mode; nothing was read beyond its row or
    written); ``reason`` says why in one sentence. A region's first tick initializes it and, when
    windows are waiting, decides on them at once: its action is then the decision's, and ``reason``
    starts with the initialization's. ``version`` and ``plan_id`` are the activated version's number
    and plan id (None unless activated or initialized; p^(0) has no plan), ``n_channels`` the channel
    count the region runs with after the tick (the new version's when activated, else the applied
    version's).
    ``build_seconds`` is the time spent deciding (merging the window, predicting b, building the
    function and its plan), ``storage_seconds`` the time in the database: ``read_seconds`` in the read
    transaction plus ``write_seconds`` in the write transaction (0 when nothing was written), which
    is the time the tick holds SQLite's write lock.
    ``b_before`` is the imbalance b of the applied function on the window the tick decided on (Gedik
    Eq. 11), as its event records it: None when it recorded none (no decision on a window, an empty
    window, or an infinite b).
    """

    region: str
    action: TickAction
    reason: str
    version: int | None
    plan_id: int | None
    n_channels: int | None
    build_seconds: float
    storage_seconds: float
    read_seconds: float
    write_seconds: float
    b_before: float | None = None


@dataclass(frozen=True)
class TickInput:
    """What a tick reads of a region before it decides (step 1 of the module docstring); what a job
    measures of a batch is ``repart.spark.observe.Observation``.

    ``status`` is the status the decision will be compared against when it is persisted;
    ``newest_seq`` the newest snapshot's seq (None without snapshots); ``applied_n_channels`` N of the
    applied version (None before the first); ``mode_reason`` why the region is in its mode.
    ``applying_plan`` (a plan being applied), and
    ``applied_function``, ``window`` (the sliding window's snapshots, oldest first) and ``history``
    (the newest batches' loads the channel-count policy reads, oldest first), with ``before_change``
    (the batch before the last change of N when ``history`` holds only batches at the applied N) are
    read only when a decision on a new window is due (``awaits_decision``); they are None, None,
    empty, empty and None otherwise. ``tick_failures`` counts the region's failed ticks in a row
    (``repart.storage.backoff``): a successful tick ends its backoff.
    """

    region: str
    config: RegionConfig
    settings: ControllerSettings
    status: RegionStatus
    newest_seq: int | None
    applied_n_channels: int | None
    mode_reason: str | None = None
    applying_plan: int | None = None
    applied_function: RoutingFunction | StatePartitions | None = None
    window: tuple[Snapshot, ...] = ()
    history: tuple[BatchLoad, ...] = ()
    before_change: BatchLoad | None = None
    tick_failures: int = 0


@dataclass(frozen=True)
class Verdict:
    """What ``decide`` concluded: the action, its reason, N after it, and what to persist.

    ``event`` is None for ``idle``, ``blocked`` and ``held`` (nothing to write). ``version`` is set for
    ``initialized`` and ``activated``, ``plan`` for ``activated``; ``considered_seq`` is the newest
    window seq decided on (``unchanged``, ``activated`` and ``recommended``).
    """

    action: TickAction
    reason: str
    n_channels: int | None
    event: NewEvent | None = None
    version: NewVersion | None = None
    plan: MigrationPlan | None = None
    considered_seq: int | None = None


@dataclass(frozen=True)
class Persisted:
    """What ``persist`` wrote: the activated version's number and its plan id (None if none), and the
    pending plans the activation superseded."""

    version: int | None
    plan_id: int | None
    superseded_plans: tuple[int, ...] = ()


def tick(
    engine: Engine, region: str, *, now: datetime | None = None, fence: Fence | None = None
) -> TickResult:
    """Run one read → decide → persist iteration for ``region`` (see the module docstring).

    ``now`` (timezone-aware; default: the current time) is the time of what is written (the
    channel-count policy counts batches, not seconds). ``fence`` is the caller's lease of the
    region (a daemon's); without one (``repart tick``) the compare-and-set on the region's status alone
    guards the write. Raises NotFound for an unknown region, InvalidInput naming the field for a region
    configuration the controller cannot act on, and Conflict when the lease is lost or
    the status changed between the read and the write; nothing is written then.
    """
    moment = aware_now(now)
    first, windows_waiting = _iterate(engine, region, moment, fence)
    if first.action != "initialized" or not windows_waiting:
        return first
    then, _ = _iterate(engine, region, moment, fence)
    if then.action == "idle":
        return first
    return dataclasses.replace(
        then,
        reason=f"{first.reason}; then {then.reason}",
        build_seconds=first.build_seconds + then.build_seconds,
        storage_seconds=first.storage_seconds + then.storage_seconds,
        read_seconds=first.read_seconds + then.read_seconds,
        write_seconds=first.write_seconds + then.write_seconds,
    )


def _iterate(engine: Engine, region: str, moment: datetime, fence: Fence | None) -> tuple[TickResult, bool]:
    """One read → decide → persist pass, and whether the region had snapshots when it was read."""
    started = time.perf_counter()
    tick_input = read_transaction(engine, lambda session: read_tick_input(session, region))
    read_done = time.perf_counter()
    verdict = decide(tick_input, moment)
    decided = time.perf_counter()
    persisted, write_seconds = Persisted(None, None), 0.0
    if verdict.event is not None:
        persisted = run_in_transaction(
            engine, lambda session: persist(session, tick_input, verdict, moment, fence)
        )
        write_seconds = time.perf_counter() - decided
    elif tick_input.tick_failures:
        run_in_transaction(engine, lambda session: end_backoff(session, region, fence))
        write_seconds = time.perf_counter() - decided
    read_seconds = read_done - started
    reason = verdict.reason
    if persisted.superseded_plans:
        listed = ", ".join(str(plan) for plan in persisted.superseded_plans)
        reason += f"; superseded pending plan(s) {listed}, never applied"
    result = TickResult(
        region=region,
        action=verdict.action,
        reason=reason,
        version=persisted.version,
        plan_id=persisted.plan_id,
        n_channels=verdict.n_channels,
        build_seconds=decided - read_done,
        storage_seconds=read_seconds + write_seconds,
        read_seconds=read_seconds,
        write_seconds=write_seconds,
        b_before=None if verdict.event is None else verdict.event.data.get("b_before"),
    )
    return result, tick_input.newest_seq is not None


# The statements of ``read_tick_input``, built once (a tick runs them for every region every interval).
_NEWEST_SEQ_AND_APPLIED_N = select(
    select(func.max(tables.snapshots.c.seq))
    .where(tables.snapshots.c.region_id == bindparam("region_id"))
    .scalar_subquery(),
    select(tables.versions.c.n_channels)
    .where(
        tables.versions.c.region_id == bindparam("region_id"),
        tables.versions.c.number == bindparam("number"),
    )
    .scalar_subquery(),
)
_APPLYING_PLAN = select(func.min(tables.plans.c.id)).where(
    tables.plans.c.region_id == bindparam("region_id"), tables.plans.c.status == "applying"
)
_APPLIED_FUNCTION = select(tables.versions.c.function_json).where(
    tables.versions.c.region_id == bindparam("region_id"), tables.versions.c.number == bindparam("number")
)


def read_tick_input(session: Session, region: str) -> TickInput:
    """Step 1: the status check, then, only when a decision on a new window is due, the applied
    function and the window (see ``TickInput``)."""
    row = region_by_name(session, region)
    applied = {"region_id": row.id, "number": row.applied_version}
    newest_seq, applied_n_channels = session.execute(_NEWEST_SEQ_AND_APPLIED_N, applied).one()
    config = RegionConfig.from_row(row)
    settings = ControllerSettings.from_config(config)
    tick_input = TickInput(
        region,
        config,
        settings,
        RegionStatus.of(row),
        newest_seq,
        applied_n_channels,
        row.mode_reason,
        tick_failures=row.tick_failures,
    )
    if not awaits_decision(tick_input):
        return tick_input
    applying = session.scalar(_APPLYING_PLAN, {"region_id": row.id})
    if applying is not None:
        return dataclasses.replace(tick_input, applying_plan=applying)
    function_json = session.scalar(_APPLIED_FUNCTION, applied)
    window = latest_snapshots(session, region, window_size(settings.counters))
    history = batch_history(session, row.id, settings.policy.history_batches, applied_n_channels)
    return dataclasses.replace(
        tick_input,
        applied_function=load_version_function(cast(str, function_json)),
        window=tuple(window),
        history=history,
        before_change=batch_before_change(session, row.id, history, applied_n_channels),
    )


def batch_history(session: Session, region_id: int, count: int, applied_n: int) -> tuple[BatchLoad, ...]:
    """The loads of the region's newest ``count`` batches (snapshots), oldest first: each with the N of
    the version it reports it ran with (``applied_n`` when it names none), its channels and its
    progress; items and slots are not read."""
    if count == 0:
        return ()
    snapshot, version = models.Snapshot, models.Version
    rows = session.execute(
        select(snapshot, version.n_channels)
        .outerjoin(version, (version.region_id == snapshot.region_id) & (version.number == snapshot.version))
        .where(snapshot.region_id == region_id)
        .order_by(snapshot.seq.desc())
        .limit(count)
    ).all()
    return _loads(session, [(row, applied_n if n is None else n) for row, n in reversed(rows)])


def batch_before_change(
    session: Session, region_id: int, history: tuple[BatchLoad, ...], applied_n: int
) -> BatchLoad | None:
    """The newest batch before ``history`` that ran at another N than ``applied_n``, when every batch
    of ``history`` ran at ``applied_n`` (the batch before the last change of N, which the policy's
    effectiveness check compares against however long ago the change was); None otherwise or when
    there is none."""
    if not history or any(load.n_channels != applied_n for load in history):
        return None
    snapshot, version = models.Snapshot, models.Version
    found = session.execute(
        select(snapshot, version.n_channels)
        .join(version, (version.region_id == snapshot.region_id) & (version.number == snapshot.version))
        .where(
            snapshot.region_id == region_id,
            snapshot.seq < history[0].seq,
            version.n_channels != applied_n,
        )
        .order_by(snapshot.seq.desc())
        .limit(1)
    ).first()
    return None if found is None else _loads(session, [(found[0], found[1])])[0]


def _loads(session: Session, rows: list[tuple[models.Snapshot, int]]) -> tuple[BatchLoad, ...]:
    """``BatchLoad``s of snapshot rows, each with the N it ran with, their channels read in one query."""
    channel = models.SnapshotChannel
    ids = [row.id for row, _ in rows]
    measured: dict[int, list[ChannelMeasurement]] = {}
    for snapshot_id, number, tuples, busy, state in session.execute(
        select(
            channel.snapshot_id, channel.channel, channel.tuples, channel.busy_seconds, channel.state_bytes
        )
        .where(channel.snapshot_id.in_(ids))
        .order_by(channel.snapshot_id, channel.channel)
    ):
        measured.setdefault(snapshot_id, []).append(ChannelMeasurement(number, tuples, busy, state))
    return tuple(
        BatchLoad(
            seq=row.seq,
            n_channels=n,
            channels=tuple(measured.get(row.id, ())),
            progress=stored_progress(row),
            ingested_at=row.ingested_at,
        )
        for row, n in rows
    )


def awaits_decision(tick_input: TickInput) -> bool:
    """True when the region is not held and has an applied version and a snapshot newer than the one
    last decided on."""
    status, newest = tick_input.status, tick_input.newest_seq
    if status.mode == "hold" or status.applied_version is None or newest is None:
        return False
    return status.considered_seq is None or newest > status.considered_seq


def decide(tick_input: TickInput, now: datetime) -> Verdict:
    """Step 2, a pure function: what to do about the region, given what was read and ``now``."""
    status, n_applied = tick_input.status, tick_input.applied_n_channels
    if status.mode == "hold":
        return Verdict("held", f"held: {tick_input.mode_reason or 'no reason given'}", n_applied)
    if status.applied_version is None or n_applied is None:
        return _initialize(tick_input.config)
    if tick_input.newest_seq is None:
        return Verdict("idle", "no snapshots yet", n_applied)
    if not awaits_decision(tick_input):
        return Verdict(
            "idle",
            f"no snapshot newer than window seq {status.considered_seq}, already decided on",
            n_applied,
        )
    if tick_input.applying_plan is not None:
        return Verdict(
            "blocked",
            f"plan {tick_input.applying_plan} is being applied; deciding again once it is applied or failed",
            n_applied,
        )
    current, window = tick_input.applied_function, tick_input.window
    if current is None or not window:
        raise TypeError("a tick input with a decision due must hold the applied function and the window")
    if isinstance(current, StatePartitions):
        verdict = _analyze_state(tick_input, current)
    else:
        verdict = _analyze(
            tick_input.settings, status, current, window, tick_input.history, tick_input.before_change
        )
    if status.mode == "recommend" and verdict.action == "activated":
        return _recommendation(verdict)
    return verdict


def _recommendation(verdict: Verdict) -> Verdict:
    """What ``activated`` would have done, recorded instead as a ``recommended`` event:
    the candidate's N, digest, predicted b and m, and its plan's move counts and m; nothing is activated."""
    version, plan, event = verdict.version, verdict.plan, verdict.event
    if version is None or plan is None or event is None:
        raise TypeError("a recommendation is made from an activation verdict with a version and a plan")
    data = dict(event.data) | {
        "digest": version.digest,
        "n_channels": version.n_channels,
        "plan": {
            "explicit_moves": len(plan.explicit_moves),
            "slot_moves": len(plan.slot_moves),
            "consolidations": len(plan.consolidations),
            "plan_m": None if plan.m is None else json_number(plan.m),
        },
    }
    reason = f"recommend mode, nothing activated: {verdict.reason}"
    return Verdict(
        "recommended",
        reason,
        verdict.n_channels,
        event=NewEvent("recommended", event.rule, reason, data),
        considered_seq=verdict.considered_seq,
    )


def _initialize(config: RegionConfig) -> Verdict:
    """p^(0): the consistent hash alone on ``n_channels_initial`` channels, activated without a plan;
    for a ``spark-state`` region, the count ``n_channels_initial`` of state partitions."""
    if config.engine == "spark-state":
        count = StatePartitions(config.n_channels_initial, config.key_type)
        reason = f"initial count: {count.n_partitions} state partitions"
        return Verdict(
            "initialized",
            reason,
            count.n_partitions,
            event=NewEvent("initialized", "initial", reason, {"n_channels": count.n_partitions}),
            version=NewVersion(count.to_json(), count.digest, count.n_partitions, "initial"),
        )
    function = initial_function(
        config.n_channels_initial,
        config.key_type,
        config.slot_bits,
        ConsistentSpec(method=cast(ConsistentMethod, config.consistent_method)),
    )
    reason = f"p(0): consistent hashing ({config.consistent_method}) on {function.n_channels} channels"
    return Verdict(
        "initialized",
        reason,
        function.n_channels,
        event=NewEvent("initialized", "initial", reason, {"n_channels": function.n_channels}),
        version=NewVersion(function.to_json(), function.digest, function.n_channels, "consistent"),
    )


def _analyze(
    settings: ControllerSettings,
    status: RegionStatus,
    current: RoutingFunction,
    window: tuple[Snapshot, ...],
    history: tuple[BatchLoad, ...],
    before_change: BatchLoad | None,
) -> Verdict:
    """Analyze and plan on a new window: the channel-count policy on the batch history, the rebalance
    trigger on the merged window, then the build and its plan."""
    n_applied = current.n_channels
    estimate = merge_snapshots(window)
    newest = window[-1].seq
    base: dict[str, Any] = {"considered_seq": newest, "window_seqs": [snapshot.seq for snapshot in window]}
    if not estimate.keys or estimate.total == 0:
        message = "the window holds no keys to build from"
        return _unchanged(n_applied, "empty-window", message, base, newest)
    decision = settings.policy.decide(history, n_applied, before_change)
    before = split_imbalance(current, estimate, settings.params)
    b_before = before.b
    rebalance = _mode_change(current, settings) or needs_rebalance(b_before, settings.rebalance_threshold)
    base |= {
        "utility": settings.params.utility,
        "policy": decision.rule,
        "policy_numbers": decision.numbers,
        "held_by": decision.held_by,
        "n_before": n_applied,
        "n_next": decision.n_channels,
        "b_before": json_number(b_before),
        "load_before": before.max_mean_load,
        "threshold": settings.rebalance_threshold,
    }
    if not decision.changed and not rebalance.rebalance:
        return _unchanged(n_applied, decision.rule, _reason(decision, rebalance), base, newest)
    built = build_step(current, estimate, decision.n_channels, settings)
    function = built.function
    if function.digest == current.digest:
        message = (
            f"{_reason(decision, rebalance)}; the build reproduced the applied version "
            f"{status.applied_version}"
        )
        return _unchanged(n_applied, _rule(decision, rebalance), message, base, newest)
    plan = plan_migration(current, function, estimate, settings.params.resources)
    reason = _reason(decision, rebalance) + _step_note(built.event_data.get("step"))
    data = base | built.event_data | {"plan_m": None if plan.m is None else json_number(plan.m)}
    data |= moved_state(plan.m, function.n_channels, window[-1])
    if not decision.changed and rebalance.rule == "imbalance-threshold":
        held = _rebalance_held(data, b_before, settings)
        if held is not None:
            rule, message = held
            return _unchanged(n_applied, rule, f"{_reason(decision, rebalance)}; {message}", data, newest)
    version = NewVersion(
        function.to_json(),
        function.digest,
        function.n_channels,
        built.algorithm,
        built.report,
        parent_number=status.applied_version,
    )
    return Verdict(
        "activated",
        reason,
        function.n_channels,
        event=NewEvent("activated", _rule(decision, rebalance), reason, data),
        version=version,
        plan=plan,
        considered_seq=newest,
    )


def _analyze_state(tick_input: TickInput, current: StatePartitions) -> Verdict:
    """Analyze and plan on a new window of a ``spark-state`` region: the channel-count policy on the
    batch history, then, when it changes the count, the skew-aware count near its choice and the
    checkpoint's repartition to it (``repart.controller.state_step``). The imbalance trigger is not
    applied at an unchanged count: a repartition rewrites the whole state, so only a change of the
    policy's count pays for one. An unchanged count's event still records its predicted load and names
    a key no count balances."""
    settings, status, window = tick_input.settings, tick_input.status, tick_input.window
    n_applied = current.n_partitions
    estimate = merge_snapshots(window)
    newest = window[-1].seq
    base: dict[str, Any] = {"considered_seq": newest, "window_seqs": [snapshot.seq for snapshot in window]}
    decision = settings.policy.decide(tick_input.history, n_applied, tick_input.before_change)
    base |= {
        "policy": decision.rule,
        "policy_numbers": decision.numbers,
        "held_by": decision.held_by,
        "n_before": n_applied,
        "n_next": decision.n_channels,
    }
    config = tick_input.config
    if not decision.changed:  # the count stays: its choice is reported, a key no count balances named
        kept = state_step(current, estimate, n_applied, (n_applied, n_applied), config.slot_bits, window[-1])
        dominant = dominant_key_note(kept)
        message = decision.reason if dominant is None else f"{decision.reason}; {dominant}"
        return _unchanged(n_applied, decision.rule, message, base | step_data(kept), newest)
    step = state_step(
        current,
        estimate,
        decision.n_channels,
        (config.min_channels, config.max_channels),
        config.slot_bits,
        window[-1],
    )
    data = base | step_data(step)
    note = state_choice_note(step)
    if step.plan is None:
        message = f"{decision.reason}; {note}, the applied count"
        return _unchanged(n_applied, decision.rule, message, data, newest)
    data |= {"plan_m": None if step.plan.m is None else json_number(step.plan.m)}
    reason = f"{decision.reason}; {note}"
    count = step.function
    version = NewVersion(
        count.to_json(),
        count.digest,
        count.n_partitions,
        "skew-aware",
        step.choice.to_document(),
        parent_number=status.applied_version,
    )
    return Verdict(
        "activated",
        reason,
        count.n_partitions,
        event=NewEvent("activated", decision.rule, reason, data),
        version=version,
        plan=step.plan,
        considered_seq=newest,
    )


def _step_note(step: dict[str, Any] | None) -> str:
    """The reason's note when a scale step leaves b above the threshold (``build_step``), else ''."""
    if step is None or step["b_within_threshold"]:
        return ""
    return (
        f"; b after the step stays above the threshold {step['threshold']:g}: no candidate within "
        f"{step['limit']:.3g} of the keys moved reaches it"
    )


def moved_state(m: float | None, n_channels: int, newest: Snapshot) -> dict[str, Any]:
    """The state a plan moves, in the paper's unit and in the job's: the share ``m / N`` of the state
    (``moved_state_share``; m is the moved state over the mean state per channel, Gedik Eq. 10), and
    that share of the newest window's keys (``moved_rows``: one state row per key) and of its
    channels' state bytes (``moved_bytes``; None when the window reports none)."""
    if m is None:
        return {"moved_state_share": None, "moved_rows": None, "moved_bytes": None}
    share = min(1.0, m / n_channels)
    state_bytes = sum(measured.state_bytes for measured in newest.channels or ())
    return {
        "moved_state_share": share,
        "moved_rows": round(share * newest.distinct_estimate),
        "moved_bytes": round(share * state_bytes) if state_bytes else None,
    }


def _rebalance_held(
    data: dict[str, Any], b_before: float, settings: ControllerSettings
) -> tuple[str, str] | None:
    """Why a rebalance at unchanged N is not worth it, or None when it is: it moves more of the state
    than the region's ``migration_budget`` (rule ``migration-budget``), or it does not pay back within
    ``rebalance_payback_batches`` H (rule ``rebalance-gain``). Keeping the applied function costs b in
    each batch; the new one costs U(b', m) under the region's utility in the batch that moves the state
    (``repart.partitioning.utility.function_cost``) and b' in each of the H - 1 after it, so the move
    pays when (U(b', m) + (H - 1)·b') / H < b. H = 1 is the one-step comparison of U(b', m) with b
    (Gedik Eq. 13 under ATM); under APM it is b' + m / H < b."""
    share, b_after, m = data.get("moved_state_share"), data.get("predicted_b"), data.get("predicted_m")
    budget, horizon = settings.migration_budget, settings.rebalance_payback_batches
    if isinstance(share, float) and share > budget:
        return "migration-budget", f"it would move {share:.3g} of the state, over the budget {budget:g}"
    if isinstance(b_after, int | float) and isinstance(m, int | float):
        utility = settings.params.utility
        cost = (function_cost(utility, b_after, m) + (horizon - 1) * b_after) / horizon
        if cost >= b_before:
            return (
                "rebalance-gain",
                f"its predicted b = {b_after:.4g} at m = {m:.3g} does not pay back within {horizon} "
                f"batch(es) under the utility {utility} (mean cost {cost:.4g} over {horizon} batch(es) "
                f">= b = {b_before:.4g} now)",
            )
    return None


def _unchanged(n_channels: int, rule: str, message: str, data: dict[str, Any], newest: int) -> Verdict:
    event = NewEvent("no-change", rule, message, data)
    return Verdict("unchanged", message, n_channels, event=event, considered_seq=newest)


def persist(
    session: Session, tick_input: TickInput, verdict: Verdict, now: datetime, fence: Fence | None
) -> Persisted:
    """Step 3: write ``verdict`` if the region's status is still ``tick_input.status`` (and, with a
    ``fence``, its lease is still the caller's); Conflict otherwise, and nothing is written."""
    if verdict.event is None:
        raise TypeError(f"persist needs a verdict with something to write, got a {verdict.action!r} verdict")
    region = tick_input.region
    row = region_by_name(session, region, lock=True)  # region row, then lease row: acquire_lease's order
    if fence is not None:
        check_fence(session, region, row.id, fence, datetime.now(UTC))
    if tick_input.tick_failures:
        clear_backoff(session, row.id)
    expected = tick_input.status
    if verdict.version is None:
        compare_and_set_status(
            session,
            region,
            row.id,
            expected,
            dataclasses.replace(expected, considered_seq=verdict.considered_seq),
        )
        record_event(session, region, verdict.event, at=now)
        return Persisted(None, None)
    activation = activate(
        session,
        region,
        verdict.version,
        verdict.plan,
        verdict.event,
        expected=expected,
        considered_seq=verdict.considered_seq,
        at=now,
    )
    return Persisted(activation.version_number, activation.plan_id, activation.superseded_plans)


def end_backoff(session: Session, region: str, fence: Fence | None) -> None:
    """End ``region``'s backoff after a tick that had nothing else to write (with a ``fence``, only while
    its lease is still the caller's; Conflict otherwise, and nothing is written)."""
    row = region_by_name(session, region, lock=True)  # region row, then lease row, as ``persist`` locks
    if fence is not None:
        check_fence(session, region, row.id, fence, datetime.now(UTC))
    clear_backoff(session, row.id)


def _mode_change(current: RoutingFunction, settings: ControllerSettings) -> RebalanceDecision | None:
    """A rebuild whatever b is when the applied function's kind differs from the region's: a region that
    entered split mode splits its hot keys, one that left it consolidates them."""
    split = current.kind == "split"
    if split == (settings.split is not None):
        return None
    if split:
        return RebalanceDecision(True, "split-mode", "the region left split mode: its split keys consolidate")
    return RebalanceDecision(True, "split-mode", "the region entered split mode: its hot keys split")


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
    return region_by_name(session, region).considered_seq


def aware_now(now: datetime | None) -> datetime:
    """``now`` (the current UTC time when None); InvalidInput for a naive datetime."""
    moment = datetime.now(UTC) if now is None else now
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput("now", f"must be a timezone-aware datetime, got {moment.isoformat()}")
    return moment
