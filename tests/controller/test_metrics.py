"""The daemon's metrics, health check and JSON log (issue 10 §4): scraped over HTTP and checked against
the database and against a recording ticker."""

from __future__ import annotations

import http.client
import io
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select

from repart.controller.daemon import Daemon, DaemonConfig, run
from repart.controller.logs import json_logging, log_event
from repart.controller.metrics import DaemonMetrics, Health, MetricsServer
from repart.controller.tick import TickResult, tick
from repart.errors import Conflict, InvalidInput
from repart.storage import models, run_in_transaction, set_mode
from repart.storage.jsontext import load_object
from tests.cli.helpers import repart
from tests.factories import REGION, add_region, add_zipf_region, ingest, row_counts, zipf_snapshot

QUIET = "quiet"


class Ticker:
    """Ticks for real and records each result and how long ``tick`` took; while ``gate`` is clear, a
    tick waits before starting. ``done`` counts finished ticks."""

    def __init__(self) -> None:
        self.results: list[TickResult] = []
        self.seconds: dict[str, float] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Semaphore(0)
        self.done = threading.Semaphore(0)

    def __call__(self, engine: Engine, region: str, **kwargs: Any) -> TickResult:
        self.started.release()
        assert self.gate.wait(30), "the test never opened the gate"
        began = time.monotonic()
        try:
            result = tick(engine, region, **kwargs)
            self.results.append(result)
            self.seconds[region] = time.monotonic() - began
            return result
        finally:
            self.done.release()

    def wait(self, ticks: int) -> None:
        for _ in range(ticks):
            assert self.done.acquire(timeout=60), "a tick did not finish"


def settle(daemon: Daemon) -> None:
    """Wait until no tick of ``daemon`` is queued or running (a tick is done in the ticker a moment
    before the daemon frees its region)."""
    deadline = time.monotonic() + 60
    while daemon.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert daemon.in_flight == 0


@pytest.fixture
def metrics() -> Iterator[tuple[DaemonMetrics, MetricsServer]]:
    """Metrics served on a free port, closed afterwards."""
    registry = DaemonMetrics()
    server = MetricsServer(0, registry)
    yield registry, server
    server.close()


def get(server: MetricsServer, path: str) -> tuple[int, str]:
    """The status and body of ``GET path`` (503 included)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(server: MetricsServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as {(name, sorted labels): value}."""
    status, body = get(server, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def region_rows(engine: Engine) -> dict[str, tuple[int | None, int | None, datetime | None]]:
    """Per region, from the database: applied version, its N, and the oldest pending plan's creation."""

    def read(session: Any) -> dict[str, tuple[int | None, int | None, datetime | None]]:
        rows = {}
        for region in session.scalars(select(models.Region)):
            n = session.scalar(
                select(models.Version.n_channels).where(
                    models.Version.region_id == region.id, models.Version.number == region.applied_version
                )
            )
            pending = [
                plan.created_at
                for plan in session.scalars(select(models.Plan).where(models.Plan.region_id == region.id))
                if plan.status == "pending"
            ]
            rows[region.name] = (region.applied_version, n, min(pending, default=None))
        return rows

    return run_in_transaction(engine, read)


def events(engine: Engine, region: str) -> list[models.Event]:
    def read(session: Any) -> list[models.Event]:
        region_id = select(models.Region.id).where(models.Region.name == region).scalar_subquery()
        query = select(models.Event).where(models.Event.region_id == region_id).order_by(models.Event.id)
        return list(session.scalars(query))

    return run_in_transaction(engine, read)


def test_scraped_values_match_the_database_and_the_ticks(
    engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer]
) -> None:
    add_zipf_region(engine, settings={"rebalance_threshold": 1e-6})  # every decision rebuilds
    add_region(engine, QUIET)
    ingest(engine, zipf_snapshot(1, n_channels=2, demand=2))
    registry, server = metrics
    ticker = Ticker()
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=ticker, metrics=registry)
    server.serve(daemon.health)
    try:
        for _ in range(3):  # the third sweep reads the state the second one's ticks left
            assert daemon.sweep() == 2
            ticker.wait(2)
            settle(daemon)
    finally:
        daemon.stop()
    before = datetime.now(UTC)
    samples = scrape(server)
    after = datetime.now(UTC)

    database = region_rows(engine)
    assert database[REGION][2] is not None, "the decision on window 1 left no pending plan"
    for region, (applied, n, pending_since) in database.items():
        labels = (("region", region),)
        assert samples[("repart_region_applied_version", labels)] == applied
        assert samples[("repart_region_channels", labels)] == n
        age = samples[("repart_region_pending_plan_age_seconds", labels)]
        if pending_since is None:
            assert age == 0
        else:
            assert (before - pending_since).total_seconds() <= age <= (after - pending_since).total_seconds()
        assert samples[("repart_region_tick_duration_seconds", labels)] >= ticker.seconds[region]
        assert 0 <= samples[("repart_region_schedule_lag_seconds", labels)] < 30
        activated = sum(event.kind == "activated" for event in events(engine, region))
        assert samples[("repart_activations_total", labels)] == activated

    decision = [e for e in events(engine, REGION) if e.kind in ("activated", "no-change")][-1]
    assert (
        samples[("repart_region_imbalance", (("region", REGION),))]
        == load_object(decision.data_json)["b_before"]
    )
    assert ("repart_region_imbalance", (("region", QUIET),)) not in samples  # never decided

    actions = Counter(result.action for result in ticker.results)
    assert sum(actions.values()) == 6
    for action in ("initialized", "idle", "unchanged", "activated", "blocked"):
        assert samples[("repart_ticks_total", (("action", action),))] == actions[action]
    no_change = sum(event.kind == "no-change" for region in database for event in events(engine, region))
    assert samples[("repart_ticks_total", (("action", "unchanged"),))] == no_change
    assert samples[("repart_sweeps_total", ())] == 3
    assert not [key for key in samples if key[0] == "repart_failures_total"]
    assert [samples[("repart_overruns_total", (("region", region),))] for region in database] == [0, 0]


