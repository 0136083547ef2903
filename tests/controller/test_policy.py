"""The channel-count policies and the rebalance trigger (pure functions, hand-computed oracles)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.controller.policy import FixedPolicy, TargetUtilizationPolicy, needs_rebalance
from repart.controller.signal import BatchLoad, batch_signals
from repart.errors import InvalidInput
from repart.protocol.snapshot import BatchProgress, ChannelMeasurement

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch(
    seq: int,
    n: int,
    busy: list[float],
    *,
    tuples: int = 1000,
    progress: BatchProgress | None = None,
    at: datetime | None = None,
) -> BatchLoad:
    """Batch ``seq`` at ``n`` channels: channel i busy ``busy[i]`` seconds with ``tuples`` tuples each."""
    channels = tuple(ChannelMeasurement(i, tuples, seconds, 0) for i, seconds in enumerate(busy))
    return BatchLoad(seq, n, channels, progress, at)


def run(start: int, n: int, utilizations: list[float], budget: float = 10.0) -> list[BatchLoad]:
    """Batches from ``start`` at ``n`` balanced channels whose busy time is ``u · budget``."""
    return [batch(start + i, n, [u * budget] * n) for i, u in enumerate(utilizations)]


def policy(**changes: Any) -> TargetUtilizationPolicy:
    values = {
        "target_utilization": 0.7,
        "min_channels": 1,
        "max_channels": 32,
        "utilization_band": (0.45, 0.9),
        "batch_interval_seconds": 10.0,
        **changes,
    }
    return TargetUtilizationPolicy(**values)


def test_utilization_is_the_busiest_channel_over_the_budget() -> None:
    # Busiest channel 6 s of a 10 s budget: u = 0.6, inside [0.45, 0.9]; demand 4 * 0.6 / 0.7 = 3.43.
    decision = policy().decide([batch(1, 4, [6.0, 3.0, 3.0, 3.0])], 4)
    assert (decision.n_channels, decision.changed, decision.held_by) == (4, False, None)
    assert decision.numbers["utilization"] == pytest.approx(0.6)
    assert decision.numbers["demand"] == pytest.approx(4 * 0.6 / 0.7)


def test_above_the_band_scales_up_to_the_demand() -> None:
    # u = 0.95: demand 4 * 0.95 / 0.7 = 5.43 -> 6 channels.
    decision = policy().decide([batch(1, 4, [9.5, 1.0, 1.0, 1.0])], 4)
    assert (decision.n_channels, decision.changed, decision.held_by) == (6, True, None)
    assert decision.rule == "target-utilization"


def test_inside_the_band_the_band_holds_a_change_the_demand_asks_for() -> None:
    decision = policy().decide(run(1, 4, [0.5]), 4)  # demand 2.86 -> 3, but 0.5 is inside the band
    assert (decision.n_channels, decision.held_by) == (4, "band")
    assert "inside the band" in decision.reason


def test_budget_is_declared_then_reported_then_measured_between_batches() -> None:
    reported = BatchProgress(interval_seconds=20.0)
    loads = [
        batch(1, 2, [5.0, 5.0], at=T0),
        batch(2, 2, [5.0, 5.0], at=T0 + timedelta(seconds=8)),
        batch(3, 2, [5.0, 5.0], progress=reported, at=T0 + timedelta(seconds=9)),
    ]
    measured = batch_signals(loads, None)
    assert [(s.load.seq, s.budget_seconds, s.budget_source) for s in measured] == [
        (2, 8.0, "measured"),
        (3, 20.0, "reported"),
    ]
    declared = batch_signals(loads, 50.0)
    assert [(s.budget_seconds, s.budget_source) for s in declared] == [(50.0, "declared")] * 3
    assert declared[0].utilization == pytest.approx(0.1)


def test_no_budget_or_no_busy_time_holds_with_no_signal() -> None:
    no_budget = policy(batch_interval_seconds=None).decide([batch(1, 2, [9.0, 9.0])], 2)
    idle = policy().decide([batch(1, 2, [0.0, 0.0])], 2)
    nothing = policy().decide([], 2)
    for decision in (no_budget, idle, nothing):
        assert (decision.n_channels, decision.held_by) == (2, "no-signal")


def test_scale_down_waits_for_the_delay_then_sizes_for_the_busiest_of_those_batches() -> None:
    history = run(1, 8, [0.7, 0.3, 0.2])
    held = policy(scale_down_delay=3).decide(history, 8)
    assert (held.n_channels, held.held_by, held.numbers["batches_below_band"]) == (8, "scale-down-delay", 2)
    history = run(1, 8, [0.3, 0.4, 0.2])
    decision = policy(scale_down_delay=3).decide(history, 8)
    assert (decision.n_channels, decision.held_by) == (5, None)  # ceil(8 * 0.4 / 0.7) = ceil(4.57)


def test_a_scale_down_removes_at_most_the_max_factor() -> None:
    decision = policy(scale_down_delay=1, max_scale_down_factor=0.25).decide(run(1, 12, [0.1]), 12)
    assert (decision.n_channels, decision.held_by) == (9, "max-scale-down-factor")  # ceil(12 * 0.75)


def test_a_recent_scale_down_is_not_reversed_unless_the_band_is_broken_by_the_margin() -> None:
    history = run(1, 4, [0.3, 0.3, 0.3]) + run(4, 3, [0.95])  # 4 -> 3 one batch ago
    held = policy(reversal_batches=3, reversal_margin=0.1).decide(history, 3)
    assert (held.n_channels, held.held_by) == (3, "reversal")
    broken = run(1, 4, [0.3, 0.3, 0.3]) + run(4, 3, [1.05])
    # The target's count, ceil(3 * 1.05 / 0.7) = 5, without the lookback (which would land at 4).
    unlooked = policy(reversal_batches=3, reversal_margin=0.1, scale_up_lookback=0)
    assert unlooked.decide(broken, 3).n_channels == 5
    later = run(1, 4, [0.3]) + run(2, 3, [0.8, 0.8, 0.8, 0.95])  # four batches ago: not recent
    # Not held: the target's ceil(3 * 0.95 / 0.7) = 5 would put the batch at 4 x 0.3 below the band,
    # so the step lands at the fit, ceil(3 * 0.95 / 0.9) = 4.
    assert policy(reversal_batches=3).decide(later, 3).n_channels == 4


def test_a_recent_scale_up_is_never_reversed_within_the_reversal_batches() -> None:
    for dip in (0.4, 0.05):  # within the margin or far below it
        history = run(1, 4, [0.95]) + run(2, 6, [dip] * 3)
        held = policy(scale_down_delay=1, reversal_batches=3).decide(history, 6)
        assert (held.n_channels, held.held_by) == (6, "reversal")
    later = run(1, 4, [0.95]) + run(2, 6, [0.2] * 4)
    assert policy(scale_down_delay=1, reversal_batches=3).decide(later, 6).n_channels == 3  # max factor


def test_stabilization_ignores_the_first_batches_after_a_change() -> None:
    history = run(1, 2, [0.95]) + run(2, 4, [0.99])
    held = policy(stabilization_batches=1).decide(history, 4)
    assert (held.n_channels, held.held_by) == (4, "stabilization")
    waiting = policy(stabilization_batches=0).decide(run(1, 2, [0.95]), 4)  # no batch at 4 yet
    assert (waiting.n_channels, waiting.held_by) == (4, "pending-plan")
    # Batch 3 decides: the target's ceil(4 * 0.99 / 0.7) = 6 would put batch 1 (2 x 0.95, 0.32 at 6)
    # below the band, so the step lands at the fit, ceil(4 * 0.99 / 0.9) = 5.
    assert policy(stabilization_batches=1).decide(history + run(3, 4, [0.99]), 4).n_channels == 5


def test_an_ineffective_scale_up_holds_further_scale_ups() -> None:
    # 2 -> 4 channels, but the same 2000 tuples still take 9.5 s on the busiest channel: capacity
    # stayed 2000 / 9.5 rows/s where 4 channels promised twice that.
    before = [batch(1, 2, [9.5, 9.5])]
    flat = [batch(2, 4, [9.5, 9.5, 9.5, 9.5], tuples=500)]
    held = policy().decide(before + flat, 4)
    assert (held.n_channels, held.held_by) == (4, "effectiveness")
    assert held.numbers["capacity_gained"] == pytest.approx(0.0)
    assert held.numbers["capacity_promised"] == pytest.approx(2000 / 9.5)
    assert "fewer cores than channels" in held.reason
    grew = [batch(2, 4, [9.5, 9.5, 9.5, 9.5], tuples=1000)]  # twice the rows in the same time
    assert policy().decide(before + grew, 4).n_channels == 5  # the fit, as batch 1 would go below at 6


def test_a_backlog_is_caught_up_within_the_catch_up_time() -> None:
    # u = 0.6 alone is inside the band. 4 channels process 4000 rows in 6 s: 666.7 rows/s. With
    # 4400 rows waiting to catch up within 20 s the demand is 4 * (400 + 220) / (0.7 * 666.7) = 5.31,
    # its pressure 5.31 * 0.7 / 4 = 0.93, above the band.
    waiting = BatchProgress(backlog_rows=4400)
    decision = policy(catch_up_seconds=20.0).decide([batch(1, 4, [6.0] * 4, progress=waiting)], 4)
    assert decision.n_channels == 6
    assert decision.numbers["pressure"] == pytest.approx(0.93)
    assert decision.numbers["demand"] == pytest.approx(4 * 620 / (0.7 * 4000 / 6))


def test_current_outside_the_bounds_moves_to_the_nearest_bound() -> None:
    decision = policy(min_channels=2, max_channels=6).decide(run(1, 9, [0.7]), 9)
    assert (decision.n_channels, decision.rule) == (6, "bounds")
    at_max = policy(max_channels=4).decide(run(1, 4, [0.99]), 4)
    assert (at_max.n_channels, at_max.held_by) == (4, "bounds")


def test_fixed_policy_always_returns_its_count() -> None:
    fixed = FixedPolicy(6, min_channels=2, max_channels=8)
    decision = fixed.decide(run(1, 4, [0.9]), 4)
    assert (decision.n_channels, decision.changed, decision.rule) == (6, True, "fixed")
    assert fixed.decide([], 6).changed is False
    assert FixedPolicy(3).decide([], 3).n_channels == 3


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
        (lambda: policy(utilization_band=(0.8, 0.9)), "utilization_band"),
        (lambda: policy(utilization_band=(0.2, 0.6)), "utilization_band"),
        (lambda: policy(batch_interval_seconds=0), "batch_interval_seconds"),
        (lambda: policy(batch_interval_seconds=-5.0), "batch_interval_seconds"),
        (lambda: policy(catch_up_seconds=0), "catch_up_seconds"),
        (lambda: policy(stabilization_batches=-1), "stabilization_batches"),
        (lambda: policy(scale_down_delay=0), "scale_down_delay"),
        (lambda: policy(max_scale_down_factor=1.0), "max_scale_down_factor"),
        (lambda: policy(reversal_batches=1.5), "reversal_batches"),
        (lambda: policy(reversal_margin=-0.1), "reversal_margin"),
        (lambda: policy(effectiveness_threshold=1.1), "effectiveness_threshold"),
        (lambda: policy().decide([], 0), "current"),
        (lambda: FixedPolicy(0), "channels"),
        (lambda: FixedPolicy(9, max_channels=8), "channels"),
        (lambda: FixedPolicy(1, min_channels=2), "channels"),
        (lambda: FixedPolicy(3, min_channels=0), "min_channels"),
        (lambda: FixedPolicy(3, min_channels=4, max_channels=2), "max_channels"),
        (lambda: FixedPolicy(3).decide([], -1), "current"),
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


@settings(max_examples=300, deadline=None)
@given(
    utilizations=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=8),
    runs=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    u=st.floats(0.3, 0.8),
    smaller=st.floats(0.3, 0.8),
    low=st.integers(1, 8),
    span=st.integers(0, 16),
    delay=st.integers(1, 4),
    reversal=st.integers(0, 4),
)
def test_decision_is_bounded_and_monotone_in_the_target(
    utilizations: list[float],
    runs: list[int],
    u: float,
    smaller: float,
    low: int,
    span: int,
    delay: int,
    reversal: int,
) -> None:
    history = []
    for index, value in enumerate(utilizations):
        n = runs[min(index * len(runs) // len(utilizations), len(runs) - 1)]
        history.append(batch(index, n, [value * 10.0] * n))
    current = history[-1].n_channels
    common = {
        "min_channels": low,
        "max_channels": low + span,
        "utilization_band": (0.25, 0.9),
        "scale_down_delay": delay,
        "reversal_batches": reversal,
    }
    at_u = policy(target_utilization=u, **common).decide(history, current)
    at_lower = policy(target_utilization=min(u, smaller), **common).decide(history, current)
    assert low <= at_u.n_channels <= low + span
    assert at_u.changed == (at_u.n_channels != current)
    assert at_lower.n_channels >= at_u.n_channels


def test_an_infinite_b_always_rebalances() -> None:
    decision = needs_rebalance(math.inf, 1.0)
    assert decision.rebalance and decision.numbers["b"] is None
    assert "infinite" in decision.reason


@pytest.mark.parametrize(
    ("target", "band"), [(0.7, (0.4, 0.9)), (0.95, (0.4, 0.95)), (0.3, (0.3, 0.9)), (1.0, (0.4, 1.0))]
)
def test_the_default_band_holds_any_target(target: float, band: tuple[float, float]) -> None:
    built = TargetUtilizationPolicy(target, 1, 8, batch_interval_seconds=10.0)
    assert built.band == band
    # Pressure just above the band's top scales up; just inside it keeps.
    above = built.decide(run(1, 4, [band[1] + 0.01]), 4)
    inside = built.decide(run(1, 4, [band[1] - 0.01]), 4)
    assert (above.changed, inside.changed, inside.held_by in (None, "band")) == (True, False, True)


@pytest.mark.parametrize("stabilization", [0, 2])
def test_batches_still_at_the_old_count_are_a_pending_plan(stabilization: int) -> None:
    # Applied 5 channels, but the job's newest batches still ran at 4: the plan is not in effect yet.
    decision = policy(stabilization_batches=stabilization).decide(run(1, 4, [0.95, 0.95]), 5)
    assert (decision.n_channels, decision.held_by) == (5, "pending-plan")
    assert "ran at 4 channels" in decision.reason


def test_a_scale_up_keeps_the_lowest_recent_batch_inside_the_band() -> None:
    # Band [0.4, 0.9] at u = 0.7; batches at 0.5 then a jump to 1.0 on 4 channels. The target asks for
    # ceil(4 * 1.0 / 0.7) = 6, where the batches before the jump would run at 0.33, below the band;
    # 5 channels hold the jump at 0.8 and the earlier load at 0.4 (floor(4 * 0.5 / 0.4) = 5).
    history = run(1, 4, [0.5, 0.5, 0.5, 1.0])
    decision = policy(utilization_band=(0.4, 0.9)).decide(history, 4)
    assert (decision.n_channels, decision.held_by) == (5, None)
    assert decision.numbers["scale_up_sized"] == 6
    assert decision.numbers["scale_up_lowest_recent"] == pytest.approx(0.5)
    kept = "5 rather than 6 keeps the lowest of the last 6 batches (pressure 0.5) in the band"
    assert kept in decision.reason
    # Without the lookback, the target decides.
    assert policy(utilization_band=(0.4, 0.9), scale_up_lookback=0).decide(history, 4).n_channels == 6


def test_a_steady_rise_still_scales_up_to_the_target() -> None:
    # The batches before the newest are close to it: keeping the lowest (0.85) in the band allows
    # floor(4 * 0.85 / 0.4) = 8 channels, more than the target's ceil(4 * 0.95 / 0.7) = 6.
    decision = policy(utilization_band=(0.4, 0.9)).decide(run(1, 4, [0.85, 0.88, 0.95]), 4)
    assert decision.n_channels == 6
    assert "rather than" not in decision.reason


def test_a_jump_wider_than_the_band_lands_inside_the_band_for_the_newest_batch() -> None:
    # From 0.3 to 1.2 (4x, wider than the band's 2.25x): no count keeps both; the smallest count
    # holding the newest at or below 0.9 is ceil(4 * 1.2 / 0.9) = 6 (the target asks for 7).
    decision = policy(utilization_band=(0.4, 0.9)).decide(run(1, 4, [0.3, 0.3, 1.2]), 4)
    assert decision.n_channels == 6


def costed(seq: int, n: int, permille: int) -> BatchLoad:
    """Batch ``seq`` at ``n`` balanced channels, each with ``permille`` tuples busy ``permille / 100``
    seconds: utilization ``permille / 1000`` of the 10 s budget at one cost per row, so that the
    capacity is ``100 · n`` rows/s at any load and a scale-up is effective."""
    return batch(seq, n, [permille / 100] * n, tuples=permille)


def test_a_bursts_second_scale_up_looks_back_past_the_first() -> None:
    # 4 channels at 0.5, a burst (4 -> 6), and the burst still at 0.95 on 6 channels. The target asks
    # for ceil(6 * 0.95 / 0.7) = 9; the batches before the burst would run at 4 * 0.5 / 9 = 0.22 there.
    # Judged at 6 channels they run at 0.33, below the band at any count above 6, so the step lands at
    # the smallest count holding the newest batch inside the band: ceil(6 * 0.95 / 0.9) = 7.
    history = [costed(seq, 4, 500) for seq in (1, 2, 3)] + [costed(4, 6, 950)]
    decision = policy(utilization_band=(0.4, 0.9)).decide(history, 6)
    assert (decision.n_channels, decision.held_by) == (7, None)
    assert decision.numbers["scale_up_sized"] == 9
    assert decision.numbers["scale_up_lowest_recent"] == pytest.approx(4 * 0.5 / 6)
    # A milder burst: 4 channels at 0.7 judged at 6 run at 0.467, in the band up to 7 channels.
    milder = [costed(seq, 4, 700) for seq in (1, 2, 3)] + [costed(4, 6, 1000)]
    assert policy(utilization_band=(0.4, 0.9)).decide(milder, 6).n_channels == 7
    # With no batch before the first step in the lookback, the target decides.
    assert policy(utilization_band=(0.4, 0.9), scale_up_lookback=0).decide(history, 6).n_channels == 9


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(50, 2000)), min_size=1, max_size=8),
    st.integers(901, 3000),
    st.integers(1, 12),
    st.integers(0, 8),
)
def test_a_scale_up_judges_recent_batches_at_other_counts_by_their_demand(
    before: list[tuple[int, int]], newest: int, n: int, lookback: int
) -> None:
    """Oracle by enumeration, with the batches before the newest at any counts: a batch at n_i
    channels and utilization u_i runs at n_i · u_i / c on c channels."""
    built = policy(utilization_band=(0.4, 0.9), scale_up_lookback=lookback, reversal_batches=0)
    history = [costed(seq, count, permille) for seq, (count, permille) in enumerate(before)]
    history.append(costed(len(before), n, newest))
    decision = built.decide(history, n)
    work = [count * permille / 1000 for count, permille in before[-lookback:]] if lookback else []
    sized = max(n + 1, math.ceil(n * newest / 700 - 1e-9))
    fits = max(n + 1, math.ceil(n * newest / 900 - 1e-9))
    keeping = [c for c in range(fits, sized + 1) if work and min(work) / c >= 0.4 - 1e-12]
    expected = sized if not work else (max(keeping) if keeping else fits)
    assert (decision.n_channels, decision.held_by) == (min(expected, 32), None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.05, 2.0), min_size=1, max_size=8),
    st.floats(0.91, 3.0),
    st.integers(1, 12),
    st.integers(0, 8),
)
def test_a_scale_up_is_the_largest_count_between_the_fit_and_the_target_keeping_the_recent_low(
    before: list[float], newest: float, n: int, lookback: int
) -> None:
    """Oracle by enumeration: among the counts from the smallest holding the newest batch at or below
    the band's top to the target's, the largest whose lowest recent batch stays at or above the band's
    low end; the smallest of them when none does."""
    built = policy(utilization_band=(0.4, 0.9), scale_up_lookback=lookback, reversal_batches=0)
    decision = built.decide(run(1, n, [*before, newest]), n)
    recent = before[-lookback:] if lookback else []
    sized = max(n + 1, math.ceil(n * newest / 0.7 - 1e-9))
    fits = max(n + 1, math.ceil(n * newest / 0.9 - 1e-9))
    keeping = [c for c in range(fits, sized + 1) if recent and min(recent) * n / c >= 0.4 - 1e-12]
    expected = sized if not recent else (max(keeping) if keeping else fits)
    assert decision.n_channels == min(expected, 32)
