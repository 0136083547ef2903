"""Split functions on Spark: routing cost, balance, and a VWAP-style update against salting.

The DataFrame has ``--rows`` rows (default 10,000,000) of str keys drawn Zipf(``--zipf``, default 1.2)
from ``--keys`` keys (default 1,000,000) with a price, a volume and a row id, generated inside Spark,
cached and materialized before any timing. The functions for ``--channels`` channels (default 32) are
what a controller builds from the batch's exact counts (keys at or above 10^-5 of the rows, per-slot
counts for the rest): the preserving one by ``repart.partitioning.build`` (redist, tail-aware) and the
split one by ``build_split`` (D-Choices, θ = 1/(5N), on the same estimate).

Printed, in one run:

1. ``route()`` alone (noop writes, round robin, medians): no lookup, the home function, the split
   function; and on the rows of unsplit keys only, the home function against the split function,
   which shows what the split machinery costs a row that is not split.
2. ``partition()`` with the split function, and with the preserving one for reference, against
   Spark's ``repartition(N, key)``, taking turns ``--repeat`` times (target: median ratio of the
   split function <= 1.3).
3. Rows per channel, max/mean: the split function (target <= 1.05), the preserving function, and
   hashing (Spark's ``repartition(N, key)`` placement, ``pmod(hash(key), N)``), with b_lb's bound.
4. A VWAP-style sum update (volume, notional and trade count per key) of the rows in two batches,
   then the state read as one row per key: split state (``route``, sums per (channel, key),
   ``repartitionById``, ``update_state``, ``read_merged``) against salting (each split key gets as
   many salts as it has candidates, a two-phase ``groupBy``), the salted sums kept in the same
   state store (``partition`` by the home function, ``update_state``) or as a plain Parquet table
   unioned with each batch; the stores with their default 64 slot groups and with 4. Every result
   is compared key by key with the Parquet one (target: split costs no more than salting).

Run: ``.venv/bin/python benchmarks/spark_split.py [--rows R] [--keys K] [--channels N] [--zipf S]
[--repeat P]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.spark_route import KEY, exact_estimate, noop_seconds

from repart.partitioning import BuildParams, PartitionFunction, build, initial_function
from repart.partitioning.metrics import max_over_mean
from repart.partitioning.split.build import build_split
from repart.partitioning.split.function import SplitFunction
from repart.partitioning.split.params import SplitParams
from repart.protocol.merge import MergeSpec
from repart.spark.route import partition, route
from repart.spark.session import spark_session
from repart.spark.stateful import update_state
from repart.state.merge import merge_function
from repart.state.store import StateStore

TARGET_RATIO = 1.3
TARGET_BALANCE = 1.05
#: The state store's slot groups: its default, and a few (fewer, larger files per channel).
SLOT_GROUPS = (64, 4)
PARQUET = "salting, Parquet state (no store)"
VWAP_ROUNDS = 2
STATE = pa.schema(
    [(KEY, pa.string()), ("volume", pa.int64()), ("notional", pa.float64()), ("trades", pa.int64())]
)
MERGE = MergeSpec.parse("volume=sum,notional=sum,trades=sum")


def zipf_trades(spark: SparkSession, rows: int, keys: int, exponent: float) -> DataFrame:
    """``rows`` trades ``(k, price, volume, id)``, k = ``user-<rank>`` with P(rank) ~ rank^-exponent
    (inverse CDF of the continuous approximation, as benchmarks/spark_route.py)."""
    one_minus_s = 1.0 - exponent
    span = keys**one_minus_s - 1.0
    rank = F.floor(F.pow(F.rand(seed=11) * F.lit(span) + F.lit(1.0), F.lit(1.0 / one_minus_s)))
    df = spark.range(rows, numPartitions=8).select(
        F.concat(F.lit("user-"), F.least(rank, F.lit(keys)).cast("string")).alias(KEY),
        F.round(F.rand(seed=12) * 100 + 1, 2).alias("price"),
        (F.rand(seed=13) * 1_000).cast("long").alias("volume"),
        F.col("id"),
    )
    return df.cache()


def round_robin(cases: dict[str, DataFrame], repeat: int) -> dict[str, float]:
    """Median noop-write time of each case, run round robin (every other round reversed)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for df in cases.values():
        noop_seconds(df)  # warm-up: code generation, JIT
    for run in range(repeat):
        for name in list(cases)[:: 1 if run % 2 == 0 else -1]:
            times[name].append(noop_seconds(cases[name]))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def channel_rows(df: DataFrame, channel: Column | str, n: int) -> list[int]:
    """Rows of ``df`` per value of ``channel`` in [0, n)."""
    counts: dict[int, int] = dict(df.groupBy(channel).count().collect())
    return [int(counts.get(c, 0)) for c in range(n)]


