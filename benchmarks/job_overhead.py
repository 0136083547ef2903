"""A repart job's whole batch against a plain Spark job's, side by side in one run, and where the
batch's time goes.

The plain job is what a user writes without repart: ``repartition(N, key)``, ``groupBy(key).agg``
(count, sum), a full outer join with a Parquet state of the same schema, and the state overwritten
(written to a fresh directory, since Spark cannot overwrite what it reads). The repart job is a
``StatefulJob`` (mergeable state ``trades=count,volume=sum(qty)``, a SQLite controller, N channels,
fixed policy) whose ``process(df, batch_id)`` applies, routes, updates, observes, reports,
compacts and vacuums. Both start from a state of ``--keys`` keys (default 10^5), loaded untimed.
Each batch is an in-memory DataFrame of tickers drawn Zipf(1.2) from the keys, cached and counted
before it is timed. Rounds alternate the two jobs on the same batch, after an untimed warm-up round.

1. ``small_batch_ratio``: a batch of ``--small-rows`` (10,000) rows, repart over plain (target <= 3).
2. ``large_batch_ratio``: a batch of ``--large-rows`` (2,000,000) rows (target <= 1.3);
   ``large_batch_ratio_split``: the same in split mode (a D-Choices split function, built by the
   controller from the warm-up batches' snapshots) against the same plain job.
   In split mode the stateful stage's tasks (the stage whose tasks fold the channels, and the plain
   job's stage that aggregates, joins and writes) are timed from Spark's event log (each task's
   executor run time): ``split_longest_task_ratio``, repart's longest task over plain Spark's
   (target <= 1), and ``split_task_max_over_mean`` (target <= 1.25), medians over the rounds.
3. ``observe_ratio``: a job's update counts the batch's snapshot as it folds it, so observing costs no
   pass of its own; the update, observe and compact steps of the key-preserving large batch together
   (the state update with its snapshot and the compaction it makes due), over an exact
   ``groupBy(key).count()`` plus the plain job (the plain state update) on the same batch (target
   <= 0.7).
   ``observe_alone_ratio``: ``observe`` run on its own (two passes, the second over the hot slots'
   rows) over the ``groupBy``, for a batch that no update reads.
4. ``foreach_batch_ratio``: a Structured Streaming query whose ``foreachBatch`` is ``job.foreach_batch``,
   one small-batch file per trigger: its micro-batch time (``triggerExecution``) over ``process`` of
   the same batch read from the same file (target <= 1.2); ``foreach_batch_add_batch_ratio``: the
   part of it Spark spends calling ``foreach_batch`` (``addBatch``), the rest being the query's own
   bookkeeping (listing the source, writing the offset and commit logs).

Every ratio is the median over rounds of the per-round ratio (a burst of load hits both sides of a
round alike); the medians of ``BatchResult.steps`` show where repart's batch time goes. A compaction
falls due every few large batches, so for the large batches and ``observe_ratio`` the JSON also holds
every round's times and the ratio of the means (``ratio_of_means``), which counts the rounds that
compacted. The load average is printed before and after.

    .venv/bin/python benchmarks/job_overhead.py [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repart.controller.tick import tick
from repart.spark import StatefulJob
from repart.spark.observe import Window, observe
from repart.spark.session import spark_session
from repart.spark.sinks import SpoolSink

KEY = "ticker"
STATE = pa.schema([(KEY, pa.string()), ("trades", pa.int64()), ("volume", pa.int64())])
MERGE = "trades=count,volume=sum(qty)"
WINDOW = Window(seq=0, start=datetime(2026, 1, 1, tzinfo=UTC), end=datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC))
TARGETS = {
    "small_batch_ratio": 3.0,
    "large_batch_ratio": 1.3,
    "large_batch_ratio_split": 1.3,
    "split_longest_task_ratio": 1.0,
    "split_task_max_over_mean": 1.25,
    "observe_ratio": 0.7,
    "foreach_batch_ratio": 1.2,
}


def zipf_batch(spark: SparkSession, seed: int, rows: int, keys: int) -> DataFrame:
    """``rows`` trades whose tickers are Zipf(1.2) ranks folded into ``keys``, cached and counted."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.2, rows) - 1) % keys
    table = pa.table(
        {
            KEY: pc.binary_join_element_wise(pa.scalar("T"), pa.array(ranks).cast(pa.string()), ""),
            "qty": rng.integers(1, 10, rows),
        }
    )
    frame = spark.createDataFrame(table.to_pandas()).cache()
    frame.count()
    return frame


