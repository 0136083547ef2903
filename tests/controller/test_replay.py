"""Replaying snapshot sequences through the controller: the predicted busy time, the decisions (the
controller's own tick) and the figures, against hand-computed oracles."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest

from repart.controller.bound import best_balance_utilization
from repart.controller.replay import (
    MODEL,
    ReplayedBatch,
    batch_budget,
    channel_rows,
    costs_per_row,
    oracle_channels,
    oracle_target,
    replay,
    summarize,
)
from repart.controller.settings import ControllerSettings
from repart.errors import InvalidInput
from repart.partitioning import ConsistentSpec, initial_function
from repart.protocol.snapshot import BatchProgress
from repart.sim.traces import TRACE_SLOT_BITS, TraceSpec, trace_snapshots
from repart.storage import RegionConfig

COST = 86_400 * 0.7 * 2 / 4_000  # the first batch near u = 0.7 on 2 channels


def region(**changes: Any) -> RegionConfig:
    values: dict[str, Any] = {
        "key_type": "int",
        "n_channels_initial": 2,
        "max_channels": 12,
        "policy": "target-utilization",
        "slot_bits": TRACE_SLOT_BITS,
        "algorithm": "consistent",
        "settings": {"rebalance_threshold": 100.0},
    }
    return RegionConfig(**(values | changes))


def growing(batches: int = 8, drift: float = 4.0) -> TraceSpec:
    return TraceSpec(batches, rows=4_000, keys=300, drift=drift, cost_seconds_per_row=COST, seed=2)


def test_channel_rows_route_every_item_and_spread_the_rest() -> None:
    [snapshot] = trace_snapshots(TraceSpec(1, rows=3_000, keys=200))
    function = initial_function(3, "int", TRACE_SLOT_BITS)
    expected = np.zeros(3)
    for key, count in zip(snapshot.item_columns.keys, snapshot.item_columns.counts.tolist(), strict=True):
        expected[function.lookup(key)] += count
    np.testing.assert_allclose(channel_rows(function, snapshot), expected)
    fewer = dataclasses.replace(snapshot, items=snapshot.items[:10])
    rest = snapshot.tuples - sum(item.count for item in snapshot.items[:10])
    assert channel_rows(function, fewer).sum() == pytest.approx(snapshot.tuples)
    assert channel_rows(function, fewer).min() >= rest / 3


def test_replay_runs_the_controller_and_predicts_busy_time_from_the_cost_per_row() -> None:
    snapshots = trace_snapshots(growing())
    result = replay(snapshots, region())
    assert result.model == MODEL
    batches = result.batches
    assert [batch.seq for batch in batches] == list(range(8))
    p0 = initial_function(2, "int", TRACE_SLOT_BITS, ConsistentSpec())
    first = channel_rows(p0, snapshots[0]).max() * COST / 86_400
    assert batches[0].utilization == pytest.approx(first)
    for before, after in itertools.pairwise(batches):
        assert after.n_channels == before.n_next  # a plan is applied before the next batch
    steps = [batch for batch in batches if batch.n_next != batch.n_channels]
    assert steps and all(batch.n_next > batch.n_channels for batch in steps)  # the load only grows
    assert all(batch.action == "activated" and batch.moved_key_share is not None for batch in steps)
    assert result.summary.changes == len(steps)
    assert result.summary.channel_batches == sum(batch.n_channels for batch in batches)


def test_candidate_settings_change_the_decisions() -> None:
    snapshots = trace_snapshots(growing())
    default = replay(snapshots, region())
    capped = replay(snapshots, region(max_channels=2))
    assert default.summary.changes > 0
    assert capped.summary.changes == 0
    assert {batch.held_by for batch in capped.batches if batch.utilization > 0.9} == {"bounds"}
    assert capped.summary.max_consecutive_over_budget > default.summary.max_consecutive_over_budget


def row(
    seq: int, n: int, n_next: int, utilization: float, oracle: int, moved: float | None = None
) -> ReplayedBatch:
    return ReplayedBatch(seq, n, utilization, 10.0, oracle, "unchanged", None, n_next, 1.0, 1.0, moved)


def test_summary_figures_are_counted_as_defined() -> None:
    rows = [
        row(0, 4, 6, 1.2, 5, moved=0.4),  # 4 -> 6, moved 0.4 of ideal 2/6
        row(1, 6, 6, 1.1, 5),
        row(2, 6, 4, 0.3, 3, moved=0.35),  # reversed within 2 batches
        row(3, 4, 4, 1.5, 5, moved=0.05),  # a rebalance at unchanged N
        row(4, 4, 4, 0.7, 4),
        row(5, 4, 4, 1.05, 4),
        row(6, 4, 4, 1.1, 4),
        row(7, 4, 4, 1.2, 4),
    ]
    summary = summarize(rows, (0.45, 0.9))
    assert (summary.changes, summary.reversals_within_3) == (2, 1)
    assert summary.max_consecutive_over_budget == 3
    assert summary.in_band_share == pytest.approx(1 / 8)
    assert summary.channel_batches == 36 and summary.oracle_channel_batches == 34
    assert summary.cost_over_oracle == pytest.approx(36 / 34)
    assert summary.moved_over_ideal_max == pytest.approx(0.4 / (2 / 6))
    assert summary.rebalance_moved_max == pytest.approx(0.05)
    assert summary.seconds_over_budget == pytest.approx(10 * (0.2 + 0.1 + 0.5 + 0.05 + 0.1 + 0.2))


def test_bad_replays_name_their_field() -> None:
    snapshots = trace_snapshots(growing(3))
    cases = [
        ([], region(), "snapshots"),
        ([snapshots[0], dataclasses.replace(snapshots[1], region="other")], region(), "region"),
        ([snapshots[0], snapshots[1], snapshots[1]], region(), "snapshots"),  # seq twice
        (snapshots, region(split_scheme="pkg", merge="v=sum"), "split"),
        (
            [dataclasses.replace(s, progress=BatchProgress()) for s in snapshots],
            region(),
            "settings.batch_interval_seconds",
        ),
        ([dataclasses.replace(s, channels=None) for s in snapshots], region(), "channels"),
        (snapshots, region(settings={"utilization_band": [0.8, 0.9]}), "settings.utilization_band"),
    ]
    for windows, config, field in cases:
        with pytest.raises(InvalidInput) as caught:
            replay(windows, config)
        assert caught.value.field == field


def test_the_replay_and_the_sweep_take_the_same_oracle() -> None:
    """The replay's oracle per batch is the smallest N whose best balance meets the target, the largest
    N when none does (a hot key above the target at every N), computed here by hand; the sweep's,
    ``oracle_channels`` on a row of ``best_balance_utilization``, agrees on every batch."""
    config = region(min_channels=2)
    snapshots = trace_snapshots(dataclasses.replace(growing(), zipf_exponent=1.3))
    batches = replay(snapshots, config).batches
    settings = ControllerSettings.from_config(config)
    target = oracle_target(settings)
    costs = costs_per_row(snapshots)
    budgets = [batch_budget(snapshot, settings) for snapshot in snapshots]
    by_hand = []
    for snapshot, cost, budget in zip(snapshots, costs, budgets, strict=True):
        hottest = max(snapshot.item_columns.counts.tolist())
        fits = [n for n in range(2, 13) if max(snapshot.tuples / n, hottest) * cost / budget <= target]
        by_hand.append(fits[0] if fits else 12)
    assert [batch.oracle_channels for batch in batches] == by_hand
    assert 12 in by_hand and min(by_hand) < 12  # both cases occur
    assert not any(
        max(snapshot.tuples / 12, max(snapshot.item_columns.counts.tolist())) * cost / budget <= target
        for snapshot, cost, budget, n in zip(snapshots, costs, budgets, by_hand, strict=True)
        if n == 12
    )
    swept = best_balance_utilization(snapshots, costs, budgets, 12)
    assert [oracle_channels(row, target, 2) for row in swept] == by_hand
