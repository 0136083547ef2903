"""The main job (``repart demo``): the VWAP pipeline under a live controller, end to end, in two modes.

Everything runs in one process on the embedded defaults: a SQLite database in the work directory,
Spark ``local[2]``, and the controller's daemon on a background scheduler ticking every half second.
The same stream of trades feeds two regions, batch by batch in one Spark session: ``trades-preserve``
(key-preserving, Gedik's functions) and ``trades-split`` (split mode: D-Choices unless
``DemoConfig.split`` names another scheme; the state merges by summing, ``vwap.MERGE``), each with its
own state store. Both start on 4 channels under the ``target-utilization`` policy; the trade rate
grows 15 % per batch and the hot tickers drift, so the controller scales out and rebalances while each
job applies its plans to its state before the next batch.

Per batch and mode the demo measures b of the version the batch was routed with, of plain hashing
and the key-preserving bound b_lb, the state's memory, and the migrated and ideal fractions
(``repart.demo.measure``), and checks that the merged state equals a plain groupBy over all input so
far (``repart.demo.exactness``). It ends with each mode's totals (trades, volume, notional) of the
input and of the state.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from sqlalchemy import Engine

from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.service import create_region
from repart.controller.tick import last_considered_seq, tick
from repart.demo.exactness import InputLedger, difference
from repart.demo.measure import BatchCounts, batch_row
from repart.demo.report import DemoResult, DemoRow, ModeTotals
from repart.demo.vwap import MERGE, VwapPipeline, totals
from repart.errors import InvalidInput
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.sim.trades import TradeStream
from repart.spark.session import DEFAULT_MASTER, spark_session
from repart.storage import (
    RegionConfig,
    make_engine,
    read_transaction,
    run_in_transaction,
    upgrade,
)
from repart.storage.client import SqlControllerClient
from repart.validation import Interval, Options, check

#: The log4j2 configuration of the demo's Spark: errors only (Spark's default logs its start-up warnings).
LOG4J2_CONFIGURATION = Path(__file__).with_name("log4j2.properties")


def quiet_logging() -> dict[str, str]:
    """Spark settings that make the driver's JVM (and local executors, which run in it) log errors
    only, through ``LOG4J2_CONFIGURATION``. They take effect when this call starts the JVM; a session
    that is already running keeps its logging."""
    option = f"-Dlog4j2.configurationFile={LOG4J2_CONFIGURATION.as_uri()}"
    return {"spark.driver.extraJavaOptions": option, "spark.executor.extraJavaOptions": option}


#: The two modes, in the order each batch runs them, and their regions.
MODES = ("preserve", "split")
REGIONS = {mode: f"trades-{mode}" for mode in MODES}
MARKER = ".repart-demo"


@dataclass(frozen=True)
class DemoConfig:
    """The demo's knobs; the defaults are what ``make demo`` runs. ``split`` is the split region's
    scheme (one of ``SPLIT_SCHEMES``). ``slot_groups`` is the number of files per channel of each
    state store: the demo's state is small (at most 20,000 tickers), and 4 files per channel instead
    of the store's default 64 spare each batch's update, migration and vacuum hundreds of tiny files."""

    batches: int = 8
    workdir: Path = Path(".repart/demo")
    master: str = DEFAULT_MASTER
    initial_channels: int = 4
    max_channels: int = 32
    channel_rate: float = 2_000.0
    window_seconds: float = 10.0
    tick_seconds: float = 0.5
    decision_timeout: float = 120.0
    slot_groups: int = 4
    split: str = "dchoices"
    stream: TradeStream = field(default_factory=TradeStream)

    def __post_init__(self) -> None:
        check("batches", self.batches, Interval(int, 1, 30))
        check("split", self.split, Options(SPLIT_SCHEMES))

    def region(self, mode: str) -> RegionConfig:
        """The region of ``mode``: str keys, ``target-utilization``, and in split mode the scheme and
        the VWAP state's merge."""
        split = mode == "split"
        return RegionConfig(
            key_type="str",
            n_channels_initial=self.initial_channels,
            policy="target-utilization",
            min_channels=1,
            max_channels=self.max_channels,
            split_scheme=self.split if split else None,
            merge=MERGE.to_text() if split else None,
            # Busy seconds are modelled (channel_rate), so is the budget: each batch stands for a
            # trigger interval of window_seconds, whatever this machine's speed or load.
            settings={"target_utilization": 0.8, "batch_interval_seconds": self.window_seconds},
        )


