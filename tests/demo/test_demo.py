"""The main job: the VWAP pipeline under the in-process controller, end to end (small batches), in both
modes, preserve and split."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

import repart.demo.vwap as vwap
from repart.cli.app import app
from repart.demo.report import DemoRow
from repart.demo.run import REGIONS, DemoConfig, run_demo
from repart.sim.trades import TradeStream
from repart.state.store import StateStore
from repart.storage import list_plans, list_versions, make_engine, run_in_transaction

FIELDS = [
    "mode",
    "batch",
    "N",
    "version",
    "b",
    "b_hash",
    "load",
    "load_hash",
    "b_lb",
    "memory",
    "migrated_fraction",
    "ideal_fraction",
    "seconds",
]


def expected_state(stream: TradeStream, batches: int) -> dict[str, tuple[int, int, int]]:
    """Every ticker's (trades, volume, notional_cents) over the stream's first batches, summed here
    trade by trade: the test's own oracle, independent of Spark and of the demo's check."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for seq in range(batches):
        trades = stream.batch(seq)
        for ticker, volume, notional in zip(
            trades.ticker, trades.volume.tolist(), trades.notional_cents.tolist(), strict=True
        ):
            row = sums[ticker]
            row[0] += 1
            row[1] += volume
            row[2] += notional
    return {ticker: (row[0], row[1], row[2]) for ticker, row in sums.items()}


def test_the_demo_runs_both_modes_and_every_batch_is_exact(spark: SparkSession, tmp_path: Path) -> None:
    stream = TradeStream(tickers=2_000, zipf=1.0, base_trades=8_000, growth=1.6, seed=3)
    config = DemoConfig(batches=4, workdir=tmp_path / "demo", channel_rate=500.0, stream=stream)
    seen: list[DemoRow] = []
    result = run_demo(config, on_batch=seen.append)
    assert seen == result.rows
    assert [(row.mode, row.batch) for row in result.rows] == [
        (mode, batch) for batch in range(4) for mode in ("preserve", "split")
    ]
    document = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert list(document) == ["batches", "totals"]
    assert all(list(row) == FIELDS for row in document["batches"])
    assert list(document["totals"]) == ["preserve", "split"]
    trades = sum(stream.size(b) for b in range(4))
    for totals in document["totals"].values():
        assert list(totals) == ["input", "state", "equal"]
        assert totals["equal"] and totals["input"] == totals["state"] and totals["input"]["trades"] == trades
    assert all(not totals.mismatches for totals in result.totals.values())
    preserve = [row for row in result.rows if row.mode == "preserve"]
    split = [row for row in result.rows if row.mode == "split"]
    first, last = preserve[0].N, preserve[-1].N
    assert first == config.initial_channels < last
    for before, after in itertools.pairwise(preserve):
        if after.N != before.N:
            assert after.ideal_fraction == pytest.approx(abs(after.N - before.N) / max(after.N, before.N))
            assert 0 < after.migrated_fraction <= 1.1 * after.ideal_fraction  # README's claim
    # On this stream repart's function is better balanced than plain hashing on every batch that ran at
    # an unchanged N (right after a scale step, whose migration is bounded to 1.5x the ideal share, it
    # may not be; the default demo's page shows a batch where it is not); the split function beats
    # hashing on every batch after the first and the key-preserving function on average (a preserve
    # rebuild may pass it on one batch); the split state holds partials.
    steady = [after for before, after in itertools.pairwise(preserve) if after.N == before.N]
    assert steady
    assert all(row.b is not None and row.b_hash is not None and row.b < row.b_hash for row in steady)
    assert all(row.memory == 1.0 for row in preserve)
    assert all(row.b is not None and row.b_hash is not None and row.b < row.b_hash for row in split[1:])
    assert all(row.b is not None for row in result.rows)
    assert sum(row.b or 0.0 for row in split) < sum(row.b or 0.0 for row in preserve)
    assert any(row.memory > 1.0 for row in split)
    for p, s in zip(preserve, split, strict=True):
        if p.N == s.N:  # the same batch at the same N: the same hashing and the same bound
            assert (s.b_hash, s.b_lb) == (p.b_hash, p.b_lb)

    engine = make_engine(f"sqlite:///{tmp_path / 'demo' / 'repart.db'}")
    oracle = expected_state(stream, 4)
    for mode, region in REGIONS.items():
        plans = run_in_transaction(engine, partial(list_plans, region=region))
        versions = run_in_transaction(engine, partial(list_versions, region=region))
        applied = [plan for plan in plans if plan.status == "applied"]
        assert applied and all(plan.moved_rows is not None for plan in applied)
        store = StateStore.open(tmp_path / "demo" / "state" / mode)
        assert store.version == max(v.number for v in versions if v.status == "applied")
        assert set(store.applied_plans) == {plan.id for plan in applied}
        state = store.read_merged(vwap.MERGE).to_pylist()
        assert {
            row["ticker"]: (row["trades"], row["volume"], row["notional_cents"]) for row in state
        } == oracle
        algorithms = {version.algorithm for version in versions}
        assert ("split-dchoices" in algorithms) == (mode == "split")


