"""Builders shared by the storage tests."""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from repart.migration import MigrationPlan, plan_migration
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.protocol.snapshot import Snapshot
from repart.storage import NewEvent, NewVersion, RegionConfig, create_region, run_in_transaction
from repart.storage.models import Base

BASE_DOCUMENT: dict[str, Any] = {
    "format": 1,
    "region": "trades",
    "window": {"seq": 1, "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:01:00+00:00"},
    "tuples": 100,
    "distinct_estimate": 10,
    "epsilon": 0.01,
    "key_type": "str",
    "items": [["AAPL", 40, 0], ["MSFT", 30, 1]],
    "slot_bits": 16,
    "slots": [[5, 60], [70000 % 65536, 40]],
    "version": None,
    "channels": [{"channel": 0, "tuples": 60, "busy_seconds": 1.5, "state_bytes": 1024}],
}


def document(**changes: Any) -> dict[str, Any]:
    """A valid snapshot document with top-level fields replaced by ``changes``."""
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc.update(changes)
    return doc


def add_region(engine: Engine, name: str = "trades", key_type: str = "str", **config: Any) -> None:
    """Create a region with a default configuration (4 channels, at most 16)."""
    settings = {"n_channels_initial": 4, "max_channels": 16, **config}
    run_in_transaction(engine, lambda s: create_region(s, name, RegionConfig(key_type=key_type, **settings)))


def row_counts(engine: Engine) -> dict[str, int]:
    """The number of rows of every table."""
    with Session(engine) as session:
        return {
            t.name: session.scalar(select(func.count()).select_from(t)) or 0
            for t in Base.metadata.sorted_tables
        }


def new_version(
    function: PartitionFunction, algorithm: str = "readj", parent: int | None = None
) -> NewVersion:
    """A ``NewVersion`` for ``function``."""
    return NewVersion(
        function_json=function.to_json(),
        digest=function.digest,
        n_channels=function.n_channels,
        algorithm=algorithm,
        report={"b": 1.05, "m": 0.1},
        parent_number=parent,
    )


def estimate(**changes: Any) -> FrequencyEstimate:
    """The frequency estimate of the snapshot ``document(**changes)``."""
    return Snapshot.from_document(document(**changes)).to_estimate()


def new_plan(a: PartitionFunction, b: PartitionFunction) -> MigrationPlan:
    """The migration plan from ``a`` to ``b`` under the estimate of the base snapshot document."""
    return plan_migration(a, b, estimate())


EVENT = NewEvent(
    kind="activate", rule="rebalance", message="b above threshold", data={"b": 1.4, "threshold": 1.2}
)
