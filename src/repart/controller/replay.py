"""Replaying a snapshot sequence through the controller with candidate settings, to tune a region offline.

``replay`` creates the region in a throwaway SQLite database and, for each snapshot in turn, does what a
job and the controller would have done: the batch runs on the function applied at the time, its
channels' busy time is *predicted* (below), the snapshot is ingested with those measurements, and the
controller's own ``tick`` decides (the same read, pure decide, build and plan as ``repart tick``); an
activated plan is applied before the next batch, as a job would. Nothing else is simulated: the
decisions are the controller's.

**The busy-time model.** A window's cost per row ``c`` is its recorded channels' busy seconds over
their tuples (``Σ busy / Σ tuples``; a window without busy time takes the median of the others). At
the replayed channel count, each channel's tuples are the window's item counts routed by the applied
function, plus the tuples outside the items spread evenly over the channels; its busy time is its
tuples times ``c``. So busy time is linear in the rows a channel receives, at the window's recorded
cost, whatever N ran when it was recorded: fixed per-batch overheads and contention are not modelled.

**The figures** (``ReplaySummary``): ``changes`` of N; ``reversals_within_3`` (a change opposite to the
previous one within 3 batches); ``max_consecutive_over_budget`` (batches in a row whose busiest channel
ran over the budget); ``in_band_share`` (batches whose utilization is within the region's band);
``cost_over_oracle`` (the sum of N over the batches against an oracle's, which takes per batch the
smallest N whose best possible key-preserving balance, ``max(rows / N, hottest key's rows)``, keeps the
busiest channel at or below the target utilization, or the largest N when none does);
``moved_over_ideal_max`` (the largest share of
the keys one scale step moved, over the ideal ``|ΔN| / max(N, N')``); ``rebalance_moved_max`` (the
largest share one rebalance at unchanged N moved) and ``seconds_over_budget`` (the busy time past the
budget, summed over batches).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repart.controller.actions import explain
from repart.controller.bound import best_balance_utilization
from repart.controller.policy import TargetUtilizationPolicy
from repart.controller.service import create_region, ingest_snapshot
from repart.controller.settings import ControllerSettings
from repart.controller.steps import ideal_share, moved_key_share
from repart.controller.tick import tick
from repart.errors import InvalidInput
from repart.partitioning.routing import RoutingFunction
from repart.protocol.snapshot import ChannelMeasurement, Snapshot
from repart.storage import (
    RegionConfig,
    make_engine,
    read_transaction,
    run_in_transaction,
    upgrade,
)
from repart.storage.client import SqlControllerClient

REVERSAL_WINDOW = 3
MODEL = (
    "busy seconds of a channel = its rows at the replayed N (item counts routed by the applied function, "
    "rows outside the items spread evenly) x the window's recorded cost per row (sum busy / sum tuples)"
)


@dataclass(frozen=True)
class ReplayedBatch:
    """One replayed batch: its window ``seq``, the N it ran with, the busiest channel's utilization of
    the budget, the tick's action, the rule that held a change back, N after the tick, b and max/mean
    load (``load``) of the applied function on the window, as the tick computed them (None when the
    tick had no window to compute them on), and for an activation the share of the window's keys it
    moved."""

    seq: int
    n_channels: int
    utilization: float
    budget_seconds: float
    oracle_channels: int
    action: str
    held_by: str | None
    n_next: int
    b: float | None
    load: float | None
    moved_key_share: float | None = None


@dataclass(frozen=True)
class ReplaySummary:
    """The figures of a replay (module docstring)."""

    batches: int
    changes: int
    reversals_within_3: int
    max_consecutive_over_budget: int
    in_band_share: float
    cost_over_oracle: float
    moved_over_ideal_max: float | None
    rebalance_moved_max: float | None
    seconds_over_budget: float
    channel_batches: int
    oracle_channel_batches: int


@dataclass(frozen=True)
class Replay:
    """A replay's batches, its summary and the busy-time model it predicted with."""

    batches: tuple[ReplayedBatch, ...]
    summary: ReplaySummary
    model: str = MODEL

    def to_json(self) -> dict[str, Any]:
        """The replay as a JSON object: ``summary``, ``model`` and ``batches``."""
        return {
            "summary": dataclasses.asdict(self.summary),
            "model": self.model,
            "batches": [dataclasses.asdict(batch) for batch in self.batches],
        }


