"""Versions, plans and activation (DESIGN §6, §7): immutability, status transitions, atomicity."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput, NotFound
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.function import PartitionFunction
from repart.storage import (
    NewEvent,
    NewVersion,
    activate,
    applied_version,
    get_plan,
    get_version,
    list_events,
    list_plans,
    record_batch_report,
    run_in_transaction,
    set_plan_status,
    version_function,
)
from repart.storage.jsontext import load_object
from repart.storage.keys import key_columns
from repart.storage.models import Event
from tests.factories import REBALANCE_EVENT as EVENT
from tests.factories import add_region, new_plan, new_version, row_counts

SCATTERED = ConsistentSpec("jump")  # N 4 -> 5 moves slots scattered in more than 1000 runs, all stored
V1 = PartitionFunction(n_channels=4, key_type="str", explicit={"AAPL": 1, "nul\x00": 2}, consistent=SCATTERED)
V2 = PartitionFunction(
    n_channels=5, key_type="str", explicit={"AAPL": 4, "nul\x00": 2, "日本": 0}, consistent=SCATTERED
)
PLAN_1_2 = new_plan(V1, V2)


def plan_json(**changes: Any) -> str:
    """The JSON text of PLAN_1_2 with top-level fields replaced by ``changes``."""
    return json.dumps(json.loads(PLAN_1_2.to_json()) | changes)


def stored_moves(plan: MigrationPlan) -> list[tuple[Any, ...]]:
    """The ``plan_moves`` rows that ``plan`` is stored as, in ``stored`` below's form."""
    explicit = [
        ("explicit", key_columns(m.key)["key_utf8"], None, None, m.source, m.target, m.weight)
        for m in plan.explicit_moves
    ]
    slots = [("slots", None, *row, None) for row in plan.slot_moves.tolist()]
    return explicit + slots


def stored(engine: Engine, plan_id: int) -> tuple[Any, list[tuple[Any, ...]]]:
    """Plan ``plan_id`` and its moves as tuples."""

    def read(session: Session) -> tuple[Any, list[tuple[Any, ...]]]:
        plan = get_plan(session, plan_id)
        moves = [
            (m.kind, m.key_utf8, m.first_slot, m.last_slot, m.source, m.target, m.weight) for m in plan.moves
        ]
        return plan, moves

    return run_in_transaction(engine, read)


@pytest.fixture
def trades_at_v1(engine: Engine) -> None:
    """Region ``trades`` in ``engine``'s database, its version 1 (V1) applied."""
    add_region(engine)
    run_in_transaction(engine, lambda s: activate(s, "trades", new_version(V1, "consistent"), None, EVENT))


def _activate_v2(engine: Engine) -> Any:
    return run_in_transaction(
        engine, lambda s: activate(s, "trades", new_version(V2, parent=1), PLAN_1_2, EVENT)
    )


def _status(engine: Engine) -> tuple[dict[int, str], dict[int, str]]:
    def read(session: Session) -> tuple[dict[int, str], dict[int, str]]:
        from repart.storage import list_versions

        versions = {v.number: v.status for v in list_versions(session, "trades")}
        plans = {p.to_version: p.status for p in list_plans(session, "trades")}
        return versions, plans

    return run_in_transaction(engine, read)


def test_first_version_is_applied_without_a_plan(engine: Engine, trades_at_v1: None) -> None:
    version = run_in_transaction(engine, lambda s: applied_version(s, "trades"))
    assert version is not None and version.number == 1 and version.status == "applied"
    assert version_function(version) == V1
    stored = run_in_transaction(
        engine, lambda s: [(e.key_utf8, e.channel) for e in get_version(s, "trades", 1).explicit]
    )
    assert stored == [(b"AAPL", 1), (b"nul\x00", 2)]


