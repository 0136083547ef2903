"""The state store's per-batch cost against the size of its state, side by side in one run.

A fixed batch of ``--rows`` rows (default 200,000) of str keys drawn Zipf(1.2) from a state of ``S``
keys (``--sizes``, default 10^5, 10^6, 10^7), N = ``--channels`` (default 8), ``--batches`` batches
(default 30) per configuration. A store starts with one row for every key (written straight into base
files), then each batch is partitioned (``repart.spark.partition``) and folded in
(``update_state``), and the store is compacted when a channel is due (``StateStore.compact``, timed
with the batch that made it due). Printed per backend (a local directory, and the local S3 endpoint,
moto's server on loopback):

1. **Growth with the state.** Per-batch time, mean and p95, for a mergeable store (``n=count,
   v=sum``: partials reduced in the JVM, no state read) and a general one (``combine`` over the
   touched keys' rows, upserts), and the ratio of the mean at the largest size to the mean at the
   smallest (targets: mergeable <= 1.3, general <= 3; the mean counts the compactions that fall due),
   and of the medians beside it (``*_growth_median``). Beside them, the full rewrite every batch did
   before this store (each channel read whole, combined, written whole), measured the same way on the
   smallest and largest sizes. Also the memory a batch's tasks added to their Python workers at their
   peak (``ChannelUpdate.peak_bytes``: the worker's peak resident set above its resident set when the
   task started, ``repart.spark.task_memory``; the largest task of a batch, median over the batches)
   at the largest size over the smallest (mergeable, target <= 1.5).
2. **Against Spark's own stateful streaming** (local backend): a Structured Streaming
   ``groupBy(k).agg(count, sum)`` with the RocksDB state store provider, outputMode update, N state
   partitions, one file of the same batch per trigger after a first micro-batch that loads the same
   state; its micro-batch time (``triggerExecution``) against repart's mergeable batch at the largest
   size (target <= 1.5).
3. **Scale-out 32 -> 33** of a store of ``--scale-rows`` rows (default 10^7): bytes written by the
   migration (data files and commit document) over the state's bytes (target <= 1 %), and the bytes a
   read of each channel fetches (``StateStore.read_bytes``) over a fresh store laid out for 33
   channels: the new channel, the worst channel (target <= 1.3) and the whole store, then after
   compaction (worst channel, target <= 1.05). On the local backend the same again with the consistent
   method ``jump`` beside the default (``scale_out_jump``): the new channel's slots scattered over
   every file's row groups, where the default's are one run of each file.

The machine is shared and noisy: every figure is a median or a ratio taken in the same run, and the
load average is printed with it. ``--json FILE`` writes the figures: ``mergeable_growth``,
``general_growth``, ``spark_ratio``, ``scale_out_written_fraction``, ``read_after_scale_out_ratio``,
``read_after_compaction_ratio``, ``memory_growth``, and the same under ``s3``.

Run: ``.venv/bin/python benchmarks/state_scaling.py [--sizes 100000 10000000] [--batches 30]
[--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.s3_endpoint import running

from repart.migration import plan_migration
from repart.partitioning import ConsistentSpec, PartitionFunction, initial_function
from repart.spark.route import partition
from repart.spark.session import spark_session
from repart.spark.stateful import update_state
from repart.state.compact import CompactionPolicy
from repart.state.store import StateStore

KEY = "k"
SCHEMA = pa.schema([(KEY, pa.string()), ("n", pa.int64()), ("v", pa.int64())])
MERGE = {"n": "count", "v": "sum"}
SLOT_BITS = 16
TARGETS = {
    "mergeable_growth": 1.3,
    "general_growth": 3.0,
    "memory_growth": 1.5,
    "spark_ratio": 1.5,
    "scale_out_written_fraction": 0.01,
    "read_after_scale_out_ratio_worst": 1.3,
    "read_after_compaction_ratio_worst": 1.05,
}
#: The consistent method the scale-out is also measured with, beside the default (local backend).
COMPARED_METHOD = "jump"
REPORTED = (
    "mergeable_growth",
    "mergeable_growth_median",
    "general_growth",
    "general_growth_median",
    "memory_growth",
    "full_rewrite_growth",
    "spark_ratio",
    "scale_out_written_fraction",
    "read_after_scale_out_ratio",
    "read_after_scale_out_ratio_new_channel",
    "read_after_scale_out_ratio_worst",
    "read_after_compaction_ratio",
    "read_after_compaction_ratio_worst",
)
S3_OPTIONS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench-secret"}


def add_up(old: pa.Table, rows: pa.Table) -> pa.Table:
    """The general store's combine: the touched keys' counts and sums with the batch's added."""
    batch = rows.group_by(KEY).aggregate([("v", "sum"), (KEY, "count")])
    batch = pa.table({KEY: batch[KEY], "n": batch[f"{KEY}_count"], "v": batch["v_sum"]}, schema=SCHEMA)
    summed = pa.concat_tables([old, batch]).group_by(KEY).aggregate([("n", "sum"), ("v", "sum")])
    return pa.table({KEY: summed[KEY], "n": summed["n_sum"], "v": summed["v_sum"]}, schema=SCHEMA)


