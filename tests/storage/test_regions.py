"""Regions: configuration CRUD and validation (DESIGN §7, §10)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from repart.errors import Conflict, NotFound
from repart.protocol.snapshot import Snapshot
from repart.storage import (
    NewEvent,
    RegionConfig,
    create_region,
    delete_region,
    ingest_snapshot,
    list_regions,
    record_event,
    region_by_name,
    run_in_transaction,
    update_region,
)

from .helpers import add_region, document, row_counts


def test_create_read_update_delete(engine: Engine) -> None:
    config = RegionConfig(key_type="int", n_channels_initial=8, utility="atm", settings={"target": 0.7})
    run_in_transaction(engine, lambda s: create_region(s, "clicks", config))
    add_region(engine, "trades")
    stored = run_in_transaction(engine, lambda s: RegionConfig.from_row(region_by_name(s, "clicks")))
    assert stored == config and stored.utility == "ATM" and dict(stored.settings) == {"target": 0.7}
    row = run_in_transaction(engine, lambda s: update_region(s, "clicks", alpha=1.5, max_channels=32))
    assert (row.alpha, row.max_channels) == (1.5, 32) and row.updated_at >= row.created_at
    assert run_in_transaction(engine, lambda s: [r.name for r in list_regions(s)]) == ["clicks", "trades"]
    run_in_transaction(engine, lambda s: delete_region(s, "clicks"))
    with pytest.raises(NotFound, match="unknown region 'clicks'; known regions: trades"):
        run_in_transaction(engine, lambda s: region_by_name(s, "clicks"))


def test_delete_cascades_but_keeps_the_audit_log(engine: Engine) -> None:
    add_region(engine)
    run_in_transaction(engine, lambda s: ingest_snapshot(s, Snapshot.from_document(document())))
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
        with pytest.raises(ValueError, match="region name must be"):
            add_region(engine, name)
    assert row_counts(engine)["regions"] == 1


def test_key_type_and_slot_bits_are_fixed_once_used(engine: Engine) -> None:
    add_region(engine)
    run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=12))
    run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=16))
    run_in_transaction(engine, lambda s: ingest_snapshot(s, Snapshot.from_document(document())))
    with pytest.raises(Conflict, match="slot_bits can no longer change"):
        run_in_transaction(engine, lambda s: update_region(s, "trades", slot_bits=12))
    with pytest.raises(ValueError, match="unknown region field"):
        run_in_transaction(engine, lambda s: update_region(s, "trades", colour="red"))


BAD_CONFIGS: list[tuple[dict[str, Any], str]] = [
    ({"key_type": "bytes"}, "key_type must be 'str' or 'int'"),
    ({"resources": "XYZ"}, "resources must be one of"),
    ({"alpha": 1.0}, "alpha must be > 1"),
    ({"alpha": 0.5}, "alpha must be a finite number >= 1"),
    ({"sigma": 0.0}, r"sigma must be in \(0, 1\]"),
    ({"algorithm": "best"}, "algorithm must be one of"),
    ({"utility": "XYZ"}, "utility must be one of"),
    ({"policy": "random"}, "policy must be one of fixed, target-utilization"),
    ({"min_channels": 0}, "min_channels must be in"),
    ({"max_channels": 2}, "n_channels_initial must be in"),
    ({"min_channels": 5, "max_channels": 4}, "max_channels must be in"),
    ({"tail_aware": 1}, "tail_aware must be true or false"),
    ({"slot_bits": 21}, "slot_bits must be in"),
    ({"consistent_method": "rendezvous"}, "consistent_method must be one of"),
    ({"settings": {"x": float("inf")}}, "settings must be JSON-serializable"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_CONFIGS)
def test_bad_configurations_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RegionConfig(**{"key_type": "str", "n_channels_initial": 4, **changes})
