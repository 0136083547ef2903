"""Activating split functions (DESIGN §11.3): only in a split-mode region, and named by their scheme."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.errors import InvalidInput
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import initial_function
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.storage import NewEvent, NewVersion, activate, models, version_function
from repart.storage.versions import applied_version
from tests.factories import add_region, row_counts

EVENT = NewEvent("activate", "test", "a split version")


def split_function() -> SplitFunction:
    home = initial_function(4, "str", 16)
    hot = home.lookup("AAPL")
    return SplitFunction(home, {"AAPL": SplitEntry((hot, (hot + 2) % 4), (0.5, 0.5))})


def test_a_split_region_stores_and_reads_back_a_split_version(engine: Engine) -> None:
    add_region(engine, "vwap", split_scheme="dchoices", merge="pv=sum")
    split = split_function()
    with Session(engine) as session, session.begin():
        activate(session, "vwap", NewVersion(split.to_json(), split.digest, 4, "split-dchoices"), None, EVENT)
    with Session(engine) as session:
        stored = applied_version(session, "vwap")
        assert stored is not None and version_function(stored) == split


@pytest.mark.parametrize(
    ("region", "algorithm", "field"),
    [({}, "split-pkg", "function_json"), ({"split_scheme": "pkg", "merge": "pv=sum"}, "redist", "algorithm")],
)
@pytest.mark.parametrize("keys", ["one split key", "no split key"])
def test_a_split_version_needs_a_split_region_and_a_split_algorithm(
    engine: Engine, region: dict[str, str], algorithm: str, field: str, keys: str
) -> None:
    """Also a split function that splits no key: its kind, not its table's size, decides."""
    add_region(engine, "vwap", **region)
    split = split_function() if keys == "one split key" else SplitFunction(initial_function(4, "str", 16))
    before = row_counts(engine)
    with Session(engine) as session, session.begin(), pytest.raises(InvalidInput) as raised:
        activate(session, "vwap", NewVersion(split.to_json(), split.digest, 4, algorithm), None, EVENT)
    assert raised.value.field == field
    assert row_counts(engine) == before


def test_a_plan_with_consolidations_is_stored_and_read_back(engine: Engine) -> None:
    add_region(engine, "vwap", split_scheme="dchoices", merge="pv=sum")
    split = split_function()
    plain = split.home  # AAPL leaves the head: its partial on the second candidate merges home
    plan = plan_migration(split, plain)
    assert [(c.key, c.source, c.target) for c in plan.consolidations] == [
        ("AAPL", split.split["AAPL"].candidates[1], plain.lookup("AAPL"))
    ]
    with Session(engine) as session, session.begin():
        activate(session, "vwap", NewVersion(split.to_json(), split.digest, 4, "split-dchoices"), None, EVENT)
        activate(
            session,
            "vwap",
            NewVersion(plain.to_json(), plain.digest, 4, "redist", parent_number=1),
            plan,
            EVENT,
        )
    with Session(engine) as session:
        stored = session.scalars(select(models.Plan)).one()
        assert MigrationPlan.from_json(stored.plan_json) == plan
        assert session.scalars(select(models.PlanMove)).all() == []  # no explicit or slot move