def test_each_region_exports_its_mode(engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer]) -> None:
    add_region(engine, REGION)
    add_region(engine, QUIET)
    run_in_transaction(engine, lambda session: set_mode(session, QUIET, "hold", "incident"))
    registry, server = metrics
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=Ticker(), metrics=registry)
    server.serve(daemon.health)
    try:
        daemon.sweep()
    finally:
        daemon.stop()
    samples = scrape(server)
    for region, current in ((REGION, "auto"), (QUIET, "hold")):
        exported = {
            mode: samples[("repart_region_mode", (("mode", mode), ("region", region)))]
            for mode in ("auto", "recommend", "hold")
        }
        assert exported == {mode: float(mode == current) for mode in exported}


def test_healthz_is_200_while_sweeping_and_503_when_the_sweeps_stall_or_stop(
    engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_region(engine, QUIET)
    registry, server = metrics
    daemon = Daemon(engine, DaemonConfig(0.2, 2, holder="me"), metrics=registry)
    server.serve(daemon.health)

    def until(status: int) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            code, body = get(server, "/healthz")
            if code == status or time.monotonic() > deadline:
                assert code == status, body
                return dict(json.loads(body))
            time.sleep(0.05)

    assert get(server, "/healthz")[0] == 503  # not started: no sweep yet
    release = threading.Event()
    try:
        daemon.start()
        healthy = until(200)
        assert healthy["healthy"] and healthy["sweeping"]
        assert healthy["last_sweep_seconds_ago"] <= 0.4
        sweep = daemon.sweep

        def stalled(due: float | None = None) -> int:
            release.wait(30)
            return sweep(due)

        monkeypatch.setattr(daemon, "sweep", stalled)
        stalled_body = until(503)
        # Stale means older than two intervals (0.4 s); the body rounds the age to milliseconds,
        # so an age just past 0.4 s reads 0.4.
        assert stalled_body["sweeping"] and stalled_body["last_sweep_seconds_ago"] >= 0.4
        release.set()
        until(200)
    finally:
        release.set()
        daemon.stop()
    stopped = until(503)
    assert not stopped["sweeping"]
    assert get(server, "/nothing")[0] == 404


def test_an_overrunning_region_is_counted_every_sweep_and_logged_once_per_overrun(
    engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer]
) -> None:
    add_region(engine, QUIET)
    registry, server = metrics
    ticker = Ticker()
    ticker.gate.clear()
    lines: list[dict[str, Any]] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(record.getMessage()))

    handler = Lines()
    log = logging.getLogger("repart.daemon")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=ticker, metrics=registry)
    server.serve(daemon.health)
    try:
        assert daemon.sweep() == 1
        assert ticker.started.acquire(timeout=30)
        assert [daemon.sweep() for _ in range(3)] == [0, 0, 0]  # the tick still runs
        ticker.gate.set()
        ticker.wait(1)
        settle(daemon)
        ticker.gate.clear()
        assert daemon.sweep() == 1  # a second overrun
        assert ticker.started.acquire(timeout=30)
        assert daemon.sweep() == 0
        ticker.gate.set()
        ticker.wait(1)
    finally:
        ticker.gate.set()
        daemon.stop()
        log.removeHandler(handler)
    skipped = [line for line in lines if line["event"] == "skipped"]
    assert [line["region"] for line in skipped] == [QUIET, QUIET]
    assert daemon.overruns == 4
    assert scrape(server)[("repart_overruns_total", (("region", QUIET),))] == 4


def test_a_failed_metrics_read_is_counted_and_the_regions_are_still_ticked(
    engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_region(engine, QUIET)
    registry, server = metrics
    ticker = Ticker()
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=ticker, metrics=registry)
    server.serve(daemon.health)

    def broken(session: Any) -> None:
        raise RuntimeError("the metrics query failed")

    monkeypatch.setattr("repart.controller.daemon.region_readings", broken)
    try:
        assert daemon.sweep() == 1
        ticker.wait(1)
        settle(daemon)
    finally:
        daemon.stop()
    assert [result.action for result in ticker.results] == ["initialized"]
    samples = scrape(server)
    assert samples[("repart_failures_total", (("kind", "RuntimeError"), ("stage", "metrics")))] == 1
    assert samples[("repart_ticks_total", (("action", "initialized"),))] == 1


