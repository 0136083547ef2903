"""The demo's exactness check: after every batch the merged state equals a plain groupBy over all input.

repart's state goes through routing, partial rows per channel, migrations with consolidations and
``read_merged``; the reference is what a Spark user would write without repart: the union of every
batch so far, ``groupBy(ticker)`` with a count and two sums. Both must agree on every ticker and
every column (the demo's exactness check), in both modes.
"""

from __future__ import annotations

from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from repart.demo.vwap import KEY, STATE_SCHEMA, SUMS, trades_table
from repart.sim.trades import Trades


class InputLedger:
    """Every batch fed so far, as Spark DataFrames, and their plain groupBy."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._frames: list[DataFrame] = []

    def add(self, trades: Trades) -> None:
        self._frames.append(
            self.spark.createDataFrame(trades_table(trades)).select(KEY, "volume", "notional_cents")
        )

    def grouped(self) -> pa.Table:
        """One row per ticker of all input so far: its trades, Σ volume and Σ notional_cents."""
        union = reduce(DataFrame.unionByName, self._frames)
        grouped = union.groupBy(KEY).agg(
            F.count(F.lit(1)).alias("trades"),
            F.sum("volume").alias("volume"),
            F.sum("notional_cents").alias("notional_cents"),
        )
        return grouped.select(*STATE_SCHEMA.names).toArrow().cast(STATE_SCHEMA)


def difference(expected: pa.Table, state: pa.Table) -> str | None:
    """None when ``state`` has exactly the rows of ``expected`` (one per ticker, every column equal),
    else what differs first: a ticker missing or extra, a ticker with two rows, or a column's value."""
    want = _by_key(expected)
    got = _by_key(state.select(STATE_SCHEMA.names).cast(STATE_SCHEMA))
    if len(got) != state.num_rows:
        return f"the state has {state.num_rows} rows for {len(got)} tickers"
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    if missing:
        return f"{len(missing)} tickers of the input are not in the state, e.g. {missing[0]!r}"
    if extra:
        return f"{len(extra)} tickers of the state are not in the input, e.g. {extra[0]!r}"
    for key in sorted(want):
        for column in SUMS:
            if want[key][column] != got[key][column]:
                return (
                    f"ticker {key!r}: {column} is {got[key][column]} in the state, "
                    f"{want[key][column]} in the input"
                )
    return None


def _by_key(table: pa.Table) -> dict[str, dict[str, int]]:
    return {row[KEY]: row for row in table.to_pylist()}
