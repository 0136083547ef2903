"""LossyCounter and SlidingWindow against independent oracles.

Oracles: a dict-based lossy counter that processes one key at a time, written straight from Manku &
Motwani (2002) and Gedik §4.1.2; exact counts (collections.Counter); and the paper's guarantees.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning import frequency
from repart.partitioning.domain import INT64_MAX, INT64_MIN
from repart.partitioning.frequency import FrequencyEstimate, LossyCounter, SlidingWindow

Table = dict[Any, tuple[int, int]]


class ReferenceLossyCounter:
    """Lossy counting one key at a time, as Manku & Motwani (2002) state it."""

    def __init__(self, epsilon: float, n: int = 0, table: Table | None = None) -> None:
        self.width = math.ceil(1 / epsilon)
        self.n = n
        self.table: dict[Any, list[int]] = {key: [c, d] for key, (c, d) in (table or {}).items()}

    def add(self, key: Any) -> None:
        self.n += 1
        bucket = math.ceil(self.n / self.width)
        if key in self.table:
            self.table[key][0] += 1
        else:
            self.table[key] = [1, bucket - 1]
        if self.n % self.width == 0:
            for stale in [k for k, (count, delta) in self.table.items() if count + delta <= bucket]:
                del self.table[stale]

    def entries(self) -> Table:
        return {key: (count, delta) for key, (count, delta) in self.table.items()}


def table_of(counter: LossyCounter) -> Table:
    keys, counts, deltas = counter.entries()
    rows = zip(keys.tolist(), counts.tolist(), deltas.tolist(), strict=True)
    return {key: (count, delta) for key, count, delta in rows}


def feed(
    counter: LossyCounter | SlidingWindow, stream: Sequence[Any], cuts: Sequence[int], as_array: bool
) -> None:
    """Feed ``stream`` in batches split at ``cuts``, as lists or as numpy arrays."""
    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    for lo, hi in pairwise(bounds):
        part = list(stream[lo:hi])
        if as_array and part and isinstance(part[0], int):
            counter.update(np.array(part, dtype=np.int64))
        elif as_array:
            counter.update(np.array(part, dtype=np.dtypes.StringDType()))
        else:
            counter.update(part)


def summary(estimate: FrequencyEstimate) -> tuple[Any, ...]:
    """The comparable content of an estimate (its counts are an array)."""
    return estimate.keys, estimate.counts.tolist(), estimate.total, estimate.epsilon, estimate.key_type


def assert_guarantees(counter: LossyCounter, truth: Counter[Any]) -> None:
    """count <= true <= count + delta, delta <= eps*n, and absent keys occurred at most floor(n/w) times."""
    table = table_of(counter)
    bound = counter.n // counter.bucket_width
    assert bound <= counter.error_bound + 1e-9
    for key, (count, delta) in table.items():
        assert count <= truth[key] <= count + delta, (key, count, delta, truth[key])
        assert 0 <= delta <= bound
    for key, true in truth.items():
        if key not in table:
            assert true <= bound, (key, true, bound)


EPSILONS = st.sampled_from([0.5, 1 / 3, 0.25, 0.1, 0.07, 0.05]) | st.floats(0.02, 0.99)
INT_KEYS = st.integers(-3, 8) | st.sampled_from([INT64_MIN, INT64_MAX])
STR_KEYS = st.sampled_from(
    ["", "a", "b", "ab", "é", "a\x00", "\uffff", "\U0001f600", "long key " * 3, "long key " * 4]
)


@settings(max_examples=300, deadline=None)
@given(
    epsilon=EPSILONS,
    stream=st.lists(INT_KEYS, max_size=150) | st.lists(STR_KEYS, max_size=150),
    cuts=st.lists(st.integers(0, 150), max_size=8),
    as_array=st.booleans(),
)
def test_batched_state_equals_item_by_item(
    epsilon: float, stream: list[Any], cuts: list[int], as_array: bool
) -> None:
    counter = LossyCounter(epsilon)
    feed(counter, stream, cuts, as_array)
    reference = ReferenceLossyCounter(epsilon)
    for key in stream:
        reference.add(key)
    assert table_of(counter) == reference.entries()
    assert counter.n == reference.n == len(stream)
    assert len(counter) == len(reference.table)
    keys = counter.entries()[0].tolist()
    assert keys == sorted(keys)
    assert_guarantees(counter, Counter(stream))


@pytest.mark.parametrize(
    ("epsilon", "alphabet", "batch"),
    [
        (0.01, 500, 5_000),  # batches span 50 buckets over many keys: events grouped by sorting
        (0.002, 50, 3_000),  # few keys: events grouped by a histogram
        (0.003, 2_000, 777),  # batches not aligned to buckets
    ],
)
def test_batched_equals_item_by_item_on_long_streams(epsilon: float, alphabet: int, batch: int) -> None:
    rng = np.random.default_rng(7)
    stream = np.where(
        rng.random(20_000) < 0.5,
        np.minimum(rng.zipf(1.2, 20_000), alphabet),
        rng.integers(0, alphabet, 20_000),
    )
    counter = LossyCounter(epsilon)
    for start in range(0, len(stream), batch):
        counter.update(stream[start : start + batch])
    reference = ReferenceLossyCounter(epsilon)
    for key in stream.tolist():
        reference.add(key)
    assert table_of(counter) == reference.entries()


def test_batched_equals_item_by_item_on_a_long_str_stream() -> None:
    # Names longer than 15 bytes: numpy's StringDType stores those out of line, and its searchsorted
    # misreads them (numpy#31533, numpy 2.4), which silently broke an earlier version of the counter.
    rng = np.random.default_rng(9)
    stream = [f"a-much-longer-key-name-{key}" for key in np.minimum(rng.zipf(1.2, 30_000), 10**6).tolist()]
    counter = LossyCounter(0.004)
    for start in range(0, len(stream), 1_000):
        counter.update(stream[start : start + 1_000])
    reference = ReferenceLossyCounter(0.004)
    for key in stream:
        reference.add(key)
    assert table_of(counter) == reference.entries()
    assert len(counter._code_of) == len(counter)  # the str -> code map holds just the table's keys


def test_huge_batches_are_absorbed_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frequency, "_MAX_CHUNK", 7)
    stream = [k % 5 if k % 3 else k for k in range(300)]
    counter = LossyCounter(0.05)
    counter.update(stream)
    reference = ReferenceLossyCounter(0.05)
    for key in stream:
        reference.add(key)
    assert table_of(counter) == reference.entries()


def test_keys_stay_exact() -> None:
    """Str keys are not truncated, NUL-stripped or hashed; int keys keep all 64 bits."""
    strs = ["a", "a\x00", "a\x00\x00", "x" * 1_000, "é", "\U0001f600"]
    counter = LossyCounter(0.001)
    counter.update(strs * 3)
    assert table_of(counter) == {key: (3, 0) for key in strs}
    ints = LossyCounter(0.001)
    ints.update(np.array([INT64_MIN, INT64_MAX, -1, 0], dtype=np.int64))
    numpy_scalars: list[Any] = [np.int64(-1), INT64_MAX, np.uint64(7)]
    ints.update(numpy_scalars)
    assert table_of(ints) == {INT64_MIN: (1, 0), -1: (2, 0), 0: (1, 0), 7: (1, 0), INT64_MAX: (2, 0)}


def zipf_stream(seed: int, size: int, exponent: float = 1.3, shift: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(exponent, size), 10**9).astype(np.int64) + shift


@pytest.mark.parametrize("epsilon", [1e-3, 4e-3])
def test_zipf_stream_against_exact_counts(epsilon: float) -> None:
    stream = zipf_stream(1, 200_000)
    counter = LossyCounter(epsilon)
    for start in range(0, len(stream), 9_999):
        counter.update(stream[start : start + 9_999])
    truth = Counter(stream.tolist())
    n = len(stream)
    assert counter.n == n
    assert counter.error_bound == pytest.approx(epsilon * n)
    assert_guarantees(counter, truth)
    for delta in (0.002, 0.01, 0.05):
        if delta <= epsilon:
            continue
        found = counter.frequent(delta)
        counts = found.count_of()
        assert {key for key, true in truth.items() if true >= delta * n} <= set(counts)
        for key, count in counts.items():
            assert truth[key] - epsilon * n <= count <= truth[key]
            assert truth[key] >= (delta - epsilon) * n
        assert found.total == n and found.epsilon == epsilon and found.key_type == "int"


@pytest.mark.parametrize(
    ("name", "stream"),
    [
        ("zipf", zipf_stream(2, 100_000, exponent=1.1)),
        ("uniform", np.random.default_rng(3).integers(0, 20_000, 100_000)),
        ("all distinct", np.arange(100_000)),
    ],
)
def test_space_bound(name: str, stream: np.ndarray[Any, Any]) -> None:
    """At most w * H_B <= w * (1 + ln B) entries after B bucket closes, plus this bucket's arrivals.

    Manku & Motwani's bound (1/eps) * log(eps * n) comes from the same count, sum_{i<=B} w / i, with
    the harmonic number H_B taken as log B; H_B <= 1 + ln B, so the honest bound adds one bucket, w.
    """
    epsilon = 0.002
    counter = LossyCounter(epsilon)
    w = counter.bucket_width
    rng = np.random.default_rng(4)
    start = 0
    while start < len(stream):
        step = int(rng.integers(1, 3 * w))
        counter.update(stream[start : start + step])
        start += step
        closed = counter.n // w
        if closed >= 1:
            assert len(counter) <= w * (1 + math.log(closed)) + (counter.n - closed * w), name


def test_frequent_and_estimate_on_a_small_stream() -> None:
    counter = LossyCounter(0.1)  # w = 10
    counter.update(["a"] * 12 + ["b"] * 5 + ["c"] * 3)  # n = 20; buckets close at 10 and 20
    assert table_of(counter) == {"a": (12, 0), "b": (5, 1), "c": (3, 1)}
    assert counter.frequent(0.5).count_of() == {"a": 12.0}  # count >= (0.5 - 0.1) * 20 = 8
    assert counter.frequent(0.3).count_of() == {"a": 12.0, "b": 5.0}  # count >= 4
    everything = counter.estimate(distinct_estimate=10)
    assert everything.keys == ("a", "b", "c")
    assert everything.distinct_estimate == 10
    assert everything.total == 20
    np.testing.assert_array_equal(everything.frequencies, [0.6, 0.25, 0.15])


def test_frequent_threshold_is_inclusive() -> None:
    counter = LossyCounter(0.25)  # w = 4, exact binary arithmetic
    counter.update(["a"] * 8 + ["b"] * 4 + ["c"] * 4)  # n = 16
    assert table_of(counter) == {"a": (8, 0), "b": (4, 2), "c": (4, 3)}
    assert counter.frequent(0.5).keys == ("a", "b", "c")  # count >= (0.5 - 0.25) * 16 = 4
    assert counter.frequent(0.5 + 2**-10).keys == ("a",)


def test_entries_are_copies() -> None:
    counter = LossyCounter(0.1)
    counter.update([5, 5, 6])
    keys, counts, deltas = counter.entries()
    keys[0], counts[0], deltas[0] = 9, 100, 100
    assert table_of(counter) == {5: (2, 0), 6: (1, 0)}


def test_empty_counter() -> None:
    counter = LossyCounter(0.25)
    counter.update([])
    counter.update(np.array([], dtype=np.int64))
    assert counter.n == 0 and len(counter) == 0 and counter.key_type is None
    assert summary(counter.estimate()) == ((), [], 0, 0.25, None)
    assert counter.bucket_width == 4 and counter.epsilon == 0.25


def merged_truth(*streams: Sequence[Any]) -> Counter[Any]:
    truth: Counter[Any] = Counter()
    for stream in streams:
        truth.update(stream)
    return truth


@settings(max_examples=150, deadline=None)
@given(
    epsilon=EPSILONS,
    keys=st.sampled_from([INT_KEYS, STR_KEYS]),
    data=st.data(),
)
def test_merge_keeps_the_guarantees(
    epsilon: float, keys: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    streams = data.draw(st.lists(st.lists(keys, max_size=80), min_size=2, max_size=4))
    more = data.draw(st.lists(keys, max_size=80))
    counters = []
    for stream in streams:
        counter = LossyCounter(epsilon)
        counter.update(stream)
        counters.append(counter)
    merged = counters[0]
    for counter in counters[1:]:
        merged = merged.merge(counter)
    assert merged.n == sum(map(len, streams))
    assert merged.error_bound == pytest.approx(sum(c.error_bound for c in counters))
    assert_guarantees(merged, merged_truth(*streams))
    # A merged counter counts on as a lossy counter of the concatenation: exactly like the
    # item-by-item algorithm started from the merged table, and with the same guarantees.
    reference = ReferenceLossyCounter(epsilon, merged.n, table_of(merged))
    merged.update(more)
    for key in more:
        reference.add(key)
    assert table_of(merged) == reference.entries()
    assert_guarantees(merged, merged_truth(*streams, more))


def test_merge_of_zipf_streams_against_exact_counts() -> None:
    epsilon = 1e-3
    first = zipf_stream(5, 120_000)
    second = zipf_stream(6, 70_001, exponent=1.5, shift=3)  # other popular keys, n not bucket-aligned
    one, two = LossyCounter(epsilon), LossyCounter(epsilon)
    one.update(first)
    two.update(second)
    merged = one.merge(two)
    n = len(first) + len(second)
    truth = merged_truth(first.tolist(), second.tolist())
    assert merged.n == n
    assert merged.error_bound == pytest.approx(epsilon * n)
    assert_guarantees(merged, truth)
    for key, count in table_of(merged).items():
        assert truth[key] - epsilon * n <= count[0] <= truth[key]
    for delta in (0.002, 0.01):
        assert {key for key, true in truth.items() if true >= delta * n} <= set(merged.frequent(delta).keys)
    assert table_of(two.merge(one)) == table_of(merged)
    assert table_of(one) == table_of(one.merge(LossyCounter(epsilon)))  # inputs unchanged, empty is neutral


def test_merge_counts_an_absent_key_as_up_to_the_closed_buckets() -> None:
    """At a bucket close a deleted key may have occurred b times, one more than b_current - 1."""
    one, two = LossyCounter(0.5), LossyCounter(0.5)  # w = 2
    one.update(["x"])  # x: count 1, delta 0
    two.update(["x", "y"])  # the bucket closes; x (1 + 0 <= 1) and y are deleted
    assert table_of(two) == {}
    merged = one.merge(two)
    assert table_of(merged) == {"x": (1, 1)}  # true count 2 <= 1 + 1


def test_merge_rejects_mismatches() -> None:
    with pytest.raises(InvalidInput, match="epsilon") as excinfo:
        LossyCounter(0.1).merge(LossyCounter(0.2))
    assert excinfo.value.field == "other"
    ints, strs = LossyCounter(0.1), LossyCounter(0.1)
    ints.update([1])
    strs.update(["a"])
    with pytest.raises(InvalidInput, match="key_type") as excinfo:
        ints.merge(strs)
    assert excinfo.value.field == "other"
    with pytest.raises(InvalidInput, match="LossyCounter") as excinfo:
        ints.merge(Counter())  # type: ignore[arg-type]
    assert excinfo.value.field == "other"


def drifting_stream(windows: int, width: int, seed: int) -> list[int]:
    """Each tumbling window has its own ten hot keys (2/3 of the tuples) over a shared tail."""
    rng = np.random.default_rng(seed)
    stream: list[int] = []
    for window in range(windows):
        hot = rng.integers(1_000 * window, 1_000 * window + 10, size=2 * width // 3)
        tail = rng.integers(100_000, 100_300, size=width - len(hot))
        part = np.concatenate([hot, tail])
        rng.shuffle(part)
        stream.extend(part.tolist())
    return stream


@pytest.mark.parametrize(("window", "counters"), [(600, 3), (1_000, 4), (900, 2)])
def test_sliding_window_reflects_only_the_last_closed_windows(window: int, counters: int) -> None:
    epsilon = 0.01
    sliding = SlidingWindow(epsilon, window, counters)
    width = sliding.tumbling_width
    assert width == math.ceil(window / (counters - 1))
    stream = drifting_stream(6, width, seed=counters)
    rng = np.random.default_rng(8)
    cuts = rng.integers(0, len(stream), size=5).tolist()  # batches spanning several windows
    feed(sliding, stream, cuts, as_array=True)

    recent = stream[(6 - (counters - 1)) * width :]
    truth: Counter[Any] = Counter(recent)
    estimate = sliding.estimate()
    n = estimate.total
    assert n == len(recent) == sliding.tuples_covered == (counters - 1) * width
    assert window <= n <= (1 + 1 / (counters - 1)) * window
    assert sliding.counters_in_use == counters - 1
    for key, count in estimate.count_of().items():
        assert truth[key] - epsilon * n <= count <= truth[key]  # keys of older windows are gone
    threshold = 0.03
    assert {key for key, true in truth.items() if true >= threshold * n} <= set(
        sliding.estimate(threshold).keys
    )
    # The estimate is the merge of counters over exactly those tumbling windows.
    parts = []
    for start in range(0, len(recent), width):
        part = LossyCounter(epsilon)
        part.update(recent[start : start + width])
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    assert summary(sliding.estimate()) == summary(merged.estimate())

    # The open window's tuples join the estimate only when it closes.
    sliding.update(stream[: width - 1])
    assert summary(sliding.estimate()) == summary(estimate)
    sliding.update(stream[width - 1 : width])
    assert summary(sliding.estimate()) != summary(estimate)
    assert sliding.tuples_covered == (counters - 1) * width


def test_sliding_window_warm_up() -> None:
    sliding = SlidingWindow(0.05, window=100)  # x = 3: tumbling windows of 50 tuples
    assert sliding.counters_in_use == 0 and sliding.tuples_covered == 0
    stream = drifting_stream(3, 50, seed=1)
    sliding.update(stream[:30])  # nothing closed: the open counter
    assert sliding.counters_in_use == 0
    assert sliding.estimate().total == 30
    assert summary(sliding.estimate()) == summary(counter_over(0.05, stream[:30]).estimate())
    sliding.update(stream[30:70])  # one window closed
    assert sliding.counters_in_use == 1
    assert summary(sliding.estimate()) == summary(counter_over(0.05, stream[:50]).estimate())
    sliding.update(stream[70:150])  # two closed: warmed up
    assert sliding.counters_in_use == 2 and sliding.tuples_covered == 100
    assert sliding.estimate().count_of().keys() <= set(stream[50:150])


def counter_over(epsilon: float, stream: Sequence[Any]) -> LossyCounter:
    counter = LossyCounter(epsilon)
    counter.update(stream)
    return counter


def test_sliding_window_keeps_one_key_type() -> None:
    sliding = SlidingWindow(0.1, window=4)
    sliding.update(["a", "b", "c", "d", "e"])
    with pytest.raises(InvalidInput, match="key_type"):
        sliding.update([1])
    typed = SlidingWindow(0.1, window=4, key_type="int")
    with pytest.raises(InvalidInput, match="key_type"):
        typed.update(["a"])


@pytest.mark.parametrize("epsilon", [1, -0.1, 1.5, float("nan"), "0.1", True, None])
def test_bad_epsilon(epsilon: Any) -> None:
    with pytest.raises(InvalidInput, match=r"epsilon.*\[0, 1\)") as excinfo:
        LossyCounter(epsilon)
    assert excinfo.value.field == "epsilon"
    with pytest.raises(InvalidInput, match=r"epsilon.*\[0, 1\)") as excinfo:
        SlidingWindow(epsilon, window=10)
    assert excinfo.value.field == "epsilon"


@pytest.mark.parametrize(("field", "kwargs"), [
    ("window", {"window": 0}),
    ("window", {"window": -5}),
    ("window", {"window": 2.5}),
    ("window", {"window": True}),
    ("counters", {"window": 10, "counters": 1}),
    ("counters", {"window": 10, "counters": 0}),
    ("counters", {"window": 10, "counters": 3.0}),
    ("key_type", {"window": 10, "key_type": "float"}),
])  # fmt: skip
def test_bad_sliding_window_parameters(field: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        SlidingWindow(0.1, **kwargs)
    assert excinfo.value.field == field


@pytest.mark.parametrize(
    "keys",
    [
        [1, "a"],
        ["a", 1],
        [1.5],
        [1, 2.0],
        [None],
        [True],
        ["a", False],
        [b"ab"],
        np.array([1.0, 2.0]),
        np.array([True]),
        np.array([[1, 2]]),
        np.array(["a", 1], dtype=object),
        "abc",
        [2**63],
        [INT64_MIN - 1],
        [np.uint64(2**63)],
        np.array([2**64 - 1], dtype=np.uint64),
    ],
)
def test_bad_keys(keys: Any) -> None:
    counter = LossyCounter(0.1)
    counter.update([3, 4])
    with pytest.raises(InvalidInput, match="keys"):
        counter.update(keys)
    assert counter.n == 2 and table_of(counter) == {3: (1, 0), 4: (1, 0)}  # nothing half-counted
    with pytest.raises(InvalidInput, match="keys"):
        SlidingWindow(0.1, window=10).update(keys)


def test_key_type_is_fixed() -> None:
    with pytest.raises(InvalidInput, match="key_type"):
        LossyCounter(0.1, key_type="float")  # type: ignore[arg-type]
    counter = LossyCounter(0.1, key_type="str")
    with pytest.raises(InvalidInput, match="key_type"):
        counter.update(np.array([1, 2]))
    counter = LossyCounter(0.1)
    counter.update([1])
    with pytest.raises(InvalidInput, match="key_type"):
        counter.update(["a"])
    assert counter.key_type == "int"


@pytest.mark.parametrize("threshold", [-0.1, 1.1, float("nan"), None, "0.5"])
def test_bad_threshold(threshold: Any) -> None:
    with pytest.raises(InvalidInput, match="threshold") as excinfo:
        LossyCounter(0.1).frequent(threshold)
    assert excinfo.value.field == "threshold"


@settings(max_examples=100, deadline=None)
@given(epsilon=EPSILONS, keys=st.sampled_from([INT_KEYS, STR_KEYS]), data=st.data())
def test_from_entries_rebuilds_a_counter_that_counts_on_identically(
    epsilon: float, keys: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    stream, more = data.draw(st.lists(keys, max_size=120)), data.draw(st.lists(keys, max_size=60))
    original = LossyCounter(epsilon)
    original.update(stream)
    shipped = [array.tolist() for array in original.entries()]
    rebuilt = LossyCounter.from_entries(epsilon, original.n, *shipped, key_type=original.key_type)
    assert table_of(rebuilt) == table_of(original)
    assert rebuilt.n == original.n and rebuilt.key_type == original.key_type
    original.update(more)
    rebuilt.update(more)
    assert table_of(rebuilt) == table_of(original)


def test_from_entries_rejects_tables_no_counter_can_hold() -> None:
    bad_tables = [
        ("keys", "distinct", (0.1, 10, [1, 1], [1, 1], [0, 0])),
        ("deltas", r"\[0, 1\]", (0.1, 10, [1], [1], [2])),  # floor(10 / 10) = 1 closed bucket
        ("counts", "counts must be integers >= 1", (0.1, 10, [1], [0], [0])),
        ("counts", "at most n", (0.1, 3, ["a", "b"], [2, 2], [0, 0])),
        ("counts", "one entry per key", (0.1, 3, ["a", "b"], [1], [0, 0])),
        ("n", "n must be", (0.1, -1, [], [], [])),
    ]
    for field, message, arguments in bad_tables:
        with pytest.raises(InvalidInput, match=message) as excinfo:
            LossyCounter.from_entries(*arguments)
        assert excinfo.value.field == field


@given(st.lists(st.integers(0, 20), max_size=300), st.lists(st.integers(0, 20), max_size=300))
def test_an_exact_counter_counts_and_merges_exactly(first: list[int], second: list[int]) -> None:
    counters = []
    for stream in (first, second):
        counter = LossyCounter(0.0, "int")
        counter.update(stream)
        counters.append(counter)
    merged = counters[0].merge(counters[1])
    keys, counts, deltas = merged.entries()
    exact = Counter(first + second)
    assert dict(zip(keys.tolist(), counts.tolist(), strict=True)) == dict(exact)
    assert not deltas.any() and merged.n == len(first) + len(second)
