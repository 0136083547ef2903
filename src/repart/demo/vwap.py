"""The example pipeline: per-ticker VWAP over micro-batches of trades, kept in repart's state store.

Each batch does what every stateful job under repart does (DESIGN §9):

1. **apply** the plan the controller left (``apply_next_plan``): state moves to the new layout;
2. **partition** the batch with the applied version (Spark partition i = channel i);
3. **update** the state: each channel's task folds its trades into its tickers' running sums;
4. **observe** the batch's key frequencies and per-channel load as a snapshot for the controller;
5. **report** the batch (rows, moved state, seconds) to the controller, then compact the store when
   it is due and vacuum it.

The pipeline talks to the controller only through the ``ControllerClient`` port (DESIGN §12.1). The
state of a ticker is ``(trades, volume, notional_cents)``; its VWAP is ``notional / volume``. Prices
are integer cents, so the state's totals must equal the input's totals exactly.

The region may be key-preserving or in split mode (DESIGN §11.3). Every state column is a sum, so the
state is decomposable: in split mode a hot ticker's trades are spread over several channels, each
keeps a partial row of sums, and ``MERGE`` (every column summed) merges them, when the store reads
the state (``read_merged``) and when a plan consolidates a ticker's partials into its home channel.

Every batch is processed exactly once under its batch id (its window's seq), whatever step a job is
killed at and however often it is run again on the same batch: the plan's id is in the store's
commit log (apply), the generation that absorbed the batch records its id (update: a batch absorbed
already is skipped), the controller keeps one snapshot and one report per batch id (observe, report).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from repart.errors import Conflict, InvalidInput, NotFound
from repart.partitioning.split.function import SplitFunction, StoredFunction
from repart.protocol.client import ControllerClient
from repart.protocol.merge import MergeSpec
from repart.sim.trades import Trades
from repart.spark.jobs import apply_next_plan
from repart.spark.observe import Observation, Window, observe
from repart.spark.route import partition
from repart.spark.sinks import ControllerSink
from repart.spark.stateful import ChannelUpdate, update_state
from repart.state.store import DEFAULT_SLOT_GROUPS, StateStore
from repart.validation import POSITIVE, check

KEY = "ticker"
SUMS = ("trades", "volume", "notional_cents")
STATE_SCHEMA = pa.schema([(KEY, pa.string()), *((name, pa.int64()) for name in SUMS)])
#: How a ticker's partial rows merge (split mode): every column of the state is a sum.
MERGE = MergeSpec.parse(",".join(f"{name}=sum" for name in SUMS))
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


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


@dataclass(frozen=True)
class BatchOutcome:
    """What one batch did. ``moved_rows`` is None when no plan was applied; ``state_rows_before`` the
    state's rows when the batch started (the denominator of the migrated fraction)."""

    seq: int
    version: int
    function: StoredFunction
    n_channels: int
    n_channels_before: int
    plan_id: int | None
    moved_rows: int | None
    moved_bytes: int | None
    state_rows_before: int
    input_rows: int
    updates: tuple[ChannelUpdate, ...]
    observation: Observation
    seconds: float


