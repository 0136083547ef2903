"""The sliding estimate (DESIGN §3): merged snapshots against LossyCounter.merge and exact counts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from functools import reduce
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.controller.window import merge_snapshots, window_size
from repart.errors import InvalidInput
from repart.partitioning.domain import KeyType
from repart.partitioning.frequency import LossyCounter
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.protocol.snapshot import CounterEntry, Snapshot
from tests.factories import REGION, START, counted_snapshot

SLOT_BITS = 10


def count_windows(
    chunks: Sequence[Sequence[Any]], epsilon: float, key_type: KeyType = "int"
) -> tuple[list[LossyCounter], list[Snapshot]]:
    """For each chunk, as window seq 1, 2, ...: a lossy counter that counted it (the reference) and the
    snapshot a job emits for it (``counted_snapshot``, with the window's exact slot counts)."""
    counters, snapshots = [], []
    for seq, chunk in enumerate(chunks, start=1):
        counter = LossyCounter(epsilon, key_type)
        counter.update(list(chunk))
        counters.append(counter)
        snapshots.append(
            counted_snapshot(
                REGION, seq, chunk, key_type=key_type, epsilon=epsilon, slot_bits=SLOT_BITS, slots=True
            )
        )
    return counters, snapshots


def skewed_stream(rng: random.Random, length: int, domain: int) -> list[int]:
    """Keys 0..domain-1 with Zipf-like weights 1/(rank + 1)."""
    return rng.choices(range(domain), weights=[1 / (rank + 1) for rank in range(domain)], k=length)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(0, 600), min_size=1, max_size=4),
    domain=st.integers(1, 300),
    epsilon=st.sampled_from([0.005, 0.01, 0.05, 0.1, 0.3]),
)
def test_merge_matches_lossy_counter_merge_and_exact_counts(
    seed: int, sizes: list[int], domain: int, epsilon: float
) -> None:
    rng = random.Random(seed)
    chunks = [skewed_stream(rng, size, domain) for size in sizes]
    counters, snapshots = count_windows(chunks, epsilon)
    rng.shuffle(snapshots)  # the merge orders by seq itself
    merged = merge_snapshots(snapshots)

    reference = reduce(LossyCounter.merge, counters).estimate()
    assert merged.keys == reference.keys
    np.testing.assert_array_equal(merged.counts, reference.counts)

    stream = [key for chunk in chunks for key in chunk]
    exact = Counter(stream)
    bound = epsilon * len(stream)
    assert merged.total == len(stream)
    assert merged.epsilon == epsilon
    assert merged.key_type == "int"
    estimated = merged.count_of()
    for key, true in exact.items():
        if true > bound:
            assert key in estimated
        if key in estimated:
            assert true - bound <= estimated[key] <= true
    assert set(estimated) <= set(exact)

    slots = slots_of_hashes(hash_keys(np.array(stream, dtype=np.int64)), SLOT_BITS)
    expected_slots = np.bincount(slots, minlength=1 << SLOT_BITS)
    assert merged.slot_counts is not None
    np.testing.assert_array_equal(merged.slot_counts, expected_slots)
    assert merged.slot_bits == SLOT_BITS
    assert merged.distinct_estimate == max(len(merged.keys), *(len(set(chunk)) for chunk in chunks))


def test_str_keys_merge_like_lossy_counters() -> None:
    rng = random.Random(7)
    words = ["", "a", "b", "ä", "zz", "longer key than fifteen bytes", "x\x00"]
    chunks = [rng.choices(words, weights=range(1, 8), k=200) for _ in range(3)]
    counters, snapshots = count_windows(chunks, 0.02, "str")
    merged = merge_snapshots(snapshots)
    reference = reduce(LossyCounter.merge, counters).estimate()
    assert merged.keys == reference.keys
    np.testing.assert_array_equal(merged.counts, reference.counts)
    assert merged.key_type == "str"


def test_absent_keys_get_the_closed_buckets_as_delta_and_stale_entries_drop() -> None:
    # epsilon 0.1: bucket width 10. Window 1 counts 25 tuples, window 2 counts 15 (hand-traced tables).
    first = [1] * 20 + [2] * 4 + [9]  # entries 1: (20, 0), 2: (4, 2), 9: (1, 2)
    second = [3] * 12 + [2] * 3  # entries 3: (12, 0), 2: (3, 1)
    counters, snapshots = count_windows([first, second], 0.1)
    assert {k: (int(c), int(d)) for k, c, d in zip(*counters[0].entries(), strict=True)} == {
        1: (20, 0),
        2: (4, 2),
        9: (1, 2),
    }
    merged = merge_snapshots(snapshots)
    # Merged (count, delta), absent in window 1 adding floor(25/10) = 2, in window 2 floor(15/10) = 1:
    # 1: (20, 1), 2: (7, 3), 3: (12, 2), 9: (1, 3); floor(40/10) = 4 drops 9 (1 + 3 <= 4).
    assert merged.count_of() == {1: 20.0, 2: 7.0, 3: 12.0}
    assert merged.keys == reduce(LossyCounter.merge, counters).estimate().keys
    assert merged.total == 40


