"""observe(): items, slots and null keys against exact counts; the batch read twice and only
aggregates shuffled; the database and spool sinks (the spool file's JSON byte for byte); bad
input rejected before any Spark work with nothing written (DESIGN §3, §9)."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from sqlalchemy import Engine, select

from repart.controller.spool import ingest_spool
from repart.errors import InvalidInput, NotFound
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.protocol.snapshot import Snapshot
from repart.spark.observe import Window, observe
from repart.spark.sinks import ControllerSink, SpoolSink
from repart.storage import get_snapshot, models, run_in_transaction
from repart.storage.client import SqlControllerClient
from tests.factories import add_region, row_counts, small_snapshot
from tests.spark.observing import (
    PIECES,
    START,
    WINDOW,
    MemorySink,
    check_counts,
    frame,
    shuffling_stages,
    spark_jobs,
    zipf_keys,
)


# 2 partitions of 100,000 rows each, and 6 partitions of about 33,000 rows (more partial counts to merge).
@pytest.mark.parametrize(
    ("key_type", "spark_type", "pieces"), [("str", "string", 1), ("int", "bigint", PIECES)]
)
def test_counts_and_slots_match_exact_counts(
    spark: SparkSession, key_type: str, spark_type: str, pieces: int
) -> None:
    keys = zipf_keys(key_type, seed=1, exponent=1.2, ranks=50_000)
    df = frame(spark, keys, spark_type, pieces)
    assert df.rdd.getNumPartitions() == 2 * pieces
    sink = MemorySink()
    with spark_jobs(spark, f"observe-{key_type}") as jobs:
        observation = observe(df, "k", "trades", WINDOW, sink, epsilon=1e-3, slot_bits=12, version=3)
    slot_pass, key_pass = shuffling_stages(spark, jobs)
    # The batch is read twice, each task shuffling its aggregates only, never the batch's 200,000
    # rows: the slot pass at most one row per slot (2^12) and one of null keys, the key pass one row
    # per key of the hot slots.
    assert slot_pass.numTasks() == key_pass.numTasks() == 2 * pieces
    assert slot_pass.shuffleWriteRecords() <= 2 * pieces * ((1 << 12) + 1)
    present = [key for key in keys if key is not None]
    slot_of = dict(zip(present, slots_of_hashes(hash_keys(present), 12).tolist(), strict=True))
    slot_counts = Counter(slot_of[key] for key in present)
    hot_keys = {key for key in present if slot_counts[slot_of[key]] > len(present) // 1000}
    assert 0 < key_pass.shuffleWriteRecords() <= 2 * pieces * len(hot_keys)
    check_counts(observation, keys, 1e-3)
    snapshot = observation.snapshot
    assert sink.snapshots == [snapshot] and observation.destination == "memory"
    assert snapshot.key_type == key_type and snapshot.version == 3 and snapshot.channels is None
    assert (snapshot.region, snapshot.seq, snapshot.window_start, snapshot.window_end) == (
        "trades",
        7,
        START,
        WINDOW.end,
    )
    distinct = len({key for key in keys if key is not None})
    assert abs(snapshot.distinct_estimate - distinct) <= 0.1 * distinct


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(-3, 12)), max_size=400),
    pieces=st.integers(1, 3),
    epsilon=st.sampled_from([0.02, 0.05, 0.2]),
    slot_bits=st.sampled_from([10, 20]),
)
def test_small_batches_keep_the_merged_counter_guarantees(
    spark: SparkSession, keys: list[int | None], pieces: int, epsilon: float, slot_bits: int
) -> None:
    df = frame(spark, keys, "bigint", pieces=pieces)
    observation = observe(df, "k", "r", WINDOW, MemorySink(), epsilon=epsilon, slot_bits=slot_bits)
    check_counts(observation, keys, epsilon)


@pytest.fixture
def backend() -> str:
    """The ``engine`` of these tests is a migrated SQLite file (tests/storage covers PostgreSQL)."""
    return "sqlite"


@pytest.fixture
def regions(engine: Engine) -> None:
    """Regions 'trades' (str keys) and 'ids' (int keys, 12 slot bits)."""
    add_region(engine, "trades", "str")
    add_region(engine, "ids", "int", slot_bits=12)


SMALL = ["AAPL"] * 50 + ["MSFT"] * 30 + ["IBM"] * 5 + [None] * 3 + [f"x{i}" for i in range(40)]
CHANNELS = [{"channel": 1, "tuples": 60, "busy_seconds": 1.5, "state_bytes": 1024}]


@pytest.mark.usefixtures("regions")
def test_database_sink_stores_a_readable_snapshot(spark: SparkSession, engine: Engine) -> None:
    df = frame(spark, SMALL, "string", pieces=2)
    observation = observe(
        df,
        "k",
        "trades",
        WINDOW,
        to_controller(engine),
        epsilon=1e-3,
        channels=CHANNELS,
    )
    stored = run_in_transaction(engine, lambda s: get_snapshot(s, "trades", 7))
    stored_id = run_in_transaction(
        engine, lambda s: s.scalar(select(models.Snapshot.id).where(models.Snapshot.seq == 7))
    )
    assert observation.destination == f"snapshot {stored_id}"  # its id, never the database's URL
    assert stored.tuples == observation.snapshot.tuples == len(SMALL) - 3 and observation.null_keys == 3
    exact = Counter(key for key in SMALL if key is not None)
    assert {(item.key, item.count, item.delta) for item in stored.items} == {
        (key, count, 0) for key, count in exact.items()
    }  # epsilon * n < 1: no bucket closes, nothing is deleted, counts are exact
    assert stored.slots == observation.snapshot.slots
    assert stored.channels is not None and stored.channels[0].busy_seconds == 1.5
    assert stored.window_start == START and stored.distinct_estimate >= len(exact)
    assert stored == observation.snapshot  # the controller stored the snapshot observe built

    before = row_counts(engine)
    with pytest.raises(InvalidInput, match=r"window.seq 7 was already ingested"):
        observe(df, "k", "trades", WINDOW, to_controller(engine), epsilon=0.01)
    with pytest.raises(NotFound, match="nowhere"):
        observe(df, "k", "nowhere", WINDOW, to_controller(engine), epsilon=0.01)
    with pytest.raises(InvalidInput, match="key_type must be the region's 'int'"):
        observe(
            df,
            "k",
            "ids",
            WINDOW,
            to_controller(engine),
            epsilon=0.01,
            slot_bits=12,
        )
    assert row_counts(engine) == before


@pytest.mark.usefixtures("regions")
def test_spool_sink_writes_files_the_spool_ingests(
    spark: SparkSession, engine: Engine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    df = frame(spark, [7, -3, 7, None, 2**62], "bigint", pieces=2)
    sink = SpoolSink(spool)
    later = Window(10, WINDOW.end, WINDOW.end + timedelta(minutes=1))
    first = observe(df, "k", "ids", later, sink, slot_bits=12, epsilon=0.1)
    second = observe(df, "k", "ids", WINDOW, sink, slot_bits=12, epsilon=0.1)
    again = observe(df, "k", "ids", later, sink, slot_bits=12, epsilon=0.1)
    assert Path(first.destination) == spool / "ids-00000000000000000010.json"
    assert Path(second.destination) == spool / "ids-00000000000000000007.json"  # name order = seq order
    assert Path(again.destination) == spool / "ids-00000000000000000010.1.json"  # never overwrites

    outcomes = {Path(outcome.file).name: outcome for outcome in ingest_spool(engine, spool)}
    assert len(outcomes) == 3
    assert sorted(outcome.status for outcome in outcomes.values()) == ["ingested", "ingested", "rejected"]
    assert outcomes["ids-00000000000000000007.json"].status == "ingested"
    stored = run_in_transaction(engine, lambda s: get_snapshot(s, "ids", 10))
    assert {item.key: item.count for item in stored.items} == {7: 2, -3: 1, 2**62: 1}
    assert stored.tuples == 4 and stored.slot_bits == 12


def test_the_spool_sink_writes_the_documented_json(spark: SparkSession, tmp_path: Path) -> None:
    keys = ["é"] * 3 + ["b"] * 2 + ["a"] + [None]  # distinct counts: one item order
    df = frame(spark, keys, "string", pieces=1)
    observation = observe(
        df, "k", "trades", WINDOW, SpoolSink(tmp_path), epsilon=0.1, version=3, channels=CHANNELS, batch=5
    )
    present = [key for key in keys if key is not None]
    slots = np.bincount(slots_of_hashes(hash_keys(present), 16), minlength=1 << 16)
    expected = {
        "format": 1,
        "region": "trades",
        "window": {"seq": 7, "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:01:00+00:00"},
        "tuples": 6,
        "distinct_estimate": 3,
        "epsilon": 0.1,
        "key_type": "str",
        "items": [["é", 3, 0], ["b", 2, 0], ["a", 1, 0]],
        "slot_bits": 16,
        "slots": [[int(slot), int(slots[slot])] for slot in np.flatnonzero(slots)],
        "version": 3,
        "batch": 5,
        "channels": CHANNELS,
    }
    # The file, byte for byte: fields in this order, UTF-8 keys unescaped, one line.
    assert Path(observation.destination).read_text(encoding="utf-8") == (
        json.dumps(expected, ensure_ascii=False) + "\n"
    )
    assert Snapshot.from_document(expected) == observation.snapshot


def test_sinks_refuse_bad_places_and_region_names(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as missing:
        SpoolSink(tmp_path / "missing")
    assert missing.value.field == "sink"
    with pytest.raises(InvalidInput) as raised:
        SpoolSink(tmp_path).write(small_snapshot(region="../escape"))  # it would name the file
    assert raised.value.field == "region"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tuples": -5}, "tuples"),
        ({"slots": ((99_999, 100),)}, "slots"),
        ({"epsilon": 7.0}, "epsilon"),
    ],
)
def test_sinks_refuse_a_snapshot_no_document_could_hold(
    engine: Engine, tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    """A snapshot built in code is checked as its document would be, before anything is written: the
    spool gets no file and the controller stores nothing."""
    add_region(engine, "trades", "str")
    before = row_counts(engine)
    bad = small_snapshot(region="trades", **changes)
    spool = tmp_path / "spool"
    spool.mkdir()
    for sink in (SpoolSink(spool), to_controller(engine)):
        with pytest.raises(InvalidInput) as raised:
            sink.write(bad)
        assert raised.value.field.startswith(field)
    assert list(spool.iterdir()) == []
    assert row_counts(engine) == before


NAIVE = datetime(2026, 1, 1)


def to_controller(engine: Engine) -> ControllerSink:
    return ControllerSink(SqlControllerClient(engine))


BAD_INPUTS: list[tuple[dict[str, Any], str]] = [
    ({"key_col": "ticker"}, "key_col"),
    ({"key_col": "price"}, "key_col"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": 1}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"epsilon": 1e-7}, "epsilon"),  # a snapshot of up to 10^7 items
    ({"epsilon": "0.01"}, "epsilon"),
    ({"slot_bits": 9}, "slot_bits"),
    ({"slot_bits": 21}, "slot_bits"),
    ({"region": ""}, "region"),
    ({"region": "a/b"}, "region"),
    ({"version": 0}, "version"),
    ({"batch": -1}, "batch"),
    (
        {"channels": [{"channel": -1, "tuples": 1, "busy_seconds": 0.0, "state_bytes": 0}]},
        "channels[0].channel",
    ),
    ({"channels": [{"channel": 0}]}, "channels[0]"),
    ({"window": (7, START, START)}, "window"),
]


@pytest.mark.parametrize(("changes", "field"), BAD_INPUTS)
def test_bad_input_is_named_before_any_spark_job_and_nothing_is_written(
    spark: SparkSession, tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    df = spark.createDataFrame([("a", 1.5)], "k string, price double")
    arguments: dict[str, Any] = {"key_col": "k", "region": "trades", "window": WINDOW, **changes}
    sink = SpoolSink(tmp_path)
    with spark_jobs(spark, "bad-input") as jobs, pytest.raises(InvalidInput) as raised:
        observe(
            df, arguments.pop("key_col"), arguments.pop("region"), arguments.pop("window"), sink, **arguments
        )
    assert raised.value.field.startswith(field)
    assert jobs == [] and list(tmp_path.iterdir()) == []


def test_windows_must_be_aware_and_ordered() -> None:
    for arguments, field in [
        ((1, NAIVE, START), "window.start"),
        ((1, START, NAIVE + timedelta(hours=1)), "window.end"),
        ((1, START, START), "window.end"),
        ((-1, START, START + timedelta(seconds=1)), "window.seq"),
        ((1, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), START), "window.start"),
    ]:
        with pytest.raises(InvalidInput) as raised:
            Window(*arguments)
        assert raised.value.field == field