def keys_of(ranks: np.ndarray) -> pa.Array:
    """``k<rank>`` strings for integer ranks, built in Arrow (fast at 10^7)."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(pa.scalar("k"), pa.array(ranks).cast(pa.string()), "")


def zipf_batch(seed: int, rows: int, domain: int) -> pa.Table:
    """``rows`` rows whose keys are Zipf(1.2) ranks folded into ``domain``, and a value 1..99."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.2, rows) - 1) % domain
    return pa.table({KEY: keys_of(ranks), "v": rng.integers(1, 100, rows)})


def initial_state(size: int) -> pa.Table:
    """One row per key of a state of ``size`` keys."""
    ranks = np.arange(size)
    return pa.table({KEY: keys_of(ranks), "n": np.ones(size, np.int64), "v": (ranks % 97).astype(np.int64)})


def built_store(
    location: str,
    options: dict[str, str] | None,
    state: pa.Table,
    function: PartitionFunction,
    merge: dict[str, str] | None,
) -> StateStore:
    """A store at ``location`` holding ``state`` routed by ``function``, written straight as base files."""
    store = StateStore.create(
        location, region="bench", version=1, function_digest=function.digest, n_channels=function.n_channels,
        slot_bits=function.slot_bits, key_type="str", key_col=KEY, schema=SCHEMA, merge=merge,
        options=options,
    )  # fmt: skip
    channels = function.lookup_many(state.column(KEY).to_pylist())
    order = np.argsort(channels, kind="stable")
    ordered, sorted_channels = state.take(order), channels[order]
    bounds = np.searchsorted(sorted_channels, np.arange(function.n_channels + 1))
    added = {
        channel: store.write(
            channel, ordered.slice(bounds[channel], bounds[channel + 1] - bounds[channel]), kind="base"
        )
        for channel in range(function.n_channels)
    }
    return store.commit(added, version=1, function_digest=function.digest, n_channels=function.n_channels)


def timed_batches(
    spark: SparkSession, store: StateStore, function: PartitionFunction, size: int, args: argparse.Namespace
) -> dict[str, Any]:
    """``args.batches`` batches folded into ``store``; per-batch seconds (compaction included)."""
    combine = None if store.layout.mergeable else add_up
    seconds, peaks, compactions = [], [], 0
    warm = spark.createDataFrame(zipf_batch(999, args.rows, size))  # a batch not timed: JIT, worker start
    store, _, _ = update_state(store, partition(warm, KEY, function), combine, version=1, function=function)
    for number in range(args.batches):
        frame = spark.createDataFrame(zipf_batch(1000 + number, args.rows, size))
        started = time.perf_counter()
        store, updates, _ = update_state(
            store, partition(frame, KEY, function), combine, version=1, function=function, batch_id=number
        )
        compacted = store.compact(CompactionPolicy())
        seconds.append(time.perf_counter() - started)
        compactions += compacted.compacted
        measured = [update.peak_bytes for update in updates if update.peak_bytes is not None]
        if measured:
            peaks.append(max(measured))
    return {
        "mean_s": statistics.fmean(seconds),
        "p95_s": float(np.percentile(seconds, 95)),
        "median_s": statistics.median(seconds),
        "compactions": compactions,
        "task_peak_bytes": statistics.median(peaks) if peaks else None,
    }