def run_demo(config: DemoConfig, on_batch: Callable[[DemoRow], None] | None = None) -> DemoResult:
    """Run the demo (see the module docstring); ``on_batch`` sees every row as it is measured."""
    workdir = _fresh_workdir(config.workdir)
    engine = _controller(workdir, config)
    spark = spark_session(config.master, "repart-demo", config=quiet_logging())
    pipelines = _pipelines(spark, engine, workdir, config)
    ledger = InputLedger(spark)
    mismatches: dict[str, list[str]] = {mode: [] for mode in MODES}
    states: dict[str, pa.Table] = {}
    rows: list[DemoRow] = []
    daemon = Daemon(engine, DaemonConfig(interval_seconds=config.tick_seconds, lease_ttl_seconds=30.0))
    daemon.start()
    try:
        for seq in range(config.batches):
            trades = config.stream.batch(seq)
            counts = BatchCounts.of(trades)
            ledger.add(trades)
            expected = ledger.grouped()
            for mode, pipeline in pipelines.items():
                outcome = pipeline.run_batch(seq, trades)
                states[mode] = state = pipeline.store.read_merged(MERGE)
                problem = difference(expected, state)
                if problem is not None:
                    mismatches[mode].append(f"batch {seq}: {problem}")
                # The state's rows as readers see them (a channel's deltas resolved to one row per key),
                # not the rows its files hold, which count a key again in each delta until compaction.
                state_rows = pipeline.store.read().num_rows
                row = batch_row(mode, outcome, counts, state_rows=state_rows, state_keys=state.num_rows)
                rows.append(row)
                if on_batch is not None:
                    on_batch(row)
            if seq + 1 < config.batches:
                for region in REGIONS.values():
                    _wait_for_decision(engine, region, seq, config.decision_timeout)
    finally:
        daemon.stop()
    return DemoResult(
        rows=rows,
        totals={
            mode: ModeTotals(pipeline.fed_totals, totals(states[mode]), tuple(mismatches[mode]))
            for mode, pipeline in pipelines.items()
        },
    )


def _controller(workdir: Path, config: DemoConfig) -> Engine:
    """The demo's database with both regions, each on its first version p^(0) (the consistent hash on
    the initial channels)."""
    engine = make_engine(f"sqlite:///{workdir / 'repart.db'}")
    upgrade(engine)
    for mode in MODES:
        run_in_transaction(engine, partial(create_region, name=REGIONS[mode], config=config.region(mode)))
        tick(engine, REGIONS[mode])
    return engine


def _pipelines(
    spark: SparkSession, engine: Engine, workdir: Path, config: DemoConfig
) -> dict[str, VwapPipeline]:
    """One VWAP pipeline per mode, each with its region and its state store under ``workdir/state``;
    the split region's pipeline applies its plans' consolidations with ``MERGE``."""
    client = SqlControllerClient(engine, source="repart demo")
    return {
        mode: VwapPipeline(
            spark,
            client,
            REGIONS[mode],
            workdir / "state" / mode,
            window_seconds=config.window_seconds,
            channel_rate=config.channel_rate,
            slot_groups=config.slot_groups,
        )
        for mode in MODES
    }


def _fresh_workdir(path: Path) -> Path:
    """The demo's work directory, emptied if an earlier demo left it; refuses any other directory."""
    if path.exists() and not path.is_dir():
        raise InvalidInput("workdir", f"must be a directory: {path} is a file")
    if path.exists() and any(path.iterdir()) and not (path / MARKER).exists():
        raise InvalidInput(
            "workdir",
            f"must be new or made by repart demo: {path} is not empty and was not made by repart demo",
        )
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).touch()
    return path.resolve()


def _wait_for_decision(engine: Engine, region: str, seq: int, timeout: float) -> None:
    """Block until the controller has decided on ``region``'s window ``seq`` (it ticks on its own
    schedule)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        considered = read_transaction(engine, lambda session: last_considered_seq(session, region))
        if considered is not None and considered >= seq:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the controller did not decide on window {seq} of {region} within {timeout:g} s")
