"""The daemon under load: 200 regions every 10 s on SQLite, 1,000 on PostgreSQL.

Setup (not timed): a fresh SQLite database with ``--regions`` regions (str keys, fixed policy on
N = 4 channels, algorithm ``redist``, 2^10 slots, x = 3 counters, rebalance threshold 10^-6 so that
every decision rebuilds), each initialized with p^(0) by one tick (regions of a controller that has been
running), then two rounds of windows at the feed's rate (below). With ``--cold-start`` the regions are
fresh and every one has two windows: a start with every region to initialize and decide on, which a
2-core machine needs several intervals to catch up on (reported, not a target). A window is a lossy counter
(ε = 10^-3) over 5,000 tuples of a Zipf(1) stream over 500 string keys, with its slot counts; a pool
of 16 distinct streams is reused across regions and windows.

``--backend postgresql`` runs the same against a throwaway PostgreSQL 15 server started for the run
(``initdb`` and ``pg_ctl`` from /usr/lib/postgresql/15/bin as the ``postgres`` user, in a temporary
directory, on a free loopback port, as tests/conftest.py does).

Timed run: one ``Daemon`` (interval ``--interval``, lease TTL 3 × interval, ``--workers`` tick threads) runs
for ``--duration`` seconds; its sweep k is due at ``k · interval`` after the start and hands each region to
the tick threads at ``k · interval`` plus the region's phase. A
feeder process ingests new windows half an interval after the ticks are due: in each round, to every
``--feed-every``-th region (in turn), so that a region gets a new window every ``--feed-every`` intervals; a
tick with a new window decides on it, the others are idle (the status check alone). The
feeder has a process of its own, as the jobs that submit windows have. The
daemon's ticker is wrapped to record each tick's region, start and end; the daemon counts the sweeps it
coalesced (``missed_sweeps``: due while the previous one still ran) and the regions a sweep skipped because
their previous tick was still queued or running (``overruns``).

Report: ticks per region against duration / interval; how many regions ticked in each interval (a
startup backlog shows as intervals with fewer); the lag of each tick behind its scheduled start (a
region's k-th tick, counting from 0, is due at ``k · interval`` plus its phase: a skipped interval shows as
a lag of more than an interval); tick durations; the load average before and after the run (the machine is
shared); and integrity checks on the database: every region's versions are 1..k without gaps or duplicates,
every version after the first has exactly one plan and one ``activated`` event, and no region was ticked
concurrently with itself.

Windows: every region's decisions considered increasing window seqs, each once (no window decided on
twice, no stale decision after a newer one), and the last one considered is the newest ingested
before the region's last tick.

    .venv/bin/python benchmarks/daemon.py [--regions 200] [--interval 10] [--duration 120] [--db-dir /tmp]
    .venv/bin/python benchmarks/daemon.py --backend postgresql --regions 1000 --feed-every 10 [--workers 4]
    .venv/bin/python benchmarks/daemon.py --backend postgresql --regions 1000 --feed-every 10 --cold-start
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.defaults import DEFAULT_WORKERS
from repart.controller.service import create_region
from repart.controller.tick import TickResult, tick
from repart.partitioning import LossyCounter
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.protocol.counter_items import CounterItems
from repart.protocol.snapshot import Snapshot
from repart.storage import (
    RegionConfig,
    ingest_snapshot,
    make_engine,
    models,
    run_in_transaction,
    upgrade,
)
from repart.storage.jsontext import load_object

N_CHANNELS = 4
SLOT_BITS = 10
DOMAIN = 500
TUPLES = 5_000
EPSILON = 1e-3
STREAMS = 16
PRELOADED = 2
START = datetime(2026, 1, 1, tzinfo=UTC)
END_GRACE = 1.0  # seconds before the end whose due ticks the stop may cut off


def stream_template(seed: int) -> Snapshot:
    """A window's counter and slot counts for Zipf stream ``seed``; each ingest gives it its region and
    window (``Feeder.ingest_round``)."""
    weights = 1.0 / np.arange(1, DOMAIN + 1)
    rng = np.random.default_rng(seed)
    keys = [f"key-{k}" for k in rng.choice(DOMAIN, size=TUPLES, p=weights / weights.sum())]
    counter = LossyCounter(EPSILON, key_type="str")
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    slots, slot_counts = np.unique(slots_of_hashes(hash_keys(keys, "str"), SLOT_BITS), return_counts=True)
    return Snapshot(
        region=f"stream-{seed}",
        seq=0,
        window_start=START,
        window_end=START + timedelta(minutes=1),
        tuples=TUPLES,
        distinct_estimate=len(set(keys)),
        epsilon=EPSILON,
        key_type="str",
        items=CounterItems(tuple(map(str, entries)), counts, deltas),
        slot_bits=SLOT_BITS,
        slots=tuple(zip(slots.tolist(), slot_counts.tolist(), strict=True)),
    )


PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*args: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)


@contextmanager
def database(backend: str, directory: Path) -> Iterator[str]:
    """The URL of a fresh database: an SQLite file in ``directory``, or a database on a throwaway
    PostgreSQL 15 server (without fsync, as the tests run it) that is stopped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'daemon.db'}"
        return
    root = Path(tempfile.mkdtemp(prefix="repart-bench-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    shutil.chown(root, "postgres")
    shutil.chown(sockets, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    _as_postgres(str(PG_BIN / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(data))
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
    _as_postgres(
        str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"
    )
    try:
        _as_postgres(str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "repart")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/repart"
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


class Feeder:
    """Ingests window ``seq`` of every ``feed_every``-th region (in turn: region i in the rounds where
    ``(i + seq) % feed_every == 0``); windows of one region cycle through the stream pool."""

    def __init__(self, engine: Engine, regions: list[str], templates: list[Snapshot], feed_every: int = 1):
        self.engine = engine
        self.regions = regions
        self.templates = templates
        self.feed_every = feed_every
        self.round_seconds: list[float] = []
        self.newest: dict[str, list[tuple[float, int]]] = defaultdict(list)  # (ingested at, seq)

    def ingest_round(self, seq: int, every_region: bool = False) -> None:
        started = time.perf_counter()
        for index, region in enumerate(self.regions):
            if not every_region and (index + seq) % self.feed_every:
                continue
            snapshot = replace(
                self.templates[(index + seq) % len(self.templates)],
                region=region,
                seq=seq,
                window_start=START + timedelta(minutes=seq),
                window_end=START + timedelta(minutes=seq + 1),
            )
            run_in_transaction(self.engine, lambda session, s=snapshot: ingest_snapshot(session, s))
            self.newest[region].append((time.monotonic(), seq))
        self.round_seconds.append(time.perf_counter() - started)

    def run(self, first_seq: int, origin: float, interval: float, stop: Any) -> None:
        """Round k at ``origin + (k + 0.5) · interval`` (monotonic clock) until ``stop`` is set."""
        k = 0
        while not stop.wait(max(0.0, origin + (k + 0.5) * interval - time.monotonic())):
            self.ingest_round(first_seq + k)
            k += 1


def feed_windows(
    url: str,
    regions: list[str],
    feed_every: int,
    first_seq: int,
    origin: float,
    interval: float,
    stop: Any,
    out: Any,
) -> None:
    """The feeder's process: jobs submit their windows from processes of their own, so the feeder's
    ingest does not share the daemon's interpreter. Sends back what it ingested and when
    (CLOCK_MONOTONIC is one clock for every process on the machine)."""
    engine = make_engine(url)
    feeder = Feeder(engine, regions, [stream_template(seed) for seed in range(STREAMS)], feed_every)
    feeder.run(first_seq, origin, interval, stop)
    engine.dispose()
    out.put((dict(feeder.newest), feeder.round_seconds))


def setup(engine: Engine, regions: list[str], feeder: Feeder, cold_start: bool) -> None:
    upgrade(engine)
    config = RegionConfig(
        key_type="str",
        n_channels_initial=N_CHANNELS,
        algorithm="redist",
        slot_bits=SLOT_BITS,
        settings={"rebalance_threshold": 1e-6, "counters": 3},
    )

    def create_all(session: Any) -> None:
        for name in regions:
            create_region(session, name, config)

    run_in_transaction(engine, create_all)
    if not cold_start:  # regions a running controller has already initialized
        for name in regions:
            tick(engine, name)
    for seq in range(1, PRELOADED + 1):
        feeder.ingest_round(seq, every_region=cold_start)


class Recorder:
    """The daemon's ticker: runs ``tick``, records (region, start, end, action) on the monotonic clock
    and counts failed ticks by SQLite error name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float, str]] = []
        self.failures: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, engine: Engine, region: str, **kwargs: Any) -> TickResult:
        started = time.monotonic()
        try:
            result = tick(engine, region, **kwargs)
        except Exception as error:  # the daemon logs it; here its SQLite error name is counted
            with self._lock:
                self.failures[getattr(getattr(error, "orig", None), "sqlite_errorname", repr(error))] += 1
            raise
        ended = time.monotonic()
        with self._lock:
            self.spans.append((region, started, ended, result.action))
        return result


class LogCounter(logging.Handler):
    """Counts the daemon's structured log lines by event kind (tick, error, skipped, …)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.kinds: Counter[str] = Counter()
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = json.loads(record.getMessage())
        self.kinds[line["event"]] += 1
        if line["event"] == "error" and len(self.errors) < 5:
            self.errors.append(f"{line['region']}: {line['error']}")


def integrity(engine: Engine, regions: list[str], recorder: Recorder, feeder: Feeder) -> dict[str, list[str]]:
    """Problems found per check (an empty list: the check passes)."""

    def read(session: Any) -> tuple[list[Any], list[Any], list[Any], list[Any], dict[int, str]]:
        names = {row.id: row.name for row in session.execute(select(models.Region.id, models.Region.name))}
        versions = session.execute(select(models.Version.region_id, models.Version.number)).all()
        plans = session.execute(select(models.Plan.region_id, models.Plan.to_version)).all()
        events = session.execute(
            select(models.Event.region_id, models.Event.data_json).where(models.Event.kind == "activated")
        ).all()
        decisions = session.execute(
            select(models.Event.region_id, models.Event.data_json)
            .where(models.Event.kind.in_(("activated", "no-change")))
            .order_by(models.Event.id)
        ).all()
        return versions, plans, events, decisions, names

    versions, plans, events, decisions, names = run_in_transaction(engine, read)
    numbers: dict[str, list[int]] = defaultdict(list)
    for region_id, number in versions:
        numbers[names[region_id]].append(number)
    plan_count = Counter((names[r], v) for r, v in plans)
    event_count = Counter((names[r], load_object(d).get("activated_version")) for r, d in events)
    problems: dict[str, list[str]] = {"versions": [], "plans+events": [], "concurrency": [], "windows": []}
    considered: dict[str, list[int]] = defaultdict(list)
    for region_id, data in decisions:
        considered[names[region_id]].append(load_object(data)["considered_seq"])
    last_start = {region: started for region, started, _, _ in sorted(recorder.spans, key=lambda s: s[1])}
    for region in regions:
        seqs = considered[region]
        if seqs != sorted(set(seqs)):
            problems["windows"].append(f"{region}: windows decided on {seqs}")
        due = [seq for at, seq in feeder.newest[region] if at < last_start.get(region, -math.inf)]
        if due and (not seqs or seqs[-1] != max(due)):
            problems["windows"].append(f"{region}: last decision on {seqs[-1:]}, newest window {max(due)}")
    for region in regions:
        found = sorted(numbers[region])
        if found != list(range(1, len(found) + 1)):
            problems["versions"].append(f"{region}: versions {found}")
        for number in found[1:]:
            if plan_count[(region, number)] != 1 or event_count[(region, number)] != 1:
                problems["plans+events"].append(
                    f"{region} v{number}: {plan_count[(region, number)]} plans, "
                    f"{event_count[(region, number)]} activated events"
                )
    extra = (set(plan_count) | set(event_count)) - {(r, n) for r in regions for n in sorted(numbers[r])[1:]}
    problems["plans+events"] += [f"{r} v{n}: plan or event without a version" for r, n in sorted(extra)]
    by_region: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for region, started, ended, _ in recorder.spans:
        by_region[region].append((started, ended))
    for region, spans in by_region.items():
        overlaps = sum(later[0] < earlier[1] for earlier, later in pairwise(sorted(spans)))
        if overlaps:
            problems["concurrency"].append(f"{region}: {overlaps} overlapping ticks")
    return problems


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--regions", type=int, default=200)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--feed-every", type=int, default=1, help="intervals between two windows of a region")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="the daemon's tick threads")
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="preload windows for every region (a restart with every region pending), not at the feed's rate",
    )
    args = parser.parse_args()
    regions = [f"region-{i:04d}" for i in range(args.regions)]
    templates = [stream_template(seed) for seed in range(STREAMS)]
    log_counter = LogCounter()
    daemon_log = logging.getLogger("repart.daemon")
    daemon_log.setLevel(logging.INFO)
    daemon_log.addHandler(log_counter)
    daemon_log.propagate = False

    with (
        tempfile.TemporaryDirectory(dir=args.db_dir) as directory,
        database(args.backend, Path(directory)) as url,
    ):
        engine = make_engine(url)
        feeder = Feeder(engine, regions, templates, args.feed_every)
        setup_started = time.monotonic()
        setup(engine, regions, feeder, args.cold_start)
        setup_seconds = time.monotonic() - setup_started
        setup_rounds = len(feeder.round_seconds)
        recorder = Recorder()
        config = DaemonConfig(
            interval_seconds=args.interval, lease_ttl_seconds=3 * args.interval, workers=args.workers
        )
        daemon = Daemon(engine, config, ticker=recorder)
        spawn = multiprocessing.get_context("spawn")
        stop, received = spawn.Event(), spawn.Queue()
        load_before = os.getloadavg()
        origin = time.monotonic()
        daemon.start()
        process = spawn.Process(
            target=feed_windows,
            args=(url, regions, args.feed_every, PRELOADED + 1, origin, args.interval, stop, received),
        )
        process.start()
        time.sleep(max(0.0, origin + args.duration - time.monotonic()))
        stop.set()
        daemon.stop()
        newest, rounds = received.get()
        process.join()
        for region, ingested in newest.items():
            feeder.newest[region].extend(ingested)
        feeder.round_seconds.extend(rounds)
        wall = time.monotonic() - origin
        load_after = os.getloadavg()
        problems = integrity(engine, regions, recorder, feeder)
        engine.dispose()

    starts: dict[str, list[float]] = defaultdict(list)
    for region, started, _, _ in sorted(recorder.spans, key=lambda span: span[1]):
        starts[region].append(started)
    lags = [
        started - origin - k * args.interval - daemon.phase(region)
        for region, region_starts in starts.items()
        for k, started in enumerate(region_starts)
    ]
    counts = [len(starts.get(region, [])) for region in regions]
    # A region's ticks fall due at its phase, then every interval; those due in the last second may be
    # cut off by the stop and are not expected.
    due = [
        math.floor((args.duration - END_GRACE - daemon.phase(region)) / args.interval) + 1
        for region in regions
    ]
    # Interval k of a region: [k · interval, (k + 1) · interval) after the start plus its phase.
    slots = max(due)
    ticked_in: list[set[str]] = [set() for _ in range(slots)]
    for region, region_starts in starts.items():
        for started in region_starts:
            k = math.floor((started - origin - daemon.phase(region)) / args.interval)
            if 0 <= k < slots:
                ticked_in[k].add(region)
    coverage = [len(ticked) for ticked in ticked_in]
    full = [k for k in range(slots) if coverage[k] == len(regions) or k >= min(due)]
    steady = next((k for k in range(slots) if all(j in full for j in range(k, slots))), slots)
    short = sum(count < expected_count for count, expected_count in zip(counts, due, strict=True))
    durations = [ended - started for _, started, ended, _ in recorder.spans]
    actions = Counter(action for *_, action in recorder.spans)
    feed = feeder.round_seconds[setup_rounds:]

    print(
        f"{args.backend}: {args.regions} regions, interval {args.interval:g} s, a new window per region "
        f"every {args.feed_every} interval(s), duration {args.duration:g} s (ran {wall:.1f} s; setup "
        f"{setup_seconds:.1f} s), {args.workers} tick threads; ticks: {sum(counts)} "
        f"({dict(sorted(actions.items()))})"
    )
    print(
        "load average (1/5/15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f} ({} cores)".format(
            *load_before, *load_after, os.cpu_count()
        )
    )
    print(
        f"ticks per region: min {min(counts)} / mean {np.mean(counts):.2f} / max {max(counts)}, "
        f"expected {min(due)}-{max(due)} (by phase); regions short of it: {short}; sweeps coalesced: "
        f"{daemon.missed_sweeps}; ticks skipped as still running: {daemon.overruns}"
    )
    print(
        f"regions ticked in interval k (by phase): {coverage}; every region in every interval from "
        f"interval {steady} on"
    )
    print(
        f"start lag s: max {max(lags, default=math.nan):.3f}, p99 {percentile(lags, 99):.3f}, "
        f"p50 {percentile(lags, 50):.3f}"
    )
    print(
        f"tick duration s: mean {np.mean(durations):.3f}, p99 {percentile(durations, 99):.3f}, "
        f"max {max(durations):.3f}; tick busy time / wall time: {sum(durations) / wall:.2f}"
    )
    print(
        f"feeder: {len(feed)} rounds of {args.regions // args.feed_every} windows, "
        f"mean {np.mean(feed) if feed else math.nan:.3f} s, max {max(feed, default=math.nan):.3f} s"
    )
    print(f"daemon log lines: {dict(sorted(log_counter.kinds.items()))}")
    print(
        f"failed ticks (after run_in_transaction's retries): {dict(recorder.failures)}; "
        "the other errors are lease transactions"
    )
    for error in log_counter.errors:
        print(f"  error: {error}")
    on_schedule = (
        short == 0
        and not daemon.missed_sweeps
        and not daemon.overruns
        and max(lags, default=math.inf) < args.interval
    )
    if args.cold_start:  # a backlog to catch up on, reported above; the schedule is not a target here
        print(f"INFO  every region ticked on schedule (every interval, lag < interval): {on_schedule}")
    else:
        verdict = "PASS" if on_schedule else "FAIL"
        print(f"{verdict}  every region ticked on schedule (every interval, lag < interval)")
    for check, label in (
        ("versions", "versions 1..k without gaps or duplicates"),
        ("plans+events", "one plan and one activated event per version after the first"),
        ("concurrency", "no region ticked concurrently with itself"),
        ("windows", "every window decided on once, in order, up to the newest before the last tick"),
    ):
        print(f"{'FAIL' if problems[check] else 'PASS'}  {label}")
        for problem in problems[check][:5]:
            print(f"  {problem}")


if __name__ == "__main__":
    main()
