"""Balance of the consistent slot tables: ring (1000 virtual nodes) against jump, side by side.

For each channel count N the script builds both tables at S = 16 slot bits from cold caches and prints
the max/min ratio and the coefficient of variation (CV) of the slot count per channel, and the build
time, for the default seed. A second table averages the same ratios over several seeds, since one seed
is one sample of each method's spread. This measurement chose ``DEFAULT_METHOD`` in
``repart.partitioning.consistent``.

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


def print_row(n: int, ring: Balance, jump: Balance) -> None:
    print(
        f"{n:>3} | {ring.max_min:>12.3f} {ring.cv:>7.2%} {ring.build_ms:>8.1f} ms"
        f" | {jump.max_min:>12.3f} {jump.cv:>7.2%} {jump.build_ms:>8.1f} ms"
    )


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
    ring = ConsistentSpec(method="ring", replicas=args.replicas)
    jump = ConsistentSpec(method="jump")
    header = "  N | ring max/min  ring CV  ring build | jump max/min  jump CV  jump build"
    print(f"S = {bits}, ring replicas = {args.replicas}, default seed {ring.seed:#x}")
    print(header)
    for n in CHANNEL_COUNTS:
        print_row(n, measure(n, ring, bits), measure(n, jump, bits))
    print(f"\nmean over seeds 0..{args.seeds - 1}")
    print(header)
    for n in CHANNEL_COUNTS:
        rings = [replace(ring, seed=seed) for seed in range(args.seeds)]
        jumps = [replace(jump, seed=seed) for seed in range(args.seeds)]
        print_row(n, mean_balance(n, rings, bits), mean_balance(n, jumps, bits))


if __name__ == "__main__":
    main()
