"""update_state with a split function (DESIGN §11.3): one partial row per (key, channel), each the
aggregate of the rows routed to that channel, and read_merged equal to a plain aggregation of all input.

The oracles are pure Python: the routing of each row by ``SplitFunction.lookup(key, row_hash)`` (the
row hash collected from Spark) and sums over the input rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning import PartitionFunction
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.merge import MergeSpec
from repart.spark.route import partition, route
from repart.spark.stateful import _partials, update_state
from repart.state.store import StateStore

N = 5
SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
MERGE = MergeSpec.parse("n=sum,total=sum")


def add_up(state: pa.Table, rows: pa.Table) -> pa.Table:
    """The channel's state plus its batch rows: per key, the row count and the sum of ``v``."""
    batch = rows.group_by("k").aggregate([("v", "sum"), ("k", "count")])
    batch = pa.table({"k": batch["k"], "n": batch["k_count"], "total": batch["v_sum"]}, schema=SCHEMA)
    summed = pa.concat_tables([state, batch]).group_by("k").aggregate([("n", "sum"), ("total", "sum")])
    return pa.table({"k": summed["k"], "n": summed["n_sum"], "total": summed["total_sum"]}, schema=SCHEMA)


def batch(seed: int, rows: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.3, rows) % 2_000
    return pa.table(
        {
            "k": [f"key-{k}" for k in keys.tolist()],
            "v": rng.integers(1, 100, rows),
            "seq": np.arange(rows) + seed * rows,  # distinct rows, so that rows of a key spread
        }
    )


def split_version(table: pa.Table) -> SplitFunction:
    """The 6 most frequent keys split over 2 to N channels, one of them explicit in the home."""
    hot = [key for key, _ in Counter(table["k"].to_pylist()).most_common(6)]
    home = PartitionFunction(n_channels=N, key_type="str", explicit={hot[0]: 4})
    split = {}
    for index, key in enumerate(hot):
        d = 2 + index % (N - 1)
        others = [channel for channel in range(N) if channel != home.lookup(key)][: d - 1]
        split[key] = SplitEntry((home.lookup(key), *others), tuple([1 / d] * d))
    return SplitFunction(home, split)


#: The mergeable stores' merge: ``n`` counts a key's rows, ``total`` sums their ``v``.
COUNTED = {"n": "count", "total": "sum"}


def new_store(
    root: Path, version: PartitionFunction | SplitFunction, merge: dict[str, str] | None = None
) -> StateStore:
    """An empty store laid out by ``version``: general, or mergeable by ``merge``."""
    return StateStore.create(
        root,
        region="vwap",
        version=1,
        function_digest=version.digest,
        n_channels=N,
        slot_bits=version.slot_bits,
        key_type="str",
        key_col="k",
        schema=SCHEMA,
        slot_groups=4,
        merge=merge,
    )


def test_update_state_keeps_one_partial_row_per_key_and_channel(spark: SparkSession, tmp_path: Path) -> None:
    first, second = batch(1), batch(2)
    version = split_version(first)
    store = new_store(tmp_path / "state", version)
    expected: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])  # (key, channel) → n, total
    for batch_id, table in enumerate((first, second)):
        df = spark.createDataFrame(table)
        # The default row hash: every column but the key.
        hashes = df.select(F.xxhash64(*(c for c in df.columns if c != "k")).alias("h")).toArrow()["h"]
        hashes = hashes.to_pylist()
        for key, value, row_hash in zip(table["k"].to_pylist(), table["v"].to_pylist(), hashes, strict=True):
            partial = expected[(key, version.lookup(key, row_hash))]
            partial[0] += 1
            partial[1] += value
        store, updates, _ = update_state(
            store, partition(df, "k", version), add_up, version=1, function=version, batch_id=batch_id
        )
        assert sum(update.input_rows for update in updates) == table.num_rows

    state = store.read()
    got = {
        (row["k"], row["channel"]): [row["n"], row["total"]] for row in state.to_pylist()
    }  # one row per (key, channel): the dict would lose a duplicate
    assert len(got) == state.num_rows and got == dict(expected)
    spread = Counter(key for key, _ in got)
    assert all(spread[key] >= 2 for key in version.split) and max(spread.values()) == N

    merged = store.read_merged(MERGE)
    everything = pa.concat_tables([first, second])
    oracle: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, value in zip(everything["k"].to_pylist(), everything["v"].to_pylist(), strict=True):
        oracle[key][0] += 1
        oracle[key][1] += value
    assert merged.schema == SCHEMA and merged.num_rows == len(oracle)
    assert {row["k"]: [row["n"], row["total"]] for row in merged.to_pylist()} == dict(oracle)