def replay(
    snapshots: Sequence[Snapshot],
    config: RegionConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Replay:
    """Replay ``snapshots`` (one region's, in window order) through the controller for a region
    configured as ``config`` (module docstring); ``progress(done, total)`` after each batch.

    InvalidInput naming the field: no snapshots; snapshots of several regions; a split region
    (``settings.split``: the model routes keys to one channel each); no budget (neither
    ``settings.batch_interval_seconds`` nor every snapshot's ``progress.interval_seconds``); no
    recorded busy time to estimate the cost per row from. A bad setting is the controller's error.
    """
    ordered = _checked(snapshots, config)
    settings = ControllerSettings.from_config(config)
    band = _band(settings)
    costs = costs_per_row(ordered)
    region = ordered[0].region
    with tempfile.TemporaryDirectory(prefix="repart-replay-") as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'replay.db'}")
        try:
            upgrade(engine)
            run_in_transaction(engine, lambda session: create_region(session, region, config))
            tick(engine, region, now=ordered[0].window_start)
            client = SqlControllerClient(engine)
            rows = []
            for index, (snapshot, cost) in enumerate(zip(ordered, costs, strict=True)):
                rows.append(_replay_batch(engine, client, snapshot, cost, settings, config))
                if progress is not None:
                    progress(index + 1, len(ordered))
        finally:
            engine.dispose()
    return Replay(tuple(rows), summarize(rows, band))


def _replay_batch(
    engine: Any,
    client: SqlControllerClient,
    snapshot: Snapshot,
    cost: float,
    settings: ControllerSettings,
    config: RegionConfig,
) -> ReplayedBatch:
    applied = client.applied_function(snapshot.region)
    function = applied.function
    per_channel = channel_rows(function, snapshot)
    budget = batch_budget(snapshot, settings)
    measured = tuple(
        ChannelMeasurement(channel, int(rows), float(rows) * cost, 0)
        for channel, rows in enumerate(per_channel)
    )
    ran = dataclasses.replace(snapshot, version=applied.version, channels=measured, batch=None)
    run_in_transaction(engine, lambda session: ingest_snapshot(session, ran, source="repart replay"))
    result = tick(engine, snapshot.region, now=snapshot.window_end)
    shown = read_transaction(engine, lambda session: explain(session, snapshot.region))
    moved = None
    if result.action == "activated":
        plan = client.claim_next_plan(snapshot.region)
        if plan is not None:
            client.report_plan(plan.plan_id, "applied")
        moved = moved_key_share(
            function, client.applied_function(snapshot.region).function, snapshot.item_columns.keys
        )
    b, load = shown.get("b_before"), shown.get("load_before")
    return ReplayedBatch(
        seq=snapshot.seq,
        n_channels=function.n_channels,
        utilization=float(per_channel.max()) * cost / budget,
        budget_seconds=budget,
        oracle_channels=oracle_channels(
            best_balance_utilization([snapshot], [cost], [budget], config.max_channels)[0],
            oracle_target(settings),
            config.min_channels,
        ),
        action=result.action,
        held_by=shown.get("held_by"),
        n_next=result.n_channels or function.n_channels,
        b=float(b) if isinstance(b, int | float) else None,
        load=float(load) if isinstance(load, int | float) else None,
        moved_key_share=moved,
    )


def channel_rows(function: RoutingFunction, snapshot: Snapshot) -> np.ndarray:
    """Each channel's rows in ``snapshot``'s window under ``function`` (module docstring; a replayed
    region is key-preserving, so its functions are home functions)."""
    n = function.n_channels
    function = function.home
    items = snapshot.item_columns
    rows = np.zeros(n, dtype=np.float64)
    if len(items.keys):
        channels = function.lookup_many(items.keys)
        rows += np.bincount(channels, weights=items.counts.astype(np.float64), minlength=n)
    rows += (snapshot.tuples - float(items.counts.sum())) / n
    return rows


def oracle_channels(utilization: np.ndarray, target: float, min_channels: int = 1) -> int:
    """The oracle's N for one batch: the smallest N from ``min_channels`` whose best-balance utilization
    ``utilization[N - 1]`` (a row of ``repart.controller.bound.best_balance_utilization``) is at or below
    ``target``; the largest N, ``len(utilization)``, when none is (module docstring)."""
    meets = np.flatnonzero(np.asarray(utilization)[min_channels - 1 :] <= target)
    return int(meets[0]) + min_channels if len(meets) else len(utilization)


