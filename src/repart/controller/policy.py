"""The controller's *analyze* step: how many channels, and whether to rebalance.

Gedik §4.5 places these decisions in the adaptivity loop (measure, analyze, plan, activate): the
analysis decides whether the number of channels must change, and planning then builds the next
partitioning function. Everything here is pure: a policy reads the newest batches' measurements
(``repart.controller.signal.BatchLoad``) and returns a ``Decision`` carrying the new channel count, the
rule that decided it, the rule that held a change back (``held_by``), a human-readable reason and the
numbers it was computed from, which is what the controller records as an audit event.

Policies:

- ``FixedPolicy``: always the configured channel count.
- ``TargetUtilizationPolicy``: the busiest channel's busy time against the time the job has per batch,
  sized to a target utilization inside a band, with stabilization, a scale-down delay, a maximum
  scale-down factor, no quick reversals and scaling-effectiveness detection, all counted in batches.

``needs_rebalance`` is the independent trigger: rebalance when the relative imbalance ``b`` of the
current function on the current frequencies (Gedik Eq. 11) exceeds a threshold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from repart.controller.signal import BatchLoad, BatchSignal, batch_signals
from repart.errors import InvalidInput
from repart.validation import (
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    Interval,
    check,
)

# Relative slack when taking the ceiling of the raw demand, so that a demand that is an integer up to
# floating-point rounding (e.g. 3.0000000000000004) does not ask for one channel more.
_CEIL_SLACK = 1e-9

DEFAULT_TARGET_UTILIZATION = 0.7
DEFAULT_BAND = (0.4, 0.9)
"""The default utilization band around the default target; ``default_band`` widens it to any target."""
DEFAULT_STABILIZATION_BATCHES = 0
DEFAULT_SCALE_DOWN_DELAY = 1
DEFAULT_MAX_SCALE_DOWN_FACTOR = 0.5
DEFAULT_REVERSAL_BATCHES = 3
DEFAULT_REVERSAL_MARGIN = 0.1
DEFAULT_EFFECTIVENESS_THRESHOLD = 0.1
DEFAULT_SCALE_UP_LOOKBACK = 6
CATCH_UP_BUDGETS = 5.0
"""Without a declared catch-up time, a backlog is to be caught up within this many batch budgets."""


def default_band(target_utilization: float) -> tuple[float, float]:
    """The band a region gets without ``utilization_band``: ``DEFAULT_BAND`` widened to hold the target,
    ``[min(0.4, u), max(0.9, u)]``, so that every target in (0, 1] has a default band."""
    low, high = DEFAULT_BAND
    return min(low, target_utilization), max(high, target_utilization)


@dataclass(frozen=True)
class Decision:
    """A channel-count decision and its audit trail.

    ``n_channels`` is the count to run with next, ``changed`` whether it differs from the current
    count, ``rule`` the policy (``"fixed"``, ``"target-utilization"``) or bound that decided it,
    ``reason`` one sentence for people, ``numbers`` the inputs and intermediate values, and
    ``held_by`` the rule that held a change back or limited it (``band``, ``pending-plan``, ``stabilization``,
    ``scale-down-delay``, ``reversal``, ``effectiveness``, ``max-scale-down-factor``, ``bounds``,
    ``no-signal``; None when nothing did).
    """

    n_channels: int
    changed: bool
    rule: str
    reason: str
    numbers: dict[str, float] = field(default_factory=dict)
    held_by: str | None = None


@dataclass(frozen=True)
class RebalanceDecision:
    """Whether to rebalance, by which rule, why, and with which numbers (see ``needs_rebalance``)."""

    rebalance: bool
    rule: str
    reason: str
    numbers: dict[str, float | None] = field(default_factory=dict)


class ChannelPolicy(Protocol):
    """A channel-count policy (the *analyze* step)."""

    @property
    def history_batches(self) -> int:
        """How many of the newest batches ``decide`` looks at."""
        ...

    def decide(
        self, history: Sequence[BatchLoad], current: int, before_change: BatchLoad | None = None
    ) -> Decision:
        """The channel count to run with next, given the newest batches (oldest first), the current
        count and, when every batch of ``history`` ran at the current count, the newest batch that ran
        at another count (the batch before the last change; None when there is none)."""
        ...


def _check_bounds(min_channels: int, max_channels: int) -> None:
    low = check("min_channels", min_channels, POSITIVE_INT)
    check("max_channels", max_channels, Interval(int, low, None))  # max_channels >= min_channels


@dataclass(frozen=True)
class FixedPolicy:
    """Always ``channels`` channels; with bounds given, ``channels`` must lie in ``[min, max]``."""

    channels: int
    min_channels: int | None = None
    max_channels: int | None = None

    def __post_init__(self) -> None:
        low = 1 if self.min_channels is None else check("min_channels", self.min_channels, POSITIVE_INT)
        if self.max_channels is not None:
            _check_bounds(low, self.max_channels)
        check("channels", self.channels, Interval(int, low, self.max_channels))  # in [min, max]

    @property
    def history_batches(self) -> int:
        """None needed: the fixed policy reads no batch."""
        return 0

    def decide(
        self, history: Sequence[BatchLoad], current: int, before_change: BatchLoad | None = None
    ) -> Decision:
        """``channels``, whatever the load; ``changed`` when it differs from ``current``."""
        check("current", current, POSITIVE_INT)
        changed = self.channels != current
        reason = (
            f"fixed policy: {current} -> {self.channels} channels"
            if changed
            else f"fixed policy: keep {current} channels"
        )
        return Decision(
            self.channels, changed, "fixed", reason, {"current": current, "channels": self.channels}
        )


@dataclass(frozen=True)
class TargetUtilizationPolicy:
    """Sizing to a target utilization of the busiest channel, in the job's time, without flapping.

    The signal of each batch is ``repart.controller.signal.BatchSignal``: the busiest channel's busy
    seconds over the batch's budget, and the demand ``N · (rate_in + backlog / catch_up) / (u ·
    capacity)`` channels (DS2's sizing on the channel that decides, plus catching up on a backlog
    within ``catch_up_seconds``, by default five budgets). Its *pressure* ``demand · u / N`` is the
    utilization itself when there is no backlog. ``decide`` applies, in this order, and the first rule
    that holds the count back is named in ``Decision.held_by``:

    1. ``bounds``: a current count outside ``[min_channels, max_channels]`` moves to the nearest bound.
    2. ``pending-plan``: the newest batch ran at another count than ``current`` (the job has not
       applied the plan to it yet): keep.
    3. ``no-signal``: no batch with busy time, tuples and a budget: keep.
    4. ``stabilization``: the first ``stabilization_batches`` batches after a change of N took effect
       are not used (they carry the migration); with none left, keep.
    5. ``band``: with the newest batch's pressure inside ``utilization_band`` (default
       ``default_band(target_utilization)``), keep.
    6. Above the band, scale up to ``ceil(demand)`` (at least one more channel), or fewer when
       ``ceil(demand)`` would put a recent batch below the band: the count is lowered, not below the
       smallest count that brings the newest batch inside the band, to the largest that keeps the
       lowest of the ``scale_up_lookback`` batches before the newest at or above the band's low end
       (a batch that ran at another count is judged by its demand, as it would run at the current
       count: a burst's second scale-up looks back past its first). A jump that is as likely to pass
       (a burst) or to swing back (a daily or weekly cycle) then lands where both the jump and the
       load before it fit the band, when the band is wide enough for both; a steady rise, whose
       recent batches are close to the newest, still lands at the target. Unless
       ``reversal``: the last step was a scale-down less than ``reversal_batches`` batches ago and the
       pressure is not above the band by ``reversal_margin``; or ``effectiveness``: the last step
       was a scale-up that raised the measured capacity by less than ``effectiveness_threshold`` of
       the rise it promised (``capacity · (N1/N0 - 1)``: a cluster with fewer cores than channels, a
       bottleneck outside the channels), which holds every further scale-up until N changes again.
    7. Below the band, scale down only after ``scale_down_delay`` batches in a row below it
       (``scale-down-delay``), to the ceiling of the largest demand among them, removing at most
       ``max_scale_down_factor`` of the channels in one step; never within ``reversal_batches`` of a
       scale-up (``reversal``), whatever the margin: too many channels for a few batches costs
       channels, too few costs the budget.

    Stabilization, the delay and the reversal window are counted in batches (one snapshot per batch),
    never in wall-clock seconds. The count is monotone in the demand: a smaller ``u`` never yields
    fewer channels on a scale-up.
    """

    target_utilization: float
    min_channels: int
    max_channels: int
    utilization_band: tuple[float, float] | None = None
    batch_interval_seconds: float | None = None
    catch_up_seconds: float | None = None
    stabilization_batches: int = DEFAULT_STABILIZATION_BATCHES
    scale_down_delay: int = DEFAULT_SCALE_DOWN_DELAY
    max_scale_down_factor: float = DEFAULT_MAX_SCALE_DOWN_FACTOR
    reversal_batches: int = DEFAULT_REVERSAL_BATCHES
    reversal_margin: float = DEFAULT_REVERSAL_MARGIN
    effectiveness_threshold: float = DEFAULT_EFFECTIVENESS_THRESHOLD
    scale_up_lookback: int = DEFAULT_SCALE_UP_LOOKBACK

    def __post_init__(self) -> None:
        target = check("target_utilization", self.target_utilization, FRACTION)
        _check_bounds(self.min_channels, self.max_channels)
        low, high = self.band
        if not (0 <= low <= target <= high):
            raise InvalidInput(
                "utilization_band",
                f"must be [low, high] with 0 <= low <= target_utilization {target:g} <= high, "
                f"got [{low:g}, {high:g}]",
            )
        if self.batch_interval_seconds is not None:
            check("batch_interval_seconds", self.batch_interval_seconds, POSITIVE)
        if self.catch_up_seconds is not None:
            check("catch_up_seconds", self.catch_up_seconds, POSITIVE)
        check("stabilization_batches", self.stabilization_batches, NON_NEGATIVE_INT)
        check("scale_down_delay", self.scale_down_delay, POSITIVE_INT)
        check("max_scale_down_factor", self.max_scale_down_factor, Interval(float, 0, 1, closed="neither"))
        check("reversal_batches", self.reversal_batches, NON_NEGATIVE_INT)
        check("reversal_margin", self.reversal_margin, NON_NEGATIVE)
        check("effectiveness_threshold", self.effectiveness_threshold, PROBABILITY)
        check("scale_up_lookback", self.scale_up_lookback, NON_NEGATIVE_INT)

    @property
    def band(self) -> tuple[float, float]:
        """``(low, high)``: the ``utilization_band`` given, else ``default_band(target_utilization)``."""
        return self.utilization_band or default_band(self.target_utilization)

    @property
    def history_batches(self) -> int:
        """Enough batches to see the stabilized run at the current N, the delay, the reversal window or
        the scale-up lookback, and the batch before the last change (for the effectiveness check)."""
        window = max(self.scale_down_delay, self.reversal_batches, self.scale_up_lookback)
        return self.stabilization_batches + window + 2

    def decide(
        self, history: Sequence[BatchLoad], current: int, before_change: BatchLoad | None = None
    ) -> Decision:
        """The next channel count (see the class docstring for the rules and their order).
        ``before_change`` is the batch before the last change of N when ``history`` holds none but
        batches at ``current``: the effectiveness check compares against it however long ago N
        changed."""
        check("current", current, POSITIVE_INT)
        low, high = self.band
        numbers: dict[str, float] = {
            "current": current,
            "target_utilization": self.target_utilization,
            "band_low": low,
            "band_high": high,
            "min_channels": self.min_channels,
            "max_channels": self.max_channels,
        }
        clamped = min(max(current, self.min_channels), self.max_channels)
        if clamped != current:
            bounds = f"[{self.min_channels}, {self.max_channels}]"
            return _result(clamped, current, "bounds", f"{current} channels is outside {bounds}", numbers)
        run = _run_at(history, current)
        since_change = None if len(run) == len(history) else len(run)
        previous = before_change if since_change is None else history[-len(run) - 1]
        previous_n = None if previous is None else previous.n_channels
        skipped = 0 if since_change is None else self.stabilization_batches
        signals = batch_signals(history, self.batch_interval_seconds)
        used = {load.seq for load in run[skipped:]}
        stable = [signal for signal in signals if signal.load.seq in used]
        if since_change is not None:
            numbers["batches_since_change"] = since_change
        if history and not run:
            message = (
                f"the newest batch ran at {history[-1].n_channels} channels, not the applied {current}: "
                "the job has not applied the plan yet"
            )
            return _held(current, "pending-plan", message, numbers)
        if not stable:
            if history and not run[skipped:]:
                message = (
                    f"stabilization: {len(run)} batch(es) ran at {current} channels since the change, "
                    f"the first {self.stabilization_batches} are not used"
                )
                return _held(current, "stabilization", message, numbers)
            return _held(
                current, "no-signal", "no batch measured busy time with tuples and a budget", numbers
            )
        newest = stable[-1]
        catch_up = self.catch_up_seconds or CATCH_UP_BUDGETS * newest.budget_seconds
        demand = newest.demand(self.target_utilization, catch_up)
        pressure = newest.pressure(self.target_utilization, catch_up)
        numbers |= {
            "utilization": newest.utilization,
            "pressure": pressure,
            "demand": demand,
            "budget_seconds": newest.budget_seconds,
            "capacity": newest.capacity,
            "rate_in": newest.rate_in,
            "backlog_rows": newest.backlog_rows,
            "catch_up_seconds": catch_up,
        }
        budget = f"{newest.budget_seconds:g} s budget ({newest.budget_source})"
        signal = f"utilization {newest.utilization:.3g} of a {budget}"
        if newest.backlog_rows:
            signal += f", {newest.backlog_rows} rows waiting (pressure {pressure:.3g})"
        if pressure > high:
            unsettled = {load.seq for load in run[:skipped]}
            settled = [signal for signal in signals if signal.load.seq not in unsettled]
            target = self._scale_up_count(current, demand, settled, catch_up, numbers)
            return self._scale_up(current, target, pressure, signal, since_change, previous, stable, numbers)
        if pressure < low:
            return self._scale_down(
                current, pressure, signal, since_change, previous_n, stable, catch_up, numbers
            )
        held = "band" if _ceil(demand) != current else None
        reason = f"{signal} is inside the band [{low:g}, {high:g}]"
        return _result(current, current, "target-utilization", reason, numbers, held)

    def _scale_up_count(
        self,
        current: int,
        demand: float,
        settled: Sequence[BatchSignal],
        catch_up: float,
        numbers: dict[str, float],
    ) -> int:
        """The count a scale-up goes to, before the bounds (rule 6 of the class docstring). ``settled``
        holds the signals of the history but the current run's stabilization batches, newest last."""
        low, high = self.band
        u = self.target_utilization
        sized = max(current + 1, _ceil(demand))
        recent = settled[-self.scale_up_lookback - 1 : -1] if self.scale_up_lookback else []
        if not recent or low == 0:
            return sized
        # A recent batch's pressure at the current count: its demand (channels) · u / current, whatever
        # count it ran at.
        lowest = min(signal.demand(u, catch_up) for signal in recent) * u / current
        fits = max(current + 1, _ceil(demand * u / high))  # the newest batch at or below the band's top
        keeps_low = _floor(current * lowest / low)  # the lowest recent batch at or above its low end
        numbers |= {
            "scale_up_sized": sized,
            "scale_up_lowest_recent": lowest,
            "scale_up_keeps_low": keeps_low,
        }
        return min(sized, max(fits, keeps_low))

    def _scale_up(
        self,
        current: int,
        sized: int,
        pressure: float,
        signal: str,
        since_change: int | None,
        previous: BatchLoad | None,
        stable: Sequence[BatchSignal],
        numbers: dict[str, float],
    ) -> Decision:
        high = self.band[1]
        previous_n = None if previous is None else previous.n_channels
        target = min(sized, self.max_channels)
        if target == current:
            return _held(current, "bounds", f"{signal} is above the band, at max_channels {current}", numbers)
        recent = since_change is not None and since_change <= self.reversal_batches
        if (
            recent
            and previous_n is not None
            and previous_n > current
            and pressure <= high + self.reversal_margin
        ):
            message = (
                f"reversal: {previous_n} -> {current} was {since_change} batch(es) ago, and {signal} is "
                f"not above the band by the margin {self.reversal_margin:g} (target would be {target})"
            )
            return _held(current, "reversal", message, numbers)
        if previous is not None and previous.n_channels < current and previous.capacity is not None:
            gained = math.fsum(s.capacity for s in stable) / len(stable) - previous.capacity
            promised = previous.capacity * (current / previous.n_channels - 1)
            numbers |= {"capacity_gained": gained, "capacity_promised": promised}
            if gained < self.effectiveness_threshold * promised:
                message = (
                    f"effectiveness: the scale-up {previous_n} -> {current} raised the capacity by "
                    f"{gained:.4g} rows/s, under {self.effectiveness_threshold:g} of the "
                    f"{promised:.4g} rows/s it promised (fewer cores than channels, or a bottleneck "
                    f"outside the channels?); further scale-ups are held (target would be {target})"
                )
                return _held(current, "effectiveness", message, numbers)
        reason = f"{signal} is above the band"
        if "scale_up_sized" in numbers and target < min(numbers["scale_up_sized"], self.max_channels):
            lowest = numbers["scale_up_lowest_recent"]
            reason += (
                f"; {target} rather than {numbers['scale_up_sized']:g} keeps the lowest of the last "
                f"{self.scale_up_lookback} batches (pressure {lowest:.3g}) in the band"
            )
        return _result(target, current, "target-utilization", reason, numbers)

    def _scale_down(
        self,
        current: int,
        pressure: float,
        signal: str,
        since_change: int | None,
        previous_n: int | None,
        stable: Sequence[BatchSignal],
        catch_up: float,
        numbers: dict[str, float],
    ) -> Decision:
        low = self.band[0]
        u = self.target_utilization
        below = list(itertools.takewhile(lambda s: s.pressure(u, catch_up) < low, reversed(stable)))
        numbers["batches_below_band"] = len(below)
        if len(below) < self.scale_down_delay:
            message = (
                f"scale-down delay: {signal} is below the band for {len(below)} of the "
                f"{self.scale_down_delay} batches in a row required"
            )
            return _held(current, "scale-down-delay", message, numbers)
        demand = max(s.demand(u, catch_up) for s in below[: self.scale_down_delay])
        floor = _ceil(current * (1 - self.max_scale_down_factor))
        target = max(_ceil(demand), floor, self.min_channels)
        numbers |= {"scale_down_demand": demand, "scale_down_floor": floor}
        if target >= current:
            held = "bounds" if current == self.min_channels else None
            reason = f"{signal} is below the band, but the largest recent demand {demand:.3g} needs {current}"
            return _result(current, current, "target-utilization", reason, numbers, held)
        recent = since_change is not None and since_change <= self.reversal_batches
        if recent and previous_n is not None and previous_n < current:
            message = (
                f"reversal: {previous_n} -> {current} was {since_change} batch(es) ago, within "
                f"{self.reversal_batches} (target would be {target})"
            )
            return _held(current, "reversal", message, numbers)
        reason = f"{signal} is below the band for {len(below)} batches"
        if target == floor and _ceil(demand) < floor:
            reason += f"; at most {self.max_scale_down_factor:g} of the channels go in one step"
            return _result(target, current, "target-utilization", reason, numbers, "max-scale-down-factor")
        return _result(target, current, "target-utilization", reason, numbers)


def _run_at(history: Sequence[BatchLoad], current: int) -> list[BatchLoad]:
    """The newest batches of ``history`` that ran at ``current`` channels, oldest first."""
    run = list(itertools.takewhile(lambda load: load.n_channels == current, reversed(history)))
    return run[::-1]


def _ceil(demand: float) -> int:
    return math.ceil(demand - _CEIL_SLACK * max(1.0, demand))


def _floor(count: float) -> int:
    return math.floor(count + _CEIL_SLACK * max(1.0, count))


def _held(current: int, rule: str, message: str, numbers: dict[str, float]) -> Decision:
    return _result(current, current, "target-utilization", message, numbers, rule)


def _result(
    n: int, current: int, rule: str, reason: str, numbers: dict[str, float], held_by: str | None = None
) -> Decision:
    what = f"keep {current} channels" if n == current else f"{current} -> {n} channels"
    return Decision(n, n != current, rule, f"{what}: {reason}", numbers, held_by)


def needs_rebalance(b_current: float, threshold: float) -> RebalanceDecision:
    """Rebalance when ``b_current > threshold`` (Gedik §4.5).

    ``b_current`` is the relative load imbalance ``b`` (Gedik Eq. 11) of the current
    partitioning function on the current frequency estimate; ``b <= 1`` means every resource is within
    its tolerance α, so a threshold of 1 rebalances exactly when a tolerance is exceeded. b is infinite
    when a channel carries no load (r = max/min), which always exceeds the threshold; the numbers then
    hold ``b = None`` so that they stay valid JSON. ``InvalidInput`` when ``threshold`` is not a finite
    number > 0 or ``b_current`` is NaN or negative.
    """
    check("threshold", threshold, POSITIVE)
    check("b_current", b_current, Interval(float, 0, math.inf))  # infinite when a channel has no load
    if math.isinf(b_current):
        return RebalanceDecision(
            True,
            "imbalance-threshold",
            f"b is infinite (a channel has no load), exceeding threshold {threshold:g}",
            {"b": None, "threshold": float(threshold)},
        )
    rebalance = b_current > threshold
    relation = "exceeds" if rebalance else "is within"
    return RebalanceDecision(
        rebalance,
        "imbalance-threshold",
        f"b = {b_current:.4g} {relation} threshold {threshold:g}",
        {"b": float(b_current), "threshold": float(threshold)},
    )