def initial_rows(spark: SparkSession, keys: int) -> DataFrame:
    """One trade of every key: the batch that loads the state before anything is timed."""
    names = pc.binary_join_element_wise(pa.scalar("T"), pa.array(np.arange(keys)).cast(pa.string()), "")
    return spark.createDataFrame(pa.table({KEY: names, "qty": np.ones(keys, np.int64)}).to_pandas())


class PlainJob:
    """The job without repart: repartition, aggregate, full outer join with the Parquet state, write."""

    def __init__(self, spark: SparkSession, root: Path, channels: int, keys: int) -> None:
        self.spark, self.root, self.channels = spark, root, channels
        self.generation = 0
        names = pc.binary_join_element_wise(pa.scalar("T"), pa.array(np.arange(keys)).cast(pa.string()), "")
        self.path(0).mkdir(parents=True)
        ones = np.ones(keys, np.int64)
        pq.write_table(
            pa.table({KEY: names, "trades": ones, "volume": ones}), self.path(0) / "part-0.parquet"
        )

    def path(self, generation: int) -> Path:
        return self.root / f"state-{generation}"

    def process(self, batch: DataFrame) -> float:
        started = time.perf_counter()
        delta = (
            batch.repartition(self.channels, KEY)
            .groupBy(KEY)
            .agg(F.count(F.lit(1)).alias("n"), F.sum("qty").alias("q"))
        )
        state = self.spark.read.parquet(str(self.path(self.generation)))
        joined = state.join(delta, KEY, "full_outer").select(
            KEY,
            (F.coalesce("trades", F.lit(0)) + F.coalesce("n", F.lit(0))).alias("trades"),
            (F.coalesce("volume", F.lit(0)) + F.coalesce("q", F.lit(0))).alias("volume"),
        )
        joined.write.mode("overwrite").parquet(str(self.path(self.generation + 1)))
        shutil.rmtree(self.path(self.generation))
        self.generation += 1
        return time.perf_counter() - started


def repart_job(root: Path, channels: int, split: bool, spark: SparkSession, keys: int) -> StatefulJob:
    """A StatefulJob on its own SQLite database and store, its state loaded; in split mode warmed up
    until the controller routes with a split function."""
    job = StatefulJob(
        f"sqlite:///{root / 'repart.db'}", region="trades", key=KEY, state=root / "state", schema=STATE,
        merge=MERGE,
    )  # fmt: skip
    job.ensure_region(channels=channels, policy="fixed", **({"split_scheme": "dchoices"} if split else {}))
    job.process(initial_rows(spark, keys), 0)
    if split:
        assert job.engine is not None
        for warm in range(1, 6):
            job.process(zipf_batch(spark, 100 + warm, 200_000, keys), warm)
            tick(job.engine, "trades")
            if job.client.applied_function("trades").function.kind == "split":
                job.process(zipf_batch(spark, 200 + warm, 10_000, keys), 100 + warm)  # applies the plan
                break
        else:
            raise SystemExit("the controller built no split function from the warm-up batches")
    return job


def paired(
    rounds: int, make_batch: Callable[[int], DataFrame], *sides: Callable[[DataFrame], float]
) -> list[list[float]]:
    """Each of ``sides`` timed on the same batch per round, in turn, after an untimed warm-up round:
    one list of times per side. The order of the sides is reversed every other round, so that what a
    side leaves behind (a warmer JIT, garbage to collect, busy Python workers) weighs on each side as
    often."""
    times: list[list[float]] = [[] for _ in sides]
    for number in range(rounds + 1):
        batch = make_batch(number)
        order = range(len(sides)) if number % 2 else range(len(sides) - 1, -1, -1)
        by_side = {index: sides[index](batch) for index in order}
        measured = [by_side[index] for index in range(len(sides))]
        batch.unpersist()
        if number:
            for side_times, seconds in zip(times, measured, strict=True):
                side_times.append(seconds)
    return times


def described(
    spark: SparkSession, prefix: str, side: Callable[[DataFrame], float]
) -> Callable[[DataFrame], float]:
    """``side`` with its Spark jobs described as ``prefix-<call number>`` (the event log's handle on
    them; call 0 is the warm-up)."""
    calls = itertools.count()

    def run(batch: DataFrame) -> float:
        spark.sparkContext.setJobDescription(f"{prefix}-{next(calls)}")
        try:
            return side(batch)
        finally:
            spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    return run


