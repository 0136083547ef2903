"""StatefulJob: a batch job and a Structured Streaming query against a real SQLite controller and a
real state store, checked against a plain groupBy of every input row; exactly once under batch ids and
query ids; bad input refused before anything is written."""

from __future__ import annotations

import json
import runpy
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import func, select

from repart.controller.actions import scale
from repart.errors import InvalidInput
from repart.spark import StatefulJob
from repart.storage import batch_reports, make_engine, models, read_transaction
from repart.storage.snapshots import latest_snapshots

SCHEMA = "k string, trades long, volume long, low long, high long"
MERGE = "trades=count,volume=sum(qty),low=min(price),high=max(price)"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def trades(seed: int, rows: int = 4_000) -> pd.DataFrame:
    """Skewed trades; every 50th price is null (a merge skips nulls, as SQL does)."""
    rng = np.random.default_rng(seed)
    keys = (rng.zipf(1.3, rows) - 1) % 300
    prices = pd.array(rng.integers(1, 1_000, rows), dtype="Int64")
    prices[::50] = pd.NA
    return pd.DataFrame({"k": [f"k{key}" for key in keys], "qty": rng.integers(1, 10, rows), "price": prices})


def oracle(frames: list[pd.DataFrame]) -> dict[str, tuple[int, int, int | None, int | None]]:
    """The state a plain groupBy of every input row gives."""
    rows = pd.concat(frames)
    grouped = rows.groupby("k").agg(
        trades=("qty", "size"), volume=("qty", "sum"), low=("price", "min"), high=("price", "max")
    )
    return {
        key: (int(row.trades), int(row.volume), _int(row.low), _int(row.high))
        for key, row in grouped.iterrows()
    }


def _int(value: object) -> int | None:
    return None if pd.isna(value) else int(value)  # type: ignore[call-overload]


def state_of(frame: DataFrame) -> dict[str, tuple[int, int, int | None, int | None]]:
    rows = frame.collect()
    assert len({row.k for row in rows}) == len(rows)  # one row per key
    return {row.k: (row.trades, row.volume, row.low, row.high) for row in rows}


def new_job(tmp_path: Path, **options: object) -> StatefulJob:
    arguments = {
        "region": "trades",
        "key": "k",
        "state": tmp_path / "state",
        "schema": SCHEMA,
        "merge": MERGE,
    }
    job = StatefulJob(f"sqlite:///{tmp_path}/repart.db", **(arguments | options))  # type: ignore[arg-type]
    job.ensure_region(channels=3, policy="fixed")
    return job


def report_count(url: str) -> int:
    count = select(func.count()).select_from(models.BatchReport)
    return int(read_transaction(make_engine(url), lambda session: session.scalar(count)) or 0)


def test_a_batch_job_keeps_the_state_a_group_by_gives_once_per_batch_id(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path, tick=True)
    frames = [trades(seed) for seed in range(3)]
    calls = []  # (monotonic time before the call, after it)
    for batch_id, frame in enumerate(frames):
        batch = spark.createDataFrame(frame)
        before = time.monotonic()
        result = job.process(batch, batch_id)
        calls.append((before, time.monotonic()))
        assert result.sequence == batch_id and result.input_rows == len(frame)
    job.process(spark.createDataFrame(frames[2]), 2)  # a retry of the last batch adds nothing
    assert state_of(job.state()) == oracle(frames)
    reported = read_transaction(
        job.engine,  # type: ignore[arg-type]
        lambda session: [report.batch for report in batch_reports(session, "trades")],
    )
    assert reported == [0, 1, 2]
    # Each snapshot after the first carries the time since the previous batch started: the previous
    # call's length at least (less the moment before its clock read), at most the time from the
    # previous call's start to this call's end.
    engine = job.engine
    assert engine is not None
    snapshots = read_transaction(engine, lambda session: latest_snapshots(session, "trades", 3))
    assert [snapshot.seq for snapshot in snapshots] == [0, 1, 2] and snapshots[0].progress is None
    for index in (1, 2):
        progress = snapshots[index].progress
        assert progress is not None and progress.input_rows_per_second is None
        (previous_start, previous_end), (_, end) = calls[index - 1], calls[index]
        interval = progress.interval_seconds
        assert interval is not None
        assert previous_end - previous_start - 0.01 <= interval <= end - previous_start


def test_a_batch_run_again_after_its_commit_leaves_the_pending_plan_to_the_next_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path)
    first, second = trades(30, 1_000), trades(31, 1_000)
    job.process(spark.createDataFrame(first), 0)
    plan_id = scale(job.engine, "trades", 5).plan_id  # type: ignore[arg-type]
    again = job.process(spark.createDataFrame(first), 0)  # as after a crash past the state commit
    assert again.absorbed and again.plan_id is None and again.n_channels == 3 and job.store.n_channels == 3
    result = job.process(spark.createDataFrame(second), 1)
    assert not result.absorbed and result.plan_id == plan_id and job.store.n_channels == 5
    assert state_of(job.state()) == oracle([first, second])