def test_exact_snapshots_add_counts_and_keep_every_key() -> None:
    exact = [
        counted_snapshot(REGION, seq, chunk, key_type="int", epsilon=0.0)
        for seq, chunk in enumerate([[1, 1, 2], [2, 3]], start=1)
    ]
    counted = [{entry.key: (entry.count, entry.delta) for entry in snapshot.items} for snapshot in exact]
    assert counted == [{1: (2, 0), 2: (1, 0)}, {2: (1, 0), 3: (1, 0)}]
    merged = merge_snapshots(exact)
    assert merged.count_of() == {1: 2.0, 2: 2.0, 3: 1.0}
    assert (merged.total, merged.epsilon) == (5, 0.0)


def test_one_snapshot_merges_to_its_own_estimate() -> None:
    _, [snapshot] = count_windows([skewed_stream(random.Random(3), 500, 50)], 0.01)
    merged, own = merge_snapshots([snapshot]), snapshot.to_estimate()
    assert merged.keys == own.keys
    np.testing.assert_array_equal(merged.counts, own.counts)
    assert merged.slot_counts is not None and own.slot_counts is not None
    np.testing.assert_array_equal(merged.slot_counts, own.slot_counts)
    assert (merged.total, merged.distinct_estimate) == (own.total, own.distinct_estimate)


def test_slot_counts_are_absent_when_any_snapshot_lacks_them() -> None:
    _, snapshots = count_windows([[1, 2], [3]], 0.1)
    without = counted_snapshot(REGION, 2, [3], key_type="int", epsilon=0.1, slot_bits=SLOT_BITS)
    assert snapshots[1].slots is not None and without.slots is None
    assert merge_snapshots([snapshots[0], without]).slot_counts is None


def other(snapshot: Snapshot, **changes: Any) -> Snapshot:
    """``snapshot`` as window seq 2 (the next minute) with fields replaced by ``changes``."""
    fields = {
        "seq": 2,
        "window_start": snapshot.window_end,
        "window_end": snapshot.window_end + timedelta(minutes=1),
        **changes,
    }
    return Snapshot(**{**snapshot.__dict__, **fields})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"region": "orders"}, "region"),
        ({"key_type": "str", "items": ()}, "key_type"),
        ({"slot_bits": 12, "slots": None}, "slot_bits"),
        ({"seq": 1}, "seq"),
        ({"window_start": START + timedelta(seconds=90)}, "overlap"),
    ],
)
def test_incompatible_snapshots_are_rejected(changes: dict[str, Any], field: str) -> None:
    _, [snapshot] = count_windows([[1, 2, 2]], 0.01)
    with pytest.raises(InvalidInput, match=field) as excinfo:
        merge_snapshots([snapshot, other(snapshot, **changes)])
    assert excinfo.value.field == "snapshots"


def test_windows_before_a_change_of_epsilon_leave_the_estimate() -> None:
    counters, [first, second] = count_windows([[1, 2, 2], [3, 3, 1]], 0.01)
    exact = LossyCounter(0.0, "int")
    exact.update([4, 4, 4, 5])
    entries = exact.entries()
    changed = other(
        second,
        seq=2,
        epsilon=0.0,
        tuples=exact.n,
        items=tuple(CounterEntry(int(k), int(c), 0) for k, c in zip(entries[0], entries[1], strict=True)),
        slots=None,
        window_start=START + timedelta(minutes=2),
        window_end=START + timedelta(minutes=3),
    )
    merged = merge_snapshots([first, second, changed])
    assert (merged.total, merged.epsilon, dict(zip(merged.keys, merged.counts.tolist(), strict=True))) == (
        4,
        0.0,
        {4: 3.0, 5: 1.0},
    )
    assert merge_snapshots([first, second]).total == counters[0].n + counters[1].n


def test_gaps_between_windows_are_allowed_and_empty_input_is_rejected() -> None:
    _, [snapshot] = count_windows([[1, 2, 2]], 0.01)
    later = other(
        snapshot, seq=5, window_start=START + timedelta(hours=1), window_end=START + timedelta(hours=2)
    )
    assert merge_snapshots([snapshot, later]).total == 6
    with pytest.raises(InvalidInput, match="at least one snapshot") as excinfo:
        merge_snapshots([])
    assert excinfo.value.field == "snapshots"


def test_window_size() -> None:
    assert window_size(3) == 2
    assert window_size(2) == 1
    for bad in (1, 0, True, 2.5):
        with pytest.raises(InvalidInput, match="x") as excinfo:
            window_size(bad)  # type: ignore[arg-type]
        assert excinfo.value.field == "x"
