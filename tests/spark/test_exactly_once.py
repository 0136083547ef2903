"""Exactly-once batches end to end (DESIGN §9, §12.1): the VWAP job, a child process, is killed with
SIGKILL at each step of a batch and run again on the same batch; every rerun exits 0 and afterwards the
state's totals equal the input's exactly, with one snapshot, one report and one applied plan per batch.

The kill points, reached through ``REPART_KILL_AT`` in the child (it ``os.kill``s itself with SIGKILL
when the named step is done):

- ``apply-written``: inside ``StateStore.apply``, the next generation's files written and verified, its
  commit document not yet created;
- ``apply-committed``: right after the store committed the plan, before the controller heard of it;
- ``update-committed``: right after the state commit that absorbed the batch;
- ``observe-submitted``: right after the batch's snapshot reached the controller;
- ``report-recorded``: right after the batch report.

Before every batch the test scales the region, so every batch starts with a pending plan and its apply
step moves state. The 20 trials run in two lanes (two regions, each with its own database and state
store) side by side: lane 0's jobs reach the controller through SQL (``SqlControllerClient``), lane 1's
through the HTTP API (``HttpControllerClient`` against the API served on loopback, with a job token),
so both clients of the port pass the same trials. Each child starts its own Spark (local[2]) when it
makes the batch's DataFrame; a JVM class-data archive, made once by a child that exits normally
(``-XX:ArchiveClassesAtExit``) and kept between test sessions, cuts every later child's JVM start-up
several-fold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from repart.api.server import ApiServer
from repart.controller.actions import scale
from repart.controller.tick import tick
from repart.demo.vwap import SUMS, input_totals, totals
from repart.sim.trades import TradeStream
from repart.state.store import StateStore
from repart.storage import make_engine, models, run_in_transaction, upgrade
from repart.storage.tokens import create_token
from tests.factories import add_region
from tests.spark.children import class_data_archive

STREAM = {"tickers": 400, "base_trades": 2500, "growth": 1.0, "seed": 11}
KILL_POINTS = ("apply-written", "apply-committed", "update-committed", "observe-submitted", "report-recorded")
TRIALS = 20
LANES = 2
CHANNELS = (5, 3, 6, 4)  # the N each batch of a lane scales to, in turn (a region starts on 4)

CHILD = f"""
import json, os, signal, sys
from pathlib import Path

import repart.demo.vwap as vwap
import repart.spark.job as job_module
import repart.state.store as store_module
from repart.sim.trades import TradeStream
from repart.spark.session import spark_session
from repart.storage import make_engine
from repart.protocol.http_client import HttpControllerClient
from repart.storage.client import SqlControllerClient

step = os.environ.get("REPART_KILL_AT")