def sums() -> list[Column]:
    """A batch's per-key state: Σ volume, Σ price·volume, and the trade count."""
    return [
        F.sum("volume").alias("volume"),
        F.sum("notional").alias("notional"),
        F.count("id").alias("trades"),
    ]


def merged_sums() -> list[Column]:
    """Partial states merged: every column summed."""
    return [F.sum(name).alias(name) for name in STATE.names[1:]]


def new_store(root: Path, function: PartitionFunction | SplitFunction, slot_groups: int) -> StateStore:
    return StateStore.create(
        root,
        region="vwap",
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=function.slot_bits,
        key_type="str",
        key_col=KEY,
        schema=STATE,
        slot_groups=slot_groups,
    )


def store_combine() -> Callable[[pa.Table, pa.Table], pa.Table]:
    """``update_state``'s combine: the channel's state and its batch sums merged by the region's merge."""
    merge = merge_function(MERGE)
    names, schema = STATE.names, STATE

    def combine(state: pa.Table, rows: pa.Table) -> pa.Table:
        return merge(pa.concat_tables([state, rows.select(names).cast(schema)]))

    return combine


def split_update(
    batches: list[DataFrame], function: SplitFunction, root: Path, *, slot_groups: int
) -> tuple[pa.Table, float, float]:
    """The split-state path: each batch routed, summed per (channel, key) in the JVM (partial sums
    before the shuffle, as salting's ``groupBy`` has), each channel's sums moved to Spark partition i
    = channel i (``repartitionById``, as ``partition`` does) and folded into the channel's partial
    state on its executor with the region's merge; then ``read_merged``. Returns the merged state,
    the update seconds and the read seconds."""
    store, combine = new_store(root, function, slot_groups), store_combine()
    started = time.perf_counter()
    for batch_id, batch in enumerate(batches):
        routed = route(batch, KEY, function, row_cols=["id"]).groupBy("channel", KEY).agg(*sums())
        parted = routed.repartitionById(function.n_channels, "channel")
        store, _, _ = update_state(store, parted, combine, version=1, function=function, batch_id=batch_id)
    updated = time.perf_counter()
    merged = store.read_merged(MERGE)
    return merged, updated - started, time.perf_counter() - updated


def salted_sums(batch: DataFrame, function: SplitFunction) -> DataFrame:
    """Salting's two-phase aggregation of a batch: a split key's rows get a salt in [0, d) (d its
    candidate count, from a broadcast table), sums by (key, salt), then by key."""
    salts = [(key, len(entry.candidates)) for key, entry in function.split.items()]
    salt_map = batch.sparkSession.createDataFrame(salts, f"{KEY} string, salts int")
    salted = batch.join(F.broadcast(salt_map), KEY, "left").withColumn(
        "salt", F.pmod(F.xxhash64("id"), F.coalesce("salts", F.lit(1)))
    )
    return salted.groupBy(KEY, "salt").agg(*sums()).groupBy(KEY).agg(*merged_sums())


def salted_store_update(
    batches: list[DataFrame], function: SplitFunction, root: Path, *, slot_groups: int
) -> tuple[pa.Table, float, float]:
    """Salting into the same state store: each batch's salted sums partitioned by the split
    function's home (a key-preserving function: one state row per key) and folded in by
    ``update_state`` with the same combine; then ``read_merged``."""
    home = function.home
    store, combine = new_store(root, home, slot_groups), store_combine()
    started = time.perf_counter()
    for batch_id, batch in enumerate(batches):
        parted = partition(salted_sums(batch, function), KEY, home)
        store, _, _ = update_state(store, parted, combine, version=1, function=home, batch_id=batch_id)
    updated = time.perf_counter()
    merged = store.read_merged(MERGE)
    return merged, updated - started, time.perf_counter() - updated


