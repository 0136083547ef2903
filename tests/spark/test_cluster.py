"""The example pipeline on a real Spark standalone cluster whose executors share nothing but an object
store: a master and two workers started from pyspark's own launcher on loopback, each worker with its
own work directory, and ``spark-submit examples/vwap.py`` against them with its state at the local S3
endpoint (moto's server).

The driver runs in the spark-submit process, the per-channel state updates in the workers' executors
(other JVMs and other Python workers). Only the driver's environment holds the endpoint and the
credentials (the workers are started without them), so this checks that everything shipped to
executors pickles, that the store handle carries its options to them, and that the store is written
from there, with no directory the executors share.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from repart.demo.vwap import totals
from repart.state.store import StateStore
from tests.factories import s3_bucket

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise AssertionError(f"{log.name}: process exited with {process.returncode}:\n{log.read_text()}")
        time.sleep(0.5)
    raise AssertionError(f"{log.name}: no {text!r} within {timeout} s:\n{log.read_text(errors='replace')}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_log = tmp_path / "master.log"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        processes.append(master)
        wait_for(master_log, "I have been elected leader", master)
        for number in (1, 2):
            worker_log = tmp_path / f"worker{number}.log"
            with worker_log.open("wb") as out:
                worker = subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                     "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                     "--work-dir", str(tmp_path / f"work{number}")],
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            processes.append(worker)
            wait_for(worker_log, "Successfully registered with master", worker)
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_two_batches_of_the_example_on_a_standalone_cluster(
    cluster: str, tmp_path: Path, s3_endpoint: str, s3_options: dict[str, str]
) -> None:
    state = f"s3://{s3_bucket(s3_endpoint)}/vwap"
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": s3_options["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": s3_options["aws_secret_access_key"],
        "AWS_ENDPOINT_URL": s3_endpoint,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    env.pop("REPART_SPARK_MASTER", None)
    submitted = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master", cluster,
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=4",
            str(ROOT / "examples" / "vwap.py"),
            "--db", f"sqlite:///{tmp_path / 'repart.db'}",
            "--state", state,
            "--batches", "2",
            "--channel-rate", "2000",
        ],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-5000:]
    lines = [json.loads(line) for line in submitted.stdout.splitlines() if line.startswith("{")]
    batches, summary = lines[:-1], lines[-1]
    assert [line["batch"] for line in batches] == [0, 1]
    assert summary["state_totals"] == summary["input_totals_this_run"]
    store = StateStore.open(state, s3_options)
    assert totals(store.read()) == summary["input_totals_this_run"]
    store.verify()
    # Both workers ran executors of the application; every listed data file is in the bucket.
    assert all(any((tmp_path / f"work{number}").glob("app-*")) for number in (1, 2))
    assert {entry.path for entry in store.all_files()} <= {
        info.path for info in store.objects.listing("data/")
    }
