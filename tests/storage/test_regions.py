"""Regions: configuration CRUD and validation (DESIGN §7, §10)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from repart.controller.service import create_region, update_region
from repart.errors import Conflict, InvalidInput, NotFound
from repart.storage import (
    NewEvent,
    RegionConfig,
    delete_region,
    ingest_snapshot,
    list_regions,
    record_event,
    region_by_name,
    run_in_transaction,
)
from tests.factories import add_region, row_counts, small_snapshot


def test_create_read_update_delete(engine: Engine) -> None:
    config = RegionConfig(
        key_type="int", n_channels_initial=8, utility="atm", settings={"target_utilization": 0.7}
    )
    run_in_transaction(engine, lambda s: create_region(s, "clicks", config))
    add_region(engine, "trades")
    stored = run_in_transaction(engine, lambda s: RegionConfig.from_row(region_by_name(s, "clicks")))
    assert (
        stored == config and stored.utility == "ATM" and dict(stored.settings) == {"target_utilization": 0.7}
    )
    row = run_in_transaction(engine, lambda s: update_region(s, "clicks", alpha=1.5, max_channels=32))
    assert (row.alpha, row.max_channels) == (1.5, 32) and row.updated_at >= row.created_at
    assert run_in_transaction(engine, lambda s: [r.name for r in list_regions(s)]) == ["clicks", "trades"]
    run_in_transaction(engine, lambda s: delete_region(s, "clicks"))
    with pytest.raises(NotFound, match="unknown region 'clicks'; known regions: trades"):
        run_in_transaction(engine, lambda s: region_by_name(s, "clicks"))


def test_delete_cascades_but_keeps_the_audit_log(engine: Engine) -> None:
    add_region(engine)
    run_in_transaction(engine, lambda s: ingest_snapshot(s, small_snapshot()))
    run_in_transaction(
        engine, lambda s: record_event(s, "trades", NewEvent("ingest", "spool", "one snapshot"))
    )
    run_in_transaction(engine, lambda s: delete_region(s, "trades"))
    counts = row_counts(engine)
    assert counts["events"] == 1 and counts["snapshots"] == counts["snapshot_items"] == counts["regions"] == 0


def test_duplicate_names_and_bad_names_are_refused(engine: Engine) -> None:
    add_region(engine)
    with pytest.raises(Conflict, match="region 'trades' already exists"):
        add_region(engine)
    for name in ("", "-x", "a b", "x" * 129, "nul\x00"):
        with pytest.raises(InvalidInput) as raised:
            add_region(engine, name)
        assert raised.value.field == "region"
    assert row_counts(engine)["regions"] == 1


def test_key_type_and_slot_bits_are_fixed_once_used(engine: Engine) -> None:
    add_region(engine)
    run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=12))
    run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=16))
    run_in_transaction(engine, lambda s: ingest_snapshot(s, small_snapshot()))
    with pytest.raises(Conflict, match="slot_bits can no longer change"):
        run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=12))
    with pytest.raises(InvalidInput) as raised:
        run_in_transaction(engine, lambda s: update_region(s, "trades", colour="red"))
    assert raised.value.field == "colour" and "is not a region field" in str(raised.value)


# (changes to a valid configuration, the field named, a message fragment where it is the point)
BAD_CONFIGS: list[tuple[dict[str, Any], str, str | None]] = [
    ({"key_type": "bytes"}, "key_type", "'str', 'int'"),
    ({"resources": "XYZ"}, "resources", None),
    ({"alpha": 1.0}, "alpha", "(1, inf)"),
    ({"alpha": 0.5}, "alpha", None),
    ({"alpha": float("inf")}, "alpha", None),
    ({"sigma": 0.0}, "sigma", None),
    ({"algorithm": "best"}, "algorithm", None),
    ({"utility": "XYZ"}, "utility", None),
    ({"policy": "random"}, "policy", "'fixed', 'target-utilization'"),
    ({"min_channels": 0}, "min_channels", None),
    ({"max_channels": 2}, "n_channels_initial", None),
    ({"min_channels": 5, "max_channels": 4}, "max_channels", None),
    ({"tail_aware": 1}, "tail_aware", None),
    ({"slot_bits": 21}, "slot_bits", None),
    ({"consistent_method": "rendezvous"}, "consistent_method", None),
    ({"settings": {"x": float("inf")}}, "settings", None),
    ({"settings": ["x"]}, "settings", None),
]


@pytest.mark.parametrize(("changes", "field", "fragment"), BAD_CONFIGS)
def test_bad_configurations_name_the_field(changes: dict[str, Any], field: str, fragment: str | None) -> None:
    with pytest.raises(InvalidInput) as raised:
        RegionConfig(**{"key_type": "str", "n_channels_initial": 4, **changes})
    assert raised.value.field == field
    assert fragment is None or fragment in str(raised.value)
