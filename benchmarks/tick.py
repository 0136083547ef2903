"""One controller tick (issue #3 target: < 1 s including storage), with the build/storage split.

A region with 32 channels (fixed policy, algorithm ``auto``, rebalance threshold 0.5 so that every
tick rebuilds) and x = 3 counters, so a tick merges the last two windows. Each window is a lossy
counter over 10^6 tuples of a Zipf(1) stream over 10^6 keys with ε = 1.6·10^-5 (buckets of 62,500
tuples divide the window exactly); together they hold about 10,000 distinct items. The first tick
initializes the region (not timed); the timed tick merges the window, predicts b, builds scan, redist
and readj, plans the migration and activates version, plan and event in SQLite. Each run uses a fresh
database; the best of ``--repeat`` runs is printed.

    .venv/bin/python benchmarks/tick.py [--repeat 3] [--db-dir /tmp]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from repart.controller.tick import TickResult, tick
from repart.partitioning import LossyCounter
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.storage import (
    RegionConfig,
    create_region,
    ingest_snapshot,
    make_engine,
    parse_snapshot,
    run_in_transaction,
    upgrade,
)

REGION = "bench"
DOMAIN = 1_000_000
TUPLES = 1_000_000
EPSILON = 1.6e-5
SLOT_BITS = 16
START = datetime(2026, 1, 1, tzinfo=UTC)


def window_document(seq: int) -> dict[str, Any]:
    rng = np.random.default_rng(seq)
    weights = 1.0 / np.arange(1, DOMAIN + 1)
    cumulative = np.cumsum(weights / weights.sum())
    keys = np.searchsorted(cumulative, rng.random(TUPLES) * cumulative[-1]).astype(np.int64)
    counter = LossyCounter(EPSILON, key_type="int")
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    slots, slot_counts = np.unique(slots_of_hashes(hash_int64_array(keys), SLOT_BITS), return_counts=True)
    return {
        "format": 1,
        "region": REGION,
        "window": {
            "seq": seq,
            "start": (START + timedelta(minutes=seq)).isoformat(),
            "end": (START + timedelta(minutes=seq + 1)).isoformat(),
        },
        "tuples": TUPLES,
        "distinct_estimate": max(len(np.unique(keys)), len(entries)),
        "epsilon": EPSILON,
        "key_type": "int",
        "items": [[int(k), int(c), int(d)] for k, c, d in zip(entries, counts, deltas, strict=True)],
        "slot_bits": SLOT_BITS,
        "slots": [[int(s), int(c)] for s, c in zip(slots, slot_counts, strict=True)],
    }


def one_run(directory: Path, documents: list[dict[str, Any]]) -> tuple[TickResult, float]:
    engine = make_engine(f"sqlite:///{directory / 'tick.db'}")
    upgrade(engine)
    config = RegionConfig(
        key_type="int",
        n_channels_initial=32,
        algorithm="auto",
        slot_bits=SLOT_BITS,
        settings={"rebalance_threshold": 0.5, "counters": 3},
    )
    run_in_transaction(engine, lambda session: create_region(session, REGION, config))
    tick(engine, REGION)  # p^(0)
    for document in documents:
        snapshot = parse_snapshot(document)
        run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))
    started = time.perf_counter()
    result = tick(engine, REGION)
    seconds = time.perf_counter() - started
    engine.dispose()
    return result, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db-dir", type=Path, default=None)
    args = parser.parse_args()
    documents = [window_document(seq) for seq in (1, 2)]
    items = len({item[0] for document in documents for item in document["items"]})
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.db_dir) as directory:
            runs.append(one_run(Path(directory), documents))
    result, seconds = min(runs, key=lambda run: run[1])
    print(f"merged window: {items:,} distinct items in 2 snapshots; N = {result.n_channels}; {result.action}")
    print(f"{'tick total s':>13} {'build s':>9} {'storage s':>10}  target < 1 s")
    verdict = "PASS" if seconds < 1.0 else "FAIL"
    print(f"{seconds:>13.3f} {result.build_seconds:>9.3f} {result.storage_seconds:>10.3f}  {verdict}")
    print(f"reason: {result.reason}")


if __name__ == "__main__":
    main()
