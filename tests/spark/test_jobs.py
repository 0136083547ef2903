"""The job's side of the plan life cycle through the ControllerClient port: pending → applying → applied
| failed (DESIGN §6–§9, §12.1), with ``SqlControllerClient`` on SQLite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from repart.controller.actions import scale
from repart.controller.tick import last_considered_seq, tick
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound
from repart.migration import MigrationPlan
from repart.protocol.merge import MergeSpec
from repart.spark.jobs import apply_next_plan
from repart.state.merge import Merge, MergeColumns
from repart.state.store import StateStore
from repart.storage import models, run_in_transaction, set_plan_status
from repart.storage.client import SqlControllerClient
from tests.factories import REGION, add_region, counted_snapshot, ingest, new_store


@pytest.fixture
def backend() -> str:
    """The ``engine`` of these tests is a migrated SQLite file (tests/storage covers PostgreSQL)."""
    return "sqlite"


@dataclass(frozen=True)
class Moved:
    moved_rows: int
    moved_bytes: int
    already_applied: bool = False


@dataclass
class FakeStore:
    """Records what it was asked to apply; fails when told to."""

    error: Exception | None = None
    committed_before: bool = False
    calls: list[tuple[int, int, int]] = field(default_factory=list)
    merges: list[MergeColumns | Merge | None] = field(default_factory=list)

    def apply(
        self,
        plan: MigrationPlan,
        *,
        plan_id: int,
        region: str,
        from_version: int,
        to_version: int,
        merge: MergeColumns | Merge | None = None,
    ) -> Moved:
        assert region == REGION and isinstance(plan, MigrationPlan)
        self.calls.append((plan_id, from_version, to_version))
        self.merges.append(merge)
        if self.error is not None:
            raise self.error
        if self.committed_before:
            return Moved(moved_rows=0, moved_bytes=0, already_applied=True)
        return Moved(moved_rows=123, moved_bytes=4567)


def plans(engine: Engine) -> list[models.Plan]:
    with Session(engine) as session:
        return list(session.scalars(select(models.Plan).order_by(models.Plan.id)))


def failure_events(engine: Engine) -> list[models.Event]:
    with Session(engine) as session:
        return list(session.scalars(select(models.Event).where(models.Event.kind == "plan-failed")))


def planned(engine: Engine) -> int:
    """Version 1 applied on 4 channels, version 2 on 6 planned with a pending plan; returns its id."""
    add_region(engine, n_channels_initial=4, max_channels=8)
    tick(engine, REGION)
    plan_id = scale(engine, REGION, 6).plan_id
    assert plan_id is not None
    return plan_id


def test_before_the_first_tick_there_is_no_function_and_nothing_to_apply(engine: Engine) -> None:
    add_region(engine, n_channels_initial=4)
    client = SqlControllerClient(engine)
    with pytest.raises(NotFound, match="no applied version yet"):
        client.applied_function(REGION)
    assert apply_next_plan(client, REGION, FakeStore()) is None


def test_apply_next_plan_takes_the_plan_through_applying_to_applied(engine: Engine) -> None:
    plan_id = planned(engine)
    client = SqlControllerClient(engine)
    assert client.applied_function(REGION).version == 1
    store = FakeStore()
    done = apply_next_plan(client, REGION, store)
    assert done is not None
    todo, moved = done
    assert (todo.plan_id, todo.from_version, todo.to_version) == (plan_id, 1, 2)
    assert store.calls == [(plan_id, 1, 2)] and moved.moved_rows == 123
    assert store.merges == [None]  # no merge given and none declared by the region: none passed on
    (row,) = plans(engine)
    assert (row.status, row.moved_rows, row.moved_bytes) == ("applied", 123, 4567)
    number, function = client.applied_function(REGION)
    assert number == 2 and function.digest == MigrationPlan.from_json(row.plan_json).target_digest
    assert client.claim_next_plan(REGION) is None
    client.report_plan(plan_id, "applied", moved_rows=123, moved_bytes=4567)  # a retry: a no-op
    with pytest.raises(Conflict, match="a retry must repeat them"):
        client.report_plan(plan_id, "applied", moved_rows=1, moved_bytes=1)  # other numbers
    assert (plans(engine)[0].moved_rows, plans(engine)[0].moved_bytes) == (123, 4567)


@pytest.mark.parametrize(
    "error",
    [
        InvalidInput("from_version", "must be the store's: it holds version 7"),
        Corrupt("truncated", path="/s/f"),
    ],
)
def test_a_plan_the_store_refuses_fails_with_its_reason_and_the_error_propagates(
    engine: Engine, error: Exception
) -> None:
    plan_id = planned(engine)
    client = SqlControllerClient(engine)
    with pytest.raises(type(error), match=str(error)):
        apply_next_plan(client, REGION, FakeStore(error=error))
    (row,) = plans(engine)
    assert row.status == "failed"
    (event,) = failure_events(engine)
    assert event.message == f"{type(error).__name__}: {error}" and f'"plan_id":{plan_id}' in event.data_json
    assert client.applied_function(REGION).version == 1
    assert client.claim_next_plan(REGION) is None


def test_an_error_that_may_follow_the_commit_leaves_the_plan_applying_for_a_retry(engine: Engine) -> None:
    plan_id = planned(engine)
    client = SqlControllerClient(engine)
    with pytest.raises(OSError, match="disk full"):
        apply_next_plan(client, REGION, FakeStore(error=OSError("disk full")))
    assert plans(engine)[0].status == "applying"
    # The retry finds the plan committed in the store: applied, with the moved amounts unknown.
    done = apply_next_plan(client, REGION, FakeStore(committed_before=True))
    assert done is not None and done[0].plan_id == plan_id
    (row,) = plans(engine)
    assert (row.status, row.moved_rows, row.moved_bytes) == ("applied", None, None)


def test_a_merge_the_job_gives_wins_over_the_regions(engine: Engine) -> None:
    planned(engine)
    with Session(engine) as session, session.begin():
        session.execute(update(models.Region).where(models.Region.name == REGION).values(merge="n=max"))
    store = FakeStore()
    spec = MergeSpec.parse("n=sum")
    assert apply_next_plan(SqlControllerClient(engine), REGION, store, merge=spec) is not None
    assert store.merges == [spec]


def test_by_default_the_store_gets_the_merge_the_region_declares(engine: Engine) -> None:
    planned(engine)
    declared = "volume=sum,low=min"
    with Session(engine) as session, session.begin():
        session.execute(update(models.Region).where(models.Region.name == REGION).values(merge=declared))
    client = SqlControllerClient(engine)
    assert client.region_merge(REGION) == MergeSpec.parse(declared)
    store = FakeStore()
    assert apply_next_plan(client, REGION, store) is not None
    assert store.merges == [MergeSpec.parse(declared)]
    with pytest.raises(NotFound, match="nowhere"):
        client.region_merge("nowhere")


def test_a_plan_left_applying_by_a_dead_job_is_retried(engine: Engine) -> None:
    plan_id = planned(engine)
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applying"))
    client = SqlControllerClient(engine)
    todo = client.claim_next_plan(REGION)
    assert todo is not None and todo.plan_id == plan_id
    assert apply_next_plan(client, REGION, FakeStore()) is not None
    assert plans(engine)[0].status == "applied"


def store_at_version_1(engine: Engine, root: Path) -> StateStore:
    """A real state store laid out by the region's applied version, 4,000 rows routed by it."""
    number, function = SqlControllerClient(engine).applied_function(REGION)
    keys = [f"k{i}" for i in range(4000)]
    table = pa.table(
        {"key": keys, "n": list(range(4000))}, schema=pa.schema([("key", pa.string()), ("n", pa.int64())])
    )
    return new_store(root, function, table, slot_groups=4, version=number)


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_damaged_state_file_fails_the_plan_naming_the_file(
    engine: Engine, tmp_path: Path, damage: str
) -> None:
    plan_id = planned(engine)
    store = store_at_version_1(engine, tmp_path / "state")
    plan = MigrationPlan.from_json(plans(engine)[0].plan_json)
    victim = next(e for c in plan.channels_losing_keys for e in store.files(c))  # a file the plan reads
    assert store.objects.local_root is not None
    path = store.objects.local_root / victim.path
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: victim.bytes // 2])
    client = SqlControllerClient(engine)
    with pytest.raises(Corrupt) as raised:
        apply_next_plan(client, REGION, store)
    assert raised.value.path == victim.path
    (row,) = plans(engine)
    assert row.status == "failed" and row.id == plan_id
    (event,) = failure_events(engine)
    assert event.message.startswith(f"Corrupt: {victim.path}: state file")
    assert StateStore.open(store.url).generation == 1  # nothing committed


