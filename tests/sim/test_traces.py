"""Synthetic load traces: their seasonality, drift and bursts, emitted as valid snapshot sequences."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from repart.errors import InvalidInput
from repart.protocol.snapshot import Snapshot
from repart.sim.traces import DAY_SECONDS, TraceSpec, bursts, load_factors, named_traces, trace_snapshots


def test_weekly_cycle_and_drift_are_exact_without_bursts() -> None:
    factors = load_factors(TraceSpec(15, weekend_factor=0.7, drift=2.0))
    drift = 2.0 ** (np.arange(15) / 14)
    weekend = np.array([0.7 if day % 7 in (5, 6) else 1.0 for day in range(15)])
    np.testing.assert_allclose(factors, drift * weekend)


def test_the_daily_cycle_is_lowest_at_midnight() -> None:
    factors = load_factors(TraceSpec(48, batch_seconds=3600, daily_amplitude=0.3))
    hours = np.arange(48) % 24
    np.testing.assert_allclose(factors, 1 - 0.3 * np.cos(2 * math.pi * hours / 24))
    assert factors.argmin() == 0 and factors[12] == pytest.approx(1.3)


def test_bursts_are_reproducible_and_within_their_factors() -> None:
    spec = TraceSpec(500, burst_probability=0.1, burst_factor=2.0, seed=3)
    factors = load_factors(spec)
    np.testing.assert_array_equal(factors, load_factors(spec))
    bursts = factors[factors != 1.0]
    assert len(bursts) > 20
    assert bursts.min() >= 1.5 and bursts.max() <= 2.0
    assert not np.array_equal(factors, load_factors(TraceSpec(500, burst_probability=0.1, seed=4)))


def test_each_burst_starts_where_its_factor_begins_and_lasts_one_to_three_batches() -> None:
    spec = TraceSpec(500, batch_seconds=3_600, burst_probability=0.1, burst_factor=2.5, seed=4)
    factors, starts = bursts(spec)
    assert load_factors(spec) == pytest.approx(load_factors(TraceSpec(500, batch_seconds=3_600)) * factors)
    assert starts.any()
    in_burst = factors > 1
    for index in np.flatnonzero(starts):
        length = 1
        while (
            index + length < len(factors)
            and factors[index + length] == factors[index]
            and not starts[index + length]
        ):
            length += 1
        assert 1 <= length <= 3
        assert 1.5 <= factors[index] <= 2.5
    # Every batch in a burst belongs to one that started at or before it, within three batches.
    for index in np.flatnonzero(in_burst):
        assert starts[max(0, index - 2) : index + 1].any()
    assert not (starts & ~in_burst).any()


@pytest.mark.parametrize("distribution", ["zipf", "words"])
def test_a_trace_is_a_sequence_of_valid_snapshots(distribution: str) -> None:
    spec = TraceSpec(
        9, rows=5_000, keys=300, distribution=distribution, weekend_factor=0.5, cost_seconds_per_row=0.01
    )
    snapshots = trace_snapshots(spec)
    assert [snapshot.seq for snapshot in snapshots] == list(range(9))
    for snapshot, factor in zip(snapshots, load_factors(spec), strict=True):
        assert Snapshot.from_document(snapshot.to_document()) == snapshot
        assert snapshot.checked() == snapshot
        assert snapshot.tuples == round(5_000 * factor)
        assert int(snapshot.item_columns.counts.sum()) == snapshot.tuples  # exact counts: every key
        assert (snapshot.window_end - snapshot.window_start).total_seconds() == DAY_SECONDS
        assert snapshot.progress is not None and snapshot.progress.interval_seconds == DAY_SECONDS
        assert snapshot.channels is not None
        [channel] = snapshot.channels
        assert channel.tuples == snapshot.tuples
        assert channel.busy_seconds == pytest.approx(0.01 * snapshot.tuples)
    for before, after in itertools.pairwise(snapshots):
        assert after.window_start == before.window_end
    keys = snapshots[0].item_columns.keys
    assert all(isinstance(key, str if distribution == "words" else int) for key in keys)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"batches": 0}, "batches"),
        ({"batch_seconds": 0}, "batch_seconds"),
        ({"keys": 1}, "keys"),
        ({"distribution": "pareto"}, "distribution"),
        ({"drift": -1.0}, "drift"),
        ({"daily_amplitude": 0.3}, "daily_amplitude"),  # daily batches have no daily cycle
        ({"burst_probability": 1.5}, "burst_probability"),
        ({"burst_factor": 1.2}, "burst_factor"),
        ({"cost_seconds_per_row": 0}, "cost_seconds_per_row"),
    ],
)
def test_bad_trace_parameters_name_their_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        TraceSpec(**({"batches": 5} | changes))
    assert caught.value.field == field


def test_the_named_traces_size_their_first_batch_for_the_target_on_four_channels() -> None:
    traces = named_traces(7)
    assert set(traces) == {
        "weekly-drift-zipf",
        "weekly-drift-words",
        "bursty-words",
        "weekly-drift-zipf-weekend-0.6",
    }
    for spec in traces.values():
        assert spec.seed == 7
        # rows · cost / (batch seconds · 4 channels) = 0.7 on the first batch (load factor 1 on a Monday)
        assert spec.rows * spec.cost_seconds_per_row / (spec.batch_seconds * 4) == pytest.approx(0.7)
    deeper, base = traces["weekly-drift-zipf-weekend-0.6"], traces["weekly-drift-zipf"]
    assert (base.weekend_factor, deeper.weekend_factor) == (0.7, 0.6)
    assert deeper == TraceSpec(**{**vars(base), "weekend_factor": 0.6})
