"""The example pipeline: per-ticker VWAP over micro-batches of trades, kept in repart's state store.

Each batch goes through a ``repart.spark.StatefulJob``, which applies the controller's pending plan,
partitions the trades with the applied version, folds each channel's trades into its tickers' running
sums, observes the batch for the controller, reports it, and compacts and vacuums the store when due.

The pipeline talks to the controller only through the ``ControllerClient`` port. The
state of a ticker is ``(trades, volume, notional_cents)``; its VWAP is ``notional / volume``. Prices
are integer cents, so the state's totals must equal the input's totals exactly.

The region may be key-preserving or in split mode. Every state column is a sum, so the
state is decomposable: in split mode a hot ticker's trades are spread over several channels, each
keeps a partial row of sums, and ``MERGE`` (every column summed) merges them, when the store reads
the state (``read_merged``) and when a plan consolidates a ticker's partials into its home channel.

Every batch is processed exactly once under its batch id (its window's seq), whatever step a job is
killed at and however often it is run again on the same batch: the plan's id is in the store's
commit log (apply), the generation that absorbed the batch records its id (update: a batch absorbed
already is skipped), the controller keeps one snapshot and one report per batch id (observe, report).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from repart.protocol.client import ControllerClient
from repart.protocol.merge import MergeSpec
from repart.sim.trades import Trades
from repart.spark.job import BatchResult, StatefulJob
from repart.state.store import DEFAULT_SLOT_GROUPS, StateStore

KEY = "ticker"
SUMS = ("trades", "volume", "notional_cents")
STATE_SCHEMA = pa.schema([(KEY, pa.string()), *((name, pa.int64()) for name in SUMS)])
#: How a ticker's partial rows merge (split mode): every column of the state is a sum.
MERGE = MergeSpec.parse(",".join(f"{name}=sum" for name in SUMS))


def trades_table(trades: Trades) -> pa.Table:
    """A batch of trades as an Arrow table: ticker, price_cents, volume, notional_cents."""
    return pa.table(
        {
            KEY: pa.array(trades.ticker, pa.string()),
            "price_cents": trades.price_cents,
            "volume": trades.volume,
            "notional_cents": trades.notional_cents,
        }
    )


def combine_vwap(state: pa.Table, trades: pa.Table) -> pa.Table:
    """A channel's new state: its tickers' sums with the channel's trades of this batch added."""
    batch = trades.group_by(KEY).aggregate([("volume", "sum"), ("notional_cents", "sum"), (KEY, "count")])
    batch = pa.table(
        {
            KEY: batch[KEY],
            "trades": batch[f"{KEY}_count"].cast(pa.int64()),
            "volume": batch["volume_sum"],
            "notional_cents": batch["notional_cents_sum"],
        }
    )
    merged = pa.concat_tables([state.select(STATE_SCHEMA.names).cast(STATE_SCHEMA), batch.cast(STATE_SCHEMA)])
    summed = merged.group_by(KEY).aggregate([(name, "sum") for name in SUMS])
    return pa.table({KEY: summed[KEY], **{name: summed[f"{name}_sum"] for name in SUMS}}, schema=STATE_SCHEMA)


def totals(table: pa.Table) -> dict[str, int]:
    """Σ trades, Σ volume and Σ notional_cents of a state table."""
    return {name: int(pc.sum(table[name]).as_py() or 0) for name in SUMS}


def input_totals(trades: Trades) -> dict[str, int]:
    """The same totals over a batch of trades (one trade each)."""
    return {
        "trades": len(trades),
        "volume": int(trades.volume.sum()),
        "notional_cents": int(trades.notional_cents.sum()),
    }


class VwapPipeline:
    """Runs batches of trades through a ``StatefulJob`` against a region of the controller (through
    ``client``): the job folds each channel's trades into its tickers' sums with ``combine_vwap``.

    ``channel_rate`` (trades per second one channel sustains), when given, models each channel's busy
    seconds as ``tuples / channel_rate`` in the snapshots instead of measuring its task time: the two
    cores of a local session cannot show how busy 20 channels of a cluster would be, and a model keeps
    the demo's channel-count decisions reproducible. The other arguments are the job's
    (``repart.spark.StatefulJob``). The store is opened, or created, when the pipeline is.
    """

    def __init__(
        self,
        spark: SparkSession,
        client: ControllerClient,
        region: str,
        state: str | os.PathLike[str],
        *,
        window_seconds: float = 10.0,
        channel_rate: float | None = None,
        epsilon: float = 1e-4,
        slot_groups: int = DEFAULT_SLOT_GROUPS,
        state_options: Mapping[str, str] | None = None,
    ) -> None:
        self.spark = spark
        self.job = StatefulJob(
            client,
            region=region,
            key=KEY,
            state=state,
            schema=STATE_SCHEMA,
            combine=combine_vwap,
            state_options=state_options,
            epsilon=epsilon,
            window_seconds=window_seconds,
            channel_rate=channel_rate,
            slot_groups=slot_groups,
        )
        self.job.store  # noqa: B018 - open or create the store now: a bad location fails here
        # Σ trades, volume and notional of the batches this pipeline ran (``input_totals``).
        self.fed_totals = dict.fromkeys(SUMS, 0)

    @property
    def store(self) -> StateStore:
        """The job's state store at the generation its last batch left."""
        return self.job.store

    def run_batch(self, seq: int, trades: Trades) -> BatchResult:
        """Process batch ``seq`` of ``trades`` (its id: running a batch again finishes it exactly once)."""
        result = self.job.process(self.spark.createDataFrame(trades_table(trades)), seq)
        self.fed_totals = {
            name: self.fed_totals[name] + value for name, value in input_totals(trades).items()
        }
        return result
