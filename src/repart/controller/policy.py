"""The controller's *analyze* step: how many channels, and whether to rebalance.

Gedik §4.5 places these decisions in the adaptivity loop (measure, analyze, plan, activate): the
analysis decides whether the number of channels must change, and planning then builds the next
partitioning function. Everything here is pure: a policy reads a window's channel measurements
(``WindowLoad``, from storage's snapshots) and returns a ``Decision`` carrying the new channel count,
the rule that decided it, a human-readable reason and the numbers it was computed from, which is what
the controller records as an audit event.

Policies:

- ``FixedPolicy``: always the configured channel count.
- ``TargetUtilizationPolicy``: DS2-style sizing from the channels' busy time. One channel sustains
  ``rate_one = Σ tuples / Σ busy_seconds`` (over the channels that were busy), the input arrives at
  ``rate_in = Σ tuples / window_seconds``; the *raw demand* is ``rate_in / (u · rate_one)`` channels
  and the target is its ceiling clamped to ``[min_channels, max_channels]``; hysteresis and a
  cooldown keep the count from flapping.

``needs_rebalance`` is the independent trigger: rebalance when the relative imbalance
``b`` of the current function on the current frequencies (Gedik Eq. 11) exceeds a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from repart.errors import InvalidInput
from repart.protocol.snapshot import ChannelMeasurement, Snapshot
from repart.validation import (
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    Interval,
    check,
)

# Relative slack when taking the ceiling of the raw demand, so that a demand that is an integer up to
# floating-point rounding (e.g. 3.0000000000000004) does not ask for one channel more.
_CEIL_SLACK = 1e-9


@dataclass(frozen=True)
class Decision:
    """A channel-count decision and its audit trail.

    ``n_channels`` is the count to run with next, ``changed`` whether it differs from the current
    count, ``rule`` the policy (``"fixed"``, ``"target-utilization"``) or bound that decided it,
    ``reason`` one sentence for people, and ``numbers`` the inputs and intermediate values.
    """

    n_channels: int
    changed: bool
    rule: str
    reason: str
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RebalanceDecision:
    """Whether to rebalance, by which rule, why, and with which numbers (see ``needs_rebalance``)."""

    rebalance: bool
    rule: str
    reason: str
    numbers: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowLoad:
    """Channel measurements over windows of known total wall-clock length.

    ``channels`` holds one ``ChannelMeasurement`` per channel and window (several windows may be
    pooled: their tuples and busy seconds add); ``window_seconds`` is the wall-clock length they were
    measured over, the sum of the windows' lengths.
    """

    channels: tuple[ChannelMeasurement, ...]
    window_seconds: float

    def __post_init__(self) -> None:
        check("window_seconds", self.window_seconds, POSITIVE)
        for index, measured in enumerate(self.channels):
            check(f"channels[{index}].tuples", measured.tuples, NON_NEGATIVE_INT)
            check(f"channels[{index}].busy_seconds", measured.busy_seconds, NON_NEGATIVE)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> WindowLoad:
        """The load of one snapshot's window: its channels over ``window_end - window_start``."""
        return cls.from_snapshots((snapshot,))

    @classmethod
    def from_snapshots(cls, snapshots: Iterable[Snapshot]) -> WindowLoad:
        """The pooled load of several windows: all their channel measurements over their total length.

        ``InvalidInput("snapshots")`` when ``snapshots`` is empty.
        """
        chosen = list(snapshots)
        if not chosen:
            raise InvalidInput("snapshots", "must hold at least one snapshot, got none")
        return cls(
            channels=tuple(measured for snapshot in chosen for measured in snapshot.channels or ()),
            window_seconds=sum((s.window_end - s.window_start).total_seconds() for s in chosen),
        )

    @property
    def tuples(self) -> int:
        """Σ tuples over all channels."""
        return sum(measured.tuples for measured in self.channels)

    @property
    def busy_seconds(self) -> float:
        """Σ busy seconds over all channels."""
        return math.fsum(measured.busy_seconds for measured in self.channels)

    @property
    def busy_tuples(self) -> int:
        """Σ tuples over the channels that were busy (busy_seconds > 0)."""
        return sum(measured.tuples for measured in self.channels if measured.busy_seconds > 0)


