"""Keys per second of ``PartitionFunction.lookup_many`` against the hashing floor, side by side.

The floor is a bare Python loop of ``xxhash.xxh64_intdigest(bytes, 42)`` over the same keys (int keys as
8 little-endian bytes, str keys as UTF-8): hashing every key once, which any lookup must do.
The function has N = 10 channels and an explicit map of the most frequent keys; keys are drawn uniformly
or Zipf-distributed (exponent 1.1) from a universe of 100,000 keys, every str key a distinct object as
it would be after decoding a batch. Each timing is the best of a few repetitions. The "hashing" column
times the hashing stage of lookup_many alone (``hash_int64_array`` / ``hash_str_keys``). Target: lookup
time / floor time <= 1.5.

Run: ``.venv/bin/python benchmarks/lookup.py [--keys N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import HASH_SEED, hash_int64_array, hash_str_keys

TARGET_RATIO = 1.5
UNIVERSE = 100_000
ZIPF_EXPONENT = 1.1
N_CHANNELS = 10


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` timed runs."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def int_floor(keys: list[int]) -> None:
    digest = xxhash.xxh64_intdigest
    for key in keys:
        digest(key.to_bytes(8, "little", signed=True), HASH_SEED)


def str_floor(keys: list[str]) -> None:
    digest = xxhash.xxh64_intdigest
    for key in keys:
        digest(key.encode(), HASH_SEED)


def draw_ranks(rng: np.random.Generator, distribution: str, count: int) -> npt.NDArray[np.int64]:
    """Indices into the key universe, rank 0 the most frequent under Zipf."""
    if distribution == "uniform":
        return rng.integers(0, UNIVERSE, size=count)
    weights = 1.0 / np.arange(1, UNIVERSE + 1) ** ZIPF_EXPONENT
    return rng.choice(UNIVERSE, size=count, p=weights / weights.sum())


def function_for(hot: Sequence[Any], rng: np.random.Generator) -> PartitionFunction:
    channels = rng.integers(0, N_CHANNELS, size=len(hot)).tolist()
    return PartitionFunction(N_CHANNELS, explicit=dict(zip(hot, channels, strict=True)))


@dataclass(frozen=True)
class Case:
    """One key type: the function, its keys as lookup_many takes them, and the floor over the same keys."""

    kind: str
    function: PartitionFunction
    keys: Sequence[Any] | npt.NDArray[np.int64]
    hashes: Callable[[Any], object]  # the hashing stage inside lookup_many
    floor: Callable[[list[Any]], None]
    floor_keys: list[Any]


def measure(case: Case, repeat: int) -> tuple[float, float, float, float]:
    """(lookup, hashing stage, floor) seconds and the explicit share, after checking lookup_many."""
    function, keys = case.function, case.keys
    sample = case.floor_keys[:1000]
    if function.lookup_many(keys[:1000]).tolist() != [function.lookup(key) for key in sample]:
        raise AssertionError("lookup_many disagrees with lookup")
    return (
        best_seconds(lambda: function.lookup_many(keys), repeat),
        best_seconds(lambda: case.hashes(keys), repeat),
        best_seconds(lambda: case.floor(case.floor_keys), repeat),
        float(np.mean([key in function.explicit for key in sample])),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys per run (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions, best taken (default 5)")
    parser.add_argument("--explicit", type=int, default=500, help="explicit map size (default 500)")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    universe = rng.integers(-(2**63), 2**63 - 1, size=UNIVERSE, dtype=np.int64, endpoint=True)
    print(f"{args.keys:,} keys, N = {N_CHANNELS}, {args.explicit} explicit keys, best of {args.repeat}")
    print(
        f"{'keys':<8} {'type':<4} {'explicit':>8} {'lookup keys/s':>14} {'hashing keys/s':>15}"
        f" {'floor keys/s':>13}  lookup/floor"
    )
    verdicts = []
    for distribution in ("uniform", "zipf"):
        values = universe[draw_ranks(rng, distribution, args.keys)]
        hot_values = universe[: args.explicit].tolist()
        ints = values.tolist()
        strs = [f"key-{value:x}" for value in ints]
        cases = (
            Case("int", function_for(hot_values, rng), values, hash_int64_array, int_floor, ints),
            Case(
                "str",
                function_for([f"key-{v:x}" for v in hot_values], rng),
                strs,
                hash_str_keys,
                str_floor,
                strs,
            ),
        )
        for case in cases:
            lookup_s, hashing_s, floor_s, share = measure(case, args.repeat)
            ratio = lookup_s / floor_s
            verdicts.append(ratio <= TARGET_RATIO)
            print(
                f"{distribution:<8} {case.kind:<4} {share:>8.1%} {args.keys / lookup_s:>14,.0f}"
                f" {args.keys / hashing_s:>15,.0f} {args.keys / floor_s:>13,.0f}"
                f"  {ratio:>12.2f} {'PASS' if ratio <= TARGET_RATIO else 'FAIL'}"
            )
    print(f"target lookup/floor <= {TARGET_RATIO}: {'PASS' if all(verdicts) else 'FAIL'}")


if __name__ == "__main__":
    main()