def last_stage_task_times(event_log: Path) -> dict[str, list[float]]:
    """Per job description, the executor run times (seconds) of the tasks of the last stage that ran
    under it (the stage that writes: repart's channel tasks, the plain job's join and write), read
    from Spark's event log."""
    stage_description: dict[int, str] = {}
    task_times: dict[int, list[float]] = {}
    with event_log.open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                description = (event.get("Properties") or {}).get("spark.job.description")
                if description:
                    for stage in event["Stage IDs"]:
                        stage_description[stage] = description
            elif (
                kind == "SparkListenerTaskEnd" and event.get("Task End Reason", {}).get("Reason") == "Success"
            ):
                task_times.setdefault(event["Stage ID"], []).append(
                    event["Task Metrics"]["Executor Run Time"] / 1000
                )
    last: dict[str, int] = {}
    for stage in task_times:
        description = stage_description.get(stage)
        if description is not None and stage > last.get(description, -1):
            last[description] = stage
    return {description: task_times[stage] for description, stage in last.items()}


def grouped(batch: DataFrame) -> float:
    """An exact ``groupBy(key).count()`` of ``batch``, written to Spark's no-op sink: its seconds."""
    started = time.perf_counter()
    batch.groupBy(KEY).count().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def batch_figures(ours: list[float], theirs: list[float], steps: dict[str, list[float]]) -> dict[str, Any]:
    """Both sides' times per round and their medians, repart's steps per round and their medians (the
    warm-up round's left out), and the ratio of the two sides' mean times: the statistic that counts
    the compactions falling due in some rounds, which the median of the per-round ratios leaves out
    when they fall in fewer than half of them."""
    return {
        "repart_s": ours,
        "plain_s": theirs,
        "repart_median_s": statistics.median(ours),
        "plain_median_s": statistics.median(theirs),
        "ratio_of_means": statistics.mean(ours) / statistics.mean(theirs),
        "steps_s": {step: values[1:] for step, values in steps.items()},
        "steps_median_s": {step: statistics.median(values[1:]) for step, values in steps.items()},
    }


def split_task_figures(events: Path, rounds: int) -> dict[str, Any]:
    """The split rounds' stateful-stage task times from the event log in ``events``: per round,
    repart's longest task over the plain job's and repart's max/mean (and the plain job's), medians."""
    (log,) = events.iterdir()
    tasks = last_stage_task_times(log)
    longest, ours, theirs = [], [], []
    for number in range(1, rounds + 1):
        repart, plain = tasks[f"split-repart-{number}"], tasks[f"split-plain-{number}"]
        longest.append(max(repart) / max(plain))
        ours.append(max(repart) / statistics.mean(repart))
        theirs.append(max(plain) / statistics.mean(plain))
    return {
        "split_longest_task_ratio": statistics.median(longest),
        "split_task_max_over_mean": statistics.median(ours),
        "split_task_max_over_mean_plain": statistics.median(theirs),
        "split_task_rounds": {"longest_ratio": longest, "max_over_mean": ours, "max_over_mean_plain": theirs},
    }