def salted_parquet_update(
    batches: list[DataFrame], function: SplitFunction, root: Path
) -> tuple[pa.Table, float, float]:
    """Salting with the state as a plain Parquet table: each batch's salted sums unioned with the
    state, summed by key and written as the new state (no manifest, checksums or fsync); the last
    state is read back with pyarrow."""
    spark = batches[0].sparkSession
    started = time.perf_counter()
    state_path: Path | None = None
    for batch_id, batch in enumerate(batches):
        batch_state = salted_sums(batch, function)
        if state_path is not None:
            old = spark.read.parquet(str(state_path))
            batch_state = old.unionByName(batch_state).groupBy(KEY).agg(*merged_sums())
        state_path = root / f"generation-{batch_id}"
        batch_state.write.parquet(str(state_path))
    updated = time.perf_counter()
    assert state_path is not None
    merged = pq.read_table(state_path).cast(STATE)
    return merged, updated - started, time.perf_counter() - updated


def same_state(a: pa.Table, b: pa.Table) -> bool:
    """Equal keys, volumes and trade counts; notional sums equal to a relative 1e-9."""
    a, b = a.sort_by(KEY), b.sort_by(KEY)
    if a.num_rows != b.num_rows or not a[KEY].equals(b[KEY]):
        return False
    exact = a["volume"].equals(b["volume"]) and a["trades"].equals(b["trades"])
    x, y = a["notional"].to_numpy(), b["notional"].to_numpy()
    return bool(exact and np.allclose(x, y, rtol=1e-9, atol=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent, not 1 (default 1.2)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.zipf == 1.0:
        parser.error("--zipf must not be 1 (the inverse CDF divides by 1 - exponent)")
    n = args.channels

    spark = spark_session(
        "local[2]",
        "spark-split-bench",
        shuffle_partitions=n,
        config={"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"},
    )
    df = zipf_trades(spark, args.rows, args.keys, args.zipf)
    df.count()
    estimate, hot = exact_estimate(df, args.rows)
    top_rows = hot[0]["count"]
    started = time.perf_counter()
    preserve = build(initial_function(n, "str"), estimate, n, BuildParams(tail_aware=True)).function
    preserve_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result = build_split(
        initial_function(n, "str"),
        estimate,
        n,
        split=SplitParams("dchoices"),
        params=BuildParams(tail_aware=True),
    )
    split_seconds = time.perf_counter() - started
    split, report = result.function, result.report
    widths = sorted((len(entry.candidates) for entry in split.split.values()), reverse=True)
    print(
        f"{args.rows:,} rows, {args.keys:,} Zipf({args.zipf}) str keys, N = {n}; local[2], noop writes; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"preserve: redist, tail-aware, {len(preserve.explicit):,} explicit keys ({preserve_seconds:.2f} s); "
        f"split: dchoices, θ = {report.theta:.5f}, {len(split.split)} split keys, candidates "
        f"{widths[:8]}{' ...' if len(widths) > 8 else ''}, d = {report.d}, predicted b = "
        f"{report.predicted_b:.3f}, b_lb = {report.b_lb:.2f}, memory {report.memory:.4f} "
        f"({split_seconds:.2f} s)"
    )

    unsplit = df.where(~F.col(KEY).isin(list(split.split))).cache()
    unsplit_rows = unsplit.count()
    route_times = round_robin(
        {
            "no lookup (bare DataFrame)": df,
            "home function (PartitionFunction)": route(df, KEY, split.home),
            "split function": route(df, KEY, split),
            f"unsplit keys only ({unsplit_rows:,} rows): home function": route(unsplit, KEY, split.home),
            f"unsplit keys only ({unsplit_rows:,} rows): split function": route(unsplit, KEY, split),
        },
        args.repeat,
    )
    unsplit.unpersist()
    print(f"\nroute() alone, round robin, median of {args.repeat} (seconds):")
    for name, seconds in route_times.items():
        print(f"  {name:62s} {seconds:6.2f}")

    shuffles = {
        "partition(split)": partition(df, KEY, split),
        "partition(preserve)": partition(df, KEY, preserve),
        "repartition(N, key)": df.repartition(n, KEY),
    }
    for shuffled in shuffles.values():
        noop_seconds(shuffled)  # warm-up
    print(f"\nfull shuffle (seconds): {'  '.join(shuffles)}  ratios to repartition")
    shuffle_s: dict[str, list[float]] = {name: [] for name in shuffles}
    for run in range(args.repeat):  # the three in turn, starting with another one each run
        order = list(shuffles)[run % 3 :] + list(shuffles)[: run % 3]
        for name in order:
            shuffle_s[name].append(noop_seconds(shuffles[name]))
        own = shuffle_s["repartition(N, key)"][-1]
        split_s, preserve_s = shuffle_s["partition(split)"][-1], shuffle_s["partition(preserve)"][-1]
        print(
            f"  run {run + 1}: {split_s:18.2f} {preserve_s:21.2f} {own:21.2f}   "
            f"{split_s / own:5.2f} {preserve_s / own:5.2f}"
        )
    ratios = {
        name: statistics.median(a / b for a, b in zip(times, shuffle_s["repartition(N, key)"], strict=True))
        for name, times in shuffle_s.items()
    }
    median = ratios["partition(split)"]
    print(
        f"median ratio partition(split) / repartition {median:.2f} (partition(preserve): "
        f"{ratios['partition(preserve)']:.2f}); target <= {TARGET_RATIO}: "
        f"{'PASS' if median <= TARGET_RATIO else 'FAIL'}"
    )

    print("\nrows per channel:            max        min   max/mean")
    loads = {
        "split function": channel_rows(route(df, KEY, split), "channel", n),
        "preserve function": channel_rows(route(df, KEY, preserve), "channel", n),
        "hashing (repartition)": channel_rows(df, F.pmod(F.hash(KEY), F.lit(n)).alias("p"), n),
    }
    for name, counts in loads.items():
        ratio = max_over_mean(np.asarray(counts))
        print(f"  {name:22s} {max(counts):12,} {min(counts):10,} {ratio:9.3f}")
    best = max(top_rows, -(-args.rows // n))
    balance = max(loads["split function"]) / (args.rows / n)
    print(
        f"  (a key-preserving function cannot do better than max {best:,} rows: max/mean "
        f"{best / (args.rows / n):.2f}); split target <= {TARGET_BALANCE}: "
        f"{'PASS' if balance <= TARGET_BALANCE else 'FAIL'}"
    )

    trades = df.select(KEY, "volume", (F.col("price") * F.col("volume")).alias("notional"), "id")
    batches = [trades.where(F.col("id") % 2 == parity) for parity in (0, 1)]
    paths: dict[str, Callable[[Path], tuple[pa.Table, float, float]]] = {}
    for groups in SLOT_GROUPS:
        paths[f"split state, {groups} slot groups"] = partial(
            split_update, batches, split, slot_groups=groups
        )
        paths[f"salting into the store, {groups} slot groups"] = partial(
            salted_store_update, batches, split, slot_groups=groups
        )
    paths[PARQUET] = partial(salted_parquet_update, batches, split)
    root = Path(tempfile.mkdtemp(prefix="repart-split-bench-"))
    vwap_times: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    states: dict[str, pa.Table] = {}
    try:
        for name in paths:  # warm-up: every plan once
            paths[name](root / f"warm-up-{len(states)}")
            states[name] = pa.table({})
        for run in range(VWAP_ROUNDS):  # round robin, every other round reversed
            for index, name in enumerate(list(paths)[:: 1 if run % 2 == 0 else -1]):
                states[name], update_s, read_s = paths[name](root / f"{run}-{index}")
                vwap_times[name].append((update_s, read_s))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\nVWAP-style sum update, 2 batches of {args.rows // 2:,} rows, {len(split.split)} hot keys "
        f"({sum(widths)} salts in all); every path warmed up once, then the median of {VWAP_ROUNDS} "
        "rounds (seconds):"
    )
    print(f"  {'':40s} update   read  total  same state as {PARQUET.split(',')[0]}")
    totals = {name: statistics.median(u + r for u, r in runs) for name, runs in vwap_times.items()}
    for name, runs in vwap_times.items():
        update_s, read_s = statistics.median(u for u, _ in runs), statistics.median(r for _, r in runs)
        print(
            f"  {name:40s} {update_s:6.2f} {read_s:6.2f} {totals[name]:6.2f}  "
            f"{same_state(states[name], states[PARQUET])}"
        )
    for groups in SLOT_GROUPS:
        mine = totals[f"split state, {groups} slot groups"]
        theirs = totals[f"salting into the store, {groups} slot groups"]
        print(
            f"  {groups} slot groups: split / salting into the store {mine / theirs:.2f}, "
            f"split / salting with Parquet state {mine / totals[PARQUET]:.2f}; target <= 1: "
            f"{'PASS' if mine <= theirs else 'FAIL'} (same store), "
            f"{'PASS' if mine <= totals[PARQUET] else 'FAIL'} (Parquet)"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
