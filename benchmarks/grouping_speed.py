"""Routing speed of every grouping kernel against a bare numba loop, and against its Python reference.

    .venv/bin/python benchmarks/grouping_speed.py [--messages 10000000] [--reference-messages 20000]
        [--schemes kg,pkg,dchoices,wchoices,rr,fish,dkg]

Zipf(2.0) over 10^5 keys, n = 100 workers, S = 5 sources: most tuples are head tuples. The floor is a
numba loop that only reads each key hash and writes hash mod n. It writes into a fresh output array
on every run, as ``route`` does: reusing one would spare the floor alone the first touch of 80 MB
(page faults, about 0.7 ns/tuple at 10^7; that time is printed too). ``route``'s checks of its input
(about 0.6 ns/tuple) stay on the groupings' side. Every kernel is compiled (and warmed on a small
stream) before timing, so compile time stays out; all timings come from this one run and are
printed as ratios. Times are the thread's CPU time (``time.thread_time``), the best of ``RUNS``
(the references: one run), so that other processes on a shared machine do not count; on an idle
machine they equal wall time. The pure-Python references (tests/partitioning/groupings/reference.py)
are timed on the first ``--reference-messages`` tuples and compared per tuple.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.partitioning.groupings import reference as ref

from repart.partitioning.groupings import dkg, fish, make_grouping
from repart.sim.streams import zipf_stream

N, SOURCES = 100, 5
#: Timed runs per measurement, the best kept: on a shared machine other processes' cache and memory
#: traffic still lengthen a run's CPU time now and then.
RUNS = 5
TARGETS = {"kg": 3.0, "pkg": 3.0, "dchoices": 10.0, "wchoices": 10.0, "rr": 10.0, "fish": 10.0, "dkg": 10.0}


@numba.njit(cache=True)
def floor(key_hashes: np.ndarray, n: int, out: np.ndarray) -> None:
    modulus = np.uint64(n)
    for i in range(key_hashes.size):
        out[i] = np.int64(key_hashes[i] % modulus)


def references() -> dict[str, object]:
    theta = 1 / (5 * N)
    capacity = int(np.ceil(10 / theta))
    return {
        "kg": ref.KG(N, SOURCES, 1),
        "pkg": ref.PKG(N, SOURCES, 1),
        "dchoices": ref.Head(N, SOURCES, 1, "dchoices", theta, capacity),
        "wchoices": ref.Head(N, SOURCES, 1, "wchoices", theta, capacity),
        "rr": ref.Head(N, SOURCES, 1, "rr", theta, capacity),
        "fish": ref.FISH(
            N,
            SOURCES,
            1,
            rates=[1.0] * N,
            arrival_rate=0.9 * N,
            theta=theta,
            epoch=fish.EPOCH,
            decay=fish.DECAY,
            spread=fish.SPREAD,
            tail_choices=fish.TAIL_CHOICES,
            capacity=capacity,
            virtual_nodes=fish.VIRTUAL_NODES,
        ),
        "dkg": ref.DKG(
            N,
            SOURCES,
            1,
            expected_keys=dkg.EXPECTED_KEYS,
            cycle=dkg.CYCLE,
            old_every=dkg.OLD_EVERY,
            warmup=dkg.CYCLE,
        ),
    }


def best_of(runs: int, action) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        start = time.thread_time()
        action()
        times.append(time.thread_time() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--reference-messages", type=int, default=20_000)
    parser.add_argument(
        "--schemes", default=",".join(TARGETS), help="comma-separated schemes to time (default: all)"
    )
    args = parser.parse_args()
    schemes = args.schemes.split(",")
    unknown = sorted(set(schemes) - set(TARGETS))
    if unknown:
        parser.error(f"--schemes: unknown {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    stream = zipf_stream(2.0, 100_000, args.messages, SOURCES, seed=1)
    hashes, sources = stream.key_hashes, stream.sources
    reused = np.empty(hashes.size, dtype=np.int64)
    floor(hashes[:10], N, reused)
    floor_seconds = best_of(RUNS, lambda: floor(hashes, N, np.empty(hashes.size, dtype=np.int64)))
    reused_seconds = best_of(RUNS, lambda: floor(hashes, N, reused))
    print(f"stream: Zipf(2.0), K = 10^5, m = {hashes.size:,}, n = {N}, S = {SOURCES}, p1 = {stream.p1:.3f}")
    print(
        f"floor (read hash, write hash mod n into a fresh array, as route does): {floor_seconds:.3f} s = "
        f"{1e9 * floor_seconds / hashes.size:.1f} ns/tuple "
        f"(into one reused array: {1e9 * reused_seconds / hashes.size:.1f} ns/tuple)\n"
    )
    print(
        "| scheme | seconds | ns/tuple | × floor | target | reference µs/tuple | kernel speed-up | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    failures = 0
    small_h = [int(k) for k in hashes[: args.reference_messages]]
    small_s = sources[: args.reference_messages].tolist()
    for scheme, reference in references().items():
        if scheme not in schemes:
            continue
        make_grouping(scheme, N, SOURCES, seed=1).route(hashes[:50_000], sources[:50_000])  # compile + warm
        seconds = best_of(RUNS, lambda s=scheme: make_grouping(s, N, SOURCES, seed=1).route(hashes, sources))
        reference_per_tuple = best_of(1, lambda r=reference: r.route(small_h, small_s)) / len(small_h)
        ratio = seconds / floor_seconds
        speedup = reference_per_tuple / (seconds / hashes.size)
        ok = ratio <= TARGETS[scheme] and speedup >= 50
        failures += not ok
        print(
            f"| {scheme} | {seconds:.3f} | {1e9 * seconds / hashes.size:.1f} | {ratio:.2f} | "
            f"≤ {TARGETS[scheme]:g} | "
            f"{1e6 * reference_per_tuple:.1f} | {speedup:,.0f}× | {'PASS' if ok else 'FAIL'} |",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