def killing_after(name, original):
    def run(*args, **kwargs):
        result = original(*args, **kwargs)
        if step == name:
            print("killed at", name, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return run


class LazySpark:
    \"\"\"The SparkSession, started when the batch first needs it.\"\"\"

    def __getattr__(self, name):
        return getattr(spark_session("local[2]", "exactly-once", shuffle_partitions=2), name)


store_module.migrate_files = killing_after("apply-written", store_module.migrate_files)
store_module.StateStore.apply = killing_after("apply-committed", store_module.StateStore.apply)
job_module.update_state = killing_after("update-committed", job_module.update_state)
job_module.observe = killing_after("observe-submitted", job_module.observe)
job_module.observe_counted = killing_after("observe-submitted", job_module.observe_counted)
SqlControllerClient.report_batch = killing_after("report-recorded", SqlControllerClient.report_batch)
HttpControllerClient.report_batch = killing_after("report-recorded", HttpControllerClient.report_batch)

controller, state, region, seq = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if controller.startswith("http://"):
    client = HttpControllerClient(controller, os.environ["REPART_TOKEN"])
else:
    client = SqlControllerClient(make_engine(controller))
pipeline = vwap.VwapPipeline(LazySpark(), client, region, state, channel_rate=500.0, slot_groups=4)
outcome = pipeline.run_batch(seq, TradeStream(**{STREAM!r}).batch(seq))
print(json.dumps({{"seq": seq, "N": outcome.n_channels, "plan": outcome.plan_id}}), flush=True)
"""


class Lane:
    """One region with its own database and state store, run batch after batch by child processes."""

    def __init__(self, root: Path, number: int, java_options: str, *, over_http: bool) -> None:
        self.region = f"lane{number}"
        self.db = f"sqlite:///{root / f'{self.region}.db'}"
        self.state = root / f"{self.region}-state"
        self.java_options = java_options
        self.engine = make_engine(self.db)
        upgrade(self.engine)
        add_region(self.engine, self.region, n_channels_initial=4, max_channels=8)
        tick(self.engine, self.region)
        self.api: ApiServer | None = None
        self.controller, self.token = self.db, ""
        if over_http:
            self.api = ApiServer(self.engine, 0)
            self.api.serve()
            self.controller = self.api.url
            self.token = run_in_transaction(
                self.engine, lambda session: create_token(session, f"job:{self.region}")[0]
            )

    def run_batch(self, seq: int, kill_at: str | None = None) -> str:
        """Run batch ``seq`` in a child process; returns its stdout, asserting how it ended."""
        options = f"--driver-java-options '{self.java_options}' pyspark-shell"
        environment = {key: value for key, value in os.environ.items() if key != "REPART_KILL_AT"}
        environment |= {"PYSPARK_SUBMIT_ARGS": options, **({"REPART_KILL_AT": kill_at} if kill_at else {})}
        environment["REPART_TOKEN"] = self.token
        child = subprocess.run(
            [sys.executable, "-c", CHILD, self.controller, str(self.state), self.region, str(seq)],
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        expected = 0 if kill_at is None else -signal.SIGKILL
        assert child.returncode == expected, (
            self.region,
            seq,
            kill_at,
            child.returncode,
            child.stderr[-3000:],
        )
        if kill_at is not None:
            assert child.stdout.splitlines()[-1] == f"killed at {kill_at}"
        return child.stdout

    def trial(self, seq: int, kill_at: str, n_channels: int) -> None:
        """Scale to ``n_channels`` (a pending plan), run batch ``seq`` killed at ``kill_at``, run it
        again to exit 0, and check that everything counts every batch once."""
        plan_id = scale(self.engine, self.region, n_channels).plan_id
        self.run_batch(seq, kill_at)
        line = json.loads(self.run_batch(seq).splitlines()[-1])
        assert (line["seq"], line["N"]) == (seq, n_channels)
        # The killed run claimed the plan; the rerun finishes and reports it only if the kill came first.
        assert line["plan"] == (plan_id if kill_at.startswith("apply") else None)
        self.check_exactly_once(seq + 1)

    def check_exactly_once(self, batches: int) -> None:
        """State totals, snapshots, reports and plans after batches 0 … ``batches`` − 1."""
        stream = TradeStream(**STREAM)
        expected = dict.fromkeys(SUMS, 0)
        for seq in range(batches):
            for name, value in input_totals(stream.batch(seq)).items():
                expected[name] += value
        store = StateStore.open(self.state)
        assert totals(store.read()) == expected
        store.verify()
        assert store.last_batch is not None and store.last_batch.batch_id == batches - 1
        with Session(self.engine) as session:
            snapshots = session.execute(select(models.Snapshot.seq, models.Snapshot.batch)).all()
            reported = session.scalars(select(models.BatchReport.batch)).all()
            plans = session.execute(select(models.Plan.id, models.Plan.status)).all()
        assert sorted(snapshots) == [(seq, seq) for seq in range(batches)]
        assert sorted(reported) == list(range(batches))
        assert {status for _, status in plans} <= {"applied"}
        assert store.applied_plans == tuple(sorted(plan_id for plan_id, _ in plans))


@pytest.mark.slow
def test_a_batch_killed_at_any_step_and_run_again_counts_once(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive, first_options = class_data_archive(tmp_path_factory.getbasetemp().parent, tmp_path)
    options = f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1"
    lanes = [Lane(tmp_path, number, options, over_http=number == 1) for number in range(LANES)]
    lanes[0].java_options = first_options
    lanes[0].run_batch(0)  # batch 0 without a kill creates the store (and the archive, if missing)
    made = tmp_path / archive.name
    if made.exists():
        os.replace(made, archive)
    lanes[0].java_options = lanes[1].java_options

    def run_lane(lane_number: int) -> None:
        lane = lanes[lane_number]
        if lane_number:
            lane.run_batch(0)
        lane.check_exactly_once(1)
        for trial in range(lane_number, TRIALS, LANES):
            seq = trial // LANES + 1
            lane.trial(seq, KILL_POINTS[trial % len(KILL_POINTS)], CHANNELS[seq % len(CHANNELS)])

    try:
        with ThreadPoolExecutor(LANES) as pool:
            list(pool.map(run_lane, range(LANES)))
    finally:
        for lane in lanes:
            if lane.api is not None:
                lane.api.close()
            lane.engine.dispose()
