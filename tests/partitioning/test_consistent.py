"""Slot tables (DESIGN §2): plain-Python oracles, consistency, balance, determinism, validation."""

from __future__ import annotations

import bisect
import hashlib
import os
import subprocess
import sys
from typing import get_args

import mmh3
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning import consistent
from repart.partitioning.consistent import (
    DEFAULT_REPLICAS,
    RING_SEED,
    ConsistentSpec,
    clear_caches,
    jump_hash_array,
    slot_table,
)
from repart.partitioning.domain import DEFAULT_METHOD, ConsistentMethod

MASK64 = 2**64 - 1
seeds = st.integers(0, 2**32 - 1)


def jump_consistent_hash(key: int, n_buckets: int) -> int:
    """Lamping & Veach's C++ code, line by line, with Python floats as its doubles."""
    b, j = -1, 0
    while j < n_buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & MASK64
        j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def splitmix64(state: int) -> int:
    z = (state + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def jump_oracle(n: int, seed: int, slot_bits: int) -> list[int]:
    return [jump_consistent_hash(splitmix64(s ^ seed), n) for s in range(2**slot_bits)]


def ring_oracle(n: int, replicas: int, seed: int, slot_bits: int) -> list[int]:
    """First virtual node at or after each slot start, wrapping; ties to the lower channel."""
    nodes = sorted(
        (mmh3.hash64(f"{c}:{v}", seed, signed=False)[0], c) for c in range(n) for v in range(replicas)
    )
    positions = [position for position, _ in nodes]
    owners = []
    for s in range(2**slot_bits):
        index = bisect.bisect_left(positions, s << (64 - slot_bits))
        owners.append(nodes[index % len(nodes)][1])
    return owners


def prefix_oracle(n: int, slot_bits: int) -> list[int]:
    """Channels join one by one; each earlier channel, lowest id first, keeps ⌊2^S/c⌋ slots, one more
    while the remainder lasts and it has one more to keep, and gives its lowest other slots to the new
    one: lists of slots, one slot at a time."""
    total = 2**slot_bits
    owned = [list(range(total))]
    for joining in range(1, n):
        base, extra = divmod(total, joining + 1)
        taken: list[int] = []
        for slots in owned:
            keep = base + 1 if extra and len(slots) > base else base
            extra -= keep - base
            taken += slots[: len(slots) - keep]
            del slots[: len(slots) - keep]
        owned.append(sorted(taken))
    table = [0] * total
    for channel, slots in enumerate(owned):
        for slot in slots:
            table[slot] = channel
    return table


def test_oracles_reproduce_published_values() -> None:
    # Test vectors shared by jump hash implementations (python-jump-consistent-hash, jmphash-rs).
    vectors = [(1, 1, 0), (42, 57, 43), (0xDEAD10CC, 1, 0), (0xDEAD10CC, 666, 361), (256, 1024, 520)]
    vectors.append((123456, 1000, 984))
    for key, n, bucket in vectors:
        assert jump_consistent_hash(key, n) == bucket
        assert jump_hash_array(np.array([key], dtype=np.uint64), n).tolist() == [bucket]
    assert splitmix64(0) == 0xE220A8397B1DCDAF  # SplitMix64's first output from state 0


@given(st.lists(st.integers(0, MASK64), min_size=1, max_size=50), st.integers(1, 100_000))
def test_jump_hash_array_equals_the_scalar_algorithm(keys: list[int], n: int) -> None:
    result = jump_hash_array(np.array(keys, dtype=np.uint64), n)
    assert result.dtype == np.int32
    assert result.tolist() == [jump_consistent_hash(k, n) for k in keys]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 300), seeds)
def test_jump_table_equals_oracle(n: int, seed: int) -> None:
    table = slot_table(n, ConsistentSpec("jump", seed=seed), 10)
    assert table.tolist() == jump_oracle(n, seed, 10)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 12), st.integers(1, 30), seeds)
def test_ring_table_equals_oracle(n: int, replicas: int, seed: int) -> None:
    table = slot_table(n, ConsistentSpec("ring", replicas=replicas, seed=seed), 10)
    assert table.tolist() == ring_oracle(n, replicas, seed, 10)


