"""Evaluation metrics of a partition function on true frequencies (Gedik §3, Eq. 1–12).

Loads L_k(i) per channel (Eq. 1, 3, 5), the max/min ratios r_k (Eq. 2, 4, 6), the relative imbalances
b_k = r_k/α and their geometric mean b over the non-constant resources (Eq. 11, §4.4), max/mean load
(the busiest channel's load over the mean channel's), the migration cost M (Eq. 9) and the relative
migration cost m = M / L̄_s (Eq. 10, 12), and the lower bound b_lb that no function keeping every key
on one channel can beat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.domain import check_alpha
from repart.partitioning.resources import Resources, check_channels, item_loads
from repart.partitioning.utility import geometric_mean

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

COMMUNICATION = 2
"""The row of the communication loads (Eq. 5) in ``channel_loads``: resources s, c, n in this order."""


def _check_frequencies(frequencies: FloatArray) -> FloatArray:
    f = np.asarray(frequencies, dtype=np.float64)
    if f.ndim != 1 or f.size == 0:
        raise InvalidInput("frequencies", f"must be a non-empty 1-d array, got shape {f.shape}")
    if not np.all(np.isfinite(f)) or np.any(f < 0):
        raise InvalidInput("frequencies", "must be finite numbers >= 0, got a NaN, infinite or negative one")
    return f


def channel_loads(
    resources: Resources, frequencies: FloatArray, channels: IntArray, n_channels: int
) -> FloatArray:
    """L_k(i) for k = s, c, n (rows) and channel i (columns): Eq. 1, 3 and 5."""
    f = _check_frequencies(frequencies)
    n = check_channels(n_channels)
    ch = np.asarray(channels, dtype=np.int64)
    if ch.shape != f.shape:
        raise InvalidInput("channels", f"must have one entry per frequency ({f.size}), got shape {ch.shape}")
    if ch.size and (ch.min() < 0 or ch.max() >= n):
        raise InvalidInput("channels", f"must be channels in [0, {n - 1}], got {ch.min()} to {ch.max()}")
    loads = item_loads(resources, f)
    return np.stack([np.bincount(ch, weights=row, minlength=n) for row in loads])


def max_over_mean(loads: npt.NDArray[np.number[Any]]) -> float:
    """max/mean load: the busiest channel's load over the mean channel's, every channel counted (an
    empty one as 0).

    1.0 is perfect balance and N (the number of channels) the worst, everything on one channel; unlike
    b it is finite when a channel has no load, and 1.0 when no channel has any (the result is held in
    [1, N] against rounding). ``InvalidInput("loads")`` for an empty or not 1-d array, or a load that
    is negative or not finite.
    """
    values = np.asarray(loads, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise InvalidInput("loads", f"must be a non-empty 1-d array of loads, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise InvalidInput("loads", "must be finite numbers >= 0, got a NaN, infinite or negative one")
    total = math.fsum(values.tolist())
    if total <= 0:
        return 1.0
    return min(max(float(values.max()) * values.size / total, 1.0), float(values.size))


@dataclass(frozen=True)
class Imbalance:
    """How unevenly a function loads its channels.

    - ``r``: r_k = max/min channel load for k = s, c, n (Eq. 2, 4, 6); infinite when a channel has no
      load of that resource.
    - ``b_k``: r_k / α, the relative imbalance of each resource.
    - ``b``: the geometric mean of b_k over the non-constant resources (Eq. 11, §4.4).
    - ``max_mean_load``: ``max_over_mean`` of the communication loads (Eq. 5), the tuples each channel
      receives: the busiest channel's rows over the mean channel's. Communication's β is linear in
      every resource code, so this is the same measure whatever the code; it stays finite when a
      channel is empty.
    """

    r: tuple[float, float, float]
    b_k: tuple[float, float, float]
    b: float
    max_mean_load: float


def imbalance(resources: Resources, loads: FloatArray, alpha: float) -> Imbalance:
    """r_k = max_i L_k(i) / min_i L_k(i) (Eq. 2, 4, 6), b_k = r_k/α, b per Eq. 11 and §4.4, and
    max/mean load on the communication row (``Imbalance``) of ``loads``, L_k(i) for k = s, c, n by
    channel as ``channel_loads`` gives them.

    A channel with no load makes r_k infinite.
    """
    a = check_alpha(alpha)
    ratios = []
    for row in np.asarray(loads, dtype=np.float64):
        high, low = float(row.max()), float(row.min())
        ratios.append(high / low if low > 0 else (1.0 if high == 0 else math.inf))
    b_k = tuple(r / a for r in ratios)
    b = float(geometric_mean([np.array(b_k[k]) for k in resources.active]))
    return Imbalance(
        r=(ratios[0], ratios[1], ratios[2]),
        b_k=(b_k[0], b_k[1], b_k[2]),
        b=b,
        max_mean_load=max_over_mean(np.asarray(loads, dtype=np.float64)[COMMUNICATION]),
    )


def migration_cost(resources: Resources, frequencies: FloatArray, before: IntArray, after: IntArray) -> float:
    """M(p_t, p_t+1) = Σ_d β_s(f(d))·1(p_t(d) ≠ p_t+1(d)) (Eq. 9)."""
    f = _check_frequencies(frequencies)
    state = item_loads(resources, f)[0]
    moved = np.asarray(before, dtype=np.int64) != np.asarray(after, dtype=np.int64)
    return float(state[moved].sum())


def relative_migration(
    resources: Resources, frequencies: FloatArray, before: IntArray, after: IntArray, n_channels: int
) -> float:
    """m = M / L̄_s with L̄_s = Σ_d β_s(f(d)) / N (Eq. 10, 12), N the new channel count."""
    f = _check_frequencies(frequencies)
    ideal = float(item_loads(resources, f)[0].sum()) / check_channels(n_channels)
    return migration_cost(resources, f, before, after) / ideal if ideal > 0 else 0.0


def lower_bound(resources: Resources, frequencies: FloatArray, n_channels: int, alpha: float) -> float:
    """b_lb: per resource r_k ≥ max(1, h·(N−1)/(T−h)), h the largest item load and T the total.

    The channel holding the heaviest item carries at least h, and the lightest of the other N − 1
    channels at most (T − h)/(N − 1). b_lb is the geometric mean over the non-constant resources of
    these bounds, divided by α.
    """
    f = _check_frequencies(frequencies)
    n = check_channels(n_channels)
    a = check_alpha(alpha)
    loads = item_loads(resources, f)
    bounds = []
    for k in resources.active:
        h = float(loads[k].max())
        total = float(loads[k].sum())
        if n == 1:
            bounds.append(1.0)
        elif total - h <= 0:
            bounds.append(math.inf)
        else:
            bounds.append(max(1.0, h * (n - 1) / (total - h)))
    return float(geometric_mean([np.array(x) for x in bounds])) / a