def test_activation_writes_version_plan_moves_and_event(engine: Engine, trades_at_v1: None) -> None:
    result = _activate_v2(engine)
    assert result.version_number == 2 and result.plan_id is not None and result.superseded_plans == ()
    plan, moves = stored(engine, result.plan_id)
    assert (plan.from_version, plan.to_version, plan.status) == (1, 2, "pending")
    assert (plan.plan_json, plan.digest) == (PLAN_1_2.to_json(), PLAN_1_2.digest)
    assert MigrationPlan.from_json(plan.plan_json) == PLAN_1_2
    counts = (len(PLAN_1_2.explicit_moves), len(PLAN_1_2.slot_moves), PLAN_1_2.cost, PLAN_1_2.m)
    assert (plan.explicit_moves, plan.slot_moves, plan.predicted_cost, plan.predicted_m) == counts
    # AAPL (40 of the snapshot's 100 tuples, state β_s(f) = f) moves from 1 to 4; 日本 (not counted)
    # from its slot's channel to 0; 'nul\x00' keeps channel 2 and is pinned; N 4 → 5 moves slots to 4.
    assert moves[:2] == [
        ("explicit", b"AAPL", None, None, 1, 4, pytest.approx(0.4)),
        ("explicit", "日本".encode(), None, None, 3, 0, 0.0),
    ]
    assert PLAN_1_2.pinned_keys == ("nul\x00",) and counts[:2] == (2, len(moves) - 2) and counts[1] > 1000
    assert moves == stored_moves(PLAN_1_2)
    assert {move[5] for move in moves[2:]} == {4}
    events = run_in_transaction(engine, lambda s: list_events(s, "trades"))
    assert [e.kind for e in events] == ["activate", "activate"]
    assert load_object(events[0].data_json) == {
        "b": 1.4,
        "threshold": 1.2,
        "activated_version": 2,
        "plan_id": result.plan_id,
        "superseded_plans": [],
    }
    assert _status(engine) == ({1: "applied", 2: "planned"}, {2: "pending"})


def test_a_plan_may_be_given_as_json_text_and_without_an_estimate(engine: Engine, trades_at_v1: None) -> None:
    plan = plan_migration(V1, V2)
    result = run_in_transaction(
        engine, lambda s: activate(s, "trades", new_version(V2, parent=1), plan.to_json(), EVENT)
    )
    assert result.plan_id is not None
    row, moves = stored(engine, result.plan_id)
    assert (row.plan_json, row.digest, row.predicted_cost, row.predicted_m) == (
        plan.to_json(),
        plan.digest,
        None,
        None,
    )
    assert moves == stored_moves(plan) and moves[0][-1] == 0.0


def test_applying_a_plan_moves_the_versions_along(engine: Engine, trades_at_v1: None) -> None:
    plan_id = _activate_v2(engine).plan_id
    run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "applying"))
    run_in_transaction(
        engine, lambda s: set_plan_status(s, plan_id, "applied", moved_rows=10, moved_bytes=2048)
    )
    assert _status(engine) == ({1: "superseded", 2: "applied"}, {2: "applied"})
    plan = run_in_transaction(engine, lambda s: get_plan(s, plan_id))
    assert (plan.moved_rows, plan.moved_bytes) == (10, 2048)
    report = run_in_transaction(
        engine, lambda s: record_batch_report(s, "trades", 7, {"rows": 10}, plan_id=plan_id)
    )
    assert report > 0


def test_a_failed_plan_abandons_its_version(engine: Engine, trades_at_v1: None) -> None:
    plan_id = _activate_v2(engine).plan_id
    run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "applying"))
    run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "failed"))
    assert _status(engine) == ({1: "applied", 2: "abandoned"}, {2: "failed"})


def test_a_new_activation_supersedes_the_pending_plan(engine: Engine, trades_at_v1: None) -> None:
    first = _activate_v2(engine)
    second = _activate_v2(engine)
    assert second.superseded_plans == (first.plan_id,)
    assert _status(engine) == (
        {1: "applied", 2: "abandoned", 3: "planned"},
        {2: "superseded", 3: "pending"},
    )


ILLEGAL = [
    ([], "applied", "cannot go from 'pending' to 'applied'"),
    ([], "failed", "cannot go from 'pending' to 'failed'"),
    (["applying"], "superseded", "cannot go from 'applying' to 'superseded'"),
    (["applying"], "pending", "cannot go from 'applying' to 'pending'"),
    (["applying", "applied"], "applying", "cannot go from 'applied' to 'applying'"),
    (["applying", "failed"], "applied", "cannot go from 'failed' to 'applied'"),
    (["superseded"], "applying", "cannot go from 'superseded' to 'applying'"),
]


