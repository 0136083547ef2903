"""Reading the history back and removing records: the audit log, batch reports, snapshot and region
deletes (DESIGN §7, §10)."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput, NotFound
from repart.partitioning import initial_function
from repart.storage import (
    EVENT_KINDS,
    NewEvent,
    activate,
    delete_region,
    delete_snapshot,
    models,
    record_batch_report,
    record_event,
    region_events,
    run_in_transaction,
    snapshot_summaries,
)
from tests.factories import (
    add_region,
    add_versions,
    counted_snapshot,
    ingest,
    new_version,
    row_counts,
    skewed_keys,
)

SOURCE = Path(__file__).resolve().parents[2] / "src" / "repart"
REGION_TABLES = ("versions", "version_explicit", "plans", "plan_moves", "snapshots", "snapshot_items")


def windows(engine: Engine, *seqs: int) -> None:
    ingest(engine, *(counted_snapshot("trades", seq, skewed_keys(seq, 2000)) for seq in seqs))


def test_a_snapshot_a_decision_depends_on_is_deleted_only_by_force(engine: Engine) -> None:
    add_region(engine)
    windows(engine, 1, 2, 3, 4)
    first = new_version(initial_function(4, "str", 16), "consistent")
    decided = NewEvent("initialized", "initial", "p(0)", {"window_seqs": [1, 2]})
    run_in_transaction(engine, lambda s: activate(s, "trades", first, None, decided, considered_seq=2))
    scaled = NewEvent(
        "scaled", "operator", "weighed by window 3", {"window_seqs": [3], "activated_version": 7}
    )
    scaled_id = run_in_transaction(engine, lambda s: record_event(s, "trades", scaled))
    before = row_counts(engine)

    with pytest.raises(Conflict, match=r"window.seq 1 .*considered the windows up to seq 2"):
        run_in_transaction(engine, lambda s: delete_snapshot(s, "trades", 1))
    with pytest.raises(Conflict, match=rf"event\(s\) {scaled_id} \(scaled, version 7\)") as refused:
        run_in_transaction(engine, lambda s: delete_snapshot(s, "trades", 3))
    assert "considered" not in str(refused.value)
    with pytest.raises(NotFound, match=r"region 'trades' has no snapshot with window\.seq 9"):
        run_in_transaction(engine, lambda s: delete_snapshot(s, "trades", 9))
    assert row_counts(engine) == before

    items = {s.seq: s.items for s in run_in_transaction(engine, lambda s: snapshot_summaries(s, "trades"))}
    free = run_in_transaction(engine, lambda s: delete_snapshot(s, "trades", 4))
    assert (free.snapshot.seq, free.forced, free.depended_on) == (4, False, ())
    after = row_counts(engine)
    assert after["snapshots"] == before["snapshots"] - 1
    assert after["snapshot_items"] == before["snapshot_items"] - items[4]
    assert after["events"] == before["events"] + 1

    forced = run_in_transaction(engine, lambda s: delete_snapshot(s, "trades", 2, force=True))
    assert forced.forced and len(forced.depended_on) == 2  # considered, and the initialized event
    remaining = run_in_transaction(engine, lambda s: [x.seq for x in snapshot_summaries(s, "trades")])
    assert remaining == [1, 3]
    logged = run_in_transaction(
        engine,
        lambda s: [json.loads(e.data_json) for e in region_events(s, "trades", kind="snapshot-deleted")],
    )
    assert [(d["seq"], d["forced"], len(d["depended_on"])) for d in logged] == [(4, False, 0), (2, True, 2)]


def test_a_region_with_versions_is_deleted_only_by_force(engine: Engine, db_url: str) -> None:
    add_region(engine)
    add_region(engine, "kept")
    add_versions(db_url, "trades", (4, 6))
    add_versions(db_url, "kept", (4, 6))
    windows(engine, 1)

    def report(session: Session) -> None:
        plan_id = session.scalar(
            select(models.Plan.id).join(models.Region).where(models.Region.name == "trades").limit(1)
        )
        record_batch_report(session, "trades", 1, {"rows": 3}, plan_id=plan_id)
        record_event(session, "trades", NewEvent("no-change", "test", "kept in the log"))

    run_in_transaction(engine, report)
    before = row_counts(engine)
    with pytest.raises(Conflict, match="region 'trades' has 2 version"):
        run_in_transaction(engine, lambda s: delete_region(s, "trades"))
    with pytest.raises(NotFound, match="unknown region 'bonds'"):
        run_in_transaction(engine, lambda s: delete_region(s, "bonds"))
    assert row_counts(engine) == before

    deleted = run_in_transaction(engine, lambda s: delete_region(s, "trades", force=True))
    assert (deleted.versions, deleted.plans, deleted.snapshots) == (2, 1, 1)
    after = row_counts(engine)
    for table in REGION_TABLES:  # half of them were the deleted region's (the snapshots all were)
        assert after[table] == (before[table] // 2 if table not in ("snapshots", "snapshot_items") else 0)
    assert (after["regions"], after["batch_reports"], after["events"]) == (1, 0, before["events"])


def test_region_events_filter_and_refuse_bad_filters(engine: Engine) -> None:
    add_region(engine)
    start = datetime(2026, 2, 1, tzinfo=UTC)

    def add(session: Session) -> None:
        for minute, kind in enumerate(("initialized", "no-change", "activated", "no-change")):
            event = NewEvent(kind, "test", f"m{minute}")
            record_event(session, "trades", event, at=start + minute * timedelta(minutes=1))

    run_in_transaction(engine, add)

    def read(kind: str | None = None, since: datetime | None = None) -> list[str]:
        return run_in_transaction(
            engine, lambda s: [e.message for e in region_events(s, "trades", kind=kind, since=since)]
        )

    assert read() == ["m0", "m1", "m2", "m3"]
    assert read(kind="no-change") == ["m1", "m3"]
    assert read(since=start + timedelta(minutes=2)) == ["m2", "m3"]
    assert read(kind="no-change", since=start + timedelta(seconds=61)) == ["m3"]
    with pytest.raises(InvalidInput) as unknown:
        read(kind="activate")
    assert unknown.value.field == "kind" and "'activated'" in str(unknown.value)
    with pytest.raises(InvalidInput) as naive:
        read(since=datetime(2026, 2, 1))
    assert naive.value.field == "since"


def _written_kinds() -> set[str]:
    """The string kinds passed to ``NewEvent`` (first argument or ``kind=``) anywhere in src/repart,
    and the members of ``Literal`` aliases named ``…Kind`` (``ActionKind``)."""
    found: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "NewEvent":
                values = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "kind")]
                found |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "").endswith("Kind"):
                found |= {
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value != "Literal"
                }
    return found


def test_event_kinds_are_the_kinds_the_code_writes() -> None:
    written = _written_kinds()
    assert written >= {"initialized", "activated", "no-change", "rollback", "scaled", "plan-failed"}
    assert written == set(EVENT_KINDS)