def median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def streaming_ratio(spark: SparkSession, root: Path, args: argparse.Namespace) -> dict[str, float]:
    """Per micro-batch time of ``foreach_batch`` in a streaming query against ``process`` on the same
    batches, each job with its own region and store (both loaded alike), so neither finds the other's
    batches absorbed."""
    streamed = repart_job(root / "streamed", args.channels, False, spark, args.keys)
    processed = repart_job(root / "processed", args.channels, False, spark, args.keys)
    incoming = root / "incoming"
    incoming.mkdir()
    query_times, process_times, in_foreach_batch = [], [], []
    stream = spark.readStream.schema(f"{KEY} string, qty long").option("maxFilesPerTrigger", 1)
    query = (
        stream.parquet(str(incoming)).writeStream.foreachBatch(streamed.foreach_batch)
        .option("checkpointLocation", str(root / "checkpoint")).trigger(processingTime="100 milliseconds")
        .start()
    )  # fmt: skip
    try:
        for number in range(args.rounds + 1):
            batch = zipf_batch(spark, 5000 + number, args.small_rows, args.keys)
            staged = root / f".{number}.parquet"
            batch.toPandas().to_parquet(staged)
            os.replace(staged, incoming / f"{number:04d}.parquet")
            query.processAllAvailable()
            progress = query.lastProgress
            timed = progress["durationMs"]["triggerExecution"] / 1000
            inside = progress["durationMs"]["addBatch"] / 1000  # Spark's call of foreach_batch
            # The same batch read the same way: the query reads the file, so process reads it too.
            same = spark.read.schema(f"{KEY} string, qty long").parquet(
                str(incoming / f"{number:04d}.parquet")
            )
            process_seconds = processed.process(same, 10_000 + number).seconds
            batch.unpersist()
            if number:
                query_times.append(timed)
                process_times.append(process_seconds)
                in_foreach_batch.append(inside)
    finally:
        query.stop()
    return {
        "foreach_batch_median_s": statistics.median(query_times),
        "foreach_batch_add_batch_median_s": statistics.median(in_foreach_batch),
        "process_median_s": statistics.median(process_times),
        "foreach_batch_ratio": median_ratio(query_times, process_times),
        "foreach_batch_add_batch_ratio": median_ratio(in_foreach_batch, process_times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--small-rows", type=int, default=10_000)
    parser.add_argument("--large-rows", type=int, default=2_000_000)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    figures: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}}
    figures["load_average_before"] = os.getloadavg()
    print(f"load average before: {figures['load_average_before']}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="repart-job-overhead-"))
    events = scratch / "events"
    events.mkdir()
    spark = spark_session(
        "local[2]", "job-overhead", shuffle_partitions=args.channels,
        config={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.rolling.enabled": "false",  # one file, as plain JSON lines
            "spark.eventLog.compress": "false",
        },
    )  # fmt: skip
    steps: dict[str, list[float]] = {}

    batch_ids = itertools.count(1_000)  # one sequence for every job: ids grow from batch to batch

    def timed(job: StatefulJob) -> Callable[[DataFrame], float]:
        def run(batch: DataFrame) -> float:
            result = job.process(batch, next(batch_ids))
            for step, seconds in result.steps.items():
                steps.setdefault(step, []).append(seconds)
            return result.seconds

        return run

    try:
        plain = PlainJob(spark, scratch / "plain", args.channels, args.keys)
        job = repart_job(scratch / "preserve", args.channels, False, spark, args.keys)
        steps.clear()
        ours, theirs = paired(
            args.rounds, lambda n: zipf_batch(spark, n, args.small_rows, args.keys), timed(job), plain.process
        )
        figures["small_batch"] = batch_figures(ours, theirs, steps)
        figures["small_batch_ratio"] = median_ratio(ours, theirs)
        print(f"small batch: {figures['small_batch']}", flush=True)
        steps.clear()
        ours, theirs, grouped_times = paired(
            args.rounds, lambda n: zipf_batch(spark, 20 + n, args.large_rows, args.keys), timed(job),
            plain.process, grouped,
        )  # fmt: skip
        figures["large_batch"] = batch_figures(ours, theirs, steps)
        figures["large_batch_ratio"] = median_ratio(ours, theirs)
        print(f"large batch: {figures['large_batch']}", flush=True)
        # The large batch's update, observe and compact steps (warm-up left out) against groupBy + plain.
        counted = [
            update + observed + compacted
            for update, observed, compacted in zip(
                steps["update"][1:], steps["observe"][1:], steps["compact"][1:], strict=True
            )
        ]
        separate = [g + p for g, p in zip(grouped_times, theirs, strict=True)]
        figures["observe"] = {
            "update_observe_compact_s": counted,
            "groupby_and_plain_s": separate,
            "ratio_of_means": statistics.mean(counted) / statistics.mean(separate),
            "update_observe_compact_median_s": statistics.median(counted),
            "groupby_median_s": statistics.median(grouped_times),
            "groupby_and_plain_median_s": statistics.median(separate),
        }
        figures["observe_ratio"] = median_ratio(counted, separate)
        split_job = repart_job(scratch / "split", args.channels, True, spark, args.keys)
        steps.clear()
        ours, theirs = paired(
            args.rounds,
            lambda n: zipf_batch(spark, 50 + n, args.large_rows, args.keys),
            described(spark, "split-repart", timed(split_job)),
            described(spark, "split-plain", plain.process),
        )
        figures["large_batch_split"] = batch_figures(ours, theirs, steps)
        figures["large_batch_ratio_split"] = median_ratio(ours, theirs)
        spool = scratch / "spool"
        spool.mkdir()

        def observed(batch: DataFrame) -> float:
            started = time.perf_counter()
            observe(batch, KEY, "bench", WINDOW, SpoolSink(spool), epsilon=1e-4)
            for leftover in spool.glob("*.json"):
                leftover.unlink()
            return time.perf_counter() - started

        alone, theirs = paired(
            args.rounds, lambda n: zipf_batch(spark, 70 + n, args.large_rows, args.keys), observed, grouped
        )
        figures["observe"].update(
            {
                "observe_alone_median_s": statistics.median(alone),
                "observe_alone_groupby_median_s": statistics.median(theirs),
            }
        )
        figures["observe_alone_ratio"] = median_ratio(alone, theirs)
        figures.update(streaming_ratio(spark, scratch / "stream", args))
        spark.stop()  # the event log is complete once the application ends
        figures.update(split_task_figures(events, args.rounds))
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    figures["load_average_after"] = os.getloadavg()
    for name, target in TARGETS.items():
        print(f"{name}: {figures[name]:.3f} (target <= {target})")
    print(f"load average after: {figures['load_average_after']}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
