"""Grouping metrics and the queueing model against plain-Python oracles and hand-computed cases."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.groupings import metrics
from repart.partitioning.groupings.metrics import (
    GroupingMetrics,
    Latency,
    LoadExcess,
    evaluate,
    latency,
    load_excess,
    load_std,
    memory,
    saturation,
)

# ---------------------------------------------------------------- oracles, written plainly


def oracle_load_excess(workers: list[int], n: int) -> tuple[float, float]:
    loads = [0] * n
    values = []
    for t, w in enumerate(workers, start=1):
        loads[w] += 1
        values.append(max(loads) - t / n)
    m = len(workers)
    return values[-1] / m, sum(values) / m / m


def oracle_memory(key_ids: list[int], workers: list[int]) -> float:
    receivers: dict[int, set[int]] = {}
    for k, w in zip(key_ids, workers, strict=True):
        receivers.setdefault(k, set()).add(w)
    return sum(len(s) for s in receivers.values()) / len(receivers)


def oracle_load_std(workers: list[int], n: int) -> float:
    m = len(workers)
    percent = [100.0 * workers.count(i) / m for i in range(n)]
    mean = sum(percent) / n
    return math.sqrt(sum((p - mean) ** 2 for p in percent) / n)


def oracle_latencies(workers: list[int], rates: list[float], arrival_rate: float) -> list[float]:
    finish = [0.0] * len(rates)
    out = []
    for t, w in enumerate(workers):
        arrival = t / arrival_rate
        start = max(finish[w], arrival)
        finish[w] = start + 1.0 / rates[w]
        out.append(finish[w] - arrival)
    return out


def oracle_percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def oracle_saturation(workers: list[int], rates: list[float]) -> float:
    m = len(workers)
    return min(rates[i] / (workers.count(i) / m) for i in range(len(rates)) if workers.count(i) > 0)


# ---------------------------------------------------------------- random streams


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, int, list[int], list[int], list[float], float]:
    n = draw(st.sampled_from([1, 2, 3, 5, 8]))
    distinct = draw(st.sampled_from([1, 2, 7, 30]))
    m = draw(st.integers(1, 300))
    workers = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    keys = draw(st.lists(st.integers(0, distinct - 1), min_size=m, max_size=m))
    rate = st.floats(0.05, 20.0, allow_nan=False, allow_infinity=False)
    rates = draw(st.lists(rate, min_size=n, max_size=n))
    arrival_rate = draw(st.floats(0.05, 50.0, allow_nan=False, allow_infinity=False))
    return n, distinct, keys, workers, rates, arrival_rate


def arr(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(streams())
def test_against_oracles(case: tuple[int, int, list[int], list[int], list[float], float]) -> None:
    n, distinct, keys, workers, rates, lam = case
    final, average = oracle_load_excess(workers, n)
    result = load_excess(arr(workers), n)
    assert result.final == pytest.approx(final, rel=1e-12, abs=1e-12)
    assert result.average == pytest.approx(average, rel=1e-12, abs=1e-12)

    assert memory(arr(keys), arr(workers), n, distinct) == pytest.approx(oracle_memory(keys, workers))
    assert load_std(arr(workers), n) == pytest.approx(oracle_load_std(workers, n), rel=1e-9, abs=1e-9)

    lats = oracle_latencies(workers, rates, lam)
    lat = latency(arr(workers), np.array(rates), lam)
    assert lat.mean == pytest.approx(sum(lats) / len(lats), rel=1e-9)
    assert lat.p99 == pytest.approx(oracle_percentile(lats, 99.0), rel=1e-9)
    assert saturation(arr(workers), np.array(rates)) == pytest.approx(oracle_saturation(workers, rates))

    everything = evaluate(arr(keys), arr(workers), n, distinct, np.array(rates), lam)
    assert everything == GroupingMetrics(
        imbalance=result.final,
        imbalance_avg=result.average,
        memory=memory(arr(keys), arr(workers), n, distinct),
        load_std=load_std(arr(workers), n),
        latency_mean=lat.mean,
        latency_p99=lat.p99,
        saturation=saturation(arr(workers), np.array(rates)),
    )


@settings(max_examples=40, deadline=None)
@given(streams())
def test_memory_sorting_fallback(case: tuple[int, int, list[int], list[int], list[float], float]) -> None:
    """memory() counts distinct pairs by sorting when the bitmap would exceed _BITMAP_LIMIT bits."""
    n, distinct, keys, workers, _, _ = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "_BITMAP_LIMIT", 0)
        assert memory(arr(keys), arr(workers), n, distinct) == pytest.approx(oracle_memory(keys, workers))


# ---------------------------------------------------------------- hand-computed cases


def test_key_grouping_single_key() -> None:
    workers = arr([2] * 12)
    keys = arr([0] * 12)
    n = 4
    assert memory(keys, workers, n, distinct=1) == 1.0
    assert load_excess(workers, n).final == pytest.approx(1 - 1 / n)
    # I(t) = t − t/4 = 3t/4, Σ_{t=1..12} = 3/4·78 = 58.5, / 12 / 12
    assert load_excess(workers, n).average == pytest.approx(58.5 / 144)
    # percentages (0, 0, 100, 0): mean 25, variance (3·625 + 5625)/4 = 1875
    assert load_std(workers, n) == pytest.approx(math.sqrt(1875.0))
    assert load_std(workers - 2, 1) == 0.0
    assert load_excess(workers - 2, 1) == LoadExcess(final=0.0, average=0.0)


def test_shuffle_round_robin() -> None:
    n, k = 5, 6
    m = k * n
    workers = arr([t % n for t in range(m)])
    # each of 3 keys appears 10 times in a row: keys 0..2 each cover every worker (10 ≥ 5 consecutive)
    keys = arr([t // 10 for t in range(m)])
    result = load_excess(workers, n)
    assert result.final == 0.0
    # I(t) = ceil(t/n) − t/n ≠ 0 between multiples of n: Σ over one period is (4+3+2+1)/5 = 2
    assert result.average == pytest.approx(k * 2.0 / m / m)
    assert memory(keys, workers, n, distinct=3) == n
    assert load_std(workers, n) == 0.0
    assert saturation(workers, np.ones(n)) == pytest.approx(n)


def test_two_worker_latency_by_hand() -> None:
    # μ = (1, 0.5): services 1 and 2; arrivals at 0, 1, 2, 3, 4
    # t=0 → w0 finishes 1 (lat 1); t=1 → w1 finishes 3 (lat 2); t=2 → w1 waits, finishes 5 (lat 3);
    # t=3 → w0 idle, finishes 4 (lat 1); t=4 → w1 waits until 5, finishes 7 (lat 3)
    workers = arr([0, 1, 1, 0, 1])
    rates = np.array([1.0, 0.5])
    result = latency(workers, rates, 1.0)
    assert result.mean == pytest.approx(2.0)
    # sorted (1, 1, 2, 3, 3): position 0.99·4 = 3.96 → 3
    assert result.p99 == pytest.approx(3.0)
    # arrivals at rate 2 (0, .5, 1, 1.5, 2): w0 finishes 1 (lat 1); w1 finishes 2.5 (lat 2), then
    # 4.5 (lat 3.5); w0 idle from 1, finishes 2.5 (lat 1); w1 finishes 6.5 (lat 4.5) → mean 12/5;
    # sorted (1, 1, 2, 3.5, 4.5): 3.5 + 0.96·1 = 4.46
    fast = latency(workers, rates, 2.0)
    assert isinstance(fast, Latency)
    assert fast.mean == pytest.approx(2.4)
    assert fast.p99 == pytest.approx(4.46)
    # worker 1 gets 3/5 of the stream at μ = 0.5 → saturates at 0.5 / 0.6; worker 0 at 1 / 0.4
    assert saturation(workers, rates) == pytest.approx(5 / 6)


def test_saturation_examples() -> None:
    assert saturation(arr([0, 0, 0]), np.array([1.0])) == 1.0
    assert saturation(arr([0, 0, 0]), np.array([1.0, 0.001])) == 1.0  # idle workers do not count
    assert saturation(arr([0, 1, 1, 1]), np.array([3.0, 3.0])) == pytest.approx(4.0)


def test_integer_dtypes_and_lists_are_accepted() -> None:
    assert load_excess(np.array([0, 1], dtype=np.int32), 2) == LoadExcess(final=0.0, average=0.25 / 2)
    assert memory(np.array([0, 0], dtype=np.uint8), [0, 1], 2, 1) == 2.0
    assert latency(np.array([0]), np.array([2]), 1).mean == 0.5


# ---------------------------------------------------------------- bad inputs


W = arr([0, 1, 1])
R = np.array([1.0, 2.0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: load_excess(W, 0), r"^n must be an integer in \[1, inf\)"),
        (lambda: load_excess(W, True), r"^n must be"),
        (lambda: load_std(W, 1), r"^workers must hold ids in \[0, n - 1 = 0\]"),
        (lambda: load_excess(arr([0, -1]), 2), r"^workers must hold ids in \[0, n - 1 = 1\]"),
        (lambda: load_excess(np.array([0.0, 1.0]), 2), r"^workers must be an integer array"),
        (lambda: load_excess(np.array([True]), 2), r"^workers must be an integer array"),
        (lambda: load_excess(arr([]), 2), r"^workers must be a non-empty 1-d array"),
        (lambda: load_excess(arr([[0, 1]]), 2), r"^workers must be a non-empty 1-d array"),
        (lambda: memory(arr([0, 1, 2]), W, 2, 2), r"^key_ids must hold ids in \[0, distinct - 1 = 1\]"),
        (lambda: memory(arr([0, -1, 0]), W, 2, 2), r"^key_ids must hold ids in \[0, distinct - 1 = 1\]"),
        (lambda: memory(np.array([0.0, 0, 0]), W, 2, 2), r"^key_ids must be an integer array"),
        (lambda: memory(arr([0, 0]), W, 2, 2), r"^key_ids must have one entry per entry of workers"),
        (lambda: memory(arr([0, 0, 0]), W, 2, 0), r"^distinct must be an integer in \[1, inf\)"),
        (lambda: memory(arr([0, 0, 0]), W, 1, 1), r"^workers must hold ids in \[0, n - 1 = 0\]"),
        (lambda: latency(W, np.array([1.0, 0.0]), 1.0), r"^rates must be finite numbers > 0"),
        (lambda: latency(W, np.array([1.0, -2.0]), 1.0), r"^rates must be finite numbers > 0"),
        (lambda: latency(W, np.array([1.0, np.nan]), 1.0), r"^rates must be finite numbers > 0"),
        (lambda: latency(W, np.array([1.0, np.inf]), 1.0), r"^rates must be finite numbers > 0"),
        (lambda: latency(W, np.array([], dtype=float), 1.0), r"^rates must be a non-empty 1-d array"),
        (lambda: latency(W, np.array(["a", "b"]), 1.0), r"^rates must be a real array"),
        (lambda: latency(W, np.array([1.0]), 1.0), r"^workers must hold ids in \[0, n - 1 = 0\]"),
        (lambda: latency(W, R, 0.0), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: latency(W, R, -1.0), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: latency(W, R, math.nan), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: latency(W, R, math.inf), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: latency(W, R, "1"), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: saturation(W, np.array([1.0, 0.0])), r"^rates must be finite numbers > 0"),
        (lambda: saturation(np.array([0.5]), R), r"^workers must be an integer array"),
        (lambda: evaluate(W, W, 2, 2, np.ones(3), 1.0), r"^rates must have length n = 2, got 3"),
        (lambda: evaluate(W, W, 2, 2, np.array([1.0, np.nan]), 1.0), r"^rates must be finite numbers > 0"),
        (lambda: evaluate(W, W, 2, 2, R, 0), r"^arrival_rate must be a number in \(0, inf\)"),
        (lambda: evaluate(arr([0, 5, 0]), W, 2, 2, R, 1.0), r"^key_ids must hold ids"),
        (lambda: evaluate(arr([0]), W, 2, 2, R, 1.0), r"^key_ids must have one entry per entry of workers"),
        (lambda: evaluate(W, arr([0, 2, 0]), 2, 2, R, 1.0), r"^workers must hold ids in \[0, n - 1 = 1\]"),
        (lambda: evaluate(W, W, 0, 2, R, 1.0), r"^n must be an integer in \[1, inf\)"),
    ],
)
def test_bad_inputs(call: Callable[[], object], match: str) -> None:
    with pytest.raises(InvalidInput, match=match) as excinfo:
        call()
    assert excinfo.value.field == match.removeprefix("^").split()[0]