class ChannelPolicy(Protocol):
    """A channel-count policy."""

    def decide(
        self, load: WindowLoad | None, current: int, now: datetime, last_change_at: datetime | None
    ) -> Decision:
        """The channel count to run with next, given the last window's load and the current count."""
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

    def decide(
        self, load: WindowLoad | None, current: int, now: datetime, last_change_at: datetime | None
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
    """DS2-style sizing to a target utilization ``u`` of every channel.

    With ``rate_one = Σ busy tuples / Σ busy seconds`` (the tuples per busy second of the channels that
    were busy at all) and ``rate_in = Σ tuples / window_seconds``, the raw demand is
    ``demand = rate_in / (u · rate_one)`` channels and the target ``clamp(ceil(demand), min, max)``.
    ``decide`` then applies, in this order:

    1. Bounds: a current count outside ``[min_channels, max_channels]`` is moved to the nearest bound
       at once (bounds override measurements, hysteresis and cooldown).
    2. No measurement (no load, no channels, no busy time, or no tuples on busy channels): keep.
    3. Target equal to the current count: keep.
    4. Hysteresis: keep while ``|demand - current| <= hysteresis · current``, i.e. while the raw demand
       is within ``hysteresis`` (a fraction: 0.1 = 10 %) of the current count; 0 disables it.
    5. Cooldown: keep while ``now - last_change_at < cooldown_seconds``.
    6. Otherwise move to the target.

    The count is monotone in the demand: a smaller ``u`` never yields fewer channels.
    """

    target_utilization: float
    min_channels: int
    max_channels: int
    cooldown_seconds: float = 0.0
    hysteresis: float = 0.0

    def __post_init__(self) -> None:
        check("target_utilization", self.target_utilization, FRACTION)
        _check_bounds(self.min_channels, self.max_channels)
        check("cooldown_seconds", self.cooldown_seconds, NON_NEGATIVE)
        check("hysteresis", self.hysteresis, NON_NEGATIVE)

    def decide(
        self, load: WindowLoad | None, current: int, now: datetime, last_change_at: datetime | None
    ) -> Decision:
        """The next channel count (see the class docstring for the rules and their order)."""
        check("current", current, POSITIVE_INT)
        numbers: dict[str, float] = {
            "current": current,
            "target_utilization": self.target_utilization,
            "min_channels": self.min_channels,
            "max_channels": self.max_channels,
        }
        clamped = min(max(current, self.min_channels), self.max_channels)
        if clamped != current:
            return self._result(
                clamped,
                current,
                "bounds",
                f"{current} channels is outside [{self.min_channels}, {self.max_channels}]",
                numbers,
            )
        if load is None or not load.channels:
            return self._result(current, current, "target-utilization", "no channel measurements", numbers)
        busy, busy_tuples = load.busy_seconds, load.busy_tuples
        numbers |= {
            "tuples": load.tuples,
            "busy_seconds": busy,
            "busy_tuples": busy_tuples,
            "window_seconds": load.window_seconds,
        }
        if busy <= 0 or busy_tuples == 0:
            return self._result(
                current, current, "target-utilization", "no busy time with tuples measured", numbers
            )
        rate_one = busy_tuples / busy
        rate_in = load.tuples / load.window_seconds
        demand = rate_in / (self.target_utilization * rate_one)
        needed = math.ceil(demand - _CEIL_SLACK * max(1.0, demand))
        target = min(max(needed, self.min_channels), self.max_channels)
        numbers |= {"rate_one": rate_one, "rate_in": rate_in, "demand": demand, "target": target}
        rule = "target-utilization"
        if target == current:
            bounds = f"[{self.min_channels}, {self.max_channels}]"
            reason = f"demand {demand:.3g} gives target {target} in {bounds}"
            return self._result(current, current, rule, reason, numbers)
        change = abs(demand - current) / current
        numbers["relative_change"] = change
        if change <= self.hysteresis:
            return self._result(
                current,
                current,
                rule,
                f"demand {demand:.3g} is within hysteresis {self.hysteresis:g} of {current} channels",
                numbers,
            )
        if last_change_at is not None:
            since = (now - last_change_at).total_seconds()
            numbers["seconds_since_change"] = since
            if since < self.cooldown_seconds:
                return self._result(
                    current,
                    current,
                    rule,
                    f"cooldown: last change {since:g} s ago, {self.cooldown_seconds:g} s required "
                    f"(target would be {target})",
                    numbers,
                )
        return self._result(
            target, current, rule, f"demand {demand:.3g} channels at u = {self.target_utilization:g}", numbers
        )

    @staticmethod
    def _result(n: int, current: int, rule: str, reason: str, numbers: dict[str, float]) -> Decision:
        if n == current:
            reason = f"keep {current} channels: {reason}"
        else:
            reason = f"{current} -> {n} channels: {reason}"
        return Decision(n, n != current, rule, reason, numbers)


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