@pytest.mark.parametrize(("path", "status", "message"), ILLEGAL)
def test_illegal_plan_transitions_are_refused(
    engine: Engine, trades_at_v1: None, path: list[str], status: str, message: str
) -> None:
    plan_id = _activate_v2(engine).plan_id
    for step in path:
        run_in_transaction(engine, lambda s, step=step: set_plan_status(s, plan_id, step))
    before = _status(engine)
    with pytest.raises(Conflict, match=message):
        run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, status))
    assert _status(engine) == before


def test_unknown_status_and_unknown_plan_are_errors(engine: Engine, trades_at_v1: None) -> None:
    plan_id = _activate_v2(engine).plan_id
    with pytest.raises(InvalidInput, match="status must be one of"):
        run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "done"))
    with pytest.raises(NotFound, match="plan 999 does not exist"):
        run_in_transaction(engine, lambda s: set_plan_status(s, 999, "applying"))
    with pytest.raises(InvalidInput, match="recorded when a plan is applied"):
        run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "applying", moved_rows=3))


@pytest.mark.parametrize(
    "field", ["digest", "function_json", "n_channels", "algorithm", "number", "report_json"]
)
def test_version_content_is_immutable(engine: Engine, trades_at_v1: None, field: str) -> None:
    def change(session: Session) -> None:
        version = get_version(session, "trades", 1)
        setattr(version, field, 7 if field in ("n_channels", "number") else "changed")
        session.flush()

    with pytest.raises(Conflict, match=f"only status may change, not {field}"):
        run_in_transaction(engine, change)
    assert run_in_transaction(engine, lambda s: get_version(s, "trades", 1).digest) == V1.digest


def test_versions_and_their_entries_cannot_be_deleted_or_edited(engine: Engine, trades_at_v1: None) -> None:
    def delete_version(session: Session) -> None:
        session.delete(get_version(session, "trades", 1))
        session.flush()

    def edit_entry(session: Session) -> None:
        get_version(session, "trades", 1).explicit[0].channel = 3
        session.flush()

    for work in (delete_version, edit_entry):
        with pytest.raises(Conflict):
            run_in_transaction(engine, work)
    assert row_counts(engine)["version_explicit"] == 2


def test_status_of_a_version_may_change(engine: Engine, trades_at_v1: None) -> None:
    plan_id = _activate_v2(engine).plan_id
    run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "superseded"))
    assert _status(engine)[0][2] == "abandoned"


def test_activation_is_atomic_when_it_fails_midway(engine: Engine, trades_at_v1: None) -> None:
    def fail(*_: object) -> None:
        raise RuntimeError("disk full")

    before = row_counts(engine)
    event.listen(Event, "before_insert", fail)
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            _activate_v2(engine)
        with Session(engine) as session:
            # The caller swallows the error and commits: activate's SAVEPOINT still leaves nothing behind.
            with pytest.raises(RuntimeError):
                activate(session, "trades", new_version(V2), PLAN_1_2, EVENT)
            session.commit()
    finally:
        event.remove(Event, "before_insert", fail)
    assert row_counts(engine) == before


