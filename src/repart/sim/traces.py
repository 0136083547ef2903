"""Load traces for tuning the channel-count policy: seasonal, drifting and bursty snapshot sequences.

A trace is what a job would have reported, batch after batch: a sequence of ``Snapshot`` windows, one
per batch, each with exact key counts (``epsilon = 0``), the batch's budget as its reported
``progress.interval_seconds``, and one channel's measurement (every tuple on channel 0, busy
``cost_seconds_per_row`` seconds per tuple). ``repart.controller.replay`` replays a trace through the
controller, predicting the busy time of the channel counts the controller chooses from these.

The rows of batch ``t`` are ``rows · drift^(t / (batches - 1)) · weekly(t) · daily(t) · burst(t)``:

- ``weekly``: ``weekend_factor`` on the last two days of every 7-day week (batch ``t`` falls on day
  ``t · batch_seconds / 86400``), 1 otherwise;
- ``daily``: ``1 - daily_amplitude · cos(2π · hour / 24)``, lowest at midnight (batches shorter than a
  day only);
- ``burst``: with probability ``burst_probability`` a batch starts a burst of 1 to 3 batches whose load
  is multiplied by a factor drawn uniformly from ``[1.5, burst_factor]``.

Keys follow Zipf(``zipf_exponent``) over ``keys`` integer keys, or the frequencies of the ``keys``
most frequent English words (``wordfreq``); each batch draws its rows multinomially from them.

``named_traces`` holds the named traces that ``repart replay --trace`` and
``benchmarks/policy_traces.py`` replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np

from repart.errors import InvalidInput
from repart.protocol.counter_items import CounterEntry
from repart.protocol.snapshot import BatchProgress, ChannelMeasurement, Snapshot
from repart.sim.streams import english_vocabulary
from repart.sim.workload import ZipfWorkload
from repart.validation import POSITIVE, POSITIVE_INT, PROBABILITY, Interval, Options, check

DISTRIBUTIONS = ("zipf", "words")
DAY_SECONDS = 86_400.0
TRACE_START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
TRACE_SLOT_BITS = 12


@dataclass(frozen=True)
class TraceSpec:
    """The parameters of a synthetic trace (see the module docstring)."""

    batches: int
    batch_seconds: float = DAY_SECONDS
    rows: int = 100_000
    keys: int = 2_000
    distribution: str = "zipf"
    zipf_exponent: float = 0.8
    drift: float = 1.0
    weekend_factor: float = 1.0
    daily_amplitude: float = 0.0
    burst_probability: float = 0.0
    burst_factor: float = 2.5
    cost_seconds_per_row: float = 1.0
    seed: int = 0
    region: str = "trace"

    def __post_init__(self) -> None:
        check("batches", self.batches, POSITIVE_INT)
        check("batch_seconds", self.batch_seconds, POSITIVE)
        check("rows", self.rows, POSITIVE_INT)
        check("keys", self.keys, Interval(int, 2, None))
        check("distribution", self.distribution, Options(DISTRIBUTIONS))
        check("zipf_exponent", self.zipf_exponent, Interval(float, 0, 4))
        check("drift", self.drift, POSITIVE)
        check("weekend_factor", self.weekend_factor, POSITIVE)
        check("daily_amplitude", self.daily_amplitude, Interval(float, 0, 1, closed="left"))
        check("burst_probability", self.burst_probability, PROBABILITY)
        check("burst_factor", self.burst_factor, Interval(float, 1.5, None))
        check("cost_seconds_per_row", self.cost_seconds_per_row, POSITIVE)
        if self.daily_amplitude and self.batch_seconds >= DAY_SECONDS:
            raise InvalidInput("daily_amplitude", "needs batches shorter than a day (batch_seconds < 86400)")


def load_factors(spec: TraceSpec) -> np.ndarray:
    """The load multiplier of every batch (module docstring), the same for the same ``seed``."""
    t = np.arange(spec.batches, dtype=np.float64)
    span = max(spec.batches - 1, 1)
    factors = spec.drift ** (t / span)
    day = np.floor(t * spec.batch_seconds / DAY_SECONDS)
    factors *= np.where(day % 7 >= 5, spec.weekend_factor, 1.0)
    if spec.daily_amplitude:
        hour = (t * spec.batch_seconds / 3600.0) % 24
        factors *= 1 - spec.daily_amplitude * np.cos(2 * math.pi * hour / 24)
    factors *= bursts(spec)[0]
    return factors


def bursts(spec: TraceSpec) -> tuple[np.ndarray, np.ndarray]:
    """The burst multiplier of every batch (1 outside bursts) and whether the batch starts a burst
    (module docstring), the same for the same ``seed``."""
    rng = np.random.default_rng(spec.seed)
    factors = np.ones(spec.batches, dtype=np.float64)
    starts = np.zeros(spec.batches, dtype=bool)
    left, factor = 0, 1.0
    for index in range(spec.batches):
        if left == 0 and rng.random() < spec.burst_probability:
            left, factor = int(rng.integers(1, 4)), float(rng.uniform(1.5, spec.burst_factor))
            starts[index] = True
        if left:
            factors[index] = factor
            left -= 1
    return factors, starts


def trace_snapshots(spec: TraceSpec) -> list[Snapshot]:
    """The trace of ``spec`` as its snapshot sequence, window ``seq`` 0, 1, … (module docstring)."""
    keys, shares = _distribution(spec)
    rng = np.random.default_rng(spec.seed + 1)
    snapshots = []
    for seq, factor in enumerate(load_factors(spec)):
        counts = rng.multinomial(max(1, round(spec.rows * factor)), shares)
        present = np.flatnonzero(counts)
        tuples = int(counts.sum())
        start = TRACE_START + timedelta(seconds=seq * spec.batch_seconds)
        snapshots.append(
            Snapshot(
                region=spec.region,
                seq=seq,
                window_start=start,
                window_end=start + timedelta(seconds=spec.batch_seconds),
                tuples=tuples,
                distinct_estimate=len(present),
                epsilon=0.0,
                key_type="str" if spec.distribution == "words" else "int",
                items=[CounterEntry(keys[i], int(counts[i]), 0) for i in present],
                slot_bits=TRACE_SLOT_BITS,
                channels=(ChannelMeasurement(0, tuples, tuples * spec.cost_seconds_per_row, 0),),
                progress=BatchProgress(interval_seconds=spec.batch_seconds),
            )
        )
    return snapshots


def _distribution(spec: TraceSpec) -> tuple[list[int] | list[str], np.ndarray]:
    if spec.distribution == "words":
        words, probabilities = english_vocabulary(spec.keys)
        return words, probabilities
    return list(range(spec.keys)), ZipfWorkload(spec.zipf_exponent, spec.keys).frequencies


TRACE_START_CHANNELS = 4
"""The channel count a named trace's first batch is sized for."""
TRACE_TARGET_UTILIZATION = 0.7
"""The utilization of the first batch of a named trace on ``TRACE_START_CHANNELS`` channels."""


