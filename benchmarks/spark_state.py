"""Spark-managed state: the skew-aware state partition count against a plain rule's count.

Section ``skew``. A stateful Structured Streaming query places each key's state in partition
``pmod(murmur3(key), n)``. For each seed, ``--tuples`` tuples are drawn from Zipf(1.1) truncated to
``--keys`` ranks, the ranks shuffled over distinct string keys ``user-<seed>-<i>``. For each count n a plain
target-utilization rule could pick (``--counts``), ``repart.controller.state_count.choose_state_count``
chooses a count within ±10 % of n from the ``--hot`` most frequent keys (exact counts and Spark hashes)
and the rest as the tail's total. Both counts are then judged by the TRUE maximum partition load, over
every key, placed exactly as Spark places it (``spark_partitions`` of ``spark_hash_strings``): the
ratio chosen / rule per seed; ``skew_aware_max_load_ratio`` is its median and ``skew_aware_worst_ratio``
its maximum, per n and over every (n, seed) pair. Targets: median <= 0.9, worst <= 1.0.

More partitions lower the mean load, so part of the gain can come from choosing a larger count; the
ratio of b = max / mean (``b_ratio``) is printed beside it and shows what placement alone gains. Where
the largest key exceeds the mean partition load at the chosen count, no count helps (the remedy is
split mode): the rows mark it. ``oracle`` is the best ratio any candidate reaches, judged by the true
maximum over every key: no choice among the same candidates does better, so a target below it is out
of reach for the count alone.

The JSON holds ``sections`` (one entry per section run; more sections can be added to ``SECTIONS``),
the headline figures named by the targets at the top level, and the load average before and after.

    .venv/bin/python benchmarks/spark_state.py [--seeds 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repart.controller.state_count import choose_state_count
from repart.partitioning.spark_hash import spark_hash_strings, spark_partitions

TARGETS = {"skew_aware_max_load_ratio": 0.9, "skew_aware_worst_ratio": 1.0, "changes_in_steady_batches": 0}


def zipf_counts(rng: np.random.Generator, keys: int, tuples: int, exponent: float) -> npt.NDArray[np.float64]:
    """The count of each of ``keys`` keys among ``tuples`` draws of a Zipf(``exponent``) law truncated to
    ``keys`` ranks (rank i drawn with probability proportional to i^-exponent), the ranks assigned to
    keys by a random permutation."""
    weights = np.arange(1, keys + 1, dtype=np.float64) ** -exponent
    by_rank = rng.multinomial(tuples, weights / weights.sum())
    counts = np.empty(keys, dtype=np.float64)
    counts[rng.permutation(keys)] = by_rank
    return counts


def true_max_load(hashes: npt.NDArray[np.int32], counts: npt.NDArray[np.float64], n: int) -> float:
    """The busiest of n state partitions, every key placed as Spark places it."""
    return float(np.bincount(spark_partitions(hashes, n), weights=counts, minlength=n).max())


def skew_section(args: argparse.Namespace) -> dict[str, Any]:
    """The skew-aware count against the rule's, per seed and count; see the module docstring."""
    counts_of_n = [int(n) for n in args.counts.split(",")]
    rows: list[dict[str, Any]] = []
    print(
        f"\nskew: Zipf({args.zipf}) over {args.keys} keys, {args.tuples} tuples, hot set {args.hot}, "
        f"tolerance ±{args.tolerance:.0%}, {args.seeds} seeds"
    )
    print(
        f"  {'n':>4} {'seed':>4} {'chosen':>6} {'rule max':>9} {'chosen max':>10} {'ratio':>6} "
        f"{'oracle':>6} {'b rule':>7} {'b chosen':>8} {'b ratio':>7} {'top key':>8} {'choose ms':>9}"
    )
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        counts = zipf_counts(rng, args.keys, args.tuples, args.zipf)
        hashes = spark_hash_strings(pa.array([f"user-{seed}-{i}" for i in range(args.keys)]))
        hot = np.argsort(-counts, kind="stable")[: args.hot]
        tail = float(counts.sum() - counts[hot].sum())
        total = float(counts.sum())
        for n in counts_of_n:
            started = time.perf_counter()
            choice = choose_state_count(hashes[hot], counts[hot], tail, n, 1, args.max_n, args.tolerance)
            choose_ms = (time.perf_counter() - started) * 1000
            true_max = {m: true_max_load(hashes, counts, m) for m in choice.candidates}
            rule_max, chosen_max = true_max[n], true_max[choice.chosen]
            best_max = min(true_max.values())
            row = {
                "n": n,
                "seed": seed,
                "chosen": choice.chosen,
                "rule_true_max_load": rule_max,
                "chosen_true_max_load": chosen_max,
                "ratio": chosen_max / rule_max,
                "oracle_ratio": best_max / rule_max,
                "candidates": len(choice.candidates),
                "rule_true_b": rule_max * n / total,
                "chosen_true_b": chosen_max * choice.chosen / total,
                "b_ratio": (chosen_max * choice.chosen) / (rule_max * n),
                "rule_predicted_b": choice.rule_b,
                "chosen_predicted_b": choice.chosen_b,
                "top_key_share": float(counts.max() / total),
                "dominant_key": choice.dominant_key is not None,
                "choose_ms": choose_ms,
            }
            rows.append(row)
            print(
                f"  {n:>4} {seed:>4} {choice.chosen:>6} {rule_max:>9.0f} {chosen_max:>10.0f} "
                f"{row['ratio']:>6.3f} {row['oracle_ratio']:>6.3f} "
                f"{row['rule_true_b']:>7.3f} {row['chosen_true_b']:>8.3f} "
                f"{row['b_ratio']:>7.3f} {row['top_key_share']:>7.1%}{'*' if row['dominant_key'] else ' '} "
                f"{choose_ms:>9.1f}",
                flush=True,
            )
    print("  (* the largest key exceeds the mean partition load at the chosen count: no count helps)")
    per_n = {str(n): _summary([row for row in rows if row["n"] == n]) for n in counts_of_n}
    overall = _summary(rows)
    print(
        f"\n  {'n':>7} {'median ratio':>12} {'worst ratio':>11} {'median oracle':>13} {'worst oracle':>12} "
        f"{'median b ratio':>14} {'moved off n':>11}"
    )
    for name, summary in [*per_n.items(), ("overall", overall)]:
        print(
            f"  {name:>7} {summary['skew_aware_max_load_ratio']:>12.3f} "
            f"{summary['skew_aware_worst_ratio']:>11.3f} {summary['median_oracle_ratio']:>13.3f} "
            f"{summary['worst_oracle_ratio']:>12.3f} "
            f"{summary['median_b_ratio']:>14.3f} {summary['moved_share']:>11.0%}"
        )
    return {"per_n": per_n, "overall": overall, "rows": rows}


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    ratios = [row["ratio"] for row in rows]
    return {
        "skew_aware_max_load_ratio": statistics.median(ratios),
        "skew_aware_worst_ratio": max(ratios),
        "median_oracle_ratio": statistics.median(row["oracle_ratio"] for row in rows),
        "worst_oracle_ratio": max(row["oracle_ratio"] for row in rows),
        "median_b_ratio": statistics.median(row["b_ratio"] for row in rows),
        "moved_share": sum(row["chosen"] != row["n"] for row in rows) / len(rows),
    }


