"""The demo's parts that need no Spark session: b on merged keys, the exactness comparison, the JSON
document and the side-by-side plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from repart.demo.exactness import difference
from repart.demo.measure import PARAMS, BatchCounts
from repart.demo.report import DemoResult, DemoRow, ModeTotals
from repart.demo.vwap import STATE_SCHEMA
from repart.errors import InvalidInput
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split.build import split_imbalance
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.sim.plot import plot_demo
from repart.sim.trades import Trades

HOME = PartitionFunction(n_channels=2, explicit={"a": 0, "b": 1, "c": 1})


def counts_of(tickers: list[str]) -> BatchCounts:
    n = len(tickers)
    return BatchCounts.of(Trades(tickers, np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64)))


def test_b_counts_a_split_key_on_its_candidates_by_weight() -> None:
    counts = counts_of(["a"] * 60 + ["b"] * 20 + ["c"] * 20)
    assert dict(zip(counts.keys, counts.counts.tolist(), strict=True)) == {"a": 60, "b": 20, "c": 20}
    # Key-preserving: 60 against 40 tuples (state and communication both linear), b = 1.5 / α; max/mean
    # load 60 over the mean 50.
    preserving = split_imbalance(HOME, counts.estimate, PARAMS)
    assert (preserving.b, preserving.max_mean_load) == pytest.approx((1.5 / 1.2, 60 / 50))
    # a's tuples 5/6 at home, 1/6 on channel 1: 50 against 50, b = 1 / α.
    even = SplitFunction(HOME, {"a": SplitEntry((0, 1), (5 / 6, 1 / 6))})
    assert split_imbalance(even, counts.estimate, PARAMS).b == pytest.approx(1 / 1.2)
    assert split_imbalance(even, counts.estimate, PARAMS).max_mean_load == pytest.approx(1.0)
    halves = SplitFunction(HOME, {"a": SplitEntry((0, 1), (0.5, 0.5))})
    assert split_imbalance(halves, counts.estimate, PARAMS).b == pytest.approx((70 / 30) / 1.2)
    assert split_imbalance(halves, counts.estimate, PARAMS).max_mean_load == pytest.approx(70 / 50)


def state(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    return pa.table(
        {name: [row[i] for row in rows] for i, name in enumerate(STATE_SCHEMA.names)}, schema=STATE_SCHEMA
    )


def test_difference_names_what_differs_first() -> None:
    rows = [("T1", 2, 10, 500), ("T2", 1, 3, 90)]
    expected = state(rows)
    assert difference(expected, state(rows[::-1])) is None  # the order of the rows is free
    assert difference(expected, state([rows[0], ("T2", 1, 4, 90)])) == (
        "ticker 'T2': volume is 4 in the state, 3 in the input"
    )
    assert difference(expected, state(rows[:1])) == "1 tickers of the input are not in the state, e.g. 'T2'"
    assert difference(expected, state([*rows, ("T3", 1, 1, 1)])) == (
        "1 tickers of the state are not in the input, e.g. 'T3'"
    )
    partials = state([("T1", 1, 5, 250), ("T1", 1, 5, 250), ("T2", 1, 3, 90)])
    assert difference(expected, partials) == "the state has 3 rows for 2 tickers"


def row(mode: str, batch: int, b: float | None = 1.1, memory: float = 1.0) -> DemoRow:
    return DemoRow(
        mode=mode,
        batch=batch,
        N=4 + batch,
        version=batch + 1,
        b=b,
        b_hash=1.4,
        load=1.05,
        load_hash=1.3,
        b_lb=0.9,
        memory=memory,
        migrated_fraction=0.0 if batch == 0 else 0.19,
        ideal_fraction=0.0 if batch == 0 else 0.2,
        seconds=1.0,
    )


def test_a_mode_is_equal_only_with_equal_totals_and_every_batch_exact() -> None:
    totals = {"trades": 3, "volume": 13, "notional_cents": 590}
    exact = ModeTotals(totals, dict(totals))
    drifted = ModeTotals(
        totals, dict(totals), ("batch 1: ticker 'T2': volume is 4 in the state, 3 in the input",)
    )
    lost = ModeTotals(totals, {**totals, "trades": 2})
    assert exact.equal and not drifted.equal and not lost.equal
    result = DemoResult(
        [row("preserve", 0), row("split", 0, memory=1.02)], {"preserve": exact, "split": drifted}
    )
    assert not result.equal
    assert result.to_json() == {
        "batches": [r.to_json() for r in result.rows],
        "totals": {
            "preserve": {"input": totals, "state": totals, "equal": True},
            "split": {"input": totals, "state": totals, "equal": False},
        },
    }


def test_the_plot_shows_the_modes_side_by_side(tmp_path: Path) -> None:
    import matplotlib.image

    rows = [
        row(mode, batch, b=None if batch == 0 else 1.0)
        for batch in range(3)
        for mode in ("preserve", "split")
    ]
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    plot_demo([r.to_json() for r in rows if r.mode == "preserve"], one, "one mode")
    plot_demo([r.to_json() for r in rows], two, "both modes")
    height_one, width_one = matplotlib.image.imread(one).shape[:2]
    height_two, width_two = matplotlib.image.imread(two).shape[:2]
    assert height_two == height_one and width_two > 1.8 * width_one
    with pytest.raises(InvalidInput, match="rows must not be empty"):
        plot_demo([], tmp_path / "none.png", "nothing")
    assert not (tmp_path / "none.png").exists()