def test_a_general_job_combines_the_touched_keys(spark: SparkSession, tmp_path: Path) -> None:
    def combine(old: pa.Table, batch: pa.Table) -> pa.Table:
        counted = batch.group_by("k").aggregate([("k", "count"), ("qty", "sum")])
        new = pa.table({"k": counted["k"], "trades": counted["k_count"], "volume": counted["qty_sum"]})
        rows = pa.concat_tables([old, new], promote_options="permissive")
        total = rows.group_by("k").aggregate([("trades", "sum"), ("volume", "sum")])
        return pa.table({"k": total["k"], "trades": total["trades_sum"], "volume": total["volume_sum"]})

    job = new_job(tmp_path, merge=None, combine=combine, schema="k string, trades long, volume long")
    frames = [trades(seed) for seed in range(2)]
    for batch_id, frame in enumerate(frames):
        job.process(spark.createDataFrame(frame), batch_id)
    expected = {key: value[:2] for key, value in oracle(frames).items()}
    assert {row.k: (row.trades, row.volume) for row in job.state().collect()} == expected


def _run_query(spark: SparkSession, job: StatefulJob, incoming: Path, checkpoint: Path) -> str:
    stream = spark.readStream.schema("k string, qty long, price long").json(str(incoming))
    query = (
        stream.writeStream.foreachBatch(job.foreach_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return str(query.id)


def _drop(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    records = frame.astype(object).where(frame.notna(), None).to_dict("records")
    path.write_text("\n".join(json.dumps(record) for record in records))


def test_a_streaming_query_restarts_exactly_and_a_new_checkpoint_continues(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path)
    frames = [trades(10 + seed, 1_500) for seed in range(4)]
    _drop(frames[0], tmp_path / "in" / "0.json")
    first = _run_query(spark, job, tmp_path / "in", tmp_path / "checkpoint")
    _drop(frames[1], tmp_path / "in" / "1.json")
    assert _run_query(spark, job, tmp_path / "in", tmp_path / "checkpoint") == first  # restarted
    assert state_of(job.state()) == oracle(frames[:2])
    last = job.store.last_batch
    assert last is not None and last.query is not None and last.query.query_id == first
    # A new checkpoint (a new query id, batch ids from 0 again) continues the store's sequence.
    _drop(frames[2], tmp_path / "in2" / "2.json")
    _drop(frames[3], tmp_path / "in2" / "3.json")
    second = _run_query(spark, job, tmp_path / "in2", tmp_path / "checkpoint2")
    assert second != first
    assert state_of(job.state()) == oracle(frames)
    assert report_count(f"sqlite:///{tmp_path}/repart.db") == job.store.last_batch.batch_id + 1  # type: ignore[union-attr]


def test_a_streaming_batch_reports_the_query_s_rates_of_its_previous_micro_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path)
    for number in range(3):
        _drop(trades(40 + number, 800), tmp_path / "in" / f"{number}.json")
    stream = spark.readStream.schema("k string, qty long, price long").option("maxFilesPerTrigger", 1)
    query = (
        stream.json(str(tmp_path / "in")).writeStream.foreachBatch(job.foreach_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    assert query.exception() is None
    recent = query.recentProgress
    engine = job.engine
    assert engine is not None and [progress["batchId"] for progress in recent] == [0, 1, 2]
    snapshots = read_transaction(engine, lambda session: latest_snapshots(session, "trades", 3))
    assert snapshots[0].progress is None  # the query's first batch: nothing measured before it
    for snapshot, previous in zip(snapshots[1:], recent, strict=False):
        assert snapshot.progress is not None
        for field, name in (
            ("input_rows_per_second", "inputRowsPerSecond"),
            ("processed_rows_per_second", "processedRowsPerSecond"),
        ):
            reported = getattr(snapshot.progress, field)
            assert reported == pytest.approx(previous[name]) if previous[name] > 0 else reported is None


def test_a_batch_id_going_back_within_a_query_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    job = new_job(tmp_path)
    frame = spark.createDataFrame(trades(1, 500))
    job.process(frame, 0, query_id="q-1")
    job.process(frame, 1, query_id="q-1")
    generation = job.store.generation
    with pytest.raises(InvalidInput, match="batch_id must not go back within query q-1"):
        job.process(frame, 0, query_id="q-1")
    job.process(frame, 0, query_id="q-2")  # another query continues the store's sequence
    assert job.store.generation > generation and job.store.last_batch.batch_id == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"merge": None}, "merge or combine must be given"),
        ({"combine": lambda old, new: new}, "merge or combine must be given"),
        ({"key": "ticker"}, r"key must name a column of the schema \[.*\], got 'ticker'"),
        (
            {"merge": "trades=count,volume=sum"},
            r"merge must name every state column \['high', 'low', 'trades', 'volume'\] once",
        ),
        ({"merge": "trades=avg"}, "merge must be comma-separated"),
        ({"schema": "k double, trades long"}, "key must be a string or signed integer column, got 'k'"),
        (
            {"schema": f"{SCHEMA}, _rows long", "merge": f"{MERGE},_rows=sum"},
            r"schema must not use .*'_rows'",
        ),
        ({"window_seconds": 0}, "window_seconds"),
        ({"epsilon": 1e-7}, "epsilon"),
        ({"retain": -1}, "retain"),
        ({"schema": "k string, trades long, volume long, low long, high long, _slot int"}, "schema"),
    ],
)
def test_bad_job_arguments_are_refused_naming_the_field(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    arguments = {"region": "trades", "key": "k", "state": tmp_path / "s", "schema": SCHEMA, "merge": MERGE}
    with pytest.raises(InvalidInput, match=message):
        StatefulJob(f"sqlite:///{tmp_path}/db", **(arguments | options))  # type: ignore[arg-type]


def test_batches_and_stores_that_do_not_fit_are_refused_before_anything_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path)
    generation = job.store.generation
    no_key = spark.createDataFrame(pd.DataFrame({"ticker": ["a"], "qty": [1], "price": [1]}))
    with pytest.raises(InvalidInput, match="key must name a column: the DataFrame has no column 'k'"):
        job.process(no_key, 0)
    int_key = spark.createDataFrame(pd.DataFrame({"k": [1], "qty": [1], "price": [1]}))
    with pytest.raises(InvalidInput, match="key must hold the version's keys: column 'k' holds 'int' keys"):
        job.process(int_key, 0)
    reserved = spark.createDataFrame(pd.DataFrame({"k": ["a"], "qty": [1], "price": [1], "Channel": [0]}))
    with pytest.raises(InvalidInput, match=r"df must not use the column names \['Channel'\]"):
        job.process(reserved, 0)
    with pytest.raises(InvalidInput, match="query_id must be a non-empty string"):
        job.process(reserved.drop("Channel"), 0, query_id="")
    no_source = spark.createDataFrame(pd.DataFrame({"k": ["a"], "qty": [1]}))
    with pytest.raises(InvalidInput, match=r"merge reads batch columns \['price'\]"):
        job.process(no_source, 0)
    retyped = StatefulJob(
        job.engine.url.render_as_string(hide_password=False),  # type: ignore[union-attr]
        region="trades", key="k", state=tmp_path / "state",
        schema=SCHEMA.replace("volume long", "volume double"), merge=MERGE,
    )  # fmt: skip
    with pytest.raises(InvalidInput, match=r"schema .*'volume'"):
        retyped.store  # noqa: B018
    other = StatefulJob(
        job.engine.url.render_as_string(hide_password=False),  # type: ignore[union-attr]
        region="other", key="k", state=tmp_path / "state", schema=SCHEMA, merge=MERGE,
    )  # fmt: skip
    with pytest.raises(InvalidInput, match=r"state must be region 'other'.s store"):
        other.store  # noqa: B018
    assert job.store.refreshed().generation == generation
    assert report_count(f"sqlite:///{tmp_path}/repart.db") == 0