def test_ring_node_at_a_slot_start_owns_it_and_ties_go_to_the_lower_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Real mmh3 positions never tie or hit a slot start exactly, so place the nodes by hand.
    def start(slot: int) -> int:
        return slot << 54

    nodes = {0: [start(5), start(100)], 1: [start(50), start(5)]}
    monkeypatch.setattr(
        consistent, "_channel_positions", lambda c, replicas, seed: np.array(nodes[c], dtype=np.uint64)
    )
    slot_table.cache_clear()
    try:
        table = slot_table(2, ConsistentSpec("ring", replicas=2), 10).tolist()
    finally:
        slot_table.cache_clear()
    expected = [0] * 6 + [1] * 45 + [0] * 50 + [0] * 923  # slots 0-5, 6-50, 51-100, 101-1023 (wrap)
    assert table == expected


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 1500), st.integers(10, 11))
def test_prefix_table_equals_oracle(n: int, slot_bits: int) -> None:
    assert slot_table(n, ConsistentSpec("prefix"), slot_bits).tolist() == prefix_oracle(n, slot_bits)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3000), st.integers(10, 16))
def test_prefix_counts_differ_by_at_most_one_and_a_join_takes_each_channels_lowest_slots(
    n: int, slot_bits: int
) -> None:
    before, after = (
        slot_table(n, ConsistentSpec("prefix"), slot_bits),
        slot_table(n + 1, ConsistentSpec("prefix"), slot_bits),
    )
    counts = np.bincount(after, minlength=n + 1)
    assert counts.max() - counts.min() <= 1
    slots = np.arange(2**slot_bits)
    for channel in np.unique(before[after == n]):  # every slot a channel gives is below all it keeps
        owned = before == channel
        assert slots[owned & (after == n)].max() < slots[owned & (after == channel)].min()


def test_prefix_balances_at_the_largest_n_and_slot_bits() -> None:
    table = slot_table(65_536, ConsistentSpec("prefix"), 20)  # the largest N at the most slots
    assert np.bincount(table).tolist() == [16] * 65_536


@given(st.integers(1, 1000), st.integers(10, 14))
def test_mod_table_is_slot_mod_n(n: int, slot_bits: int) -> None:
    table = slot_table(n, ConsistentSpec("mod"), slot_bits)
    assert table.tolist() == [s % n for s in range(2**slot_bits)]


consistent_specs = st.one_of(
    st.builds(ConsistentSpec, st.just("jump"), st.just(DEFAULT_REPLICAS), seeds),
    st.builds(ConsistentSpec, st.just("prefix")),
    st.builds(ConsistentSpec, st.just("ring"), st.integers(1, 200), seeds),
)


@settings(max_examples=40, deadline=None)
@given(consistent_specs, st.integers(1, 40), st.integers(10, 12))
def test_growing_moves_slots_only_to_the_new_channel(spec: ConsistentSpec, n: int, slot_bits: int) -> None:
    before, after = slot_table(n, spec, slot_bits), slot_table(n + 1, spec, slot_bits)
    moved = before != after
    assert np.all(after[moved] == n)  # N → N+1: every moved slot goes to channel N
    assert np.array_equal(moved, after == n)  # N+1 → N: exactly channel N's slots move


def test_mod_is_not_consistent() -> None:
    before, after = slot_table(10, ConsistentSpec("mod"), 16), slot_table(11, ConsistentSpec("mod"), 16)
    assert np.mean(before != after) > 0.8


def slot_counts(method: ConsistentMethod, n: int) -> npt.NDArray[np.int64]:
    return np.bincount(slot_table(n, ConsistentSpec(method), 16), minlength=n)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 10, 16, 32, 64, 100, 1000])
def test_jump_balance_is_binomial(n: int) -> None:
    counts = slot_counts("jump", n)
    mean = 2**16 / n
    sd = np.sqrt(2**16 * (1 / n) * (1 - 1 / n))
    assert np.all(np.abs(counts - mean) <= 5 * sd)


def test_ring_balance_with_default_replicas() -> None:
    # Measured: the largest deviation over N = 1..64 with RING_SEED is 10.7% of the fair share.
    for n in range(1, 65):
        share = slot_counts("ring", n) / (2**16 / n)
        assert np.all(np.abs(share - 1) <= 0.12), n


def table_digest(table: npt.NDArray[np.int32]) -> str:
    return hashlib.sha256(table.astype("<i4").tobytes()).hexdigest()


