"""The database's size per plan before and after plan retention, on SQLite and PostgreSQL, side by side.

One region (string keys, 2^16 slots) gets ``--plans`` activations, each built with redist from the
applied version on a lossy counter's window of ``--keys`` Zipf(1.1) keys and its channel count
alternating between 8 and 9 (each scale step moves about 1/9 of the slot space in ranges, and the
heavy keys as explicit moves), and each plan is reported applied, as a job would. The database's size
is measured after the region's first version (the baseline, no plan), after the plans, and after
``repart plans prune REGION --keep-versions 1`` (the service's ``prune_plans``: every plan but the
applied version's keeps only its row and its ``plan-pruned`` event). Sizes are measured compacted:
SQLite's file after ``VACUUM``, PostgreSQL's ``pg_database_size`` after ``VACUUM FULL`` (the PostgreSQL
server is a throwaway one, ``benchmarks/daemon.py``'s). Per plan is (size - baseline) / plans.

Each backend runs ``--repeats`` times on a fresh database; the medians are printed with the load
average before and after (the machine is shared).

    .venv/bin/python benchmarks/plan_retention.py [--plans 20] [--keys 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select, text

from daemon import database  # benchmarks/daemon.py: the throwaway PostgreSQL server
from repart.controller import service
from repart.migration import plan_migration
from repart.partitioning import LossyCounter, build, initial_function
from repart.partitioning.frequency import FrequencyEstimate
from repart.storage import (
    NewEvent,
    NewVersion,
    RegionConfig,
    activate,
    make_engine,
    models,
    run_in_transaction,
    set_plan_status,
    upgrade,
)

REGION = "orders"
SLOT_BITS = 16
CHANNELS = (8, 9)


def estimate(keys: int, seed: int) -> FrequencyEstimate:
    """A lossy counter's estimate over 20 × ``keys`` Zipf(1.1) draws of ``keys`` distinct string keys."""
    rng = np.random.default_rng(seed)
    draws = rng.zipf(1.1, 20 * keys) % keys
    counter = LossyCounter(1e-4, "str")
    counter.update([f"customer-{int(k):08d}" for k in draws])
    return counter.estimate(distinct_estimate=keys)


def new_version(function: Any) -> NewVersion:
    return NewVersion(
        function_json=function.to_json(),
        digest=function.digest,
        n_channels=function.n_channels,
        algorithm="redist",
        report={},
    )


def size(engine: Engine) -> int:
    """The database's compacted size in bytes (see the module docstring)."""
    if engine.dialect.name == "sqlite":
        engine.dispose()  # no pooled connection holds a snapshot the checkpoint would wait for
        database_file = engine.url.database
        assert database_file is not None
        connection = sqlite3.connect(database_file, isolation_level=None)
        try:
            connection.execute("VACUUM")
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            connection.close()
        wal = Path(f"{database_file}-wal")
        return Path(database_file).stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM FULL"))
        return int(connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one())


def moves(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(models.PlanMove)).scalar_one())


def measure(url: str, plans: int, window: FrequencyEstimate) -> dict[str, float]:
    """One fresh database: baseline, with the plans, after the prune (see the module docstring)."""
    engine = make_engine(url)
    try:
        upgrade(engine)
        config = RegionConfig(key_type="str", n_channels_initial=CHANNELS[0], slot_bits=SLOT_BITS)
        run_in_transaction(engine, lambda s: service.create_region(s, REGION, config))
        event = NewEvent("activated", "benchmark", "built by benchmarks/plan_retention.py")
        first = initial_function(CHANNELS[0], "str", SLOT_BITS)
        run_in_transaction(engine, lambda s: activate(s, REGION, new_version(first), None, event))
        baseline = size(engine)
        fill_from(engine, first, plans, window, event)
        with_plans, moves_before = size(engine), moves(engine)
        started = time.perf_counter()
        pruned = run_in_transaction(engine, lambda s: service.prune_plans(s, REGION, keep_versions=1))
        prune_seconds = time.perf_counter() - started
        after, moves_after = size(engine), moves(engine)
    finally:
        engine.dispose()
    return {
        "baseline": baseline,
        "before_per_plan": (with_plans - baseline) / plans,
        "after_per_plan": (after - baseline) / plans,
        "pruned": len(pruned),
        "moves_before": moves_before,
        "moves_after": moves_after,
        "prune_seconds": prune_seconds,
    }


def fill_from(engine: Engine, first: Any, plans: int, window: FrequencyEstimate, event: NewEvent) -> None:
    """``plans`` activations after ``first``, each plan reported applied."""
    previous = first
    for index in range(plans):
        function = build(previous, window, CHANNELS[(index + 1) % 2], algorithm="redist").function
        plan = plan_migration(previous, function, window)
        plan_id = run_in_transaction(
            engine, lambda s, f=function, p=plan: activate(s, REGION, new_version(f), p, event)
        ).plan_id
        assert plan_id is not None
        for status in ("applying", "applied"):
            run_in_transaction(engine, lambda s, st=status, i=plan_id: set_plan_status(s, i, st))
        previous = function


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plans", type=int, default=20)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    args = parser.parse_args()
    window = estimate(args.keys, seed=1)
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, float]]] = {}
    for backend in args.backends:
        for repeat in range(args.repeats):
            with (
                tempfile.TemporaryDirectory(prefix="repart-retention-") as directory,
                database(backend, Path(directory)) as url,
            ):
                results.setdefault(backend, []).append(measure(url, args.plans, window))
            print(f"{backend} run {repeat + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(
        f"plan retention: {args.plans} applied plans of one region ({args.keys:,} distinct str keys, "
        f"2^{SLOT_BITS} slots, N alternating {CHANNELS[0]} <-> {CHANNELS[1]}), then "
        "`plans prune --keep-versions 1`"
    )
    print(
        f"medians of {args.repeats} fresh databases per backend; "
        "sizes compacted (SQLite VACUUM, PostgreSQL VACUUM FULL)"
    )
    header = (
        f"{'backend':<11}{'baseline B':>12}{'per plan before B':>19}{'per plan after B':>18}"
        f"{'after/before':>14}{'move rows before':>18}{'after':>7}{'prune s':>9}"
    )
    print(header)
    for backend, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"{backend:<11}{median['baseline']:>12,.0f}{median['before_per_plan']:>19,.0f}"
            f"{median['after_per_plan']:>18,.0f}{median['after_per_plan'] / median['before_per_plan']:>14.4f}"
            f"{median['moves_before']:>18,.0f}{median['moves_after']:>7,.0f}{median['prune_seconds']:>9.3f}"
        )
        assert median["pruned"] == args.plans - 1, "every plan but the applied version's is pruned"
    print(
        f"load average before: {' '.join(f'{v:.2f}' for v in load_before)}; after: "
        f"{' '.join(f'{v:.2f}' for v in load_after)} (2 shared cores)"
    )


if __name__ == "__main__":
    main()