def test_a_split_store_refuses_the_home_function_alone(spark: SparkSession, tmp_path: Path) -> None:
    table = batch(3, 500)
    version = split_version(table)
    store = new_store(tmp_path / "state", version)
    frame = partition(spark.createDataFrame(table), "k", version.home)
    with pytest.raises(InvalidInput, match=r"function must be the store's layout"):
        update_state(store, frame, add_up, version=1, function=version.home)
    assert StateStore.open(tmp_path / "state").generation == 0


def test_a_mergeable_update_keeps_each_rows_candidate_in_its_partial(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A mergeable store under a split function: routed rows (no partition()) aggregate on their
    channel's partition, so each (key, channel) partial sums exactly the rows the row hash sent there."""
    table = batch(5)
    version = split_version(table)
    store = new_store(tmp_path / "state", version, COUNTED)
    df = spark.createDataFrame(table)
    hashes = df.select(F.xxhash64(*(c for c in df.columns if c != "k")).alias("h")).toArrow()["h"].to_pylist()
    expected: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for key, value, row_hash in zip(table["k"].to_pylist(), table["v"].to_pylist(), hashes, strict=True):
        partial = expected[(key, version.lookup(key, row_hash))]
        partial[0] += 1
        partial[1] += value
    store, updates, _ = update_state(
        store, route(df, "k", version), version=1, function=version, sources={"total": "v"}
    )
    assert sorted((update.channel, update.input_rows) for update in updates) == sorted(
        Counter(channel for (_, channel), (n, _) in expected.items() for _ in range(n)).items()
    )
    state = store.read()
    got = {(row["k"], row["channel"]): [row["n"], row["total"]] for row in state.to_pylist()}
    assert len(got) == state.num_rows and got == dict(expected)


def plan_lines(frame: DataFrame) -> list[str]:
    """The physical plan Spark would run for ``frame``, one node per line, the root first."""
    return str(frame._jdf.queryExecution().executedPlan().toString()).splitlines()


def test_a_mergeable_update_reduces_by_key_before_any_shuffle_unless_keys_are_split(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Under a key-preserving function the batch is reduced by key in each map task before the first
    shuffle (its rows are neither routed nor shuffled one by one); under a split function the routed
    rows are shuffled once, to their channel, and aggregated there."""
    table = batch(6, 2000)
    split = split_version(table)
    for function in (split.home, split):
        store = new_store(tmp_path / function.kind, function, COUNTED)
        lines = plan_lines(
            _partials(
                route(spark.createDataFrame(table), "k", function), store, function, "channel", {"total": "v"}
            )
        )
        exchanges = [number for number, line in enumerate(lines) if "Exchange " in line]
        if function.kind == "preserve":
            (partial,) = [number for number, line in enumerate(lines) if "partial_count" in line]
            assert len(exchanges) == 2 and "shufflepartitionidpassthrough" in lines[exchanges[0]]
            assert "hashpartitioning(k#" in lines[exchanges[1]] and exchanges[1] < partial  # above it
            assert "HashAggregate" in lines[partial] and "Scan" in lines[-1]
            assert not any("xxhash64" in line for line in lines[partial:])  # no row is routed
        else:
            assert len(exchanges) == 1 and "shufflepartitionidpassthrough" in lines[exchanges[0]]
            assert "HashAggregate(keys=[channel#" in lines[exchanges[0] - 1]
            assert not any("HashAggregate" in line for line in lines[exchanges[0] :])  # after it only


def test_a_split_update_places_channels_whatever_spark_requires_of_a_clustering(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A session that requires every clustering key of a distribution (the channel partitioning then
    does not cluster by (channel, key)) still gets each channel's partials on the channel's task."""
    table = batch(7, 3000)
    version = split_version(table)
    store = new_store(tmp_path / "state", version, COUNTED)
    setting = "spark.sql.requireAllClusterKeysForDistribution"
    before = spark.conf.get(setting, None)
    spark.conf.set(setting, "true")
    try:
        store, updates, _ = update_state(
            store, route(spark.createDataFrame(table), "k", version), version=1, function=version,
            sources={"total": "v"},
        )  # fmt: skip
    finally:
        if before is None:
            spark.conf.unset(setting)
        else:
            spark.conf.set(setting, before)
    assert sum(update.input_rows for update in updates) == table.num_rows
    merged = {row["k"]: [row["n"], row["total"]] for row in store.read_merged(MERGE).to_pylist()}
    oracle: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, value in zip(table["k"].to_pylist(), table["v"].to_pylist(), strict=True):
        oracle[key][0] += 1
        oracle[key][1] += value
    assert merged == dict(oracle)