class VwapPipeline:
    """Runs batches of the VWAP job against a region of the controller (through ``client``) and a
    state store.

    ``channel_rate`` (trades per second one channel sustains), when given, models each channel's busy
    seconds as ``tuples / channel_rate`` in the snapshots instead of measuring its task time: the two
    cores of a local session cannot show how busy 20 channels of a cluster would be, and a model keeps
    the demo's channel-count decisions reproducible. ``window_seconds`` is the event-time length of a
    batch (its snapshot's window). ``epsilon`` is the snapshots' error bound (observe lists every key
    above ⌊n/⌈1/ε⌉⌋): it must stay below the controller's frequency threshold δ (about 6·10⁻⁴ at
    N = 32 with the defaults) so that every key the builders would track is in the snapshot; 10⁻⁴
    leaves a margin of six. ``slot_groups`` is the number of files per channel of a store the pipeline
    creates (``repart.state.files``). The merge of split keys' partial rows is the region's
    (``ControllerClient.region_merge``; ``MERGE`` for this state), which ``apply_next_plan`` uses for
    a plan's consolidations: a region whose applied version is a split function but that declares no
    merge is refused (InvalidInput ``merge``) before the batch writes anything.
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
        self.window_seconds = check("window_seconds", window_seconds, POSITIVE)
        self.channel_rate = None if channel_rate is None else check("channel_rate", channel_rate, POSITIVE)
        self.spark = spark
        self.client = client
        self.region = region
        self.state = os.fspath(state)
        self.state_options = dict(state_options) if state_options is not None else None
        self.epsilon = epsilon
        self.slot_groups = slot_groups
        self.store = self._open_or_create_store()
        # Σ trades, volume and notional of the batches this pipeline ran (``input_totals``).
        self.fed_totals = dict.fromkeys(SUMS, 0)

    def _open_or_create_store(self) -> StateStore:
        """The store at ``state`` (a path or a URL), created (laid out by the applied version) where
        there is none. A damaged store is Corrupt, never created over."""
        try:
            return StateStore.open(self.state, self.state_options)
        except NotFound:
            pass
        number, function = self.client.applied_function(self.region)
        return StateStore.create(
            self.state,
            region=self.region,
            version=number,
            function_digest=function.digest,
            n_channels=function.n_channels,
            slot_bits=function.slot_bits,
            key_type="str",
            key_col=KEY,
            schema=STATE_SCHEMA,
            slot_groups=self.slot_groups,
            options=self.state_options,
        )

    def run_batch(self, seq: int, trades: Trades) -> BatchOutcome:
        """Apply, partition, update, observe and report batch ``seq`` (see the module docstring); the
        batch's id is ``seq``, so running a batch again finishes it exactly once."""
        started = time.perf_counter()
        state_rows_before = self.store.rows()
        n_before = self.store.n_channels
        migration = apply_next_plan(self.client, self.region, self.store)
        if migration is not None:
            self.store = StateStore.open(self.state, self.state_options)
        version, function = self.client.applied_function(self.region)
        if isinstance(function, SplitFunction) and self.client.region_merge(self.region) is None:
            raise InvalidInput(
                "merge",
                f"is required: region {self.region!r} routes with a split function (version {version}), "
                "whose partial state rows merge by the region's merge, and declares none; set one with "
                f"`repart region update {self.region} --merge COLUMN=sum|min|max,...`",
            )
        frame: DataFrame = self.spark.createDataFrame(trades_table(trades))
        self.store, updates = update_state(
            self.store,
            partition(frame, KEY, function),
            combine_vwap,
            version=version,
            function=function,
            batch_id=seq,
        )
        start = EPOCH + timedelta(seconds=seq * self.window_seconds)
        observation = observe(
            frame,
            KEY,
            self.region,
            Window(seq=seq, start=start, end=start + timedelta(seconds=self.window_seconds)),
            ControllerSink(self.client),
            epsilon=self.epsilon,
            slot_bits=function.slot_bits,
            version=version,
            channels=self._measurements(updates, function.n_channels),
            batch=seq,
        )
        seconds = time.perf_counter() - started
        plan_id = None if migration is None else migration[0].plan_id
        outcome = BatchOutcome(
            seq=seq,
            version=version,
            function=function,
            n_channels=function.n_channels,
            n_channels_before=n_before,
            plan_id=plan_id,
            moved_rows=None if migration is None else migration[1].moved_rows,
            moved_bytes=None if migration is None else migration[1].moved_bytes,
            state_rows_before=state_rows_before,
            input_rows=len(trades),
            updates=tuple(updates),
            observation=observation,
            seconds=seconds,
        )
        payload = {
            "input_rows": outcome.input_rows,
            "null_keys": observation.null_keys,
            "version": version,
            "moved_rows": outcome.moved_rows,
            "moved_bytes": outcome.moved_bytes,
            "seconds": seconds,
            "state_generation": self.store.generation,
        }
        self.client.report_batch(self.region, seq, payload, plan_id)
        # Between batches no executor is writing: rewrite the channels whose files a migration left
        # filtered or scattered (nothing is written when none is due), then drop unlisted files.
        # Compaction is housekeeping: while another process holds the store's lock (say `repart state
        # compact`), the batch, committed already, finishes without it.
        with contextlib.suppress(Conflict):
            self.store.compact()
        self.store.vacuum()
        self.fed_totals = {
            name: self.fed_totals[name] + value for name, value in input_totals(trades).items()
        }
        return outcome

    def _measurements(self, updates: list[ChannelUpdate], n_channels: int) -> list[dict[str, float | int]]:
        """Per-channel tuples, busy seconds and state bytes for the snapshot (DESIGN §3), every channel."""
        by_channel = {update.channel: update for update in updates}
        measured = []
        for channel in range(n_channels):
            update = by_channel.get(channel)
            tuples = 0 if update is None else update.input_rows
            busy = 0.0 if update is None else update.busy_seconds
            if self.channel_rate is not None:
                busy = tuples / self.channel_rate
            state_bytes = sum(entry.seen_bytes for entry in self.store.files(channel))
            measured.append(
                {"channel": channel, "tuples": tuples, "busy_seconds": busy, "state_bytes": state_bytes}
            )
        return measured
