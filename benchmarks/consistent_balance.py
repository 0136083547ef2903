"""Balance of the consistent slot tables: ring (1000 virtual nodes), jump and prefix, side by side.

For each channel count N the script builds the three tables at S = 16 slot bits from cold caches and
prints the max/min ratio and the coefficient of variation (CV) of the slot count per channel, and the
build time, for the default seed. A second table averages the same ratios over several seeds, since
one seed is one sample of a method's spread (prefix has no seed: its row is the same in both). With
``benchmarks/state_scaling.py`` (what a scale-out costs the state store) this measurement chose
``DEFAULT_METHOD`` in ``repart.partitioning.consistent``.

Run: ``.venv/bin/python benchmarks/consistent_balance.py [--slot-bits S] [--replicas V] [--seeds K]``
"""

from __future__ import annotations

import argparse
import time
from dataclasses import astuple, dataclass, replace

import numpy as np

from repart.partitioning.consistent import DEFAULT_REPLICAS, ConsistentSpec, clear_caches, slot_table
from repart.partitioning.domain import DEFAULT_SLOT_BITS

CHANNEL_COUNTS = (2, 4, 8, 10, 16, 32, 64)


@dataclass(frozen=True)
class Balance:
    max_min: float
    cv: float
    build_ms: float


def measure(n: int, spec: ConsistentSpec, slot_bits: int) -> Balance:
    """Build one table from cold caches and summarize its slots per channel."""
    clear_caches()
    started = time.perf_counter()
    table = slot_table(n, spec, slot_bits)
    build_ms = (time.perf_counter() - started) * 1000
    counts = np.bincount(table, minlength=n)
    return Balance(float(counts.max() / counts.min()), float(counts.std() / counts.mean()), build_ms)


METHODS = ("ring", "jump", "prefix")


def print_row(n: int, balances: list[Balance]) -> None:
    cells = [f"{got.max_min:>14.3f} {got.cv:>9.2%} {got.build_ms:>9.1f} ms" for got in balances]
    print(f"{n:>3} | " + " | ".join(cells))


def mean_balance(n: int, specs: list[ConsistentSpec], slot_bits: int) -> Balance:
    runs = [measure(n, spec, slot_bits) for spec in specs]
    return Balance(*(float(np.mean(column)) for column in zip(*map(astuple, runs), strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slot-bits", type=int, default=DEFAULT_SLOT_BITS)
    parser.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS)
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..K-1 for the averaged table")
    args = parser.parse_args()
    bits = args.slot_bits
    specs = [ConsistentSpec(method=method, replicas=args.replicas) for method in METHODS]
    header = "  N | " + " | ".join(f"{m + ' max/min':>14} {m + ' CV':>9} {m + ' build':>12}" for m in METHODS)
    print(f"S = {bits}, ring replicas = {args.replicas}, default seed {specs[0].seed:#x}")
    print(header)
    for n in CHANNEL_COUNTS:
        print_row(n, [measure(n, spec, bits) for spec in specs])
    print(f"\nmean over seeds 0..{args.seeds - 1}")
    print(header)
    for n in CHANNEL_COUNTS:
        print_row(
            n,
            [
                mean_balance(n, [replace(spec, seed=seed) for seed in range(args.seeds)], bits)
                for spec in specs
            ],
        )


if __name__ == "__main__":
    main()
