"""Per-ticker VWAP over micro-batches of synthetic trades, with repart managing partitioning and state.

Run it locally (Spark local[2], a SQLite database and a state store under ./.repart/vwap):

    .venv/bin/python examples/vwap.py --batches 4

or against a cluster with spark-submit (the database must be reachable from the driver; the state store
from the driver and every executor: an object store such as ``s3://bucket/repart/vwap``, with the
credentials in the driver's ``AWS_*`` environment variables, or a shared file system):

    .venv/bin/spark-submit --master spark://HOST:7077 examples/vwap.py \\
        --db postgresql+psycopg://user@dbhost/repart --state s3://bucket/repart/vwap --batches 4

Each batch applies the controller's pending plan to the state, partitions the trades with the applied
version, folds them into the per-ticker sums on the channel's executor, observes the key frequencies
for the controller and reports the batch (``repart.demo.vwap``). Between batches this script runs one
controller tick (``--tick``, the default; like a cron job), or leaves deciding to a ``repart run``
daemon on the same database (``--no-tick``). It prints a JSON line per batch and, at the end, the
state's and the input's totals. A batch is processed exactly once: after a crash, run the script again
from the batch it was on (``--first-batch``), and whatever step the crash struck, that batch is counted
once in the state, the snapshots and the reports.

An expected error (a damaged state store, bad input, a conflict) is printed as one line on stderr and
the script exits with the error's code, as the ``repart`` command does: 2 for bad input or something not
found, 3 for a conflict (retry), 4 for damaged state.
"""

from __future__ import annotations

import argparse
import json
import sys

from pyspark.sql import SparkSession
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.controller.service import create_region
from repart.controller.tick import tick
from repart.demo.vwap import VwapPipeline, totals
from repart.errors import NotFound, RepartError
from repart.sim.trades import TradeStream
from repart.spark.session import spark_session
from repart.storage import (
    RegionConfig,
    make_engine,
    region_by_name,
    run_in_transaction,
    upgrade,
)
from repart.storage.client import SqlControllerClient


def ensure_region(engine: Engine, region: str, channels: int) -> None:
    """Create the region (str keys, target-utilization policy) unless it exists."""

    def work(session: Session) -> None:
        try:
            region_by_name(session, region)
        except NotFound:
            config = RegionConfig(key_type="str", n_channels_initial=channels, policy="target-utilization")
            create_region(session, region, config)

    run_in_transaction(engine, work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite:///.repart/vwap/repart.db", help="controller database URL")
    parser.add_argument(
        "--state", default=".repart/vwap/state", help="state store: a directory or an s3://, gs://, az:// URL"
    )
    parser.add_argument("--region", default="vwap")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument(
        "--first-batch", type=int, default=0, help="number of the first batch (continue after the last one)"
    )
    parser.add_argument("--channels", type=int, default=4, help="initial channel count of a new region")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[2])"
    )
    parser.add_argument("--channel-rate", type=float, default=None, help="model busy seconds as tuples/rate")
    parser.add_argument("--tick", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except RepartError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code


def run(args: argparse.Namespace) -> int:
    """Run the batches ``args`` ask for (see the module docstring)."""
    engine = make_engine(args.db)
    upgrade(engine)
    ensure_region(engine, args.region, args.channels)
    tick(engine, args.region)  # activates p^(0) for a new region; decides on earlier windows otherwise
    spark = spark_session(args.master, "repart-vwap")
    try:
        _run_batches(args, engine, spark)
    finally:
        spark.stop()
    return 0


def _run_batches(args: argparse.Namespace, engine: Engine, spark: SparkSession) -> None:
    client = SqlControllerClient(engine, source="examples/vwap.py")
    pipeline = VwapPipeline(spark, client, args.region, args.state, channel_rate=args.channel_rate)
    stream = TradeStream()
    for seq in range(args.first_batch, args.first_batch + args.batches):
        trades = stream.batch(seq)
        outcome = pipeline.run_batch(seq, trades)
        decided = tick(engine, args.region) if args.tick else None
        line = {
            "batch": seq,
            "version": outcome.version,
            "N": outcome.n_channels,
            "trades": outcome.input_rows,
            "moved_rows": outcome.moved_rows,
            "seconds": round(outcome.seconds, 3),
            "controller": None if decided is None else decided.action,
        }
        print(json.dumps(line), flush=True)
    state = totals(pipeline.store.read())
    print(json.dumps({"input_totals_this_run": pipeline.fed_totals, "state_totals": state}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
