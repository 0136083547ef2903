"""A ``spark-state`` region through the controller: its versions are counts of state partitions, its
plans repartition a checkpoint, and its count is chosen with Spark's placement of the hot keys in
view. The oracle of every placement is the hash Spark computes (``spark_hash``, itself checked
against ``F.hash``), applied key by key here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import Engine

from repart.controller import service
from repart.controller.actions import rollback, scale
from repart.controller.tick import tick
from repart.errors import Conflict, InvalidInput
from repart.migration import MigrationPlan
from repart.partitioning.spark_hash import spark_hash_strings, spark_partitions
from repart.partitioning.split.function import load_function
from repart.partitioning.state_partitions import StatePartitions, load_version_function
from repart.protocol.snapshot import BatchProgress, ChannelMeasurement, CounterEntry, Snapshot
from repart.storage import RegionConfig, run_in_transaction, set_plan_status
from repart.storage.query_leases import check_no_running_query, hold_query_lease, release_query_lease
from tests.cli.helpers import repart, repart_json
from tests.factories import add_region, events, plans, row_counts, versions, window_times

REGION = "agg"
HOT = [f"user-{i}" for i in range(40)]


def state_snapshot(seq: int, n: int, busy: float, *, counts: list[int] | None = None) -> Snapshot:
    """Batch ``seq`` of a query at ``n`` state partitions: HOT keys with ``counts`` (Zipf-like by
    default), each partition ``busy`` seconds of a 1 s trigger, 1 kB of state per partition."""
    counts = counts or [int(4000 / (rank + 1)) for rank in range(len(HOT))]
    start, end = window_times(seq)
    tuples = sum(counts) + 5000
    return Snapshot(
        region=REGION,
        seq=seq,
        window_start=start,
        window_end=end,
        tuples=tuples,
        distinct_estimate=len(HOT) + 2000,
        epsilon=0.0,
        key_type="str",
        items=[CounterEntry(key, count, 0) for key, count in zip(HOT, counts, strict=True)],
        slot_bits=16,
        channels=tuple(ChannelMeasurement(p, tuples // n, busy, 1000) for p in range(n)),
        batch=seq,
        progress=BatchProgress(interval_seconds=1.0),
    )


def ingest(engine: Engine, *snapshots: Snapshot) -> None:
    from repart.storage.snapshots import ingest_snapshot

    for snapshot in snapshots:
        run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))


def add_state_region(engine: Engine, **config: Any) -> None:
    region = RegionConfig(
        key_type="str",
        n_channels_initial=4,
        max_channels=64,
        policy="target-utilization",
        engine="spark-state",
        **config,
    )
    run_in_transaction(engine, lambda s: service.create_region(s, REGION, region))


def test_a_state_count_round_trips_and_is_refused_where_a_routing_function_is_needed() -> None:
    count = StatePartitions(12, "str")
    assert load_version_function(count.to_json()) == count
    assert count.to_json() == '{"format":1,"key_type":"str","kind":"state-partitions","n_partitions":12}'
    assert StatePartitions(12, "int").digest != count.digest
    with pytest.raises(InvalidInput, match="must be a routing function"):
        load_function(count.to_json())
    with pytest.raises(InvalidInput, match="n_partitions"):
        StatePartitions(0, "str")
    keys = ["a", "b", "hot-key", "é"]
    expected = spark_partitions(spark_hash_strings(pa.array(keys)), 12)
    assert count.partitions(keys).tolist() == expected.tolist()


def test_the_first_tick_activates_the_initial_count(engine: Engine) -> None:
    add_state_region(engine)
    result = tick(engine, REGION)
    assert result.action == "initialized"
    (version,) = versions(engine, REGION)
    assert load_version_function(version.function_json) == StatePartitions(4, "str")
    assert (version.algorithm, version.status, version.n_channels) == ("initial", "applied", 4)


def test_a_scale_up_takes_the_count_near_the_policys_with_the_lowest_predicted_max_load(
    engine: Engine,
) -> None:
    add_state_region(engine, settings={"stabilization_batches": 1})
    tick(engine, REGION)
    ingest(engine, *(state_snapshot(seq, 4, busy=2.0) for seq in (1, 2)))
    result = tick(engine, REGION)
    assert result.action == "activated"
    (event,) = [e for e in events(engine, REGION) if e.kind == "activated"]

    data = json.loads(event.data_json)
    choice = data["state_count"]
    n_policy = data["n_next"]
    assert choice["rule"] == n_policy
    # The oracle: every candidate's max partition load, the hot keys placed by Spark's hash, the rest
    # spread evenly; the chosen count has the lowest (ties to the closest to the policy's, then smaller).
    counts = np.array([int(4000 / (rank + 1)) for rank in range(len(HOT))], dtype=float)
    tail = float(sum(counts) + 5000 - counts.sum())
    hashes = spark_hash_strings(pa.array(HOT))
    predicted = {
        m: float(np.bincount(spark_partitions(hashes, m), weights=counts, minlength=m).max() + tail / m)
        for m in choice["candidates"]
    }
    best = min(predicted, key=lambda m: (predicted[m], abs(m - n_policy), m))
    assert choice["chosen"] == best == result.n_channels
    assert all(abs(m - n_policy) <= 0.1 * n_policy for m in choice["candidates"])
    (plan,) = plans(engine, region=REGION)
    stored = MigrationPlan.from_json(plan.plan_json)
    assert (stored.source_n_channels, stored.target_n_channels) == (4, best)
    assert (plan.explicit_moves, plan.slot_moves) == (0, 0)
    assert plan.predicted_cost == 4 * 1000  # the state's bytes, as the partitions reported them
    assert data["predicted_bytes"] == 4000


def test_a_key_above_one_partitions_share_is_named_in_the_reason(engine: Engine) -> None:
    add_state_region(engine, settings={"stabilization_batches": 1})
    tick(engine, REGION)
    heavy = [60_000] + [100] * (len(HOT) - 1)
    ingest(engine, *(state_snapshot(seq, 4, busy=2.0, counts=heavy) for seq in (1, 2)))
    result = tick(engine, REGION)
    assert "no count balances it" in result.reason
    assert "split mode" in result.reason


def test_recommend_mode_records_the_count_and_activates_nothing(engine: Engine) -> None:
    from repart.storage import set_mode

    add_state_region(engine, settings={"stabilization_batches": 1})
    tick(engine, REGION)
    run_in_transaction(engine, lambda s: set_mode(s, REGION, "recommend", "advice only"))
    ingest(engine, *(state_snapshot(seq, 4, busy=2.0) for seq in (1, 2)))
    before = row_counts(engine)
    assert tick(engine, REGION).action == "recommended"
    after = row_counts(engine)
    assert after["versions"] == before["versions"] and after["plans"] == before["plans"]


def test_a_spark_state_region_takes_no_split_scheme_and_keeps_its_engine() -> None:
    with pytest.raises(InvalidInput, match=r"^split_scheme"):
        RegionConfig(
            key_type="str", n_channels_initial=2, engine="spark-state", split_scheme="pkg", merge="n=sum"
        )
    with pytest.raises(InvalidInput, match=r"^engine"):
        RegionConfig(key_type="str", n_channels_initial=2, engine="flink")


def test_query_leases_refuse_a_second_query_until_the_first_stops_or_expires(engine: Engine) -> None:
    add_state_region(engine)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    hold = lambda holder, at: run_in_transaction(  # noqa: E731
        engine, lambda s: hold_query_lease(s, REGION, "/ck", holder, 60, at)
    )
    check = lambda at, holder=None: run_in_transaction(  # noqa: E731
        engine, lambda s: check_no_running_query(s, REGION, at, holder=holder)
    )
    hold("driver-a", now)
    with pytest.raises(Conflict, match="driver-a"):
        hold("driver-b", now + timedelta(seconds=30))
    with pytest.raises(Conflict, match="running query"):
        check(now)
    check(now, "driver-a")  # its own query may repartition once it stopped it
    check(now + timedelta(seconds=61))  # expired: the driver died
    hold("driver-b", now + timedelta(seconds=61))
    run_in_transaction(engine, lambda s: release_query_lease(s, REGION, "driver-b"))
    check(now + timedelta(seconds=62))


def test_a_query_lease_needs_a_spark_state_region(engine: Engine) -> None:
    add_region(engine, "plain", "str")
    before = row_counts(engine)
    with pytest.raises(InvalidInput, match=r"^region must be a spark-state region"):
        run_in_transaction(
            engine, lambda s: hold_query_lease(s, "plain", "/ck", "driver", 60, datetime.now(UTC))
        )
    assert row_counts(engine) == before


def apply_plan(engine: Engine, plan_id: int) -> None:
    """Take a plan through applying to applied, as ``ManagedQuery`` does."""
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applying"))
    run_in_transaction(engine, lambda session: set_plan_status(session, plan_id, "applied"))


def test_an_operator_scales_and_rolls_back_a_count_with_repartition_plans(engine: Engine) -> None:
    add_state_region(engine)
    tick(engine, REGION)
    ingest(engine, state_snapshot(1, 4, busy=0.5))
    scaled = scale(engine, REGION, 7, reason="more cores")
    assert (scaled.n_channels, scaled.mode) == (7, "hold")
    target = versions(engine, REGION)[-1]
    assert load_version_function(target.function_json) == StatePartitions(7, "str")
    assert target.algorithm == "operator"
    (plan,) = plans(engine, region=REGION)
    stored = MigrationPlan.from_json(plan.plan_json)
    assert (stored.source_n_channels, stored.target_n_channels, plan.predicted_cost) == (4, 7, 4000)
    apply_plan(engine, plan.id)
    back = rollback(engine, REGION, 1)
    assert back.n_channels == 4
    assert load_version_function(versions(engine, REGION)[-1].function_json) == StatePartitions(4, "str")
    assert (
        MigrationPlan.from_json(plans(engine, "pending", region=REGION)[0].plan_json).target_n_channels == 4
    )


def test_versions_and_explain_show_a_spark_state_region(engine: Engine, db_url: str) -> None:
    add_state_region(engine, settings={"stabilization_batches": 1})
    tick(engine, REGION)
    heavy = [60_000] + [100] * (len(HOT) - 1)
    ingest(engine, *(state_snapshot(seq, 4, busy=2.0, counts=heavy) for seq in (1, 2)))
    tick(engine, REGION)
    listed = repart_json(db_url, "versions", "list", REGION)
    assert [(v["kind"], v["N"], v["explicit_size"], v["split_keys"]) for v in listed] == [
        ("state-partitions", 4, 0, []),
        ("state-partitions", listed[1]["N"], 0, []),
    ]
    shown = repart_json(db_url, "versions", "show", REGION, "2")
    assert shown["function"]["n_partitions"] == listed[1]["N"]
    diff = repart_json(db_url, "versions", "diff", REGION, "1", "2")
    assert (diff["explicit_moves"], diff["slot_moves"]) == ([], [])
    explained = repart_json(db_url, "explain", REGION)
    assert explained["state_count"]["dominant_key"]["key"] == HOT[0]
    assert explained["state_count"]["dominant_key"]["share"] == pytest.approx(60_000 / (60_000 + 3900 + 5000))
    assert explained["state_count"]["chosen"] == listed[1]["N"]
    table = repart(db_url, "explain", REGION)
    assert table.exit_code == 0 and "state_count.dominant_key" in table.output


def test_a_kept_count_names_a_key_no_count_balances(engine: Engine) -> None:
    add_state_region(engine, settings={"stabilization_batches": 1})
    tick(engine, REGION)
    heavy = [60_000] + [100] * (len(HOT) - 1)
    ingest(engine, *(state_snapshot(seq, 4, busy=0.6, counts=heavy) for seq in (1, 2)))
    result = tick(engine, REGION)
    assert result.action == "unchanged"
    assert f"key {HOT[0]!r} carries" in result.reason
