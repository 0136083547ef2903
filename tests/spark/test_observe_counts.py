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
from repart.spark.batch_counts import _in_mask
from repart.spark.cardinality import estimate_distinct, register_value
from repart.spark.observe import observe
from repart.spark.sinks import SpoolSink
from tests.spark.observing import WINDOW, MemorySink, check_counts, frame, shuffling_stages, spark_jobs

ROWS = 200_000


def skewed_keys(key_type: str, seed: int) -> list[Any]:
    """ROWS Zipf(1.1) keys over about 60,000 distinct ranks with 1 % nulls."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.1, ROWS) % 100_000
    nulls = rng.random(ROWS) < 0.01
    if key_type == "str":
        values: list[Any] = [f"key-{rank}" for rank in ranks.tolist()]
    else:
        values = [(rank * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for rank in ranks.tolist()]
    return [None if null else value for value, null in zip(values, nulls.tolist(), strict=True)]


@pytest.mark.parametrize(("key_type", "spark_type"), [("str", "string"), ("int", "bigint")])
def test_every_key_above_the_bound_is_listed_with_its_exact_count(
    spark: SparkSession, key_type: str, spark_type: str
) -> None:
    keys = skewed_keys(key_type, seed=5)
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


def test_a_batch_without_a_hot_slot_is_read_once(spark: SparkSession) -> None:
    keys = [f"u{i}" for i in range(20_000)]  # every key once: no slot of 2^16 reaches 20 rows
    with spark_jobs(spark, "no-hot-slot") as jobs:
        observation = observe(frame(spark, keys, "string"), "k", "r", WINDOW, MemorySink(), epsilon=1e-3)
    assert len(shuffling_stages(spark, jobs)) == 1
    assert list(observation.snapshot.items) == []
    check_counts(observation, keys, 1e-3)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slot_bits=st.sampled_from([10, 16]),
    members=st.sets(st.integers(0, 2**16 - 1), max_size=300),
    edges=st.sets(st.sampled_from([0, 1, 62, 63, 64, 65, 127, 128, 1023, 65_535]), max_size=10),
)
def test_the_hot_slot_mask_holds_exactly_its_members(
    spark: SparkSession, slot_bits: int, members: set[int], edges: set[int]
) -> None:
    size = 1 << slot_bits
    chosen = sorted({slot % size for slot in members | edges})
    df = spark.range(size).withColumnRenamed("id", "slot")
    inside = df.where(_in_mask(F.col("slot"), np.array(chosen, dtype=np.int64), slot_bits))
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
