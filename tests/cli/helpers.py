"""Builders shared by the database command tests: the runner, snapshot documents, versions."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner, Result

from repart.cli.app import app
from repart.migration import plan_migration
from repart.partitioning import LossyCounter, PartitionFunction, build, initial_function
from repart.partitioning.frequency import FrequencyEstimate
from repart.protocol.snapshot import Snapshot
from repart.storage import NewEvent, NewVersion, activate, make_engine
from repart.storage.models import Base

runner = CliRunner()


def repart(db: str, *args: str) -> Result:
    """Run ``repart ARGS --db DB``."""
    return runner.invoke(app, [*args, "--db", db])


def repart_json(db: str, *args: str) -> Any:
    """Run ``repart ARGS --db DB --json``, check it succeeded, and parse its stdout."""
    result = repart(db, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def row_counts(db: str) -> dict[str, int]:
    """The number of rows of every table."""
    engine = make_engine(db)
    try:
        with Session(engine) as session:
            return {
                t.name: session.scalar(select(func.count()).select_from(t)) or 0
                for t in Base.metadata.sorted_tables
            }
    finally:
        engine.dispose()


def counter_document(region: str, seq: int, keys: list[str], **changes: Any) -> dict[str, Any]:
    """A snapshot document of one minute window ``seq`` from a real lossy counter run over ``keys``."""
    counter = LossyCounter(0.001, "str")
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    items = [[k, c, d] for k, c, d in zip(entries.tolist(), counts.tolist(), deltas.tolist(), strict=True)]
    document = {
        "format": 1,
        "region": region,
        "window": {
            "seq": seq,
            "start": f"2026-01-01T00:{seq:02d}:00+00:00",
            "end": f"2026-01-01T00:{seq + 1:02d}:00+00:00",
        },
        "tuples": counter.n,
        "distinct_estimate": len(items),
        "epsilon": counter.epsilon,
        "key_type": "str",
        "items": items,
        "slot_bits": 16,
    }
    document.update(changes)
    return document


def skewed_keys(seed: int = 1, count: int = 20_000) -> list[str]:
    """Zipf-like ticker keys: a few hot, many cold."""
    rng = np.random.default_rng(seed)
    return [f"K{int(k)}" for k in rng.zipf(1.3, count) % 500]


def estimate_of(document: dict[str, Any]) -> FrequencyEstimate:
    """The frequency estimate of a snapshot document."""
    return Snapshot.from_document(document).to_estimate()


def _new_version(function: PartitionFunction, predicted_b: float) -> NewVersion:
    return NewVersion(
        function_json=function.to_json(),
        digest=function.digest,
        n_channels=function.n_channels,
        algorithm="redist",
        report={"predicted_b": predicted_b, "explicit_size": len(function.explicit)},
    )


def add_versions(db: str, region: str, channels: tuple[int, ...]) -> list[PartitionFunction]:
    """Activate one version per entry of ``channels`` (built with redist from the previous one), each
    later one with a plan from the first, the applied one; returns the functions. The last plan is
    pending, the earlier ones superseded."""
    estimate = estimate_of(counter_document(region, 0, skewed_keys()))
    event = NewEvent(kind="activate", rule="test", message="built by the test")
    functions: list[PartitionFunction] = []
    previous = initial_function(channels[0], "str", 16)
    engine = make_engine(db)
    try:
        for n in channels:
            result = build(previous, estimate, n, algorithm="redist")
            plan = plan_migration(functions[0], result.function, estimate) if functions else None
            version = _new_version(result.function, result.report.predicted_b)
            with Session(engine) as session, session.begin():
                activate(session, region, version, plan, event)
            functions.append(result.function)
            previous = result.function
    finally:
        engine.dispose()
    return functions
