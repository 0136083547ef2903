"""Batched LossyCounter.update against plain item-by-item lossy counting, side by side in one run.

Both count the same Zipf stream with the same epsilon; the script checks that they end with the same
table (key, count, delta) and prints the throughput of each and the ratio. The batched counter runs
twice: the whole stream in one call, and in batches of ``--batch`` tuples as a simulator feeds it.

    .venv/bin/python benchmarks/lossy_counter.py [--n 1000000] [--epsilon 1e-4 1.7e-5] [--zipf 1.2]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from repart.partitioning.frequency import LossyCounter


def item_by_item(epsilon: float, stream: Sequence[Any]) -> dict[Any, tuple[int, int]]:
    """Manku & Motwani's lossy counting in plain Python, one key at a time."""
    width = math.ceil(1 / epsilon)
    table: dict[Any, list[int]] = {}
    for n, key in enumerate(stream, start=1):
        entry = table.get(key)
        if entry is None:
            table[key] = [1, (n - 1) // width]  # delta = ceil(n / w) - 1
        else:
            entry[0] += 1
        if n % width == 0:
            bucket = n // width
            table = {k: e for k, e in table.items() if e[0] + e[1] > bucket}
    return {key: (count, delta) for key, (count, delta) in table.items()}


def batched(epsilon: float, stream: Any, batch: int) -> dict[Any, tuple[int, int]]:
    counter = LossyCounter(epsilon)
    for start in range(0, len(stream), batch):
        counter.update(stream[start : start + batch])
    keys, counts, deltas = counter.entries()
    return dict(zip(keys.tolist(), zip(counts.tolist(), deltas.tolist(), strict=True), strict=True))


def timed(run: Callable[[], dict[Any, tuple[int, int]]]) -> tuple[float, dict[Any, tuple[int, int]]]:
    start = time.perf_counter()
    table = run()
    return time.perf_counter() - start, table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="tuples in the stream")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1e-4, 1.7e-5])
    parser.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent of the key popularity (> 1)")
    parser.add_argument("--batch", type=int, default=10_000, help="batch size of the streaming run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    ints = np.random.default_rng(args.seed).zipf(args.zipf, args.n).astype(np.int64)
    streams: list[tuple[str, Any, list[Any]]] = [("int", ints, ints.tolist())]
    strings = [f"key-{key}" for key in ints.tolist()]
    streams.append(("str", strings, strings))
    print(f"n = {args.n:,} tuples, Zipf exponent {args.zipf}, {len(np.unique(ints)):,} distinct keys")
    header = f"{'keys':>4} {'epsilon':>8} {'w':>7} {'entries':>8} | tuples/s: {'item-by-item':>12}"
    print(f"{header} {'one batch':>11} {'batches':>11} | speed-up: {'one batch':>9} {'batches':>8}")
    for kind, stream, as_list in streams:
        for epsilon in args.epsilon:
            slow, expected = timed(lambda eps=epsilon, s=as_list: item_by_item(eps, s))
            whole, table = timed(lambda eps=epsilon, s=stream: batched(eps, s, len(s)))
            assert table == expected, "one-batch update differs from item-by-item processing"
            parts, table = timed(lambda eps=epsilon, s=stream: batched(eps, s, args.batch))
            assert table == expected, "batched update differs from item-by-item processing"
            rate = [args.n / seconds for seconds in (slow, whole, parts)]
            print(
                f"{kind:>4} {epsilon:>8.2g} {math.ceil(1 / epsilon):>7} {len(expected):>8} | "
                f"{'':>10}{rate[0]:>12,.0f} {rate[1]:>11,.0f} {rate[2]:>11,.0f} | "
                f"{'':>10}{slow / whole:>8.1f}x {slow / parts:>7.1f}x"
            )


if __name__ == "__main__":
    main()
