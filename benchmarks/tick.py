"""One controller tick: the targets (< 1 s including storage, and the write lock
held <= 50 ms), with the time of each step of the reconcile loop.

A region with 32 channels (fixed policy, algorithm ``auto``, rebalance threshold 0.5 so that every
tick rebuilds) and x = 3 counters, so a tick merges the last two windows. Each window is a lossy
counter over 10^6 tuples of a Zipf(1) stream over 10^6 keys with ε = 1.6·10^-5 (buckets of 62,500
tuples divide the window exactly); together they hold about 10,000 distinct items. The first tick
initializes the region (not timed); the timed tick reads the status and the window in a read
transaction (no write lock), decides (merges the window, predicts b, builds scan, redist and readj,
plans the migration), and writes version, plan and event in a write transaction. The write lock is
SQLite's: a write transaction takes it with ``BEGIN IMMEDIATE`` and holds it until it commits, so the
write step's seconds (BEGIN to COMMIT) are the time the tick holds it; the write transactions the tick
opens are counted from the engine's ``begin`` events (a read takes no lock). Each run uses a fresh
database, where the same tick first runs on a second region with the same windows, so that SQLAlchemy
has compiled the tick's statements as in a running daemon; the best of ``--repeat`` runs is printed.

    .venv/bin/python benchmarks/tick.py [--repeat 3] [--db-dir /tmp]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, event

from repart.controller.service import create_region
from repart.controller.tick import TickResult, tick
from repart.partitioning import LossyCounter
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.protocol.counter_items import CounterItems
from repart.protocol.snapshot import Snapshot
from repart.storage import (
    RegionConfig,
    ingest_snapshot,
    make_engine,
    run_in_transaction,
    upgrade,
)
from repart.storage.engine import READ_ONLY_OPTION

REGION = "bench"
WARM_UP = "warm-up"
DOMAIN = 1_000_000
TUPLES = 1_000_000
EPSILON = 1.6e-5
SLOT_BITS = 16
START = datetime(2026, 1, 1, tzinfo=UTC)


def window_snapshot(seq: int) -> Snapshot:
    rng = np.random.default_rng(seq)
    weights = 1.0 / np.arange(1, DOMAIN + 1)
    cumulative = np.cumsum(weights / weights.sum())
    keys = np.searchsorted(cumulative, rng.random(TUPLES) * cumulative[-1]).astype(np.int64)
    counter = LossyCounter(EPSILON, key_type="int")
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    slots, slot_counts = np.unique(slots_of_hashes(hash_int64_array(keys), SLOT_BITS), return_counts=True)
    return Snapshot(
        region=REGION,
        seq=seq,
        window_start=START + timedelta(minutes=seq),
        window_end=START + timedelta(minutes=seq + 1),
        tuples=TUPLES,
        distinct_estimate=max(len(np.unique(keys)), len(entries)),
        epsilon=EPSILON,
        key_type="int",
        items=CounterItems(tuple(entries.tolist()), counts, deltas),
        slot_bits=SLOT_BITS,
        slots=tuple(zip(slots.tolist(), slot_counts.tolist(), strict=True)),
    )


def count_write_transactions(engine: Engine) -> list[int]:
    """A one-element list counting the write transactions (``BEGIN IMMEDIATE``) begun on ``engine``."""
    writes = [0]

    @event.listens_for(engine, "begin")
    def _count(connection: Any) -> None:
        if not connection.get_execution_options().get(READ_ONLY_OPTION, False):
            writes[0] += 1

    return writes


def one_run(directory: Path, snapshots: list[Snapshot]) -> tuple[TickResult, float, int]:
    engine = make_engine(f"sqlite:///{directory / 'tick.db'}")
    upgrade(engine)
    config = RegionConfig(
        key_type="int",
        n_channels_initial=32,
        algorithm="auto",
        slot_bits=SLOT_BITS,
        settings={"rebalance_threshold": 0.5, "counters": 3},
    )
    for region in (WARM_UP, REGION):
        run_in_transaction(engine, lambda session, r=region: create_region(session, r, config))
        tick(engine, region)  # p^(0)
        for window in snapshots:
            snapshot = replace(window, region=region)
            run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))
    tick(engine, WARM_UP)  # compiles the statements, as a running daemon has
    writes = count_write_transactions(engine)
    started = time.perf_counter()
    result = tick(engine, REGION)
    seconds = time.perf_counter() - started
    engine.dispose()
    return result, seconds, writes[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db-dir", type=Path, default=None)
    args = parser.parse_args()
    snapshots = [window_snapshot(seq) for seq in (1, 2)]
    items = len({key for snapshot in snapshots for key in snapshot.item_columns.keys})
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.db_dir) as directory:
            runs.append(one_run(Path(directory), snapshots))
    result, seconds, writes = min(runs, key=lambda run: run[0].write_seconds)
    print(f"merged window: {items:,} distinct items in 2 snapshots; N = {result.n_channels}; {result.action}")
    print(f"best of {args.repeat} runs by write-lock time; write transactions in the tick: {writes}")
    print(f"{'tick total s':>13} {'read s':>8} {'decide s':>9} {'write s':>8}  {'write lock held ms':>18}")
    print(
        f"{seconds:>13.3f} {result.read_seconds:>8.3f} {result.build_seconds:>9.3f} "
        f"{result.write_seconds:>8.3f}  {1000 * result.write_seconds:>18.1f}"
    )
    total = "PASS" if seconds < 1.0 else "FAIL"
    lock = "PASS" if result.write_seconds <= 0.050 and writes == 1 else "FAIL"
    print(f"{total}  tick < 1 s")
    print(f"{lock}  write lock held <= 50 ms, by one write transaction")
    print(f"all runs, write lock ms: {', '.join(f'{1000 * run[0].write_seconds:.1f}' for run in runs)}")
    print(f"reason: {result.reason}")


if __name__ == "__main__":
    main()
