"""``partition()`` against Spark's own ``df.repartition(N, key)`` on the same skewed DataFrame.

The DataFrame has ``--rows`` rows (default 10,000,000) of str keys drawn Zipf-like (``--zipf``, default
0.9) from ``--keys`` keys (default 1,000,000), generated inside Spark from ``spark.range``, cached and
materialized before any timing.
The repart function for ``--channels`` channels (default 32) is what a controller would build from the
batch: ``repart.partitioning.build`` (redist) from the exact counts of the keys above a lossy counter's
support (ε = 10^-5) and the per-slot counts, as a tail-aware build: the explicit map holds the hot
keys and slot overrides rebalance the hashed tail.

First the routing mechanisms are timed alone, round robin: a noop write of ``route()``'s output and
of two variants that replace a literal by a broadcast hash join, for the built function and for the
same function with the 5,000 most frequent keys explicit. Then each full shuffle is timed by a noop
write, alternating the two several times since the machine is noisy. Printed: every time, the median of
``partition / repartition`` over the pairs (target <= 1.3), and the largest and smallest channel load
of each, which is what the user buys with the extra work.

Run: ``.venv/bin/python benchmarks/spark_route.py [--rows R] [--keys K] [--channels N] [--zipf S]
[--repeat P]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import numpy as np
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from repart.partitioning import (
    BuildParams,
    BuildReport,
    FrequencyEstimate,
    PartitionFunction,
    build,
    initial_function,
)
from repart.partitioning.domain import DEFAULT_SLOT_BITS
from repart.partitioning.metrics import max_over_mean
from repart.spark.keys import key_column
from repart.spark.route import partition, route
from repart.spark.session import spark_session

TARGET_RATIO = 1.3
SUPPORT = 1e-5  # the lossy counter's ε: keys at or above ε·rows are tracked
KEY = "k"
WIDE_EXPLICIT = 5_000


def zipf_keys(spark: SparkSession, rows: int, keys: int, exponent: float) -> DataFrame:
    """``rows`` str keys ``user-<rank>``, rank in [1, keys] with P(rank) ~ rank^-exponent (inverse CDF)."""
    one_minus_s = 1.0 - exponent
    span = keys**one_minus_s - 1.0
    rank = F.floor(F.pow(F.rand(seed=11) * F.lit(span) + F.lit(1.0), F.lit(1.0 / one_minus_s)))
    df = spark.range(rows, numPartitions=8).select(
        F.concat(F.lit("user-"), F.least(rank, F.lit(keys)).cast("string")).alias(KEY),
        F.col("id").alias("payload"),
    )
    return df.cache()


def exact_estimate(df: DataFrame, rows: int) -> tuple[FrequencyEstimate, list[Row]]:
    """The batch's exact counts as a snapshot would give them: the keys at or above ``SUPPORT`` of the
    rows, the distinct keys and the per-slot tuple counts; and the tracked keys' rows with their counts,
    most frequent first. Also used by ``benchmarks/spark_split.py``."""
    slot_bits = DEFAULT_SLOT_BITS
    counts = df.groupBy(KEY).count()
    distinct = counts.count()
    hot = counts.where(F.col("count") >= SUPPORT * rows).orderBy(F.desc("count")).collect()
    slot_counts = np.zeros(2**slot_bits)
    slot = key_column(df, KEY).slot(slot_bits).alias("slot")
    for row in df.groupBy(slot).count().collect():
        slot_counts[row["slot"]] = row["count"]
    estimate = FrequencyEstimate.from_counts(
        {row[KEY]: float(row["count"]) for row in hot},
        total=rows,
        distinct_estimate=distinct,
        slot_counts=slot_counts,
        slot_bits=slot_bits,
    )
    return estimate, hot


def repart_function(df: DataFrame, rows: int, n: int) -> tuple[PartitionFunction, BuildReport, list[Row]]:
    """The function a controller builds from this batch (hot keys explicit, the tail rebalanced slot by
    slot from the per-slot counts of a snapshot), its build report, and the tracked keys with their
    counts, most frequent first."""
    estimate, hot = exact_estimate(df, rows)
    result = build(initial_function(n, "str"), estimate, n, BuildParams(tail_aware=True))
    return result.function, result.report, hot


def with_wide_explicit_map(version: PartitionFunction, hot: list[Row]) -> PartitionFunction:
    """``version`` with the ``WIDE_EXPLICIT`` most frequent keys explicit, on random channels."""
    rng = np.random.default_rng(5)
    explicit = {row[KEY]: int(rng.integers(version.n_channels)) for row in hot[:WIDE_EXPLICIT]}
    return dataclasses.replace(version, explicit=explicit)


def noop_seconds(df: DataFrame) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def join_variants(df: DataFrame, version: PartitionFunction) -> dict[str, DataFrame]:
    """``route()``'s channel with E, or E and T', as a broadcast hash join instead of a literal."""
    spark = df.sparkSession
    key = key_column(df, KEY, expected="str")
    explicit = spark.createDataFrame(list(version.explicit.items()), "e_key string, e_channel int")
    table = spark.createDataFrame(list(enumerate(version.table.tolist())), "t_slot long, t_channel int")
    with_explicit = df.join(F.broadcast(explicit), key.value == F.col("e_key"), "left")
    literal_table = F.get(
        F.split(F.lit(",".join(map(str, version.table.tolist()))), ","),
        key.slot(version.slot_bits).cast("int"),
    ).cast("int")
    both = with_explicit.join(F.broadcast(table), key.slot(version.slot_bits) == F.col("t_slot"), "left")
    return {
        "E join": with_explicit.select(
            *df.columns, F.when(key.is_null, 0).otherwise(F.coalesce("e_channel", literal_table)).alias("c")
        ),
        "E join, T' join": both.select(
            *df.columns, F.when(key.is_null, 0).otherwise(F.coalesce("e_channel", "t_channel")).alias("c")
        ),
    }


def loads(df: DataFrame) -> list[int]:
    """Rows per Spark partition of ``df``."""
    rows = df.groupBy(F.spark_partition_id().alias("p")).count().collect()
    counts = dict((row["p"], row["count"]) for row in rows)
    return [counts.get(p, 0) for p in range(df.rdd.getNumPartitions())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--zipf", type=float, default=0.9, help="Zipf exponent, not 1 (default 0.9)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if args.zipf == 1.0:
        parser.error("--zipf must not be 1 (the inverse CDF divides by 1 - exponent)")

    spark = spark_session(
        "local[2]",
        "spark-route-bench",
        config={"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"},
    )
    df = zipf_keys(spark, args.rows, args.keys, args.zipf)
    df.count()
    version, report, hot = repart_function(df, args.rows, args.channels)
    print(
        f"{args.rows:,} rows, {args.keys:,} Zipf({args.zipf}) str keys, N = {args.channels}, "
        f"S = {version.slot_bits}, {len(version.explicit):,} explicit keys, "
        f"{len(version.slot_overrides):,} slot overrides; local[2], noop writes; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"build: {report.algorithm}, tail-aware, predicted b = (max/min load)/α = {report.predicted_b:.2f}, "
        f"α = {BuildParams().alpha}"
    )

    wide = with_wide_explicit_map(version, hot)
    key = key_column(df, KEY)
    mechanisms = {"bare slot column (no lookup)": df.select("*", key.slot(version.slot_bits).alias("s"))}
    for name, function in (("built", version), (f"{WIDE_EXPLICIT:,} explicit", wide)):
        mechanisms[f"{name}: route() (literals)"] = route(df, KEY, function)
        for variant, routed in join_variants(df, function).items():
            mechanisms[f"{name}: {variant}"] = routed
    times: dict[str, list[float]] = {name: [] for name in mechanisms}
    for routed in mechanisms.values():
        noop_seconds(routed)  # warm-up
    for run in range(args.repeat):  # round robin, every other round reversed, against the noise
        for name in list(mechanisms)[:: 1 if run % 2 == 0 else -1]:
            times[name].append(noop_seconds(mechanisms[name]))
    print(f"\nroute() alone, round robin, median of {args.repeat} (seconds):")
    for name, seconds in times.items():
        print(f"  {name:42s} {statistics.median(seconds):6.2f}")

    ours, spark_own = partition(df, KEY, version), df.repartition(args.channels, KEY)
    noop_seconds(ours), noop_seconds(spark_own)  # warm-up (code generation, JIT)
    print("\nfull shuffle (seconds):  partition()  repartition(N, key)  ratio")
    ratios = []
    for run in range(args.repeat):
        if run % 2:
            theirs, mine = noop_seconds(spark_own), noop_seconds(ours)
        else:
            mine, theirs = noop_seconds(ours), noop_seconds(spark_own)
        ratios.append(mine / theirs)
        print(f"  run {run + 1}: {mine:21.2f} {theirs:20.2f} {ratios[-1]:6.2f}")
    median = statistics.median(ratios)
    print(
        f"median ratio {median:.2f}; target <= {TARGET_RATIO}: {'PASS' if median <= TARGET_RATIO else 'FAIL'}"
    )

    print("\nchannel loads (rows):       max        min   max/min  max/mean")
    for name, parted in (("partition()", ours), ("repartition(N, key)", spark_own)):
        counts = loads(parted)
        high, low = max(counts), min(counts)
        ratio = max_over_mean(np.asarray(counts))
        print(f"  {name:20s} {high:12,} {low:10,} {high / max(low, 1):9.2f} {ratio:9.2f}")
    best = max(hot[0]["count"], -(-args.rows // args.channels))
    print(f"  (no function can do better than max {best:,}: the mean, or the most frequent key's rows)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