def _spark() -> Any:
    from tests.spark.state_crash import ROCKSDB

    from repart.spark.session import spark_session

    return spark_session("local[2]", "spark-state-bench", shuffle_partitions=4, config=ROCKSDB)


def crash_section(args: argparse.Namespace) -> dict[str, Any]:
    """``--trials`` trials of a driver killed with SIGKILL while it repartitions (``tests.spark.
    state_crash``): the kill's delay from the start of Spark's repartition, where the child got to, the
    checkpoint's state after the kill, and the recovery's seconds; every trial asserts that the plan
    ends applied and the state equals a batch ``groupBy`` of the input."""
    import tempfile

    from tests.spark.state_crash import CrashBench

    delays = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 8.0][: args.trials]
    trials = []
    with tempfile.TemporaryDirectory() as root:
        bench = CrashBench(_spark(), Path(root))
        print("\ncrash trials (SIGKILL while repartitioning; each recovery checked exact)")
        print(
            f"  {'delay s':>8} {'target':>6} {'child got to':>14} {'after the kill':>15} {'recovery s':>10}"
        )
        for index, delay in enumerate(delays):
            trial = bench.trial(delay, (3, 5, 2, 4, 6)[index % 5])
            trials.append(trial.__dict__)
            print(
                f"  {trial.delay:8.2f} {trial.target:6d} {trial.printed:>14} {trial.after_kill:>15} "
                f"{trial.recovery_seconds:10.1f}"
            )
    outcomes = {
        state: sum(t["after_kill"] == state for t in trials) for state in ("before", "unfinished", "done")
    }
    print(f"  exact after every trial: {len(trials)} of {len(trials)}; states after the kill: {outcomes}")
    return {"trials": trials, "exact": len(trials), "after_kill": outcomes}