def test_failed_ticks_are_counted_by_kind(
    engine: Engine, metrics: tuple[DaemonMetrics, MetricsServer]
) -> None:
    """A refused write counts as kind ``conflict``, any other error by its type; the daemon goes on."""
    add_region(engine, "refused")
    add_region(engine, "broken")
    registry, server = metrics

    def failing(engine: Engine, region: str, **kwargs: Any) -> TickResult:
        if region == "refused":
            raise Conflict("the lease was lost")
        raise RuntimeError("the build failed")

    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=failing, metrics=registry)
    server.serve(daemon.health)
    try:
        assert daemon.sweep() == 2
        settle(daemon)
    finally:
        daemon.stop()
    failures = {
        labels: value for (name, labels), value in scrape(server).items() if name == "repart_failures_total"
    }
    assert failures == {
        (("kind", "conflict"), ("stage", "tick")): 1,
        (("kind", "RuntimeError"), ("stage", "tick")): 1,
    }


@pytest.mark.parametrize("port", [-1, 65536, 70000, 1.5, "9100", True])
def test_a_port_out_of_range_names_the_field(port: Any) -> None:
    with pytest.raises(InvalidInput) as raised:
        DaemonConfig(1, 5, metrics_port=port)
    assert raised.value.field == "metrics_port"
    assert "[0, 65535]" in str(raised.value)
    with pytest.raises(InvalidInput) as raised:
        MetricsServer(port, DaemonMetrics())
    assert raised.value.field == "metrics_port"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket listens on (on every interface, as the metrics server would)."""
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def test_a_port_in_use_is_refused_before_anything_starts(engine: Engine, busy_port: int) -> None:
    add_region(engine, QUIET)
    before = row_counts(engine)
    stop = threading.Event()
    stop.set()  # were the daemon to start, it would stop at once, having ticked
    with pytest.raises(InvalidInput) as raised:
        run(engine, DaemonConfig(1, 5, holder="me", metrics_port=busy_port), stop)
    assert raised.value.field == "metrics_port"
    assert f"{busy_port} is in use" in str(raised.value)
    assert row_counts(engine) == before
    assert before["leases"] == 0 and before["versions"] == 0


def test_repart_run_names_its_metrics_port_option(db_url: str, busy_port: int) -> None:
    out_of_range = repart(db_url, "run", "--metrics-port", "70000")
    assert out_of_range.exit_code == 2
    assert out_of_range.stderr.startswith("error: --metrics-port must be an integer in [0, 65535]")
    before = row_counts(db_url)
    in_use = repart(db_url, "run", "--metrics-port", str(busy_port))
    assert in_use.exit_code == 2
    assert in_use.stderr.startswith(f"error: --metrics-port must be a free port on this host; {busy_port}")
    assert row_counts(db_url) == before
    once = repart(db_url, "run", "--once", "--metrics-port", "0")
    assert once.exit_code == 2
    assert once.stderr.startswith("error: --metrics-port cannot be combined with --once")


def test_the_log_is_json_only_also_for_apscheduler_and_python_warnings() -> None:
    stream = io.StringIO()
    with json_logging(stream):
        log_event("tick", region="alpha", action="idle")
        logging.getLogger("apscheduler.executors.default").warning(
            "Run time of job %r was missed by %s", "spool", "0:00:01"
        )
        logging.getLogger("apscheduler.scheduler").info("Scheduler started")  # below WARNING: not shown
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library's warning", UserWarning, stacklevel=1)
    logging.getLogger("apscheduler.scheduler").warning("after: not ours to format")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 3
    own, scheduler, warned = lines
    assert own == {"event": "tick", "at": own["at"], "region": "alpha", "action": "idle"}
    assert {k: v for k, v in scheduler.items() if k != "at"} == {
        "event": "log",
        "level": "warning",
        "logger": "apscheduler.executors.default",
        "message": "Run time of job 'spool' was missed by 0:00:01",
    }
    assert datetime.fromisoformat(scheduler["at"]).tzinfo is not None
    assert warned["logger"] == "py.warnings" and "a library's warning" in warned["message"]


def test_a_failed_request_is_one_json_log_line(metrics: tuple[DaemonMetrics, MetricsServer]) -> None:
    _, server = metrics

    def broken() -> Health:
        raise RuntimeError("health check bug")

    server.serve(broken)
    stream = io.StringIO()
    with json_logging(stream), pytest.raises(http.client.RemoteDisconnected):
        get(server, "/healthz")
    (line,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert line["event"] == "error" and line["metrics"] is True
    assert "health check bug" in line["error"]
    assert get(server, "/metrics")[0] == 200  # the server goes on
