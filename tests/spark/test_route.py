"""route() and partition() (DESIGN §2, §9): Spark's channel of every key equals ``PartitionFunction.lookup``.

The oracle is the scalar Python lookup. Each key set (100,000 keys) is routed by several functions at
once, one channel column per function, and collected once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning import ConsistentSpec, PartitionFunction, initial_function
from repart.partitioning.domain import INT64_MAX, INT64_MIN, ConsistentMethod, Key, KeyType
from repart.partitioning.hashing import hash_key, slot_of_hash
from repart.spark.route import partition, route

KEYS = 100_000
EXPLICIT = 3_000
OVERRIDES = 500
# (N, slot bits, consistent method): every N of {1, 7, 32}, both slot sizes and both methods.
SHAPES: list[tuple[int, int, ConsistentMethod]] = [
    (1, 16, "ring"),
    (7, 10, "ring"),
    (7, 16, "jump"),
    (32, 16, "ring"),
    (32, 10, "jump"),
]
PYTHON_EVALUATION = ("BatchEvalPython", "ArrowEvalPython", "PythonUDF")
# Multi-byte letters, combining marks (e + U+0301, U+0308), emoji (a ZWJ sequence, a flag), NUL, U+FFFF.
ALPHABET = [*"abcXYZ09 -_é日本語ßЖ", "e\u0301", "\u0308", "🎉", "👩\u200d💻", "🇫🇷", "\x00", "\uffff"]


def str_keys(rng: np.random.Generator) -> list[str]:
    """100,000 str keys: short random ones, 200 long ones (200-5,000 characters), and extremes first."""
    lengths = rng.integers(0, 24, size=KEYS)
    lengths[rng.choice(KEYS, size=200, replace=False)] = rng.integers(200, 5_000, size=200)
    picks = rng.integers(0, len(ALPHABET), size=int(lengths.sum())).tolist()
    keys, start = [], 0
    for length in lengths.tolist():
        keys.append("".join(ALPHABET[i] for i in picks[start : start + length]))
        start += length
    return ["", "😀", "e\u0301", "é" * 100_000, *keys[4:]]


def int_keys(rng: np.random.Generator, low: int, high: int) -> list[int]:
    """100,000 int keys over [low, high], a tenth of them small, with both bounds, 0 and ±1 first."""
    keys = rng.integers(low, high, size=KEYS, endpoint=True, dtype=np.int64)
    keys[: KEYS // 10] = rng.integers(max(low, -1_000), min(high, 1_000), size=KEYS // 10, endpoint=True)
    return [low, high, 0, -1, 1, *keys[5:].tolist()]


def functions(keys: Sequence[Key], key_type: KeyType, seed: int) -> list[PartitionFunction]:
    """One function per shape, with thousands of explicit keys and hundreds of slot overrides each."""
    rng = np.random.default_rng(seed)
    distinct = list(dict.fromkeys(keys))
    made = []
    for n, bits, method in SHAPES:
        chosen = rng.choice(len(distinct), size=min(EXPLICIT, len(distinct) // 2), replace=False).tolist()
        explicit = {distinct[i]: int(rng.integers(0, n)) for i in chosen}
        explicit[distinct[0]] = n - 1  # an extreme key: "" or the column type's minimum
        slots = rng.choice(2**bits, size=OVERRIDES, replace=False).tolist()
        overrides = {slot: int(rng.integers(0, n)) for slot in slots}
        function = PartitionFunction(
            n_channels=n,
            key_type=key_type,
            slot_bits=bits,
            consistent=ConsistentSpec(method=method),
            explicit=explicit,
            slot_overrides=overrides,
        )
        if n > 1:  # overrides and explicit map matter: most explicit keys leave their slot's channel
            assert not np.array_equal(function.table, function.base_table)
            moved = sum(
                int(function.table[slot_of_hash(hash_key(k), bits)]) != c for k, c in explicit.items()
            )
            assert moved > len(explicit) // 2
        made.append(function)
    return made


def assert_jvm_only(df: DataFrame) -> None:
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert not [name for name in PYTHON_EVALUATION if name in plan]


def assert_routes_like_lookup(df: DataFrame, keys: Sequence[Key], versions: list[PartitionFunction]) -> None:
    """Route ``df`` (its key column ``k``, row order given by ``i``) by every version; compare each key."""
    routed = df
    for index, version in enumerate(versions):
        routed = route(routed, "k", version, channel_col=f"c{index}")
    assert_jvm_only(routed)
    table = routed.orderBy("i").toArrow()
    assert table.column("i").to_pylist() == list(range(len(keys)))
    for index, version in enumerate(versions):
        got = table.column(f"c{index}").to_pylist()
        expected = [version.lookup(key) for key in keys]
        wrong = [(keys[i], got[i], expected[i]) for i in range(len(keys)) if got[i] != expected[i]]
        assert not wrong, f"{version.n_channels} channels, S={version.slot_bits}: {wrong[:5]}"


def keyed(spark: SparkSession, keys: Sequence[Key], spark_type: str) -> DataFrame:
    return spark.createDataFrame(list(enumerate(keys)), f"i int, k {spark_type}")


def test_str_keys_route_like_lookup(spark: SparkSession) -> None:
    keys = str_keys(np.random.default_rng(1))
    assert_routes_like_lookup(keyed(spark, keys, "string"), keys, functions(keys, "str", 2))


@pytest.mark.parametrize(
    ("spark_type", "low", "high"),
    [("bigint", INT64_MIN, INT64_MAX), ("int", -(2**31), 2**31 - 1), ("tinyint", -128, 127)],
)
def test_int_keys_route_like_lookup(spark: SparkSession, spark_type: str, low: int, high: int) -> None:
    keys = int_keys(np.random.default_rng(3), low, high)
    versions = functions(keys, "int", 4)
    if spark_type == "tinyint":  # 256 distinct keys: two functions suffice
        versions = versions[2:4]
    assert_routes_like_lookup(keyed(spark, keys, spark_type), keys, versions)


def test_null_keys_go_to_channel_0(spark: SparkSession) -> None:
    str_version = PartitionFunction(n_channels=7, explicit={"a": 5, "b": 6}, slot_overrides={0: 3})
    df = spark.createDataFrame([(None,), ("a",), (None,)], "k string")
    assert [row.channel for row in route(df, "k", str_version).collect()] == [0, 5, 0]
    int_version = PartitionFunction(n_channels=7, explicit={1: 6})
    df = spark.createDataFrame([(1,), (None,)], "k int")
    assert [row.channel for row in route(df, "k", int_version).collect()] == [6, 0]
    untyped = initial_function(7)  # no key type yet: any key column is accepted
    assert [row.channel for row in route(df, "k", untyped).collect()] == [untyped.lookup(1), 0]


def test_partition_puts_channel_i_in_spark_partition_i(spark: SparkSession) -> None:
    keys = str_keys(np.random.default_rng(5))[:20_000]
    version = functions(keys, "str", 6)[1]  # N = 7
    df = keyed(spark, keys, "string").withColumn("payload", F.length("k")).repartition(3)
    parted = partition(df, "k", version)
    assert_jvm_only(parted)
    assert parted.columns == ["i", "k", "payload", "channel"]
    assert parted.rdd.getNumPartitions() == 7
    rows = parted.select(F.spark_partition_id().alias("p"), "channel", "i").collect()
    assert len(rows) == len(keys) and {row.i for row in rows} == set(range(len(keys)))
    assert all(row.p == row.channel == version.lookup(keys[row.i]) for row in rows)
    assert {row.p for row in rows} == set(range(7))

    few = spark.createDataFrame([("a",), ("b",), (None,)], "k string")
    wide = partition(few, "k", PartitionFunction(n_channels=32, explicit={"a": 31, "b": 9}))
    sizes = wide.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, [r.channel for r in rows])]).collect()
    assert len(sizes) == 32
    assert {i: channels for i, channels in sizes if channels} == {0: [0], 9: [9], 31: [31]}


def test_bad_inputs_raise_job_input_errors(spark: SparkSession) -> None:
    df = spark.createDataFrame([("a", 1.5, 3, 0)], "k string, price double, n bigint, Channel int")
    str_version = PartitionFunction(n_channels=3, explicit={"a": 1})
    int_version = PartitionFunction(n_channels=3, explicit={7: 1})
    with pytest.raises(InvalidInput, match="no column 'ticker'"):
        route(df, "ticker", str_version, channel_col="c")
    with pytest.raises(InvalidInput, match="'price' has type double"):
        partition(df, "price", str_version, channel_col="c")
    with pytest.raises(InvalidInput, match=r"column 'k' holds 'str' keys.*routes 'int' keys"):
        route(df, "k", int_version, channel_col="c")
    with pytest.raises(InvalidInput, match=r"column 'n' holds 'int' keys.*routes 'str' keys"):
        partition(df, "n", str_version, channel_col="c")
    with pytest.raises(InvalidInput, match="already has a column 'channel'"):
        route(df, "k", str_version)  # Spark resolves names case-insensitively: 'Channel' is taken
    with pytest.raises(InvalidInput, match="already has a column 'k'"):
        partition(df, "k", str_version, channel_col="k")
    with pytest.raises(InvalidInput, match="version must be a PartitionFunction"):
        route(df, "k", str_version.to_json(), channel_col="c")  # type: ignore[arg-type]