def full_rewrite_batches(
    spark: SparkSession,
    root: Path,
    state: pa.Table,
    function: PartitionFunction,
    size: int,
    batches: int,
    rows: int,
) -> float:
    """The mean per-batch time of rewriting every touched channel whole (the pre-delta store's way):
    each channel's task reads its whole Parquet state, adds the batch and writes it back."""
    channels = function.lookup_many(state.column(KEY).to_pylist())
    for channel in range(function.n_channels):
        pq.write_table(state.filter(pa.array(channels == channel)), root / f"{channel}.parquet")

    def rewrite(batches_in: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        received = list(batches_in)
        if not received:
            return
        channel = TaskContext.get().partitionId()
        path = root / f"{channel}.parquet"
        old = pq.read_table(path)
        new = add_up(old, pa.Table.from_batches(received).select([KEY, "v"]))
        pq.write_table(new, path)
        yield pa.RecordBatch.from_pylist([{"rows": new.num_rows}])

    seconds = []
    for number in range(batches):
        frame = spark.createDataFrame(zipf_batch(1000 + number, rows, size))
        started = time.perf_counter()
        partition(frame, KEY, function).mapInArrow(rewrite, "rows long").collect()
        seconds.append(time.perf_counter() - started)
    return statistics.fmean(seconds)


def spark_streaming_seconds(spark: SparkSession, root: Path, size: int, args: argparse.Namespace) -> float:
    """The median micro-batch time of a RocksDB-backed streaming groupBy over the same batches, after a
    first micro-batch that loads a state of ``size`` keys."""
    source, checkpoint = root / "source", root / "checkpoint"
    source.mkdir()
    schema = "k string, v long"
    pq.write_table(initial_state(size).select([KEY, "v"]), source / "0000.parquet")
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (
        stream.groupBy(KEY).agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("v"))
        .writeStream.outputMode("update").format("noop").option("checkpointLocation", str(checkpoint))
        .start()
    )  # fmt: skip
    try:
        query.processAllAvailable()
        seconds = []
        for number in range(args.batches):
            pq.write_table(zipf_batch(1000 + number, args.rows, size), source / f"{number + 1:04d}.parquet")
            query.processAllAvailable()
            seconds.append(query.lastProgress["durationMs"]["triggerExecution"] / 1000)
        return statistics.median(seconds)
    finally:
        query.stop()


def scale_out(
    location: Callable[[], str],
    options: dict[str, str] | None,
    rows: int,
    consistent: ConsistentSpec | None = None,
) -> dict[str, float]:
    """A store of ``rows`` keys scaled 32 -> 33 (consistent method ``consistent``, by default the
    default): bytes written and bytes read against a fresh store."""
    state = initial_state(rows)
    a = initial_function(32, "str", SLOT_BITS, consistent)
    b = initial_function(33, "str", SLOT_BITS, consistent)
    store = built_store(location(), options, state, a, None)
    state_bytes = sum(entry.bytes for entry in store.all_files())
    result = store.apply(plan_migration(a, b), plan_id=1, region="bench", from_version=1, to_version=2)
    fresh = built_store(location(), options, state, b, None)
    fresh_reads = [fresh.read_bytes(channel) for channel in range(33)]
    after = [store.read_bytes(channel) for channel in range(33)]
    store.compact(CompactionPolicy())
    compacted = [store.read_bytes(channel) for channel in range(33)]
    ratios = [got / want for got, want in zip(after, fresh_reads, strict=True)]
    compacted_ratios = [got / want for got, want in zip(compacted, fresh_reads, strict=True)]
    return {
        "state_bytes": state_bytes,
        "written_bytes": result.written_bytes,
        "scale_out_written_fraction": result.written_bytes / state_bytes,
        "scale_out_seconds": result.seconds,
        "read_after_scale_out_ratio_new_channel": ratios[32],
        "read_after_scale_out_ratio_worst": max(ratios),
        "read_after_scale_out_ratio": sum(after) / sum(fresh_reads),
        "read_after_compaction_ratio_worst": max(compacted_ratios),
        "read_after_compaction_ratio": sum(compacted) / sum(fresh_reads),
    }


def backend_locations(
    name: str, scratch: Path, endpoint: str | None
) -> tuple[Callable[[], str], dict[str, str] | None]:
    """A factory of fresh store locations on ``name`` (local or s3), and the options they need."""
    if name == "local":
        return (lambda: str(scratch / uuid.uuid4().hex)), None
    assert endpoint is not None

    def bucket() -> str:
        bucket_name = f"bench-{uuid.uuid4().hex[:12]}"
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket_name}", method="PUT")).close()
        return f"s3://{bucket_name}/state"

    return bucket, {**S3_OPTIONS, "endpoint": endpoint}