def test_a_corrupted_state_fails_the_exactness_check_and_the_demo_exits_1(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each channel's update moves one share of volume from one ticker to another: the totals still
    agree, only the per-batch check against the groupBy can see it."""
    combine = vwap.combine_vwap

    def corrupting(state: pa.Table, trades: pa.Table) -> pa.Table:
        new = combine(state, trades)
        if new.num_rows < 2:
            return new
        volume = new.column("volume").to_pylist()
        volume[0] += 1
        volume[1] -= 1
        return new.set_column(new.schema.get_field_index("volume"), "volume", pa.array(volume, pa.int64()))

    monkeypatch.setattr(vwap, "combine_vwap", corrupting)
    out = tmp_path / "demo.json"
    outcome = CliRunner().invoke(
        app,
        [
            "demo",
            "--batches",
            "1",
            "--workdir",
            str(tmp_path / "w"),
            "--plot",
            str(tmp_path / "p.png"),
            "--json",
            str(out),
        ],
    )
    assert outcome.exit_code == 1, outcome.output
    for mode in ("preserve", "split"):
        assert f"{mode}: merged state ≠ groupBy of the input after batch 0: ticker" in outcome.output
    totals = json.loads(out.read_text())["totals"]
    assert all(t["input"] == t["state"] and not t["equal"] for t in totals.values())


def test_demo_command_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    outcome = runner.invoke(app, ["demo", "--batches", "0", "--workdir", str(tmp_path / "w")])
    assert outcome.exit_code == 2 and "batches must be an integer in [1, 30]" in outcome.output
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    outcome = runner.invoke(app, ["demo", "--workdir", str(foreign), "--plot", str(tmp_path / "p.png")])
    assert outcome.exit_code == 2 and "was not made by repart demo" in outcome.output
    assert (foreign / "notes.txt").read_text() == "keep me" and not (tmp_path / "p.png").exists()
    outcome = runner.invoke(app, ["demo", "--json", str(tmp_path / "missing" / "x.json")])
    assert outcome.exit_code == 2 and "--json" in outcome.output


def test_demo_unknown_split_scheme_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    files = ["--workdir", str(tmp_path / "w"), "--plot", str(tmp_path / "p.png")]
    outcome = CliRunner().invoke(app, ["demo", "--split", "salt", *files, "--json", str(tmp_path / "d.json")])
    assert outcome.exit_code == 2
    assert "--split must be one of" in outcome.output and "dchoices" in outcome.output
    assert list(tmp_path.iterdir()) == []


def test_demo_workdir_that_is_a_file_is_named(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    outcome = CliRunner().invoke(app, ["demo", "--workdir", str(afile), "--plot", str(tmp_path / "p.png")])
    assert outcome.exit_code == 2 and "is a file" in outcome.output and afile.read_text() == "x"
