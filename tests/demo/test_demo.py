"""The main job: the VWAP pipeline under the in-process controller, end to end (small batches)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from repart.cli.app import app
from repart.demo.run import DemoConfig, run_demo
from repart.sim.trades import TradeStream
from repart.state.store import StateStore
from repart.storage import list_plans, list_versions, make_engine, run_in_transaction

FIELDS = {"batch", "N", "version", "b", "b_hash", "migrated_fraction", "ideal_fraction", "seconds"}


def test_the_demo_scales_out_applies_every_plan_and_keeps_the_totals(
    spark: SparkSession, tmp_path: Path
) -> None:
    stream = TradeStream(tickers=2_000, zipf=1.0, base_trades=8_000, growth=1.6, seed=3)
    config = DemoConfig(batches=4, workdir=tmp_path / "demo", channel_rate=250.0, stream=stream)
    seen = []
    result = run_demo(config, on_batch=seen.append)
    assert seen == result.rows and [row.batch for row in result.rows] == [0, 1, 2, 3]
    assert result.equal and result.input_totals["trades"] == sum(stream.size(b) for b in range(4))
    assert set(result.to_json()["batches"][0]) == FIELDS
    first, last = result.rows[0].N, result.rows[-1].N
    assert first == config.initial_channels < last
    for before, after in zip(result.rows, result.rows[1:], strict=False):
        if after.N != before.N:
            assert after.ideal_fraction == pytest.approx(abs(after.N - before.N) / max(after.N, before.N))
            assert 0 < after.migrated_fraction <= 1.1 * after.ideal_fraction  # README's claim
    # README's claim: repart's function is better balanced than plain hashing after the first batch.
    assert all(row.b is not None and row.b_hash is not None and row.b < row.b_hash for row in result.rows[1:])
    engine = make_engine(f"sqlite:///{tmp_path / 'demo' / 'repart.db'}")
    plans = run_in_transaction(engine, lambda session: list_plans(session, "trades"))
    versions = run_in_transaction(engine, lambda session: list_versions(session, "trades"))
    applied = [plan for plan in plans if plan.status == "applied"]
    assert applied and all(plan.moved_rows is not None for plan in applied)
    store = StateStore.open(tmp_path / "demo" / "state")
    assert store.version == max(v.number for v in versions if v.status == "applied")
    assert set(store.applied_plans) == {plan.id for plan in applied}


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


def test_demo_workdir_that_is_a_file_is_named(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    outcome = CliRunner().invoke(app, ["demo", "--workdir", str(afile), "--plot", str(tmp_path / "p.png")])
    assert outcome.exit_code == 2 and "is a file" in outcome.output and afile.read_text() == "x"