def run_backend(
    spark: SparkSession, name: str, scratch: Path, endpoint: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    location, options = backend_locations(name, scratch, endpoint)
    function = initial_function(args.channels, "str", SLOT_BITS)
    figures: dict[str, Any] = {"sizes": {}}
    for size in args.sizes:
        state = initial_state(size)
        per_size = {}
        for kind, merge in (("mergeable", MERGE), ("general", None)):
            store = built_store(location(), options, state, function, merge)
            per_size[kind] = timed_batches(spark, store, function, size, args)
            got = per_size[kind]
            peak = "-" if got["task_peak_bytes"] is None else f"{got['task_peak_bytes'] / 2**20:.1f} MiB"
            print(
                f"  {name} S={size:>9,} {kind:<9}: mean {got['mean_s']:.2f} s, p95 {got['p95_s']:.2f} s, "
                f"{got['compactions']} compactions, task peak memory {peak}",
                flush=True,
            )
        if name == "local" and size in (args.sizes[0], args.sizes[-1]):
            rewrite_root = scratch / f"rewrite-{size}"
            rewrite_root.mkdir()
            per_size["full_rewrite_mean_s"] = full_rewrite_batches(
                spark, rewrite_root, state, function, size, min(args.batches, 5), args.rows
            )
            print(f"  {name} S={size:>9,} full rewrite (before deltas): mean "
                  f"{per_size['full_rewrite_mean_s']:.2f} s", flush=True)  # fmt: skip
        figures["sizes"][size] = per_size
    small, large = figures["sizes"][args.sizes[0]], figures["sizes"][args.sizes[-1]]
    for kind in ("mergeable", "general"):
        figures[f"{kind}_growth"] = large[kind]["mean_s"] / small[kind]["mean_s"]
        figures[f"{kind}_growth_median"] = large[kind]["median_s"] / small[kind]["median_s"]
    small_peak, large_peak = small["mergeable"]["task_peak_bytes"], large["mergeable"]["task_peak_bytes"]
    if small_peak is None or large_peak is None or small_peak == 0:
        print(f"  {name} memory_growth: not measured (task peaks {small_peak}, {large_peak})", flush=True)
    else:
        figures["memory_growth"] = large_peak / small_peak
    if "full_rewrite_mean_s" in large:
        figures["full_rewrite_growth"] = large["full_rewrite_mean_s"] / small["full_rewrite_mean_s"]
    figures.update(scale_out(location, options, args.scale_rows))
    if name == "local":
        compared = scale_out(location, options, args.scale_rows, ConsistentSpec(COMPARED_METHOD))
        figures[f"scale_out_{COMPARED_METHOD}"] = compared
        print(f"  {name} scale-out 32 -> 33 with {COMPARED_METHOD}: " + ", ".join(
            f"{key} {compared[key]:.4g}" for key in REPORTED if key in compared
        ), flush=True)  # fmt: skip
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--scale-rows", type=int, default=10_000_000)
    parser.add_argument("--backends", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    spark = spark_session(
        "local[2]",
        "state-scaling",
        shuffle_partitions=args.channels,
        config={
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        },
    )  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="repart-state-scaling-"))
    figures: dict[str, Any] = {
        "args": {key: value for key, value in vars(args).items() if key != "json"},
        "load_average_before": load_before,
    }
    try:
        # moto as it is: its conditional puts are not atomic across its request threads
        # (tests/s3_endpoint.py), which no writer here races on.
        with running(atomic=False) as endpoint:
            for name in args.backends:
                print(f"backend {name}:", flush=True)
                result = run_backend(spark, name, scratch, endpoint, args)
                if name == "local":
                    figures.update(result)
                else:
                    figures["s3"] = result
        if "local" in args.backends:
            streaming_root = scratch / "streaming"
            streaming_root.mkdir()
            largest = args.sizes[-1]
            figures["spark_streaming_median_s"] = spark_streaming_seconds(
                spark, streaming_root, largest, args
            )
            figures["spark_ratio"] = (
                figures["sizes"][largest]["mergeable"]["median_s"] / figures["spark_streaming_median_s"]
            )
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    figures["load_average_after"] = os.getloadavg()
    report(figures)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


def report(figures: dict[str, Any]) -> None:
    for scope, values in (("local", figures), ("s3", figures.get("s3", {}))):
        if not values:
            continue
        print(f"{scope}:")
        for name in REPORTED:
            if name in values:
                target = TARGETS.get(name)
                print(f"  {name}: {values[name]:.4f}" + ("" if target is None else f" (target <= {target})"))
    print(f"load average after: {figures['load_average_after']}")


if __name__ == "__main__":
    sys.exit(main())
