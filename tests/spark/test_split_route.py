"""route() and partition() with split functions (DESIGN §11.3): Spark's channel of every row equals
``SplitFunction.lookup(key, row_hash)``, the row hash being Spark's ``xxhash64`` of the row's columns,
collected beside the channel.

Each key type gets 100,000 rows (half of them on 40 hot keys) routed by three functions at once (N = 1
with a plain home, N = 7 and N = 32 with split keys, explicit keys and slot overrides), one channel
column per function, and collected once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning import ConsistentSpec, PartitionFunction
from repart.partitioning.domain import INT64_MAX, INT64_MIN, ConsistentMethod, Key, KeyType
from repart.partitioning.hashing import hash_key, slot_of_hash
from repart.partitioning.split.alias import BUCKET_SPAN
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.spark.route import partition, route
from repart.spark.split_route import alias_layout, route_split

ROWS = 100_000
HOT = 40
ROW_COLS = ["i", "k", "v"]
DEFAULT_ROW_COLS = ["i", "v"]  # every column but the key
PYTHON_EVALUATION = ("BatchEvalPython", "ArrowEvalPython", "PythonUDF")
# (N, slot bits, method, split keys): S = 10 makes split keys share slots with explicit keys.
SHAPES: list[tuple[int, int, ConsistentMethod, int]] = [
    (1, 16, "ring", 0),
    (7, 10, "ring", 20),
    (32, 16, "jump", HOT),
]


def hot_and_cold(key_type: KeyType, rng: np.random.Generator) -> tuple[list[Key], list[Key]]:
    """40 hot keys (extremes among them) and 20,000 cold ones, all distinct."""
    if key_type == "str":
        hot: list[Key] = ["", "é日本語", "👩\u200d💻", *(f"hot-{i}" for i in range(HOT - 3))]
        cold: list[Key] = [f"cold-{i}-{'ß' * (i % 7)}" for i in range(20_000)]
    else:
        hot = [INT64_MIN, INT64_MAX, 0, -1, *(int(x) for x in rng.choice(10**6, HOT - 4, replace=False) + 1)]
        cold = [int(x) for x in rng.integers(-(2**62), 2**62, size=20_000)]
    return hot, cold


def rows(key_type: KeyType, seed: int) -> tuple[pa.Table, tuple[list[Key], list[Key]]]:
    """``ROWS`` rows ``(i, k, v)``: half of them on the hot keys (Zipf-like), half on cold ones; and the
    hot keys (hottest first) and the cold ones."""
    rng = np.random.default_rng(seed)
    hot, cold = hot_and_cold(key_type, rng)
    ranks = np.minimum(rng.zipf(1.3, ROWS // 2), HOT) - 1
    keys = [hot[r] for r in ranks.tolist()] + [
        cold[c] for c in rng.integers(0, len(cold), ROWS // 2).tolist()
    ]
    order = rng.permutation(ROWS).tolist()
    spark_type = pa.string() if key_type == "str" else pa.int64()
    table = pa.table(
        {
            "i": pa.array(range(ROWS), pa.int64()),
            "k": pa.array([keys[j] for j in order], spark_type),
            "v": pa.array(rng.integers(0, 5, ROWS) * 0.5, pa.float64()),  # duplicates: rows differ by i
        }
    )
    return table, (hot, cold)


def split_function(
    n: int, bits: int, method: ConsistentMethod, keys: tuple[Sequence[Key], Sequence[Key]], split_keys: int
) -> SplitFunction:
    """A home function with explicit keys (a third of the hot keys, 2,000 cold ones) and slot
    overrides, and ``split_keys`` of the hot keys split over random candidates with random weights,
    plus the edge cases: a key over all N channels, zero weights, keys explicit in the home too."""
    hot, cold = keys
    rng = np.random.default_rng(n)
    explicit = {key: int(rng.integers(0, n)) for key in [*hot[::3], *cold[:2_000]]}
    overrides = {int(slot): int(rng.integers(0, n)) for slot in rng.choice(2**bits, 300, replace=False)}
    home = PartitionFunction(
        n_channels=n,
        key_type="str" if isinstance(hot[0], str) else "int",
        slot_bits=bits,
        consistent=ConsistentSpec(method=method),
        explicit=explicit,
        slot_overrides=overrides,
    )
    split: dict[Key, SplitEntry] = {}
    for index, key in enumerate(hot[:split_keys]):
        others = [c for c in rng.permutation(n).tolist() if c != home.lookup(key)]
        if index == 1:  # every channel, evenly
            weights = [1 / n] * n
        elif index == 2:  # zero weights: candidates that never get a row
            weights = [0.5, 0.0, 0.5, 0.0] if n > 3 else [1.0, 0.0]
        else:
            weights = rng.dirichlet(np.ones(int(rng.integers(2, min(n, 8) + 1)))).tolist()
        split[key] = SplitEntry((home.lookup(key), *others[: len(weights) - 1]), tuple(weights))
    return SplitFunction(home, split)


def assert_jvm_only(df: DataFrame) -> None:
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert not [name for name in PYTHON_EVALUATION if name in plan]


def assert_routes_like_lookup(df: DataFrame, versions: Sequence[SplitFunction]) -> None:
    """Route ``df`` by every version (row hash of ``ROW_COLS``), collect the channels with the row
    hash, compare every row with the Python oracle."""
    routed = df
    for index, version in enumerate(versions):
        routed = route(routed, "k", version, channel_col=f"c{index}", row_cols=ROW_COLS)
    assert_jvm_only(routed)
    table = routed.withColumn("h", F.xxhash64(*ROW_COLS)).toArrow()
    keys, hashes = table.column("k").to_pylist(), table.column("h").to_pylist()
    assert len(keys) == ROWS
    for index, version in enumerate(versions):
        got = table.column(f"c{index}").to_pylist()
        expected = [version.lookup(key, row_hash) for key, row_hash in zip(keys, hashes, strict=True)]
        wrong = [(keys[i], hashes[i], got[i], expected[i]) for i in range(ROWS) if got[i] != expected[i]]
        assert not wrong, f"N={version.n_channels}: {len(wrong)} rows differ, such as {wrong[:3]}"
        spread: dict[Key, set[int]] = {}
        for key, channel in zip(keys, got, strict=True):
            if key in version.split:
                spread.setdefault(key, set()).add(channel)
        assert len(spread) == len(version.split)  # every split key has rows, spread over candidates:
        assert all(channels <= set(version.candidates(key)) for key, channels in spread.items())
        if version.split:
            widest = max(version.split, key=lambda key: len(version.split[key].candidates))
            assert len(spread[widest]) == version.n_channels  # all N candidates reached


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_split_functions_route_like_the_python_lookup(spark: SparkSession, key_type: KeyType) -> None:
    table, keys = rows(key_type, seed=1 if key_type == "str" else 2)
    versions = [split_function(n, bits, method, keys, split) for n, bits, method, split in SHAPES]
    assert not versions[0].split and len(versions[2].split) == HOT
    seven = versions[1]
    explicit_slots = {
        slot_of_hash(hash_key(key), 10) for key in seven.home.explicit if key not in seven.split
    }
    assert sum(slot_of_hash(hash_key(key), 10) in explicit_slots for key in seven.split) >= 10
    assert_routes_like_lookup(spark.createDataFrame(table), versions)


def test_the_row_hash_defaults_to_every_column_but_the_key_and_routes_the_same_every_time(
    spark: SparkSession,
) -> None:
    table, keys = rows("str", seed=3)
    version = split_function(32, 16, "ring", keys, HOT)
    df = spark.createDataFrame(table.slice(0, 20_000))
    first = route(df, "k", version).select("i", "channel", F.xxhash64(*DEFAULT_ROW_COLS).alias("h"))
    first = first.toArrow()
    again = route(df.repartition(5), "k", version).select("i", "channel").toArrow()  # other tasks, order
    first, again = first.sort_by("i"), again.sort_by("i")
    assert first.column("channel").equals(again.column("channel"))
    column = table.column("k").to_pylist()
    expected = [
        version.lookup(column[i], h)
        for i, h in zip(first["i"].to_pylist(), first["h"].to_pylist(), strict=True)
    ]
    assert first.column("channel").to_pylist() == expected

    by_id = (
        route(df, "k", version, row_cols=["i"]).select("i", "channel", F.xxhash64("i").alias("h")).toArrow()
    )
    expected = [
        version.lookup(column[i], h)
        for i, h in zip(by_id["i"].to_pylist(), by_id["h"].to_pylist(), strict=True)
    ]
    assert by_id.column("channel").to_pylist() == expected


def test_every_bucket_s_cut_is_read_as_the_python_lookup_reads_it(spark: SparkSession) -> None:
    """Row hashes a random row would almost never give: for every bucket of every split key (d from 2
    to 32, tables of 2 to 32 buckets at their offsets), u = 0, cut − 1, cut and 2^32 − 1, with random
    bits between the bucket and u; and unsplit codes passing through."""
    rng = np.random.default_rng(9)
    home = PartitionFunction(n_channels=32, slot_bits=10)
    entries = {}
    for index, width in enumerate((2, 3, 5, 8, 9, 32)):
        key = f"k{index}"
        others = [c for c in rng.permutation(32).tolist() if c != home.lookup(key)][: width - 1]
        entries[key] = SplitEntry((home.lookup(key), *others), tuple(rng.dirichlet(np.ones(width)).tolist()))
    version = SplitFunction(home, entries)
    layout = alias_layout(version)
    codes = layout.codes
    cases: list[tuple[int, int]] = [(5, 0), (31, -1)]
    for key in version.split:
        table = version.alias_table(key)
        for bucket, cut in enumerate(table.cuts):
            middle = int(rng.integers(0, 2 ** (32 - table.bucket_bits))) << 32
            top = bucket << (64 - table.bucket_bits) | middle
            for u in sorted({0, max(cut - 1, 0), min(cut, BUCKET_SPAN - 1), BUCKET_SPAN - 1}):
                unsigned = top | u
                cases.append((codes[key], unsigned - 2**64 if unsigned >= 2**63 else unsigned))
    df = spark.createDataFrame(cases, "code int, h bigint")
    routed = route_split(df, F.col("code"), F.col("h"), layout, channel_col="c").collect()
    by_code = {code: key for key, code in codes.items()}
    expected = [row.code if row.code >= 0 else version.lookup(by_code[row.code], row.h) for row in routed]
    assert [row.c for row in routed] == expected and routed[0].c == 5
    split_buckets = [
        cut for key in version.split for cut in version.alias_table(key).cuts if 0 < cut < BUCKET_SPAN
    ]
    assert len(split_buckets) >= 20  # buckets whose cut separates two candidates, each read on both sides
    assert len(layout.entries) == 2 + 4 + 8 + 8 + 16 + 32  # each key's own buckets, none repeated


def test_the_widest_tables_and_the_highest_channels_are_read_as_the_python_lookup_reads_them(
    spark: SparkSession,
) -> None:
    """N = 2^16: a key over every channel (16 bucket bits, the most there are), one over the three
    highest channels beside its home (channels that fill all 16 bits of an entry's fields), one over
    two; each at its cuts as above, the widest at 300 random buckets and its first and last."""
    rng = np.random.default_rng(11)
    n = 2**16
    home = PartitionFunction(n_channels=n, slot_bits=16, consistent=ConsistentSpec(method="jump"))

    def entry(key: str, others: list[int]) -> SplitEntry:
        candidates = (home.lookup(key), *(c for c in others if c != home.lookup(key)))
        return SplitEntry(candidates, tuple(rng.dirichlet(np.ones(len(candidates))).tolist()))

    version = SplitFunction(
        home,
        {
            "wide": entry("wide", rng.permutation(n).tolist()),
            "high": entry("high", [n - 1, n - 2, n - 3]),
            "pair": entry("pair", [n - 1]),
        },
    )
    assert version.alias_table("wide").bucket_bits == 16
    layout = alias_layout(version)
    cases: list[tuple[int, int]] = []
    for key in version.split:
        table = version.alias_table(key)
        buckets = list(range(len(table.cuts)))
        if key == "wide":
            buckets = sorted({0, len(table.cuts) - 1, *rng.choice(len(table.cuts), 300).tolist()})
        for bucket in buckets:
            cut = table.cuts[bucket]
            middle = int(rng.integers(0, 2 ** (32 - table.bucket_bits))) << 32
            top = bucket << (64 - table.bucket_bits) | middle
            for u in sorted({0, max(cut - 1, 0), min(cut, BUCKET_SPAN - 1), BUCKET_SPAN - 1}):
                unsigned = top | u
                cases.append((layout.codes[key], unsigned - 2**64 if unsigned >= 2**63 else unsigned))
    df = spark.createDataFrame(cases, "code int, h bigint")
    routed = route_split(df, F.col("code"), F.col("h"), layout, channel_col="c").collect()
    by_code = {code: key for key, code in layout.codes.items()}
    assert [row.c for row in routed] == [version.lookup(by_code[row.code], row.h) for row in routed]
    assert max(row.c for row in routed) >= n - 3


def test_partition_puts_each_split_row_in_its_channel_partition(spark: SparkSession) -> None:
    table, keys = rows("int", seed=5)
    version = split_function(7, 10, "ring", keys, 20)
    parted = partition(spark.createDataFrame(table.slice(0, 20_000)).repartition(3), "k", version)
    assert_jvm_only(parted)
    assert parted.columns == ["i", "k", "v", "channel"] and parted.rdd.getNumPartitions() == 7
    got = parted.select(
        F.spark_partition_id().alias("p"), "channel", "k", F.xxhash64(*DEFAULT_ROW_COLS).alias("h")
    ).collect()
    assert len(got) == 20_000
    assert all(row.p == row.channel == version.lookup(row.k, row.h) for row in got)


def test_a_frame_of_keys_alone_hashes_the_key(spark: SparkSession) -> None:
    home = PartitionFunction(n_channels=16, slot_bits=10)
    keys = [f"hot{i}" for i in range(60)]
    entries = {}
    for key in keys:  # each key's home first, then three other channels, unequal weights
        first = home.lookup(key)
        entries[key] = SplitEntry((first, *((first + j) % 16 for j in (3, 7, 11))), (0.1, 0.2, 0.3, 0.4))
    version = SplitFunction(home, entries)
    df = spark.createDataFrame([(key,) for key in [*keys, "cold", *keys]], "k string")
    got = route(df, "k", version).select("k", "channel", F.xxhash64("k").alias("h")).collect()
    assert [row.channel for row in got] == [version.lookup(row.k, row.h) for row in got]
    assert len({row.channel for row in got}) > 4  # the key's hash spreads the keys over candidates


def test_null_keys_go_to_channel_0_and_an_empty_split_table_routes_as_its_home(spark: SparkSession) -> None:
    home = PartitionFunction(n_channels=7, slot_bits=10, explicit={"a": 5, "b": 6})
    version = SplitFunction(home, {"a": SplitEntry((5, 1), (0.5, 0.5))})
    df = spark.createDataFrame([(None, 1), ("b", 2), (None, 3)], "k string, x int")
    assert [row.channel for row in route(df, "k", version).collect()] == [0, 6, 0]
    plain = SplitFunction(home)
    assert route(df, "k", plain).collect() == route(df, "k", home).collect()


def test_bad_row_cols_and_versions_are_invalid_input(spark: SparkSession) -> None:
    version = SplitFunction(
        PartitionFunction(n_channels=3, explicit={"a": 1}), {"a": SplitEntry((1, 2), (0.5, 0.5))}
    )
    df = spark.createDataFrame([("a", 1.5, {"x": 1})], "k string, price double, tags map<string,int>")
    with pytest.raises(
        InvalidInput, match=r"row_cols must be columns Spark can hash: \['tags'\] hold maps or variants"
    ):
        route(df, "k", version)
    with pytest.raises(InvalidInput, match=r"row_cols must name columns .* got unknown \['ts'\]"):
        route(df, "k", version, row_cols=["k", "ts"])
    with pytest.raises(InvalidInput, match="row_cols must name each column once"):
        partition(df, "k", version, row_cols=["k", "k"])
    bad: object
    for bad in ([], "price"):
        with pytest.raises(InvalidInput, match="row_cols must be a non-empty list of column names"):
            route(df, "k", version, row_cols=bad)
    with pytest.raises(InvalidInput, match="version must be a PartitionFunction or a SplitFunction, got str"):
        route(df, "k", version.to_json())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"column 'price' has type double"):
        route(df, "price", version, row_cols=["k"])
    assert route(df, "k", version, row_cols=["k", "price"]).count() == 1
    # A preserving function (or one without split keys) hashes no rows: the map column is no concern
    # unless row_cols names it.
    assert route(df, "k", version.home).select("channel").collect()[0][0] == 1
    assert route(df, "k", SplitFunction(version.home)).count() == 1
    with pytest.raises(InvalidInput, match=r"row_cols must be columns Spark can hash"):
        route(df, "k", version.home, row_cols=["tags"])
