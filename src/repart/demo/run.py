"""The main job (``repart demo``): the VWAP pipeline under a live controller, end to end.

Everything runs in one process on the embedded defaults: a SQLite database in the work directory,
Spark ``local[2]``, and the controller's daemon on a background scheduler ticking the region every
half second. The region starts on 4 channels under the ``target-utilization`` policy; the trade rate
grows 15 % per batch and the hot tickers drift, so the controller scales out and rebalances while the
job applies each plan to its state before the next batch.

Per batch the demo measures, on the batch's exact ticker counts: b (Gedik Eq. 11, LCL, α = 1.2) of the
version the batch was routed with, b of plain hashing (``slot mod N``, the
key hash's top 16 bits modulo N) at the same N, the fraction of
state rows the batch's migration moved, and the ideal share ``|ΔN| / max(N, N')`` a scale step must
move at least. It ends by checking that the state's totals (trades, volume, notional) equal the
input's.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.tick import last_considered_seq, tick
from repart.demo.vwap import BatchOutcome, VwapPipeline, totals
from repart.errors import InvalidInput
from repart.partitioning import ConsistentSpec, PartitionFunction, initial_function
from repart.partitioning.metrics import channel_loads, imbalance
from repart.partitioning.resources import Resources
from repart.sim.trades import Trades, TradeStream
from repart.spark.session import DEFAULT_MASTER, spark_session
from repart.storage import (
    RegionConfig,
    create_region,
    make_engine,
    read_transaction,
    run_in_transaction,
    upgrade,
)
from repart.storage.client import SqlControllerClient
from repart.validation import Interval, check

REGION = "trades"
MARKER = ".repart-demo"
ALPHA = 1.2
RESOURCES = Resources.parse("LCL")


@dataclass(frozen=True)
class DemoConfig:
    """The demo's knobs; the defaults are what ``make demo`` runs."""

    batches: int = 8
    workdir: Path = Path(".repart/demo")
    master: str = DEFAULT_MASTER
    initial_channels: int = 4
    max_channels: int = 32
    channel_rate: float = 2_000.0
    window_seconds: float = 10.0
    tick_seconds: float = 0.5
    decision_timeout: float = 120.0
    stream: TradeStream = field(default_factory=TradeStream)

    def __post_init__(self) -> None:
        check("batches", self.batches, Interval(int, 1, 30))


@dataclass(frozen=True)
class DemoRow:
    """One batch's line of the demo (the fields of ``--json``'s ``batches``)."""

    batch: int
    N: int
    version: int
    b: float | None
    b_hash: float | None
    migrated_fraction: float
    ideal_fraction: float
    seconds: float


@dataclass(frozen=True)
class DemoResult:
    rows: list[DemoRow]
    input_totals: dict[str, int]
    state_totals: dict[str, int]

    @property
    def equal(self) -> bool:
        return self.input_totals == self.state_totals

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": [row.__dict__ for row in self.rows],
            "totals": {"input": self.input_totals, "state": self.state_totals, "equal": self.equal},
        }


def run_demo(config: DemoConfig, on_batch: Callable[[DemoRow], None] | None = None) -> DemoResult:
    """Run the demo (see the module docstring); ``on_batch`` sees every row as it is measured."""
    workdir = _fresh_workdir(config.workdir)
    engine = make_engine(f"sqlite:///{workdir / 'repart.db'}")
    upgrade(engine)
    region = RegionConfig(
        key_type="str",
        n_channels_initial=config.initial_channels,
        policy="target-utilization",
        min_channels=1,
        max_channels=config.max_channels,
        settings={"target_utilization": 0.8},
    )
    run_in_transaction(engine, lambda session: create_region(session, REGION, region))
    tick(engine, REGION)  # p^(0): the consistent hash on the initial channels
    spark = spark_session(config.master, "repart-demo")
    pipeline = VwapPipeline(
        spark,
        SqlControllerClient(engine, source="repart demo"),
        REGION,
        workdir / "state",
        window_seconds=config.window_seconds,
        channel_rate=config.channel_rate,
    )
    daemon = Daemon(engine, DaemonConfig(interval_seconds=config.tick_seconds, lease_ttl_seconds=30.0))
    daemon.start()
    rows: list[DemoRow] = []
    try:
        for seq in range(config.batches):
            trades = config.stream.batch(seq)
            outcome = pipeline.run_batch(seq, trades)
            row = _row(outcome, trades)
            rows.append(row)
            if on_batch is not None:
                on_batch(row)
            if seq + 1 < config.batches:
                _wait_for_decision(engine, seq, config.decision_timeout)
    finally:
        daemon.stop()
    return DemoResult(rows=rows, input_totals=pipeline.fed_totals, state_totals=totals(pipeline.store.read()))


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


def _row(outcome: BatchOutcome, trades: Trades) -> DemoRow:
    keys, counts = np.unique(np.asarray(trades.ticker, dtype=object), return_counts=True)
    frequencies = counts / counts.sum()
    hashing = initial_function(
        outcome.n_channels, "str", outcome.function.slot_bits, ConsistentSpec(method="mod")
    )
    if not isinstance(outcome.function, PartitionFunction):
        raise TypeError("the demo's region is key-preserving: its versions are PartitionFunctions")
    moved = outcome.moved_rows or 0
    before, after = outcome.n_channels_before, outcome.n_channels
    return DemoRow(
        batch=outcome.seq,
        N=after,
        version=outcome.version,
        b=_b(outcome.function, keys, frequencies),
        b_hash=_b(hashing, keys, frequencies),
        migrated_fraction=moved / outcome.state_rows_before if outcome.state_rows_before else 0.0,
        ideal_fraction=abs(after - before) / max(after, before),
        seconds=outcome.seconds,
    )


def _b(
    function: PartitionFunction, keys: np.ndarray[Any, Any], frequencies: np.ndarray[Any, Any]
) -> float | None:
    channels = function.lookup_many(keys.tolist())
    loads = channel_loads(RESOURCES, frequencies, channels, function.n_channels)
    b = imbalance(RESOURCES, loads, ALPHA).b
    return b if math.isfinite(b) else None


def _wait_for_decision(engine: Engine, seq: int, timeout: float) -> None:
    """Block until the controller has decided on window ``seq`` (it ticks on its own schedule)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        considered = read_transaction(engine, lambda session: last_considered_seq(session, REGION))
        if considered is not None and considered >= seq:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the controller did not decide on window {seq} within {timeout:g} s")
