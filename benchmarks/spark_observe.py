"""observe() against an exact ``groupBy(key).count()`` and the scan floor, side by side in one run.

The batch is generated inside Spark from ``spark.range``: ``--rows`` rows whose string keys ``k<i>``
cover ``--keys`` distinct keys, Zipf-like (one row per key, the rest with a log-uniform rank, P(i) ~
1/(i + 1), Zipf with exponent 1). It is cached and materialized before anything is timed, so all
three read the same in-memory data:

- ``observe()`` with ε = ``--epsilon``, writing its snapshot to a spool directory in a temporary
  folder;
- the exact count ``groupBy(key).count()``, fully computed (``write.format("noop")``);
- the scan floor ``df.agg(max(xxhash64(key)))``: reading the batch and hashing every key, the least
  any snapshot in the JVM costs.

They run in turn, ``--repeat`` rounds after one untimed warm-up round; each one's best time is
reported, and the median over rounds of observe's time divided by the others' in the same round (the
ratio the targets are read on: a burst of load hits both sides of a round alike).
Then the last snapshot is checked against exact counts: its items must be exactly the keys whose exact
count is above ``floor(n / ceil(1/ε))``, each with its exact count and delta 0; every key above δ·n
(δ: the frequency threshold the controller derives for Gedik's default region, resources LCL, α = 1.2,
σ = 0.1, N = 32 channels; ``repart.partitioning.resources.frequency_threshold``) is then among them.

    .venv/bin/python benchmarks/spark_observe.py [--rows 10000000] [--keys 1000000] [--epsilon 5e-4]
        [--repeat 5] [--json FILE]

``--json FILE`` writes ``observe_seconds``, ``groupby_seconds``, ``scan_seconds`` (best of the rounds),
``groupby_ratio`` and ``scan_ratio`` (medians of the per-round ratios), ``retained_all``,
``max_undercount`` (of the keys above δ·n; a key not retained counts its whole count), ``epsilon_n``
and ``exact`` (the items are exactly the keys above the bound, at their exact counts).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from repart.partitioning.resources import Resources, frequency_threshold
from repart.spark.observe import Observation, Window, observe
from repart.spark.session import spark_session
from repart.spark.sinks import SpoolSink

ALPHA, SIGMA, CHANNELS, RESOURCES = 1.2, 0.1, 32, "LCL"


def batch(spark: SparkSession, rows: int, keys: int, partitions: int) -> DataFrame:
    """The cached, materialized batch: one string column ``key``."""
    ids = spark.range(rows, numPartitions=partitions)
    log_uniform = F.floor(F.pow(F.lit(float(keys)), F.rand(seed=7))) - 1  # in [0, keys)
    rank = F.when(F.col("id") < keys, F.col("id")).otherwise(F.least(log_uniform, F.lit(keys - 1)))
    df = ids.select(F.concat(F.lit("k"), rank.cast("bigint").cast("string")).alias("key")).cache()
    df.write.format("noop").mode("overwrite").save()
    return df


def timed_rounds(repeat: int, runs: Sequence[Callable[[int], object]]) -> list[list[float]]:
    """The wall times of each of ``runs`` in ``repeat`` rounds, after one untimed warm-up round.

    Each round runs all of them in turn, so a burst of load on the shared machine hits them alike.
    """
    times: list[list[float]] = [[] for _ in runs]
    for attempt in range(repeat + 1):
        for i, run in enumerate(runs):
            began = time.perf_counter()
            run(attempt)
            if attempt:
                times[i].append(time.perf_counter() - began)
    return times


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median over rounds of one time divided by another of the same round."""
    return statistics.median(a / b for a, b in zip(numerators, denominators, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows in the batch")
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys in the batch")
    parser.add_argument("--epsilon", type=float, default=5e-4, help="observe()'s error bound ε")
    parser.add_argument("--partitions", type=int, default=8, help="Spark partitions of the batch")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (after a warm-up round)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()

    spark = spark_session("local[2]", "repart-bench-observe", config={"spark.driver.memory": "4g"})
    df = batch(spark, args.rows, args.keys, args.partitions)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    observations: list[Observation] = []

    with tempfile.TemporaryDirectory() as spool:
        sink = SpoolSink(spool)

        def run_observe(attempt: int) -> None:
            window = Window(
                attempt, start + timedelta(minutes=attempt), start + timedelta(minutes=attempt + 1)
            )
            observations.append(observe(df, "key", "bench", window, sink, epsilon=args.epsilon))

        def run_group_by(_: int) -> None:
            df.groupBy("key").count().write.format("noop").mode("overwrite").save()

        def run_scan(_: int) -> None:
            df.agg(F.max(F.xxhash64("key"))).collect()

        observe_times, group_by_times, scan_times = timed_rounds(
            args.repeat, [run_observe, run_group_by, run_scan]
        )

    snapshot = observations[-1].snapshot
    n = snapshot.tuples
    bound = n // math.ceil(1 / args.epsilon)  # the document's bound, computed here independently
    delta = frequency_threshold(Resources.parse(RESOURCES), ALPHA, SIGMA, CHANNELS)
    epsilon_n = args.epsilon * n
    items = {item.key: (item.count, item.delta) for item in snapshot.items}
    exact_counts = df.groupBy("key").count()
    above = {row["key"]: row["count"] for row in exact_counts.where(F.col("count") > bound).collect()}
    exact = items == {key: (count, 0) for key, count in above.items()}
    heavy = {row["key"]: row["count"] for row in exact_counts.where(F.col("count") > delta * n).collect()}
    undercounts = [true - items.get(key, (0, 0))[0] for key, true in heavy.items()]
    max_undercount = max(undercounts, default=0)
    retained_all = all(key in items for key in heavy)
    observe_seconds, group_by_seconds, scan_seconds = (
        min(observe_times),
        min(group_by_times),
        min(scan_times),
    )
    ratio_group_by = median_ratio(observe_times, group_by_times)
    ratio_scan = median_ratio(observe_times, scan_times)
    hot = sum(1 for _, count in snapshot.slots or () if count > bound)

    print(
        f"batch: {args.rows:,} rows, {args.keys:,} distinct keys (str, Zipf-like), "
        f"{args.partitions} partitions, cached in memory"
    )
    print(
        f"Spark local[2]; {args.repeat} interleaved rounds after a warm-up round: best and median "
        "seconds, and the median of the per-round ratios"
    )
    print(f"{'':<42}{'best':>7}{'median':>8}  observe / this")
    rows = [
        (f"observe() (ε = {args.epsilon:g}, spool)", observe_times, ""),
        ("groupBy(key).count() (exact, noop)", group_by_times, f"{ratio_group_by:.2f} (target <= 0.7)"),
        ("scan floor agg(max(xxhash64(key)))", scan_times, f"{ratio_scan:.2f} (target <= 5)"),
    ]
    for label, times, ratio in rows:
        print(f"{label:<42}{min(times):>7.2f}{statistics.median(times):>8.2f}  {ratio}")
    print(
        f"snapshot: tuples {n:,}, items {len(items):,}, slots {len(snapshot.slots or ()):,}, "
        f"distinct_estimate {snapshot.distinct_estimate:,} (true {args.keys:,}), "
        f"null keys {observations[-1].null_keys}"
    )
    print(
        f"bound floor(n / ceil(1/ε)) = {bound:,}: {hot:,} hot slots counted by key; items are exactly "
        f"the keys above it at their exact counts (delta 0): {'yes' if exact else 'NO'}"
    )
    print(
        f"δ = {delta:.3g}: frequency_threshold({RESOURCES}, α={ALPHA}, σ={SIGMA}, N={CHANNELS}); "
        f"δ·n = {delta * n:,.0f}"
    )
    print(
        f"keys with exact count > δ·n: {len(heavy)}; retained: {sum(key in items for key in heavy)}; "
        f"largest undercount {max_undercount:,}"
    )
    if args.json is not None:
        figures = {
            "observe_seconds": observe_seconds,
            "groupby_seconds": group_by_seconds,
            "scan_seconds": scan_seconds,
            "groupby_ratio": ratio_group_by,
            "scan_ratio": ratio_scan,
            "retained_all": retained_all,
            "max_undercount": max_undercount,
            "epsilon_n": epsilon_n,
            "exact": exact,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    spark.stop()
    if not (exact and retained_all and max_undercount <= epsilon_n):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