def oracle_target(settings: ControllerSettings) -> float:
    """The utilization the oracle sizes N for: the policy's target, 1 (the budget) for other policies."""
    policy = settings.policy
    return policy.target_utilization if isinstance(policy, TargetUtilizationPolicy) else 1.0


def summarize(rows: Sequence[ReplayedBatch], band: tuple[float, float]) -> ReplaySummary:
    """The figures of the module docstring over the replayed batches."""
    steps = [(index, row) for index, row in enumerate(rows) if row.n_next != row.n_channels]
    reversals = 0
    for (at, step), (then, following) in itertools.pairwise(steps):
        opposite = (step.n_next - step.n_channels) * (following.n_next - following.n_channels) < 0
        reversals += int(opposite and then - at <= REVERSAL_WINDOW)
    longest = run = 0
    for row in rows:
        run = run + 1 if row.utilization > 1 else 0
        longest = max(longest, run)
    scale_moves = [
        row.moved_key_share / ideal_share(row.n_channels, row.n_next)
        for row in rows
        if row.moved_key_share is not None and row.n_next != row.n_channels
    ]
    rebalance_moves = [
        row.moved_key_share
        for row in rows
        if row.moved_key_share is not None and row.n_next == row.n_channels
    ]
    channel_batches = sum(row.n_channels for row in rows)
    oracle = sum(row.oracle_channels for row in rows)
    low, high = band
    return ReplaySummary(
        batches=len(rows),
        changes=len(steps),
        reversals_within_3=reversals,
        max_consecutive_over_budget=longest,
        in_band_share=sum(low <= row.utilization <= high for row in rows) / len(rows),
        cost_over_oracle=channel_batches / oracle,
        moved_over_ideal_max=max(scale_moves, default=None),
        rebalance_moved_max=max(rebalance_moves, default=None),
        seconds_over_budget=math.fsum(max(0.0, row.utilization - 1) * row.budget_seconds for row in rows),
        channel_batches=channel_batches,
        oracle_channel_batches=oracle,
    )


def _checked(snapshots: Sequence[Snapshot], config: RegionConfig) -> list[Snapshot]:
    if not snapshots:
        raise InvalidInput("snapshots", "must hold at least one snapshot, got none")
    ordered = sorted(snapshots, key=lambda snapshot: snapshot.seq)
    regions = sorted({snapshot.region for snapshot in ordered})
    if len(regions) > 1:
        raise InvalidInput("region", f"must be one region's snapshots, got {', '.join(map(repr, regions))}")
    repeated = sorted({a.seq for a, b in itertools.pairwise(ordered) if a.seq == b.seq})
    if repeated:
        raise InvalidInput(
            "snapshots", f"must hold each window seq once, got seq {repeated[0]} more than once"
        )
    if config.split_scheme is not None:
        raise InvalidInput("split", "replay predicts key-preserving regions only (each key on one channel)")
    return ordered


def batch_budget(snapshot: Snapshot, settings: ControllerSettings) -> float:
    """The budget a replayed batch is judged by: the declared ``batch_interval_seconds``, else the
    window's reported ``progress.interval_seconds``; ``InvalidInput`` when it has neither."""
    policy = settings.policy
    declared = policy.batch_interval_seconds if isinstance(policy, TargetUtilizationPolicy) else None
    reported = None if snapshot.progress is None else snapshot.progress.interval_seconds
    budget = declared or reported
    if budget is None:
        raise InvalidInput(
            "settings.batch_interval_seconds",
            f"is needed to replay window seq {snapshot.seq}, which reports no progress.interval_seconds",
        )
    return budget


def _band(settings: ControllerSettings) -> tuple[float, float]:
    policy = settings.policy
    return policy.band if isinstance(policy, TargetUtilizationPolicy) else (0.0, 1.0)


def costs_per_row(snapshots: Sequence[Snapshot]) -> list[float]:
    """Each window's recorded cost per row; the median of the others for a window without one."""
    measured: list[float | None] = []
    for snapshot in snapshots:
        channels = snapshot.channels or ()
        busy = math.fsum(channel.busy_seconds for channel in channels)
        tuples = sum(channel.tuples for channel in channels)
        measured.append(busy / tuples if busy > 0 and tuples > 0 else None)
    known = [cost for cost in measured if cost is not None]
    if not known:
        raise InvalidInput(
            "channels",
            "must record busy seconds and tuples in at least one window to estimate a cost per row",
        )
    typical = statistics.median(known)
    return [typical if cost is None else cost for cost in measured]