def named_traces(seed: int = 0) -> dict[str, TraceSpec]:
    """The named traces for ``seed``; each costs put its first batch near
    ``TRACE_TARGET_UTILIZATION`` on ``TRACE_START_CHANNELS`` channels:

    - ``weekly-drift-zipf``, ``weekly-drift-words``: 60 daily batches, weekend load 0.7x the
      weekday's, a drift that doubles the load; Zipf(0.8) over 2,000 integers, or 5,000 English words.
    - ``bursty-words``: a week of hourly batches, a daily cycle (amplitude 0.3), a 20 % drift and
      bursts (4 % per batch, up to 2.5x); 5,000 English words.
    - ``weekly-drift-zipf-weekend-0.6``: ``weekly-drift-zipf`` with weekend load 0.6x (the policy's
      defaults were not chosen on it).
    """

    def cost(batch_seconds: float, rows: int) -> float:
        return batch_seconds * TRACE_TARGET_UTILIZATION * TRACE_START_CHANNELS / rows

    daily_cost = cost(DAY_SECONDS, 100_000)
    daily = TraceSpec(
        60, rows=100_000, weekend_factor=0.7, drift=2.0, cost_seconds_per_row=daily_cost, seed=seed
    )
    return {
        "weekly-drift-zipf": daily,
        "weekly-drift-words": replace(daily, keys=5_000, distribution="words"),
        "bursty-words": TraceSpec(
            168,
            batch_seconds=3_600,
            rows=100_000,
            keys=5_000,
            distribution="words",
            daily_amplitude=0.3,
            drift=1.2,
            burst_probability=0.04,
            burst_factor=2.5,
            cost_seconds_per_row=cost(3_600, 100_000),
            seed=seed,
        ),
        "weekly-drift-zipf-weekend-0.6": replace(daily, weekend_factor=0.6),
    }