PINNED = {
    # The routing of stored functions depends on these tables: they must never change.
    "jump": "15cdaef242144df531284af8448f03f6a850580c486a534f73b97c55f45a2267",
    "ring": "a0a4e2386832956f1e8204985fa9368f54c1e19bcafd332bb8a001cb65643b28",
    "prefix": "444fd5a7532a2988899eaac91aa04754b6e2290461ef9610f9fcaab3114b36df",
    "mod": "56c2db9d28680cb6f466a92552b7737c0c57e1b472ba8c0cda98a55083784ffa",
}


@pytest.mark.parametrize("method", get_args(ConsistentMethod))
def test_default_tables_are_pinned(method: ConsistentMethod) -> None:
    assert table_digest(slot_table(10, ConsistentSpec(method), 16)) == PINNED[method]


def test_tables_are_the_same_in_a_fresh_process() -> None:
    script = (
        "import hashlib, sys\n"
        "from repart.partitioning.consistent import ConsistentSpec, slot_table\n"
        "for method in sys.argv[1:]:\n"
        "    for n in (3, 10, 64):\n"
        "        t = slot_table(n, ConsistentSpec(method), 16)\n"
        "        print(hashlib.sha256(t.astype('<i4').tobytes()).hexdigest())\n"
    )
    methods = list(get_args(ConsistentMethod))
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # str hashing must not matter
    output = subprocess.run(
        [sys.executable, "-c", script, *methods], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    expected = [table_digest(slot_table(n, ConsistentSpec(m), 16)) for m in methods for n in (3, 10, 64)]
    assert output == expected


def test_table_shape_dtype_range_and_read_only() -> None:
    table = slot_table(7, ConsistentSpec(), 12)
    assert table.dtype == np.int32
    assert table.shape == (2**12,)
    assert table.min() == 0 and table.max() == 6
    assert not table.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        table[0] = 1


def test_tables_are_cached_and_clear_caches_rebuilds_equal_tables() -> None:
    spec = ConsistentSpec("ring", replicas=50)
    table = slot_table(5, spec, 12)
    assert slot_table(5, ConsistentSpec("ring", replicas=50), 12) is table
    clear_caches()
    rebuilt = slot_table(5, spec, 12)
    assert rebuilt is not table
    assert np.array_equal(rebuilt, table)


def test_one_channel_owns_every_slot() -> None:
    for method in get_args(ConsistentMethod):
        assert not slot_table(1, ConsistentSpec(method), 10).any()


def test_spec_defaults() -> None:
    spec = ConsistentSpec()
    assert (spec.method, spec.replicas, spec.seed) == (DEFAULT_METHOD, DEFAULT_REPLICAS, RING_SEED)
    assert DEFAULT_METHOD == "prefix"
    assert ConsistentSpec(replicas=np.int64(5)).replicas == 5  # type: ignore[arg-type]
    assert type(ConsistentSpec(replicas=np.int64(5)).replicas) is int  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "hash"}, r"method must be one of 'ring', 'jump', 'prefix', 'mod'"),
        ({"replicas": 0}, r"replicas must be an integer in \[1, 100000\]"),
        ({"replicas": 100_001}, r"replicas must be an integer in \[1, 100000\]"),
        ({"replicas": 1.5}, r"replicas must be an integer"),
        ({"replicas": True}, r"replicas must be an integer"),
        ({"seed": -1}, r"seed must be an integer in \[0, 4294967295\]"),
        ({"seed": 2**32}, r"seed must be an integer in \[0, 4294967295\]"),
        ({"seed": "42"}, r"seed must be an integer"),
    ],
)
def test_spec_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        ConsistentSpec(**kwargs)  # type: ignore[arg-type]
    assert excinfo.value.field == next(iter(kwargs))


@pytest.mark.parametrize(
    ("n", "bits", "message"),
    [
        (0, 16, r"n_channels must be an integer in \[1, 65536\]"),
        (65_537, 16, r"n_channels must be an integer in \[1, 65536\]"),
        (True, 16, "n_channels must be an integer"),
        (2.0, 16, "n_channels must be an integer"),
        (4, 9, r"slot_bits must be an integer in \[10, 20\]"),
        (4, 21, r"slot_bits must be an integer in \[10, 20\]"),
    ],
)
def test_slot_table_validation(n: object, bits: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        slot_table(n, ConsistentSpec(), bits)
    assert excinfo.value.field == message.split()[0]