def test_a_nullable_column_added_to_the_schema_reads_null_for_old_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    job = new_job(tmp_path)
    old, new = trades(20, 2_000), trades(21, 2_000)
    job.process(spark.createDataFrame(old), 0)
    wider = StatefulJob(
        f"sqlite:///{tmp_path}/repart.db", region="trades", key="k", state=tmp_path / "state",
        schema=f"{SCHEMA}, biggest long", merge=f"{MERGE},biggest=max(qty)",
    )  # fmt: skip
    wider.process(spark.createDataFrame(new), 1)
    got = {row.k: row.biggest for row in wider.state().collect()}
    biggest = new.groupby("k")["qty"].max()
    assert got == {key: (int(biggest[key]) if key in biggest.index else None) for key in oracle([old, new])}
    assert state_of(wider.state().drop("biggest")) == oracle([old, new])


def user_lines(path: Path) -> int:
    """Lines of code in an example: not blank, not a comment, not the module docstring."""
    source = path.read_text(encoding="utf-8")
    body = source.split('"""', 2)[2] if source.startswith('"""') else source
    return sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("#"))


@pytest.mark.parametrize("example", ["batch_job.py", "streaming_job.py"])
def test_the_examples_run_and_stay_short(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: str
) -> None:
    assert user_lines(EXAMPLES / example) <= 30
    monkeypatch.setattr(sys, "argv", [example, str(tmp_path)])
    runpy.run_path(str(EXAMPLES / example), run_name="__main__")
    job = StatefulJob(
        f"sqlite:///{tmp_path}/repart.db", region="trades", key="ticker", state=tmp_path / "state",
        schema="ticker string, trades long, volume long", merge="trades=count,volume=sum(qty)",
    )  # fmt: skip
    state = job.state().toPandas()
    if example == "streaming_job.py":
        records = [
            json.loads(line) for file in sorted((tmp_path / "incoming").glob("*.json"))
            for line in file.read_text().splitlines()
        ]  # fmt: skip
        expected = pd.DataFrame(records).groupby("ticker")["qty"].agg(["size", "sum"])
        got = state.set_index("ticker").sort_index()
        assert got["trades"].to_dict() == expected["size"].to_dict()
        assert got["volume"].to_dict() == expected["sum"].to_dict()
    else:
        assert int(state["trades"].sum()) == 150_000
