"""Activating split functions (DESIGN §11.3): only in a split-mode region, and named by their scheme."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.errors import InvalidInput
from repart.partitioning import initial_function
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.storage import NewEvent, NewVersion, activate, version_function
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
def test_a_split_version_needs_a_split_region_and_a_split_algorithm(
    engine: Engine, region: dict[str, str], algorithm: str, field: str
) -> None:
    add_region(engine, "vwap", **region)
    split = split_function()
    before = row_counts(engine)
    with Session(engine) as session, session.begin(), pytest.raises(InvalidInput) as raised:
        activate(session, "vwap", NewVersion(split.to_json(), split.digest, 4, algorithm), None, EVENT)
    assert raised.value.field == field
    assert row_counts(engine) == before