def test_activation_is_atomic_when_a_duplicate_version_number_collides(
    engine: Engine, trades_at_v1: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import repart.storage.activation as activation

    monkeypatch.setattr(activation, "func", _MaxIsZero())
    before = row_counts(engine)
    with pytest.raises(Conflict, match="conflicts with a stored record"):
        _activate_v2(engine)
    assert row_counts(engine) == before


class _MaxIsZero:
    """Stands in for ``sqlalchemy.func`` so that activate computes version number 1 again."""

    def max(self, _column: object) -> Any:
        from sqlalchemy import literal

        return literal(0)


OTHER_V1 = PartitionFunction(n_channels=4, key_type="str", explicit={"AAPL": 0})
OTHER_V2 = PartitionFunction(n_channels=5, key_type="str", explicit={"AAPL": 3})
NO_MOVES = {"key_type": "str", "slot_bits": 16, "source_n_channels": 4, "target_n_channels": 5}

# The plan column holds anything a caller might pass: a plan, its JSON text, None or the wrong type.
# (case, version, plan, the error, the field named (InvalidInput), a message fragment where it is the
# point: which check of a field refused it)
BAD_ACTIVATIONS: list[tuple[str, NewVersion, Any, type[Exception], str | None, str | None]] = [
    ("digest", NewVersion(V2.to_json(), "0" * 64, 5, "readj"), PLAN_1_2, InvalidInput, "digest", "SHA-256"),
    (
        "not canonical",
        NewVersion(V2.to_json() + " ", V2.digest, 5, "readj"),
        PLAN_1_2,
        InvalidInput,
        "function_json",
        "canonical",
    ),
    (
        "not json",
        NewVersion("{", V2.digest, 5, "readj"),
        PLAN_1_2,
        InvalidInput,
        "function_json",
        "partition function's JSON",
    ),
    (
        "not text",
        NewVersion(b"{}", V2.digest, 5, "readj"),  # type: ignore[arg-type]
        PLAN_1_2,
        InvalidInput,
        "function_json",
        "a string",
    ),
    (
        "n",
        NewVersion(V2.to_json(), V2.digest, 6, "readj"),
        PLAN_1_2,
        InvalidInput,
        "n_channels",
        "the function's N (5)",
    ),
    ("algorithm", new_version(V2, "best"), PLAN_1_2, InvalidInput, "algorithm", None),
    (
        "key type",
        new_version(PartitionFunction(n_channels=5, explicit={1: 0})),
        PLAN_1_2,
        InvalidInput,
        "function_json",
        "the region's key_type 'str'",
    ),
    (
        "too many channels",
        new_version(PartitionFunction(n_channels=17)),
        PLAN_1_2,
        InvalidInput,
        "n_channels",
        "[1, 16] (the region's channel bounds)",
    ),
    (
        "slot bits",
        new_version(PartitionFunction(n_channels=5, slot_bits=12)),
        PLAN_1_2,
        InvalidInput,
        "function_json",
        "the region's slot_bits 16",
    ),
    (
        "report",
        dataclasses.replace(new_version(V2), report={"b": float("nan")}),
        PLAN_1_2,
        InvalidInput,
        "report",
        None,
    ),
    ("parent", new_version(V2, parent=9), PLAN_1_2, NotFound, None, "has no version 9"),
    ("no plan", new_version(V2), None, InvalidInput, "plan", "is required"),
    (
        "plan source digest",
        new_version(V2),
        new_plan(OTHER_V1, V2),
        InvalidInput,
        "plan",
        f"source_digest must be '{V1.digest}' (the digest of the applied version 1",
    ),
    (
        "plan target digest",
        new_version(V2),
        new_plan(V1, OTHER_V2),
        InvalidInput,
        "plan",
        f"target_digest must be '{V2.digest}' (the digest of the new version",
    ),
    (
        "plan backwards",
        new_version(V2),
        new_plan(V2, V1),
        InvalidInput,
        "plan",
        "source_n_channels must be 4 (N of the applied version 1",
    ),
    (
        "plan target channels",
        new_version(V2),
        dataclasses.replace(PLAN_1_2, target_n_channels=6),
        InvalidInput,
        "plan",
        "target_n_channels must be 5 (N of the new version",
    ),
    (
        "plan key_type",
        new_version(V2),
        MigrationPlan(**NO_MOVES | {"key_type": "int"}, source_digest=V1.digest, target_digest=V2.digest),
        InvalidInput,
        "plan",
        "key_type must be 'str' (the region's key type, or None",
    ),
    (
        "plan slot_bits",
        new_version(V2),
        MigrationPlan(**NO_MOVES | {"slot_bits": 12}, source_digest=V1.digest, target_digest=V2.digest),
        InvalidInput,
        "plan",
        "slot_bits must be 16 (the region's slot bits",
    ),
    ("plan type", new_version(V2), 42, InvalidInput, "plan", "a MigrationPlan or its JSON text, got 42"),
    ("plan not json", new_version(V2), "{", InvalidInput, "plan_json", "a migration plan's JSON"),
    (
        "plan fields",
        new_version(V2),
        plan_json(explicit=[]),
        InvalidInput,
        "plan_json",
        "unknown field(s) ['explicit']",
    ),
    (
        "plan shape",
        new_version(V2),
        plan_json(explicit_moves=[["AAPL", 1, 4]]),
        InvalidInput,
        "plan_json",
        "explicit_moves[0] must be a [key, source, target, weight] row",
    ),
    (
        "plan key",
        new_version(V2),
        plan_json(explicit_moves=[[5, 1, 4, 1.0]]),
        InvalidInput,
        "plan_json",
        "'int' keys or all 'str' keys, got both",
    ),
    (
        "plan source",
        new_version(V2),
        plan_json(explicit_moves=[["AAPL", 4, 0, 1.0]]),
        InvalidInput,
        "plan_json",
        "explicit_moves[0].source must be an integer in [0, 3]",
    ),
    (
        "plan target",
        new_version(V2),
        plan_json(slot_moves=[[0, 1, 0, 5]]),
        InvalidInput,
        "plan_json",
        "slot_moves[0] must have target in [0, 4], got [0, 1, 0, 5]",
    ),
    (
        "plan self move",
        new_version(V2),
        plan_json(slot_moves=[[0, 1, 2, 2]]),
        InvalidInput,
        "plan_json",
        "a source and a target that differ",
    ),
    (
        "plan slot order",
        new_version(V2),
        plan_json(slot_moves=[[5, 1, 0, 4]]),
        InvalidInput,
        "plan_json",
        "last_slot in [first_slot, 65535]",
    ),
    (
        "plan weight",
        new_version(V2),
        plan_json(explicit_moves=[["AAPL", 1, 4, -1.0]]),
        InvalidInput,
        "plan_json",
        "explicit_moves[0].weight must be a number in [0, inf)",
    ),
]


@pytest.mark.parametrize(
    ("version", "plan", "error", "field", "fragment"),
    [c[1:] for c in BAD_ACTIVATIONS],
    ids=[c[0] for c in BAD_ACTIVATIONS],
)
def test_bad_activations_write_nothing(
    engine: Engine,
    trades_at_v1: None,
    version: NewVersion,
    plan: Any,
    error: type[Exception],
    field: str | None,
    fragment: str | None,
) -> None:
    before = row_counts(engine)
    with pytest.raises(error) as raised:
        run_in_transaction(engine, lambda s: activate(s, "trades", version, plan, EVENT))
    assert field is None or (isinstance(raised.value, InvalidInput) and raised.value.field == field)
    assert fragment is None or fragment in str(raised.value)
    assert row_counts(engine) == before


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"data": {"b": float("nan")}}, "data"),
        ({"data": [1.4]}, "data"),
        ({"kind": ""}, "kind"),
        ({"kind": "k" * 33}, "kind"),
        ({"rule": "r" * 65}, "rule"),
        ({"message": None}, "message"),
    ],
)
def test_a_bad_event_names_its_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        NewEvent(**{"kind": "activate", "rule": "rule", "message": "message", **fields})
    assert raised.value.field == field


def test_a_first_version_needs_no_plan_and_refuses_one(engine: Engine) -> None:
    add_region(engine)
    with pytest.raises(InvalidInput) as raised:
        run_in_transaction(engine, lambda s: activate(s, "trades", new_version(V1), PLAN_1_2, EVENT))
    assert raised.value.field == "plan" and "no applied version" in str(raised.value)
    assert row_counts(engine)["versions"] == 0


def test_activation_waits_for_a_plan_being_applied(engine: Engine, trades_at_v1: None) -> None:
    plan_id = _activate_v2(engine).plan_id
    run_in_transaction(engine, lambda s: set_plan_status(s, plan_id, "applying"))
    with pytest.raises(Conflict, match="is being applied"):
        _activate_v2(engine)