def test_last_considered_seq_follows_the_decisions(engine: Engine) -> None:
    add_region(engine, n_channels_initial=4, max_channels=8)
    tick(engine, REGION)
    assert run_in_transaction(engine, lambda session: last_considered_seq(session, REGION)) is None
    ingest(engine, counted_snapshot(REGION, 1, [f"k{i % 50}" for i in range(5000)]))
    tick(engine, REGION)
    assert run_in_transaction(engine, lambda session: last_considered_seq(session, REGION)) == 1


def test_a_batch_is_observed_and_reported_once_under_its_id(engine: Engine) -> None:
    add_region(engine, n_channels_initial=4, max_channels=8)
    tick(engine, REGION)
    client = SqlControllerClient(engine)
    keys = [f"k{i % 40}" for i in range(2000)]
    first = client.submit_snapshot(counted_snapshot(REGION, 3, keys, batch=3))
    assert client.submit_snapshot(counted_snapshot(REGION, 3, keys[:100], batch=3)) == first
    with pytest.raises(
        InvalidInput, match=r"batch 3 of region 'trades' was observed as window\.seq 3, got 4"
    ):
        client.submit_snapshot(counted_snapshot(REGION, 4, keys, batch=3))
    with pytest.raises(InvalidInput, match=r"window\.seq 3 was already ingested"):  # no batch id: no no-op
        client.submit_snapshot(counted_snapshot(REGION, 3, keys))
    report = client.report_batch(REGION, 3, {"rows": 2000}, None)
    assert client.report_batch(REGION, 3, {"rows": 1}, None) == report
    with Session(engine) as session:
        assert session.scalars(select(models.Snapshot.batch)).all() == [3]
        assert session.scalars(select(models.BatchReport.payload_json)).all() == ['{"rows":2000}']
