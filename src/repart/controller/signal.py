"""The channel-count signal in the job's own time: what one batch measured, against the time it had.

A channel count answers one question: can N channels finish a batch within the time the job has for
it? Each batch the job reports (one snapshot per batch) becomes a ``BatchLoad``: the channel count it
ran with, its channels' busy seconds and tuples, and what the job reported of its progress (the batch
interval, the input and processing rates, the rows waiting). Against the batch's *budget*, the time the
job had for it, the load gives:

- ``utilization``: the busiest channel's busy seconds over the budget (the skewed channel decides, as
  in Flink's autoscaler); above 1 the batch ran over its budget.
- ``capacity``: the rows per second the batch's channels sustain together, ``tuples / max busy``
  (the busiest channel finishes last).
- ``demand(target, catch_up)``: the channels needed to keep the busiest channel at the target
  utilization while taking in the input rate and catching up on the backlog within ``catch_up``
  seconds: ``N · (rate_in + backlog / catch_up) / (target · capacity)``. Without a backlog and with
  ``rate_in = tuples / budget`` this is ``N · utilization / target``: DS2's sizing of the measured
  busy time, on the channel that decides. It assumes the skew of the load over channels stays as it is
  at another N.

The budget is, in this order: the region's declared ``batch_interval_seconds``; the batch's reported
``progress.interval_seconds``; the time between the ingestion of the previous batch's snapshot and this
one's. Event-time window lengths never enter it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from repart.protocol.snapshot import BatchProgress, ChannelMeasurement


@dataclass(frozen=True)
class BatchLoad:
    """What one batch measured: its window ``seq``, the channel count ``n_channels`` it ran with, its
    ``channels``' measurements, the job's ``progress`` report (None if none) and when its snapshot was
    ingested (None when unknown)."""

    seq: int
    n_channels: int
    channels: tuple[ChannelMeasurement, ...]
    progress: BatchProgress | None = None
    ingested_at: datetime | None = None

    @property
    def tuples(self) -> int:
        """Σ tuples over the channels."""
        return sum(measured.tuples for measured in self.channels)

    @property
    def max_busy_seconds(self) -> float:
        """The busiest channel's busy seconds (0 without channels)."""
        return max((measured.busy_seconds for measured in self.channels), default=0.0)

    @property
    def capacity(self) -> float | None:
        """The rows per second the channels sustain together, ``tuples / max busy`` (the busiest
        channel finishes last); None without busy time or tuples."""
        busiest = self.max_busy_seconds
        return self.tuples / busiest if busiest > 0 and self.tuples > 0 else None


@dataclass(frozen=True)
class BatchSignal:
    """One batch's signal: its load, the budget it had and where the budget came from (``declared``,
    ``reported`` or ``measured``), and the figures of the module docstring."""

    load: BatchLoad
    budget_seconds: float
    budget_source: str
    utilization: float
    capacity: float
    rate_in: float
    backlog_rows: int

    def demand(self, target: float, catch_up_seconds: float) -> float:
        """Channels needed at utilization ``target`` to take the input and the backlog within
        ``catch_up_seconds`` (module docstring)."""
        needed = self.rate_in + self.backlog_rows / catch_up_seconds
        return self.load.n_channels * needed / (target * self.capacity)

    def pressure(self, target: float, catch_up_seconds: float) -> float:
        """The utilization equivalent of the demand, ``demand · target / N``: the utilization itself
        without a backlog, more with one. The band is checked against it."""
        return self.demand(target, catch_up_seconds) * target / self.load.n_channels


def batch_signals(loads: Sequence[BatchLoad], declared_budget: float | None) -> list[BatchSignal]:
    """The signal of every batch in ``loads`` (oldest first) that measured busy time with tuples and
    has a budget (module docstring); the others are left out."""
    signals = []
    previous: BatchLoad | None = None
    for load in loads:
        budget = _budget(load, previous, declared_budget)
        previous = load
        capacity = load.capacity
        if budget is None or capacity is None:
            continue
        seconds, source = budget
        progress = load.progress or BatchProgress()
        rate_in = progress.input_rows_per_second
        signals.append(
            BatchSignal(
                load=load,
                budget_seconds=seconds,
                budget_source=source,
                utilization=load.max_busy_seconds / seconds,
                capacity=capacity,
                rate_in=load.tuples / seconds if rate_in is None else rate_in,
                backlog_rows=progress.backlog_rows or 0,
            )
        )
    return signals


def _budget(load: BatchLoad, previous: BatchLoad | None, declared: float | None) -> tuple[float, str] | None:
    if declared is not None:
        return declared, "declared"
    if load.progress is not None and load.progress.interval_seconds is not None:
        return load.progress.interval_seconds, "reported"
    if previous is None or previous.ingested_at is None or load.ingested_at is None:
        return None
    gap = (load.ingested_at - previous.ingested_at).total_seconds()
    return (gap, "measured") if gap > 0 and math.isfinite(gap) else None
