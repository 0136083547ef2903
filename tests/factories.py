"""Builders shared by the tests: snapshots, regions, versions and plans, row counts (DESIGN §12 tests).

Every snapshot a test needs is built here as a ``Snapshot`` (``repart.protocol.snapshot``) and turned
into its document with ``to_document``: no test writes a snapshot document by hand, except to break
one on purpose (``snapshot_document(**changes)`` replaces top-level fields of a valid one).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from repart.migration import plan_migration
from repart.partitioning import LossyCounter, PartitionFunction, build, initial_function
from repart.partitioning.hashing import Key, KeyType, hash_keys, slots_of_hashes
from repart.protocol.snapshot import ChannelMeasurement, CounterEntry, Snapshot
from repart.storage import (
    NewEvent,
    NewVersion,
    RegionConfig,
    activate,
    create_region,
    ingest_snapshot,
    make_engine,
    run_in_transaction,
)
from repart.storage.models import Base

START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=1)


def window_times(seq: int, start: datetime = START, length: timedelta = WINDOW) -> tuple[datetime, datetime]:
    """The start and end of window ``seq``: back to back windows of ``length`` from ``start``."""
    return start + seq * length, start + (seq + 1) * length


def counted_snapshot(
    region: str,
    seq: int,
    keys: Sequence[Key] | np.ndarray[Any, Any],
    *,
    key_type: KeyType = "str",
    epsilon: float = 0.001,
    slot_bits: int = 16,
    slots: bool = False,
    channels: Sequence[ChannelMeasurement] | None = None,
    version: int | None = None,
    batch: int | None = None,
) -> Snapshot:
    """The snapshot of window ``seq`` of a real lossy counter run over ``keys`` (with the exact slot
    counts when ``slots``)."""
    counter = LossyCounter(epsilon, key_type)
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    items = tuple(
        CounterEntry(key, int(count), int(delta))
        for key, count, delta in zip(entries.tolist(), counts.tolist(), deltas.tolist(), strict=True)
    )
    slot_counts = None
    if slots:
        filled, filled_counts = np.unique(
            slots_of_hashes(hash_keys(list(keys)), slot_bits), return_counts=True
        )
        slot_counts = tuple((int(s), int(c)) for s, c in zip(filled, filled_counts, strict=True))
    start, end = window_times(seq)
    return Snapshot(
        region=region,
        seq=seq,
        window_start=start,
        window_end=end,
        tuples=counter.n,
        distinct_estimate=max(
            len(set(keys if not isinstance(keys, np.ndarray) else keys.tolist())), len(items)
        ),
        epsilon=counter.epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=slot_counts,
        version=version,
        channels=None if channels is None else tuple(channels),
        batch=batch,
    )


def small_snapshot(**changes: Any) -> Snapshot:
    """A small valid snapshot of region ``trades`` (two items, two slots, one channel) with fields
    replaced by ``changes``."""
    start, end = window_times(1)
    fields: dict[str, Any] = {
        "region": "trades",
        "seq": 1,
        "window_start": start,
        "window_end": end,
        "tuples": 100,
        "distinct_estimate": 10,
        "epsilon": 0.01,
        "key_type": "str",
        "items": (CounterEntry("AAPL", 40, 0), CounterEntry("MSFT", 30, 1)),
        "slot_bits": 16,
        "slots": ((5, 60), (4464, 40)),
        "channels": (ChannelMeasurement(0, 60, 1.5, 1024),),
    }
    fields.update(changes)
    return Snapshot(**fields)


def snapshot_document(**changes: Any) -> dict[str, Any]:
    """``small_snapshot()``'s document with top-level fields replaced by ``changes`` (to break it)."""
    document = small_snapshot().to_document()
    document.update(changes)
    return document


def add_region(engine: Engine, name: str = "trades", key_type: str = "str", **config: Any) -> None:
    """Create region ``name`` with a default configuration (4 channels, at most 16) and ``config``."""
    settings = {"n_channels_initial": 4, "max_channels": 16, **config}
    run_in_transaction(engine, lambda s: create_region(s, name, RegionConfig(key_type=key_type, **settings)))


def ingest(engine: Engine, *snapshots: Snapshot) -> None:
    """Ingest ``snapshots`` in order, each in its own transaction."""
    for snapshot in snapshots:
        run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))


def row_counts(database: Engine | str) -> dict[str, int]:
    """The number of rows of every table of ``database`` (an engine or a URL)."""
    engine = make_engine(database) if isinstance(database, str) else database
    try:
        with Session(engine) as session:
            return {
                table.name: session.scalar(select(func.count()).select_from(table)) or 0
                for table in Base.metadata.sorted_tables
            }
    finally:
        if isinstance(database, str):
            engine.dispose()


def skewed_keys(seed: int = 1, count: int = 20_000) -> list[str]:
    """Zipf-like ticker keys: a few hot, many cold."""
    rng = np.random.default_rng(seed)
    return [f"K{int(k)}" for k in rng.zipf(1.3, count) % 500]


def counter_document(region: str, seq: int, keys: Sequence[Key], **changes: Any) -> dict[str, Any]:
    """The document of ``counted_snapshot(region, seq, keys)`` with top-level fields replaced by
    ``changes`` (to break it)."""
    document = counted_snapshot(region, seq, keys).to_document()
    document.update(changes)
    return document


def add_versions(db: str, region: str, channels: tuple[int, ...]) -> list[PartitionFunction]:
    """Activate one version per entry of ``channels`` (built with redist from the previous one), each
    later one with a plan from the first, the applied one; returns the functions. The last plan is
    pending, the earlier ones superseded."""
    estimate = counted_snapshot(region, 0, skewed_keys()).to_estimate()
    event = NewEvent(kind="activate", rule="test", message="built by the test")
    functions: list[PartitionFunction] = []
    previous = initial_function(channels[0], "str", 16)
    engine = make_engine(db)
    try:
        for n in channels:
            result = build(previous, estimate, n, algorithm="redist")
            plan = plan_migration(functions[0], result.function, estimate) if functions else None
            version = NewVersion(
                function_json=result.function.to_json(),
                digest=result.function.digest,
                n_channels=result.function.n_channels,
                algorithm="redist",
                report={
                    "predicted_b": result.report.predicted_b,
                    "explicit_size": len(result.function.explicit),
                },
            )
            with Session(engine) as session, session.begin():
                activate(session, region, version, plan, event)
            functions.append(result.function)
            previous = result.function
    finally:
        engine.dispose()
    return functions