def _directory_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def repartition_section(args: argparse.Namespace) -> dict[str, Any]:
    """Spark's offline repartition (4 → 8 partitions) of an aggregation's state of ``--state-rows`` keys
    (a 96-character value each), in seconds per GB of the state's files, against restarting the query
    from an empty checkpoint (which loses the state) and against a full rewrite of the state through
    the state data source (``statestore`` read, written as Parquet)."""
    import tempfile

    from pyspark.sql import functions as F

    from repart.spark.streaming.checkpoint import repartition_checkpoint

    spark = _spark()
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        source, empty, checkpoint = root / "in", root / "empty", root / "ck"
        empty.mkdir()
        keys = spark.range(args.state_rows).select(
            F.concat(F.lit("key-"), F.col("id").cast("string")).alias("k"),
            F.sha2(F.col("id").cast("string"), 384).alias("payload"),
        )
        keys.write.parquet(str(source))

        def run(location: Path, data: Path) -> float:
            started = time.perf_counter()
            stream = spark.readStream.schema("k string, payload string").parquet(str(data))
            query = (
                stream.groupBy("k")
                .agg(F.max("payload").alias("payload"))
                .writeStream.format("noop")
                .outputMode("update")
                .option("checkpointLocation", str(location))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            return time.perf_counter() - started

        build = run(checkpoint, source)
        state_bytes = _directory_bytes(checkpoint / "state")
        gigabytes = state_bytes / 2**30
        repartition = repartition_checkpoint(spark, str(checkpoint), 8).seconds
        restart = run(root / "fresh", empty)
        started = time.perf_counter()
        spark.read.format("statestore").load(str(checkpoint)).write.parquet(str(root / "rewrite"))
        rewrite = time.perf_counter() - started
    figures = {
        "state_rows": args.state_rows,
        "state_bytes": state_bytes,
        "build_seconds": build,
        "repartition_seconds": repartition,
        "repartition_seconds_per_gb": repartition / gigabytes,
        "empty_restart_seconds": restart,
        "rewrite_seconds": rewrite,
        "rewrite_seconds_per_gb": rewrite / gigabytes,
    }
    print(f"\nrepartition of a state of {args.state_rows} keys, {state_bytes / 2**20:.0f} MiB of files")
    print(f"  built in {build:.1f} s (one batch)")
    print(f"  repartition 4 -> 8: {repartition:.1f} s = {figures['repartition_seconds_per_gb']:.1f} s/GB")
    print(f"  restart from an empty checkpoint (the state lost): {restart:.1f} s")
    per_gb = figures["rewrite_seconds_per_gb"]
    print(f"  full rewrite through the state data source: {rewrite:.1f} s = {per_gb:.1f} s/GB")
    if state_bytes < 256 * 2**20:
        print("  (below the 256 MiB asked for: raise --state-rows)")
    return figures


def steady_section(args: argparse.Namespace) -> dict[str, Any]:
    """A managed aggregation under a steady load (``--steady-batches`` batches of equal files, one per
    1 s trigger) with the controller ticking after every batch: the activations decided on a batch
    after the first five (``changes_in_steady_batches``; target 0)."""
    import tempfile

    import pandas as pd
    from pyspark.sql import functions as F

    from repart.controller import service
    from repart.controller.tick import tick
    from repart.spark.streaming import ManagedQuery
    from repart.storage import RegionConfig, make_engine, run_in_transaction, upgrade
    from repart.storage.events import region_events

    spark = _spark()
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        source, checkpoint, db = root / "in", str(root / "ck"), f"sqlite:///{root / 'repart.db'}"
        source.mkdir()
        engine = make_engine(db)
        upgrade(engine)
        config = RegionConfig(
            key_type="str",
            n_channels_initial=4,
            policy="target-utilization",
            max_channels=32,
            engine="spark-state",
        )
        run_in_transaction(engine, lambda session: service.create_region(session, "steady", config))
        tick(engine, "steady")

        def start(location: str) -> Any:
            stream = (
                spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(source))
            )
            totals = stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
            return (
                totals.writeStream.format("noop")
                .outputMode("update")
                .option("checkpointLocation", location)
                .trigger(processingTime="1 second")
                .start()
            )

        def write(index: int) -> None:
            keys = rng.zipf(1.2, args.steady_rows) % 5000
            frame = pd.DataFrame(
                {"k": [f"k{key}" for key in keys], "v": np.ones(args.steady_rows, dtype=np.int64)}
            )
            frame.to_json(source / f".part-{index}", orient="records", lines=True)
            os.rename(source / f".part-{index}", source / f"part-{index:04d}.json")

        for index in range(3):
            write(index)
        managed = ManagedQuery(
            start,
            checkpoint=checkpoint,
            region="steady",
            controller=db,
            tick=True,
            spark=spark,
            trigger_seconds=1.0,
        )
        managed.start()
        measured: list[int] = []
        written = 3
        while len(measured) < args.steady_batches:
            measured += [int(progress["batchId"]) for progress in managed.poll()]
            while written < len(measured) + 3:
                write(written)
                written += 1
            time.sleep(0.2)
        managed.stop()
        events = run_in_transaction(
            engine, lambda session: [(e.kind, e.data_json) for e in region_events(session, "steady")]
        )
    decided = [json.loads(data) for kind, data in events if kind in ("activated", "no-change")]
    activations = [json.loads(data) for kind, data in events if kind == "activated"]
    changes = [data for data in activations if data["considered_seq"] >= measured[4]]
    activated = len(activations)
    utilization = [d["policy_numbers"].get("utilization") for d in decided if d.get("policy_numbers")]
    print(f"\nsteady load: {len(measured)} batches of {args.steady_rows} rows, one per 1 s trigger")
    print(f"  activations in all: {activated}; count changes after the first five batches: {len(changes)}")
    print(f"  utilization per decision: {[round(u, 2) for u in utilization if isinstance(u, float)]}")
    return {"batches": len(measured), "activations": activated, "changes_in_steady_batches": len(changes)}


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "skew": skew_section,
    "crash": crash_section,
    "repartition": repartition_section,
    "steady": steady_section,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"of {', '.join(SECTIONS)}")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--tuples", type=int, default=1_000_000)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--hot", type=int, default=1000)
    parser.add_argument("--counts", default="8,16,32,64", help="the rule's counts n, comma-separated")
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--max-n", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=10, help="crash: trials (at most 10)")
    parser.add_argument("--state-rows", type=int, default=3_000_000, help="repartition: keys of the state")
    parser.add_argument("--steady-batches", type=int, default=30, help="steady: batches measured")
    parser.add_argument("--steady-rows", type=int, default=20_000, help="steady: rows per batch")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.steady_batches < 6:
        parser.error(
            f"--steady-batches: must be at least 6 (five warm-up batches), got {args.steady_batches}"
        )
    chosen = args.sections.split(",")
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; accepted: {', '.join(SECTIONS)}")
    load_before = os.getloadavg()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)} ({os.cpu_count()} cores)")
    report: dict[str, Any] = {
        "args": {key: value for key, value in vars(args).items() if key != "json"},
        "load_average_before": load_before,
        "sections": {},
    }
    for name in chosen:
        report["sections"][name] = SECTIONS[name](args)
    sections = report["sections"]
    if "skew" in sections:
        report.update({target: sections["skew"]["overall"][target] for target in list(TARGETS)[:2]})
    if "repartition" in sections:
        report["repartition_seconds_per_gb"] = sections["repartition"]["repartition_seconds_per_gb"]
    if "steady" in sections:
        report["changes_in_steady_batches"] = sections["steady"]["changes_in_steady_batches"]
    report["load_average_after"] = os.getloadavg()
    print()
    for target, bound in TARGETS.items():
        if target in report:
            met = "met" if report[target] <= bound else "MISSED"
            print(f"{target}: {report[target]:.3f} (target <= {bound}: {met})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in report['load_average_after'])}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
