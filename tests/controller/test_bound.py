"""The in-band bound's dynamic programme against brute force over every channel-count sequence, and its
sequence against the replay's own figures."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.controller.bound import best_balance_utilization, in_band_bound
from repart.controller.replay import ReplayedBatch, summarize
from repart.errors import InvalidInput
from repart.sim.traces import TraceSpec, trace_snapshots


def keeps_the_rules(
    sequence: tuple[int, ...],
    over: np.ndarray,
    window: int,
    max_changes: int | None,
    max_over: int,
    unforeseen: list[bool],
) -> bool:
    """The rules written out directly, one sequence at a time."""
    changes = [
        (i, sequence[i + 1] > sequence[i]) for i in range(len(sequence) - 1) if sequence[i + 1] != sequence[i]
    ]
    if max_changes is not None and len(changes) > max_changes:
        return False
    for (i, up), (j, then_up) in itertools.pairwise(changes):
        if up != then_up and j - i <= window:
            return False
    if any(unforeseen[t] and sequence[t] != sequence[t - 1] for t in range(1, len(sequence))):
        return False
    run = 0
    for t, n in enumerate(sequence):
        run = run + 1 if over[t, n - 1] else 0
        if run > max_over:
            return False
    return True


@st.composite
def problems(draw: Any) -> dict[str, Any]:
    batches = draw(st.integers(1, 6))
    channels = draw(st.integers(1, 4))
    low = np.array(
        draw(st.lists(st.floats(0, 2), min_size=batches * channels, max_size=batches * channels))
    ).reshape(batches, channels)
    band_low = draw(st.floats(0, 1))
    start = draw(st.integers(1, channels))
    return {
        "low": low,
        "high": low * draw(st.floats(1, 1.5)),
        "band": (band_low, band_low + draw(st.floats(0, 0.6))),
        "start": start,
        "min_channels": draw(st.integers(1, start)),
        "max_changes": draw(st.none() | st.integers(0, 3)),
        "reversal_window": draw(st.integers(0, 3)),
        "max_over_in_a_row": draw(st.integers(0, 2)),
        "unforeseen": draw(st.lists(st.booleans(), min_size=batches, max_size=batches)),
    }


@settings(max_examples=300, deadline=None)
@given(problems())
def test_the_bound_is_the_best_of_every_sequence(problem: dict[str, Any]) -> None:
    low, high, (band_low, band_high) = problem["low"], problem["high"], problem["band"]
    batches, channels = low.shape
    in_band, over = (low <= band_high) & (high >= band_low), low > 1
    best = None
    counts = range(problem["min_channels"], channels + 1)
    for rest in itertools.product(counts, repeat=batches - 1):
        sequence = (problem["start"], *rest)
        rules = (problem["reversal_window"], problem["max_changes"], problem["max_over_in_a_row"])
        if keeps_the_rules(sequence, over, *rules, problem["unforeseen"]):
            score = sum(
                int(in_band[t, n - 1]) for t, n in enumerate(sequence) if not problem["unforeseen"][t]
            )
            best = score if best is None else max(best, score)
    if best is None:
        with pytest.raises(InvalidInput):
            in_band_bound(**problem)
        return
    bound = in_band_bound(**problem)
    assert bound.in_band == best
    assert bound.batches == batches
    sequence = bound.n_over_time
    rules = (problem["reversal_window"], problem["max_changes"], problem["max_over_in_a_row"])
    assert keeps_the_rules(sequence, over, *rules, problem["unforeseen"])
    assert sum(int(in_band[t, n - 1]) for t, n in enumerate(sequence) if not problem["unforeseen"][t]) == best


def test_the_bound_sequence_has_the_figures_the_replay_counts() -> None:
    """With a single utilization per count (low == high), the replay's own summary of the bound's
    sequence shows its in-band share and keeps the rules of the three-batch window."""
    rng = np.random.default_rng(5)
    batches, channels = 40, 12
    load = 4 * 0.7 * (1 + rng.uniform(-0.3, 1.5, batches))
    low = load[:, None] / np.arange(1, channels + 1)[None, :]
    bound = in_band_bound(low, low, (0.45, 0.9), 4, max_changes=6)
    rows = [
        ReplayedBatch(
            seq=t,
            n_channels=n,
            utilization=float(low[t, n - 1]),
            budget_seconds=1.0,
            oracle_channels=1,
            action="activated" if t + 1 < batches and bound.n_over_time[t + 1] != n else "no-change",
            held_by=None,
            n_next=bound.n_over_time[t + 1] if t + 1 < batches else n,
            b=None,
            load=None,
        )
        for t, n in enumerate(bound.n_over_time)
    ]
    summary = summarize(rows, (0.45, 0.9))
    assert summary.in_band_share == bound.share
    assert summary.reversals_within_3 == 0
    assert summary.changes <= 6
    assert summary.max_consecutive_over_budget <= 2


def test_best_balance_utilization_is_the_larger_of_the_spread_and_the_hottest_key() -> None:
    snapshots = trace_snapshots(TraceSpec(3, rows=1_000, keys=50, zipf_exponent=1.5, seed=3))
    utilization = best_balance_utilization(snapshots, [2.0, 2.0, 4.0], [100.0, 100.0, 50.0], 8)
    for t, snapshot in enumerate(snapshots):
        hottest = max(entry.count for entry in snapshot.items)
        cost, budget = (2.0, 2.0, 4.0)[t], (100.0, 100.0, 50.0)[t]
        expected = [max(snapshot.tuples / n, hottest) * cost / budget for n in range(1, 9)]
        assert utilization[t].tolist() == pytest.approx(expected)
    assert utilization[0, 7] == pytest.approx(max(snapshots[0].items, key=lambda e: e.count).count * 2 / 100)


def test_bad_shapes_and_starts_name_the_field() -> None:
    low = np.ones((3, 4)) * 0.5
    with pytest.raises(InvalidInput, match=r"^high "):
        in_band_bound(low, np.ones((3, 5)), (0.4, 0.9), 2)
    with pytest.raises(InvalidInput, match=r"^start "):
        in_band_bound(low, low, (0.4, 0.9), 5)
    with pytest.raises(InvalidInput, match=r"^unforeseen "):
        in_band_bound(low, low, (0.4, 0.9), 2, unforeseen=[False])
