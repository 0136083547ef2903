"""observe() in the JVM: the frequent-items sketch's guarantee against exact counts (every key above
δ·n kept, its true count within [count, count + delta]), the sketch size ε needs (and the error when a
size is too small), keys that stress the sketch's serialization, empty and nondeterministic batches,
and the HyperLogLog estimate over the slots (DESIGN §3, §9)."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.resources import Resources, frequency_threshold
from repart.spark.cardinality import estimate_distinct, register_value
from repart.spark.frequent_items import (
    EPSILON_FACTOR,
    MAX_SKETCH_SIZE,
    accumulate,
    check_sketch_size,
    default_sketch_size,
    map_size,
    minimum_sketch_size,
    read_sketch,
)
from repart.spark.observe import observe
from repart.spark.sinks import SpoolSink
from tests.spark.observing import WINDOW, MemorySink, check_counts, frame, spark_jobs

ROWS = 200_000


def skewed_keys(key_type: str, seed: int) -> list[Any]:
    """ROWS Zipf(1.1) keys over about 60,000 distinct ranks with 1 % nulls: far more keys than the
    sketch's counters, so the sketch purges and its offset is positive."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.1, ROWS) % 100_000
    nulls = rng.random(ROWS) < 0.01
    if key_type == "str":
        values: list[Any] = [f"key-{rank}" for rank in ranks.tolist()]
    else:
        values = [(rank * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for rank in ranks.tolist()]
    return [None if null else value for value, null in zip(values, nulls.tolist(), strict=True)]


@pytest.mark.parametrize(("key_type", "spark_type"), [("str", "string"), ("int", "bigint")])
def test_every_key_above_delta_n_is_kept_with_its_true_count_within_its_bounds(
    spark: SparkSession, key_type: str, spark_type: str
) -> None:
    keys = skewed_keys(key_type, seed=5)
    truth = Counter(key for key in keys if key is not None)
    n = sum(truth.values())
    epsilon = 1e-3
    # δ of a 4-channel region with Gedik's defaults: the keys the controller must see.
    delta = frequency_threshold(Resources.parse("LCL"), 1.2, 0.1, 4)
    observation = observe(frame(spark, keys, spark_type), "k", "r", WINDOW, MemorySink(), epsilon=epsilon)
    items = {item.key: (item.count, item.delta) for item in observation.snapshot.items}

    offsets = {error for _, error in items.values()}
    assert len(offsets) == 1 and 0 < offsets.pop() <= n // 1000  # the sketch purged, within ε·n
    heavy = {key: true for key, true in truth.items() if true > delta * n}
    assert len(heavy) >= 10
    for key, true in heavy.items():
        assert key in items, f"{key!r} occurs {true} > δ·n = {delta * n:.0f} times but was dropped"
        count, error = items[key]
        assert count <= true <= count + error
        assert count >= (delta - epsilon) * n  # so the controller's select_tracked keeps it
    check_counts(observation, keys, epsilon)


def test_a_larger_sketch_is_exact_when_it_holds_every_key(spark: SparkSession) -> None:
    keys = skewed_keys("str", seed=6)
    truth = Counter(key for key in keys if key is not None)
    size = math.ceil(len(truth) / 0.75) + 1  # 0.75 * M counters hold every key: no purge
    observation = observe(
        frame(spark, keys, "string"), "k", "r", WINDOW, MemorySink(), epsilon=1e-3, sketch_size=size
    )
    assert {item.key: (item.count, item.delta) for item in observation.snapshot.items} == {
        key: (count, 0) for key, count in truth.items()
    }


def test_a_sketch_too_small_for_epsilon_names_both_and_runs_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    df = spark.createDataFrame([("a",)], "k string")
    with spark_jobs(spark, "small-sketch") as jobs, pytest.raises(InvalidInput) as raised:
        observe(df, "k", "r", WINDOW, SpoolSink(tmp_path), epsilon=1e-3, sketch_size=1536)
    assert raised.value.field == "sketch_size"
    assert "at least 1,537 for epsilon=0.001" in str(raised.value)
    assert "got 1,536" in str(raised.value)
    assert jobs == [] and list(tmp_path.iterdir()) == []
    assert check_sketch_size(1537, 1e-3) == 1537


def spark_map_size(sketch_size: int) -> int:
    """Spark's ApproxTopK.calMaxMapSize in its floating-point form, raised to DataSketches' smallest
    map of 8: the independent oracle."""
    return max(8, int(math.pow(2, math.ceil(math.log(math.ceil(sketch_size / 0.75)) / math.log(2)))))


def test_sketch_sizes_follow_the_documented_bound() -> None:
    for size in [*range(1, 5000), 49_151, 49_152, 49_153, 393_216, MAX_SKETCH_SIZE]:
        assert map_size(size) == spark_map_size(size), size
    for epsilon in [0.9, 0.5, 0.3, 0.2, 0.05, 0.01, 1e-3, 3e-4, 1e-4, 1e-5, 1.7e-6]:
        width = math.ceil(1 / epsilon)
        smallest, default = minimum_sketch_size(epsilon), default_sketch_size(epsilon)
        assert EPSILON_FACTOR / map_size(smallest) <= 1 / width  # error <= n / ceil(1/ε)
        assert smallest == 1 or EPSILON_FACTOR / map_size(smallest - 1) > 1 / width  # none smaller
        assert smallest <= default <= MAX_SKETCH_SIZE and map_size(default) == map_size(smallest)
    with pytest.raises(InvalidInput) as raised:
        minimum_sketch_size(1.6e-6)
    assert raised.value.field == "epsilon"


def test_spark_builds_the_map_size_observe_relies_on(spark: SparkSession) -> None:
    df = spark.range(10_000).select((F.col("id") % 700).alias("k"))
    for size in (1, 3, 384, 1537, 3072):
        row = df.agg(accumulate("k", size).getField("sketch").alias("s")).collect()[0]
        sketch = read_sketch(bytes(row["s"]), "int")
        assert sketch.map_size == map_size(size) and sketch.n == 10_000


EDGE_STRINGS = ["", "é", "𝄞 clef", "a\x00b", "x" * 1000, "日本語", " ", "A", "a"]
EDGE_INTS = [-(2**63), 2**63 - 1, 0, -1, 1, 2**32, -(2**31)]


@pytest.mark.parametrize(
    ("values", "spark_type"), [(EDGE_STRINGS, "string"), (EDGE_INTS, "bigint"), (EDGE_INTS, "int")]
)
def test_keys_cross_the_sketch_unchanged(spark: SparkSession, values: list[Any], spark_type: str) -> None:
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
    # Spark's rand() repeats itself on every read (its seed is fixed in the plan); a Python coin
    # flip does not.
    coin = F.udf(lambda i: str(i) if random.random() < 0.5 else None, "string").asNondeterministic()
    df = spark.range(20_000, numPartitions=2).select(coin("id").alias("k"))
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
