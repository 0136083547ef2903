"""The channel-count policies and the rebalance trigger (DESIGN §8 "Analyze"), against hand-computed cases."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.controller.policy import (
    FixedPolicy,
    TargetUtilizationPolicy,
    WindowLoad,
    needs_rebalance,
)
from repart.errors import InvalidInput
from repart.protocol.snapshot import ChannelMeasurement
from tests.factories import small_snapshot, window_times

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def load(*channels: tuple[int, float], seconds: float = 1.0) -> WindowLoad:
    """A load with one (tuples, busy_seconds) pair per channel over ``seconds`` of wall-clock time."""
    return WindowLoad(
        tuple(ChannelMeasurement(i, tuples, busy, 0) for i, (tuples, busy) in enumerate(channels)), seconds
    )


def policy(**changes: Any) -> TargetUtilizationPolicy:
    settings_ = {"target_utilization": 0.8, "min_channels": 1, "max_channels": 16, **changes}
    return TargetUtilizationPolicy(**settings_)


# Four channels, each 1000 tuples and 0.5 busy seconds in a 1 s window: one channel sustains
# 4000 / 2 = 2000 tuples/s, the input is 4000 tuples/s, so at u = 0.8 the demand is 4000 / 1600 = 2.5.
FOUR = load(*[(1000, 0.5)] * 4)


def test_target_utilization_hand_computed_case() -> None:
    decision = policy().decide(FOUR, 4, NOW, None)
    assert (decision.n_channels, decision.changed, decision.rule) == (3, True, "target-utilization")
    assert decision.numbers["rate_one"] == 2000.0
    assert decision.numbers["rate_in"] == 4000.0
    assert decision.numbers["demand"] == 2.5
    assert decision.numbers["target"] == 3
    assert decision.reason.startswith("4 -> 3 channels")


def test_rates_use_only_busy_channels_for_rate_one() -> None:
    # Channel 2 reports tuples but no busy time: it counts for the input rate (3000/s over 2 s is
    # 1500/s) but not for the rate one channel sustains (2000 tuples / 1 s busy = 2000/s).
    decision = policy(target_utilization=0.5).decide(
        load((1000, 0.5), (1000, 0.5), (1000, 0.0), seconds=2.0), 3, NOW, None
    )
    assert decision.numbers["rate_one"] == 2000.0
    assert decision.numbers["rate_in"] == 1500.0
    assert decision.numbers["demand"] == 1.5
    assert decision.n_channels == 2


def test_integer_demand_is_not_rounded_up_by_float_error() -> None:
    # demand = (3000 / 1) / (0.3 * 3000 / 0.9) = 3 exactly, 3.0000000000000004 in floating point.
    decision = policy(target_utilization=0.3).decide(load((3000, 0.9)), 5, NOW, None)
    assert decision.numbers["demand"] > 3
    assert decision.n_channels == 3


def test_target_is_clamped_to_the_bounds() -> None:
    heavy = load(*[(1000, 1.0)] * 4)  # rate_one 1000/s, rate_in 4000/s: demand 5 at u = 0.8
    assert policy(max_channels=4).decide(heavy, 4, NOW, None).n_channels == 4
    assert policy(max_channels=4).decide(heavy, 4, NOW, None).changed is False
    light = load((10, 1.0), seconds=10.0)  # rate_one 10/s, rate_in 1/s: demand 0.125
    assert policy(min_channels=3).decide(light, 4, NOW, None).n_channels == 3


def test_current_outside_the_bounds_moves_to_the_nearest_bound_despite_cooldown() -> None:
    tight = policy(min_channels=2, max_channels=5, cooldown_seconds=600)
    decision = tight.decide(None, 8, NOW, NOW)
    assert (decision.n_channels, decision.changed, decision.rule) == (5, True, "bounds")
    assert tight.decide(None, 1, NOW, NOW).n_channels == 2


def test_hysteresis_keeps_small_changes_and_follows_large_ones() -> None:
    # demand 2.5 versus 3 current channels: |2.5 - 3| / 3 = 1/6.
    assert policy(hysteresis=0.2).decide(FOUR, 3, NOW, None).changed is False
    # Target 3 from 4 current: |2.5 - 4| / 4 = 0.375.
    kept = policy(hysteresis=0.4).decide(FOUR, 4, NOW, None)
    assert (kept.n_channels, kept.changed) == (4, False)
    assert kept.numbers["relative_change"] == 0.375
    assert "hysteresis" in kept.reason
    moved = policy(hysteresis=0.3).decide(FOUR, 4, NOW, None)
    assert (moved.n_channels, moved.changed) == (3, True)
    # The boundary itself keeps: |demand - current| <= hysteresis * current.
    assert policy(hysteresis=0.375).decide(FOUR, 4, NOW, None).changed is False


def test_cooldown_blocks_a_change_until_it_has_passed() -> None:
    cooling = policy(cooldown_seconds=300)
    blocked = cooling.decide(FOUR, 4, NOW, NOW - timedelta(seconds=299))
    assert (blocked.n_channels, blocked.changed) == (4, False)
    assert blocked.numbers["seconds_since_change"] == 299
    assert "cooldown" in blocked.reason and "target would be 3" in blocked.reason
    assert cooling.decide(FOUR, 4, NOW, NOW - timedelta(seconds=300)).n_channels == 3
    assert cooling.decide(FOUR, 4, NOW, None).n_channels == 3


@pytest.mark.parametrize(
    "measured",
    [None, load(), load((0, 0.0), (0, 0.0)), load((500, 0.0)), load((0, 1.0))],
    ids=["no-load", "no-channels", "idle", "no-busy-time", "busy-without-tuples"],
)
def test_no_usable_measurement_keeps_the_current_count(measured: WindowLoad | None) -> None:
    decision = policy().decide(measured, 4, NOW, None)
    assert (decision.n_channels, decision.changed) == (4, False)
    assert decision.reason.startswith("keep 4 channels: no ")


def test_unchanged_target_keeps() -> None:
    decision = policy().decide(FOUR, 3, NOW, None)
    assert (decision.n_channels, decision.changed) == (3, False)
    assert "gives target 3 in [1, 16]" in decision.reason


def test_load_from_snapshot_uses_the_window_length() -> None:
    start, _ = window_times(1)
    snapshot = small_snapshot(
        window_end=start + timedelta(seconds=10),
        tuples=5000,
        slots=None,
        channels=(ChannelMeasurement(0, 3000, 3.0, 1), ChannelMeasurement(1, 2000, 2.0, 1)),
    )
    single = WindowLoad.from_snapshot(snapshot)
    assert (single.tuples, single.busy_seconds, single.window_seconds) == (5000, 5.0, 10.0)
    # rate_one 1000/s, rate_in 500/s, u = 0.5: demand 1.
    assert policy(target_utilization=0.5).decide(single, 2, NOW, None).n_channels == 1
    pooled = WindowLoad.from_snapshots([snapshot, snapshot])
    assert (pooled.tuples, len(pooled.channels), pooled.window_seconds) == (10000, 4, 20.0)
    with pytest.raises(InvalidInput, match="snapshots") as excinfo:
        WindowLoad.from_snapshots([])
    assert excinfo.value.field == "snapshots"


def test_fixed_policy_always_returns_its_count() -> None:
    fixed = FixedPolicy(6, min_channels=2, max_channels=8)
    decision = fixed.decide(FOUR, 4, NOW, NOW)
    assert (decision.n_channels, decision.changed, decision.rule) == (6, True, "fixed")
    assert fixed.decide(None, 6, NOW, None).changed is False
    assert FixedPolicy(3).decide(None, 3, NOW, None).n_channels == 3


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: policy(target_utilization=0), "target_utilization"),
        (lambda: policy(target_utilization=1.5), "target_utilization"),
        (lambda: policy(target_utilization=math.nan), "target_utilization"),
        (lambda: policy(target_utilization="0.5"), "target_utilization"),
        (lambda: policy(min_channels=0), "min_channels"),
        (lambda: policy(min_channels=4, max_channels=3), "max_channels"),
        (lambda: policy(max_channels=True), "max_channels"),
        (lambda: policy(cooldown_seconds=-1), "cooldown_seconds"),
        (lambda: policy(hysteresis=-0.1), "hysteresis"),
        (lambda: policy(hysteresis=math.inf), "hysteresis"),
        (lambda: policy().decide(None, 0, NOW, None), "current"),
        (lambda: FixedPolicy(0), "channels"),
        (lambda: FixedPolicy(9, max_channels=8), "channels"),
        (lambda: FixedPolicy(1, min_channels=2), "channels"),
        (lambda: FixedPolicy(3, min_channels=0), "min_channels"),
        (lambda: FixedPolicy(3, min_channels=4, max_channels=2), "max_channels"),
        (lambda: FixedPolicy(3).decide(None, -1, NOW, None), "current"),
        (lambda: load((1, 1.0), seconds=0), "window_seconds"),
        (lambda: load((-1, 1.0)), "channels[0].tuples"),
        (lambda: load((1, -1.0)), "channels[0].busy_seconds"),
        (lambda: needs_rebalance(1.0, 0), "threshold"),
        (lambda: needs_rebalance(-1.0, 1.0), "b_current"),
        (lambda: needs_rebalance(math.nan, 1.0), "b_current"),
    ],
)
def test_bad_parameters_name_their_field(build: Any, field: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(field)) as excinfo:
        build()
    assert excinfo.value.field == field


def test_needs_rebalance_compares_b_with_the_threshold() -> None:
    over = needs_rebalance(1.25, 1.0)
    assert (over.rebalance, over.rule, over.numbers) == (
        True,
        "imbalance-threshold",
        {"b": 1.25, "threshold": 1.0},
    )
    assert "exceeds" in over.reason
    assert needs_rebalance(1.0, 1.0).rebalance is False
    assert needs_rebalance(0.9, 1.1).rebalance is False


channel_loads = st.lists(
    st.tuples(st.integers(0, 10**6), st.floats(0.0, 100.0, allow_nan=False)), min_size=0, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(
    channels=channel_loads,
    seconds=st.floats(0.01, 1000.0),
    u=st.floats(0.01, 1.0),
    smaller=st.floats(0.01, 1.0),
    low=st.integers(1, 8),
    span=st.integers(0, 16),
    current=st.integers(1, 40),
    hysteresis=st.floats(0.0, 1.0),
    cooldown=st.floats(0.0, 100.0),
    since=st.none() | st.floats(0.0, 200.0),
)
def test_decision_is_bounded_and_monotone_in_utilization(
    channels: list[tuple[int, float]],
    seconds: float,
    u: float,
    smaller: float,
    low: int,
    span: int,
    current: int,
    hysteresis: float,
    cooldown: float,
    since: float | None,
) -> None:
    measured = load(*channels, seconds=seconds)
    last = None if since is None else NOW - timedelta(seconds=since)
    common = {"min_channels": low, "max_channels": low + span, "cooldown_seconds": cooldown}
    at_u = policy(target_utilization=u, hysteresis=hysteresis, **common).decide(measured, current, NOW, last)
    lower_u = min(u, smaller)
    at_lower = policy(target_utilization=lower_u, hysteresis=hysteresis, **common).decide(
        measured, current, NOW, last
    )
    assert low <= at_u.n_channels <= low + span
    assert at_u.changed == (at_u.n_channels != current)
    assert at_lower.n_channels >= at_u.n_channels


def test_an_infinite_b_always_rebalances() -> None:
    decision = needs_rebalance(math.inf, 1.0)
    assert decision.rebalance and decision.numbers["b"] is None
    assert "infinite" in decision.reason
