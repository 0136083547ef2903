"""The tick in split mode (DESIGN §11.3): it builds split functions by the region's scheme, records the
head, d and the weights, plans consolidations when the region leaves split mode, and scales and rolls
back split versions."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from repart.controller.actions import explain, rollback, scale
from repart.controller.service import update_region
from repart.controller.tick import tick
from repart.migration import MigrationPlan
from repart.partitioning import initial_function
from repart.partitioning.split.function import SplitFunction
from repart.storage import (
    NewEvent,
    NewVersion,
    activate,
    run_in_transaction,
    set_plan_status,
    version_function,
)
from repart.storage.jsontext import load_object
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    add_zipf_region,
    events,
    ingest,
    plans,
    versions,
    zipf_snapshot,
)


def split_region(engine: Engine, scheme: str = "dchoices") -> None:
    """The Zipf region on 8 channels in split mode, initialized, with a window whose top key (about a
    sixth of the tuples at exponent 1.3) is too hot for one channel."""
    add_zipf_region(engine, n_channels_initial=8, algorithm="redist", split_scheme=scheme, merge="value=sum")
    tick(engine, REGION)
    ingest(engine, zipf_snapshot(1, n_channels=8, demand=8, exponent=1.3))


@pytest.mark.parametrize("scheme", ["pkg", "dchoices", "wchoices", "rr", "fish", "dkg"])
def test_a_skewed_window_activates_a_split_function_by_the_region_s_scheme(
    engine: Engine, scheme: str
) -> None:
    split_region(engine, scheme)
    result = tick(engine, REGION)
    assert (result.action, result.n_channels, result.version) == ("activated", 8, 2)
    stored = versions(engine)[1]
    function = version_function(stored)
    assert isinstance(function, SplitFunction) and stored.algorithm == f"split-{scheme}"
    assert 0 in function.split  # key 0 is the hottest of the Zipf window
    data = load_object(events(engine)[0].data_json)
    assert data["algorithm"] == f"split-{scheme}" and data["split_keys"] == len(function.split)
    assert data["predicted_b"] < data["b_before"]
    assert [row[0] for row in data["head"]] == sorted(function.split)
    assert (data["d"] is not None) == (scheme == "dchoices")
    shown = run_in_transaction(engine, lambda session: explain(session, REGION))
    assert [entry["key"] for entry in shown["head"]] == sorted(function.split)
    assert shown["memory"] == data["memory"] and shown["b_lb"] == data["b_lb"]


def apply_pending_plan(engine: Engine) -> None:
    """What a job does: take the pending plan and report it applied."""
    plan_id = plans(engine, "pending")[0].id
    for status in ("applying", "applied"):
        run_in_transaction(engine, lambda session, s=status: set_plan_status(session, plan_id, s))


def test_leaving_split_mode_consolidates_every_split_key_into_its_home(engine: Engine) -> None:
    split_region(engine)
    tick(engine, REGION)
    apply_pending_plan(engine)
    split = version_function(versions(engine)[1])
    assert isinstance(split, SplitFunction)
    run_in_transaction(engine, lambda session: update_region(session, REGION, split_scheme=None))
    ingest(engine, zipf_snapshot(2, n_channels=8, demand=8, exponent=1.3))
    result = tick(engine, REGION)
    assert result.action == "activated"
    plain = version_function(versions(engine)[2])
    assert not isinstance(plain, SplitFunction)
    plan = MigrationPlan.from_json(plans(engine)[-1].plan_json)
    assert plan.source_digest == split.digest
    merged = {(c.key, c.source) for c in plan.consolidations}
    expected = {
        (key, channel)
        for key, entry in split.split.items()
        for channel in entry.candidates
        if channel != plain.lookup(key)
    }
    assert merged == expected


def test_scale_and_rollback_of_a_split_region(engine: Engine) -> None:
    split_region(engine)
    tick(engine, REGION)
    apply_pending_plan(engine)
    scaled = scale(engine, REGION, 12, reason="more channels")
    function = version_function(versions(engine)[-1])
    assert isinstance(function, SplitFunction) and function.n_channels == 12
    assert scaled.plan_m is not None
    data = load_object(next(e for e in events(engine) if e.kind == "scaled").data_json)
    assert data["predicted_m"] == pytest.approx(scaled.plan_m)  # the plan's m, consolidations included
    rolled = rollback(engine, REGION, 1, reason="back to p(0)")
    assert version_function(versions(engine)[-1]) == version_function(versions(engine)[0])
    assert rolled.plan_m is not None


def test_an_applied_split_function_without_split_keys_is_not_rebuilt_for_the_mode(engine: Engine) -> None:
    """A split build whose window has no key hot enough to split stores a split function with an empty
    table; in split mode that is the region's kind, so a calm window changes nothing."""
    split_mode = {"split_scheme": "dchoices", "merge": "value=sum"}
    add_zipf_region(engine, n_channels_initial=8, algorithm="redist", **split_mode)
    empty = SplitFunction(initial_function(8, "int", SMALL_SLOT_BITS))
    event = NewEvent("activated", "test", "a split function without split keys")
    new = NewVersion(empty.to_json(), empty.digest, 8, "split-dchoices")
    run_in_transaction(engine, lambda session: activate(session, REGION, new, None, event))
    ingest(engine, zipf_snapshot(1, n_channels=8, demand=8, exponent=0.0))  # uniform: b within threshold
    result = tick(engine, REGION)
    assert (result.action, result.version) == ("unchanged", None)
    assert events(engine)[0].rule != "split-mode"
    assert len(versions(engine)) == 1
