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

TARGETS = {"skew_aware_max_load_ratio": 0.9, "skew_aware_worst_ratio": 1.0}


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


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {"skew": skew_section}


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
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
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
    if "skew" in report["sections"]:
        report.update({target: report["sections"]["skew"]["overall"][target] for target in TARGETS})
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
