"""Metrics of a stream grouping and a queueing model of its latency (PKG §2, D-Choices §II, DKG Eq. 7–8).

A grouping (key grouping, shuffle grouping, Partial Key Grouping, D-Choices, …) routes a stream of m
tuples to n workers. The simulator hands over, in stream order, the worker of every tuple
(``workers``, int64 in [0, n)) and the dense key id of every tuple (``key_ids``, int64 in
[0, distinct)). From these:

- the load excess I(t) = max_i L_i(t) − t/n (the papers' "imbalance"), L_i(t) the number of the first
  t tuples routed to worker i (PKG §2, D-Choices §II), at the end of the stream and averaged over
  every t;
- the memory cost: the mean number of distinct workers that receive a key (DKG's DistCost, Eq. 8);
- the standard deviation of the load percentages of the workers (DKG Eq. 7);
- the mean and 99th percentile latency of a queueing model (deterministic arrivals at rate λ, FIFO
  workers with deterministic service time 1/μ_i), and the arrival rate at which the busiest worker
  saturates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numba
import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.groupings.base import check_rates
from repart.validation import POSITIVE, POSITIVE_INT, check

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Above this many key × worker bits (256 MiB), memory() counts distinct pairs by sorting instead.
_BITMAP_LIMIT = 1 << 31


def _njit(function: Callable[..., Any]) -> Callable[..., Any]:
    """``numba.njit(cache=True)`` behind a typed signature (numba's decorator is untyped for mypy)."""
    return cast(Callable[..., Any], numba.njit(cache=True)(function))


@_njit
def _load_excess_kernel(workers: IntArray, n: int) -> tuple[int, int]:
    """(max_i L_i(m), Σ_{t=1..m} max_i L_i(t)); loads only grow, so the running max is O(1) a tuple."""
    loads = np.zeros(n, dtype=np.int64)
    top = 0
    total = 0
    for t in range(workers.size):
        w = workers[t]
        loads[w] += 1
        if loads[w] > top:
            top = loads[w]
        total += top
    return top, total


@_njit
def _pairs_kernel(key_ids: IntArray, workers: IntArray, n: int, distinct: int) -> tuple[int, int]:
    """(distinct (key, worker) pairs, distinct keys): pair k·n + w is a bit of a distinct·n bitmap."""
    bits = np.zeros((distinct * n + 7) // 8, dtype=np.uint8)
    seen = np.zeros(distinct, dtype=np.bool_)
    pairs = 0
    keys = 0
    for t in range(key_ids.size):
        k = key_ids[t]
        if not seen[k]:
            seen[k] = True
            keys += 1
        p = k * n + workers[t]
        byte = p >> 3
        mask = np.uint8(1 << (p & 7))
        if bits[byte] & mask == 0:
            bits[byte] |= mask
            pairs += 1
    return pairs, keys


@_njit
def _latency_kernel(workers: IntArray, service: FloatArray, arrival_rate: float) -> FloatArray:
    """Latency of every tuple: Lindley's finish_i = max(finish_i, t/λ) + 1/μ_i, latency = finish_i − t/λ."""
    finish = np.zeros(service.size, dtype=np.float64)
    out = np.empty(workers.size, dtype=np.float64)
    for t in range(workers.size):
        w = workers[t]
        arrival = t / arrival_rate
        done = max(finish[w], arrival) + service[w]
        finish[w] = done
        out[t] = done - arrival
    return out


def _check_ids(values: IntArray, name: str, bound: int, bound_name: str) -> IntArray:
    """A non-empty 1-d integer array with every entry in [0, bound), as int64."""
    a = np.asarray(values)
    if a.dtype.kind not in "iu":
        raise InvalidInput(name, f"must be an integer array (int64), got dtype {a.dtype}")
    if a.ndim != 1 or a.size == 0:
        raise InvalidInput(name, f"must be a non-empty 1-d array, got shape {a.shape}")
    if int(a.min()) < 0 or int(a.max()) >= bound:
        raise InvalidInput(
            name, f"must hold ids in [0, {bound_name} - 1 = {bound - 1}], got {a.min()} to {a.max()}"
        )
    return np.ascontiguousarray(a, dtype=np.int64)


@dataclass(frozen=True)
class LoadExcess:
    """How far the busiest worker's load exceeds the mean load, as fractions of the m tuples.

    The PKG paper's imbalance at time t, "the difference between the maximum and the average load of
    the workers": I(t) = max_i L_i(t) − avg_i L_i(t), L_i(t) the number of the first t tuples routed
    to worker i (PKG §2, D-Choices §II). ``final`` is I(m)/m and ``average`` the time average of I(t)
    over t = 1 … m, divided by m. It is a difference of tuple counts, not Gedik's imbalance b
    (``repart.partitioning.metrics.Imbalance``: ratios max/min of channel loads over a tolerance α).
    """

    final: float
    average: float


def load_excess(workers: IntArray, n: int) -> LoadExcess:
    """I(t) = max_i L_i(t) − t/n (PKG §2, D-Choices §II) as fractions of the m tuples (``LoadExcess``).

    ``final`` = I(m)/m; ``average`` = (Σ_{t=1..m} I(t)) / m / m, the PKG paper's "fraction of average
    imbalance". Computed exactly over every t: Σ_t max_i L_i(t) is an integer and Σ_t t/n =
    m(m+1)/(2n), so both values are exact ratios of integers rounded once.
    """
    count = check("n", n, POSITIVE_INT)
    w = _check_ids(workers, "workers", count, "n")
    m = int(w.size)
    top, total = _load_excess_kernel(w, count)
    final = (count * int(top) - m) / (count * m)
    average = (2 * count * int(total) - m * (m + 1)) / (2 * count * m * m)
    return LoadExcess(final=final, average=average)


def memory(key_ids: IntArray, workers: IntArray, n: int, distinct: int) -> float:
    """DistCost (DKG Eq. 8): Σ_k |{workers that received k}| / |{keys that occur}|.

    1 for key grouping, up to n for shuffle grouping. Distinct (key, worker) pairs are marked in a
    bitmap of distinct·n bits (sorted pair codes instead when that bitmap would exceed 256 MiB).
    """
    count = check("n", n, POSITIVE_INT)
    keys_bound = check("distinct", distinct, POSITIVE_INT)
    w = _check_ids(workers, "workers", count, "n")
    k = _check_ids(key_ids, "key_ids", keys_bound, "distinct")
    if k.size != w.size:
        raise InvalidInput("key_ids", f"must have one entry per entry of workers ({w.size}), got {k.size}")
    cells = keys_bound * count
    if cells <= _BITMAP_LIMIT:
        pairs, keys = _pairs_kernel(k, w, count, keys_bound)
        return int(pairs) / int(keys)
    codes = np.unique(k * count + w)
    return int(codes.size) / int(np.unique(codes // count).size)


def load_std(workers: IntArray, n: int) -> float:
    """DKG Eq. 7: population standard deviation of the load percentages 100·L_i(m)/m over all n workers.

    A worker that receives no tuple counts as 0 %.
    """
    count = check("n", n, POSITIVE_INT)
    w = _check_ids(workers, "workers", count, "n")
    percent = 100.0 * np.bincount(w, minlength=count) / w.size
    return float(np.std(percent))


@dataclass(frozen=True)
class Latency:
    """Mean and 99th percentile (numpy's linear interpolation) of the m tuple latencies."""

    mean: float
    p99: float


def latency(workers: IntArray, rates: FloatArray, arrival_rate: float) -> Latency:
    """Latency of a FIFO queueing model of the grouping: n = len(rates) workers.

    Tuple t = 0 … m−1 arrives at t/λ (λ = ``arrival_rate``) and is served by ``workers[t]`` one at a
    time in deterministic time 1/μ_i (μ = ``rates``). Its latency (waiting + service) follows Lindley's
    recursion finish_i = max(finish_i, t/λ) + 1/μ_i, latency = finish_i − t/λ.
    """
    r = check_rates(rates)
    lam = check("arrival_rate", arrival_rate, POSITIVE)
    w = _check_ids(workers, "workers", int(r.size), "n")
    values = cast(FloatArray, _latency_kernel(w, 1.0 / r, lam))
    return Latency(mean=float(values.mean()), p99=float(np.percentile(values, 99.0)))


def saturation(workers: IntArray, rates: FloatArray) -> float:
    """The arrival rate at which the busiest worker saturates: min over L_i > 0 of μ_i / (L_i/m).

    With routing fractions L_i/m, worker i receives λ·L_i/m tuples per unit time and keeps up while that
    stays below μ_i; the result is the throughput of the grouping in tuples per unit time.
    """
    r = check_rates(rates)
    w = _check_ids(workers, "workers", int(r.size), "n")
    loads = np.bincount(w, minlength=r.size)
    used = loads > 0
    return float(np.min(r[used] * w.size / loads[used]))


@dataclass(frozen=True)
class GroupingMetrics:
    """Every metric of one routed stream (see the functions of this module)."""

    imbalance: float
    imbalance_avg: float
    memory: float
    load_std: float
    latency_mean: float
    latency_p99: float
    saturation: float


def evaluate(
    key_ids: IntArray,
    workers: IntArray,
    n: int,
    distinct: int,
    rates: FloatArray,
    arrival_rate: float,
) -> GroupingMetrics:
    """Load excess (as ``imbalance``, the papers' name), memory, load_std, latency and saturation of one
    stream; ``rates`` must have length n."""
    count = check("n", n, POSITIVE_INT)
    r = check_rates(rates, count)
    lam = check("arrival_rate", arrival_rate, POSITIVE)
    w = _check_ids(workers, "workers", count, "n")
    excess = load_excess(w, count)
    lat = latency(w, r, lam)
    return GroupingMetrics(
        imbalance=excess.final,
        imbalance_avg=excess.average,
        memory=memory(key_ids, w, count, distinct),
        load_std=load_std(w, count),
        latency_mean=lat.mean,
        latency_p99=lat.p99,
        saturation=saturation(w, r),
    )
