"""``repart versions list|show`` of split functions (DESIGN §11.3): the split keys with their candidates
and weights."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from repart.partitioning import initial_function
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.storage import NewEvent, NewVersion, activate, make_engine
from tests.cli.helpers import repart, repart_json


def test_versions_show_lists_split_keys_home_first(db_url: str) -> None:
    assert (
        repart(
            db_url,
            "region",
            "create",
            "vwap",
            "--key-type",
            "str",
            "--channels",
            "4",
            "--split",
            "pkg",
            "--merge",
            "pv=sum",
        ).exit_code
        == 0
    )
    home = initial_function(4, "str", 16)
    hot = home.lookup("AAPL")
    split = SplitFunction(home, {"AAPL": SplitEntry((hot, (hot + 1) % 4), (0.25, 0.75))})
    engine = make_engine(db_url)
    try:
        with Session(engine) as session, session.begin():
            version = NewVersion(split.to_json(), split.digest, 4, "split-pkg")
            activate(session, "vwap", version, None, NewEvent("activate", "test", "a split version"))
    finally:
        engine.dispose()
    listed = repart_json(db_url, "versions", "list", "vwap")
    assert [(v["kind"], len(v["split_keys"])) for v in listed] == [("split", 1)]
    shown = repart_json(db_url, "versions", "show", "vwap", "1")
    assert shown["split_keys"] == [
        {"key": "AAPL", "candidates": [hot, (hot + 1) % 4], "weights": [0.25, 0.75]}
    ]
    assert shown["function"] == json.loads(split.to_json())
    people = repart(db_url, "versions", "show", "vwap", "1")
    assert people.exit_code == 0 and "split keys (home first)" in people.stdout and "0.750" in people.stdout
