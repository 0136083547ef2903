"""observe() in the JVM: the two passes against exact counts (the items are exactly the keys above
floor(n / ceil(1/ε)) at their true counts, every key above δ·n among them), the hot-slot mask against
set membership, a batch without a hot slot read once, keys that stress the round trip, empty and
nondeterministic batches, and the HyperLogLog estimate over the slots (DESIGN §3, §9)."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.resources import Resources, frequency_threshold
from repart.spark.batch_counts import in_slot_mask
from repart.spark.cardinality import estimate_distinct, register_value
from repart.spark.observe import observe
from repart.spark.sinks import SpoolSink
from tests.spark.observing import (
    WINDOW,
    MemorySink,
    check_counts,
    frame,
    shuffling_stages,
    spark_jobs,
    zipf_keys,
)


@pytest.mark.parametrize(("key_type", "spark_type"), [("str", "string"), ("int", "bigint")])
def test_every_key_above_the_bound_is_listed_with_its_exact_count(
    spark: SparkSession, key_type: str, spark_type: str
) -> None:
    keys = zipf_keys(key_type, seed=5, exponent=1.1, ranks=100_000)
    truth = Counter(key for key in keys if key is not None)
    n = sum(truth.values())
    epsilon = 1e-3
    bound = n // 1000
    # δ of a 4-channel region with Gedik's defaults: the keys the controller must see.
    delta = frequency_threshold(Resources.parse("LCL"), 1.2, 0.1, 4)
    observation = observe(
        frame(spark, keys, spark_type), "k", "r", WINDOW, MemorySink(), epsilon=epsilon, slot_bits=12
    )
    items = {item.key: item.count for item in observation.snapshot.items}
    heavy = {key: true for key, true in truth.items() if true > delta * n}
    assert len(heavy) >= 10 and all(items[key] == true for key, true in heavy.items())
    # The key pass counted cold keys too (those sharing a hot slot), and they are left out.
    slot_of = dict(zip(truth, slots_of_hashes(hash_keys(list(truth)), 12).tolist(), strict=True))
    slot_counts = Counter({slot: 0 for slot in slot_of.values()})
    for key, count in truth.items():
        slot_counts[slot_of[key]] += count
    in_hot = {key for key in truth if slot_counts[slot_of[key]] > bound}
    assert len(in_hot) > len(items) > 0
    check_counts(observation, keys, epsilon)


def same_slot_keys(count: int, slot_bits: int) -> list[str]:
    """``count`` distinct str keys that share one slot of ``slot_bits`` bits (found by search)."""
    candidates = [f"s{i}" for i in range(20_000)]
    slots = slots_of_hashes(hash_keys(candidates), slot_bits).tolist()
    by_slot: dict[int, list[str]] = {}
    for key, slot in zip(candidates, slots, strict=True):
        by_slot.setdefault(slot, []).append(key)
        if len(by_slot[slot]) == count:
            return by_slot[slot]
    raise AssertionError("no slot holds enough keys")


def test_a_key_at_the_bound_is_left_out_and_one_above_it_listed(spark: SparkSession) -> None:
    # ε = 0.01 and n = 1,000 rows: the bound is floor(1000 / 100) = 10. ``at`` (10 rows) shares its
    # slot with ``beside`` (5 rows), so the slot (15 rows) is hot and both are counted by key; only
    # ``above`` (11 rows, in another slot) is listed.
    at, beside = same_slot_keys(2, 12)
    above = "above"
    assert slots_of_hashes(hash_keys([above]), 12)[0] != slots_of_hashes(hash_keys([at]), 12)[0]
    keys = [at] * 10 + [beside] * 5 + [above] * 11 + [f"once{i}" for i in range(974)]
    observation = observe(
        frame(spark, keys, "string"), "k", "r", WINDOW, MemorySink(), epsilon=0.01, slot_bits=12
    )
    assert [(item.key, item.count, item.delta) for item in observation.snapshot.items] == [(above, 11, 0)]
    check_counts(observation, keys, 0.01)


def test_a_batch_without_a_hot_slot_is_read_once(spark: SparkSession) -> None:
    keys = [f"u{i}" for i in range(20_000)]  # every key once: no slot of 2^16 reaches 20 rows
    with spark_jobs(spark, "no-hot-slot") as jobs:
        observation = observe(frame(spark, keys, "string"), "k", "r", WINDOW, MemorySink(), epsilon=1e-3)
    assert len(shuffling_stages(spark, jobs)) == 1
    assert list(observation.snapshot.items) == []
    check_counts(observation, keys, 1e-3)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slot_bits=st.sampled_from([10, 16, 20]),
    members=st.sets(st.integers(0, 2**20 - 1), max_size=300),
    edges=st.sets(st.sampled_from([0, 1, 62, 63, 64, 65, 127, 128, 1023, 65_535, 2**20 - 1]), max_size=11),
)
def test_the_hot_slot_mask_holds_exactly_its_members(
    spark: SparkSession, slot_bits: int, members: set[int], edges: set[int]
) -> None:
    size = 1 << slot_bits
    chosen = sorted({slot % size for slot in members | edges})
    df = spark.range(size).withColumnRenamed("id", "slot")
    inside = df.where(in_slot_mask(F.col("slot"), np.array(chosen, dtype=np.int64), slot_bits))
    assert sorted(row["slot"] for row in inside.collect()) == chosen


EDGE_STRINGS = ["", "é", "𝄞 clef", "a\x00b", "x" * 1000, "日本語", " ", "A", "a"]
EDGE_INTS = [-(2**63), 2**63 - 1, 0, -1, 1, 2**32, -(2**31)]


@pytest.mark.parametrize(
    ("values", "spark_type"), [(EDGE_STRINGS, "string"), (EDGE_INTS, "bigint"), (EDGE_INTS, "int")]
)
def test_keys_cross_the_passes_unchanged(spark: SparkSession, values: list[Any], spark_type: str) -> None:
    if spark_type == "int":  # an int column: repart's int keys, hashed as bigints
        values = [value for value in values if -(2**31) <= value < 2**31]
    keys = [value for i, value in enumerate(values) for _ in range(i + 1)] + [None]
    observation = observe(frame(spark, keys, spark_type, pieces=2), "k", "r", WINDOW, MemorySink())
    assert {item.key: (item.count, item.delta) for item in observation.snapshot.items} == {
        key: (count, 0) for key, count in Counter(key for key in keys if key is not None).items()
    }
    check_counts(observation, keys, 1e-3)


def test_empty_and_all_null_batches(spark: SparkSession) -> None:
    for keys in ([], [None, None, None]):
        observation = observe(frame(spark, keys, "string", pieces=1), "k", "r", WINDOW, MemorySink())
        snapshot = observation.snapshot
        assert (snapshot.tuples, list(snapshot.items), snapshot.distinct_estimate) == (0, [], 0)
        assert snapshot.slots is None and observation.null_keys == len(keys)


def test_a_batch_whose_two_reads_differ_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    # Spark's rand() repeats itself on every read (its seed is fixed in the plan); a Python draw does
    # not. Three keys over 20,000 rows: their slots are hot, so the key pass reads the batch again.
    draw = F.udf(lambda i: random.choice(["a", "b", "c", None]), "string").asNondeterministic()
    df = spark.range(20_000, numPartitions=2).select(draw("id").alias("k"))
    with pytest.raises(InvalidInput) as raised:
        observe(df, "k", "r", WINDOW, SpoolSink(tmp_path))
    assert raised.value.field == "df" and "cache or checkpoint" in str(raised.value)
    assert list(tmp_path.iterdir()) == []
    observe(df.cache(), "k", "r", WINDOW, SpoolSink(tmp_path))  # cached: both reads agree
    assert len(list(tmp_path.iterdir())) == 1


def registers_of(hashes: np.ndarray[Any, np.dtype[np.uint64]], slot_bits: int) -> list[int]:
    """The non-zero HyperLogLog registers of ``hashes`` (numpy oracle of the slot aggregation)."""
    q = 64 - slot_bits
    low = hashes & np.uint64((1 << q) - 1)
    rho = np.full(len(hashes), q + 1, dtype=np.int64)
    for value, position in zip(low.tolist(), range(len(hashes)), strict=True):
        if value:
            rho[position] = (value & -value).bit_length()  # trailing zeros + 1
    registers = np.zeros(1 << slot_bits, dtype=np.int64)
    np.maximum.at(registers, (hashes >> np.uint64(q)).astype(np.int64), rho)
    return [int(value) for value in registers[registers > 0]]


@pytest.mark.parametrize("slot_bits", [10, 16])
def test_distinct_estimate_is_within_hyperloglogs_error(slot_bits: int) -> None:
    rng = np.random.default_rng(slot_bits)
    standard_error = 1.04 / math.sqrt(1 << slot_bits)
    for distinct in (0, 1, 7, 300, 20_000, 300_000):
        hashes = rng.integers(0, 2**64, size=distinct, dtype=np.uint64)
        estimate = estimate_distinct(registers_of(hashes, slot_bits), slot_bits)
        assert abs(estimate - distinct) <= max(1.0, 4 * standard_error * distinct), (distinct, estimate)


def test_register_values_match_trailing_zeros(spark: SparkSession) -> None:
    slot_bits = 12
    hashes = [0, 1, 2, 12, 1 << 51, 1 << 52, 3 << 52, -1, -(2**63), 2**63 - 1, 0x7FF0000000000000]
    df = spark.createDataFrame([(value,) for value in hashes], "h bigint")
    got = [row[0] for row in df.select(register_value(F.col("h"), slot_bits)).collect()]
    q = 64 - slot_bits
    expected = []
    for value in hashes:
        low = value & ((1 << q) - 1)
        expected.append((low & -low).bit_length() if low else q + 1)
    assert got == expected
