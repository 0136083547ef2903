"""The long-running controller: a sweep of every region each interval, ticks under leases.

``Daemon`` runs a sweep every interval on its own thread (never two at once; sweeps that fall due while one
still runs are coalesced into the next and counted). A sweep renews every lease this daemon holds and
takes every free or expired lease in one transaction (``repart.storage.leases.claim_leases``: five
statements however many regions), reads every region with its lease in one query (``region_leases``; a
region created later is found by the next sweep), and hands each region, at the
region's fixed phase within the interval (so that ticks do not all queue at its start), to a pool of
``workers`` tick threads, except a region another daemon holds a valid lease of (logged as ``skipped``) and
a region whose previous tick is still queued or running: that one is skipped and counted (``overruns``),
never queued twice, and logged once when it starts overrunning (one ``skipped`` line, not one per sweep
while the tick runs; the count keeps growing in ``overruns`` and in the metrics). A region whose lease
the sweep claimed is ticked under that lease's token; a region created after the claim first takes its
lease (``acquire_lease``). So two daemons on one database do not act on the same region at the same
time: the other daemon skips the region until the lease expires (its holder stopped renewing it), then
takes it over with a new fencing token. The tick presents the token with its write, so a
daemon that was paused past its lease (SIGSTOP, swap) cannot write when it resumes: its tick ends in a
``Conflict``, logged as ``conflict``, and the next sweep starts from the database's state again. With a
spool directory configured, an APScheduler job ingests the snapshot files waiting there on the same
interval (``repart.controller.spool``), and ``run_once`` ingests them before ticking. ``run`` stops on
SIGTERM or SIGINT: no new sweep, the queued ticks are dropped, the running ones finish, and the leases
are released.

A region whose tick fails (an error, not a ``Conflict``) backs off: its row counts the failed ticks in
a row and says when it is ticked again, ``min(max_backoff_seconds, interval · 2^(k-1))`` after the
k-th failed tick was due (``repart.controller.backoff``): the sweep that many intervals later ticks it,
and sweeps skip it until then, as ``run_once`` does (which records its failures too); ``repart status``
and ``repart explain`` show it. A successful tick, whoever runs it (``repart tick`` too), or ``repart
resume`` ends the backoff. After a successful
tick, a region whose settings set a plan retention (``plan_keep_versions``, ``plan_keep_days``) has the
moves of its old plans pruned (``repart.storage.retention``).

With ``metrics_port``, ``run`` first binds a ``repart.controller.metrics.MetricsServer`` (a port that
cannot be bound starts nothing: no sweep, no lease), and the daemon feeds its ``DaemonMetrics``: each
sweep reads every region's applied version and oldest unapplied plan in one more query
(``repart.controller.readings``), each tick records its action, duration and schedule lag, and a tick
that decided (any action but ``idle``, and a region's first tick) feeds the b of the region's newest
decision: its own when it recorded that decision (``DECISION_ACTIONS``), else read from the database.
``health`` is what ``/healthz`` answers: healthy while the sweep thread runs and a sweep read the
regions within the last two intervals.

The tick threads and the sweep each hold one database connection at a time, so the engine's
connection pool must hold ``workers + 2`` (the sweep, the spool job and the workers);
``Daemon`` refuses a smaller pool, and a database at another schema revision than the code's
(``repart.storage.check_revision``: InvalidInput naming ``db`` and both revisions).

Every tick, skip and lifecycle step is logged as one JSON object per line (structured logs,
``repart.controller.logs``).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from repart.controller.backoff import backoff_seconds
from repart.controller.defaults import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_MAX_BACKOFF_SECONDS,
    DEFAULT_WORKERS,
    MIN_IDLE_TRANSACTION_SECONDS,
)
from repart.controller.listen import LOOPBACK
from repart.controller.logs import log_event
from repart.controller.metrics import DaemonMetrics, Health, MetricsServer, check_metrics_port
from repart.controller.readings import decided_imbalance, region_readings
from repart.controller.settings import plan_retention
from repart.controller.spool import SpoolOutcome, check_max_bytes, ingest_spool
from repart.controller.tick import TickResult, tick
from repart.errors import Conflict, InvalidInput, NotFound
from repart.partitioning.documents import require_number
from repart.protocol.limits import MAX_SNAPSHOT_BYTES
from repart.protocol.spool import check_spool
from repart.storage import (
    Fence,
    acquire_lease,
    check_revision,
    list_regions,
    read_transaction,
    region_by_name,
    release_lease,
    run_in_transaction,
)
from repart.storage.backoff import record_failure
from repart.storage.engine import limit_idle_transactions
from repart.storage.leases import RegionLease, claim_leases, region_leases
from repart.storage.regions import region_settings
from repart.storage.retention import SETTINGS_RULE, prunable_plans, prune_plans
from repart.validation import LEASE_HOLDER, Interval, check

DECISION_ACTIONS = ("initialized", "unchanged", "activated")
"""The tick actions that record the region's newest decision (an ``initialized``, ``no-change`` or
``activated`` event): the b the metrics show is then the tick's own (``TickResult.b_before``)."""


def default_holder() -> str:
    """A lease holder name unique to this process: host, process id and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DaemonConfig:
    """How often to sweep, how long a lease lasts, who holds it, how many threads tick, the spool
    directory whose snapshot files are ingested every interval (None: no spool), and the port ``run``
    serves metrics on (None: none; 0: any free port) and its host (``metrics_host``: loopback unless
    given), the largest spool file ingested (``max_snapshot_bytes``; a larger one is rejected unread),
    and the longest wait before a region whose ticks fail is ticked again (``max_backoff_seconds``,
    ``repart.controller.backoff``). Every sweep discovers the regions created since the last one.
    InvalidInput naming the field for a bad value."""

    interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS
    holder: str = field(default_factory=default_holder)
    spool: Path | None = None
    workers: int = DEFAULT_WORKERS
    metrics_port: int | None = None
    max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES
    max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS
    metrics_host: str = LOOPBACK

    def __post_init__(self) -> None:
        require_number(self.interval_seconds, "interval", 0.01)
        require_number(self.max_backoff_seconds, "max_backoff", self.interval_seconds)
        require_number(self.lease_ttl_seconds, "lease_ttl", 0.01)
        check("workers", self.workers, Interval(int, 1, 256, "both"))
        if self.lease_ttl_seconds <= self.interval_seconds:
            raise InvalidInput(
                "lease_ttl",
                f"must exceed the interval ({self.interval_seconds:g} s) so that a live daemon renews its "
                f"leases in time, got {self.lease_ttl_seconds:g}",
            )
        check("holder", self.holder, LEASE_HOLDER)
        if self.spool is not None:
            check_spool(self.spool)
        if self.metrics_port is not None:
            check_metrics_port(self.metrics_port)
        check_max_bytes(self.max_snapshot_bytes, "max_snapshot_bytes")

    @property
    def idle_transaction_seconds(self) -> float:
        """How long PostgreSQL lets one of the daemon's transactions sit idle before it ends the session
        (``repart.storage.engine.limit_idle_transactions``): the lease's length, at least
        ``MIN_IDLE_TRANSACTION_SECONDS``. A daemon paused for longer than its lease has lost the right
        to its locks; the floor keeps a busy machine's scheduling stalls from ending healthy sessions."""
        return max(self.lease_ttl_seconds, MIN_IDLE_TRANSACTION_SECONDS)

    @property
    def connections(self) -> int:
        """Database connections the daemon may hold at once: the workers', the sweep's and the spool's."""
        return self.workers + 2


def pool_capacity(engine: Engine) -> int | None:
    """The most connections ``engine``'s pool opens at once; None when it has no limit."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return None  # SQLite :memory: and NullPool-style pools open connections on demand
    overflow = pool._max_overflow  # QueuePool exposes size() but not its overflow limit
    return None if overflow < 0 else pool.size() + overflow


class Daemon:
    """Sweeps every region on an interval and ticks it under a lease, feeding ``metrics`` if given; see
    the module docstring."""

    def __init__(
        self,
        engine: Engine,
        config: DaemonConfig,
        ticker: Callable[..., TickResult] = tick,
        metrics: DaemonMetrics | None = None,
    ):
        check_revision(engine)
        capacity = pool_capacity(engine)
        if capacity is not None and capacity < config.connections:
            raise InvalidInput(
                "workers",
                f"needs {config.connections} database connections (workers + 2), but the engine's pool "
                f"holds at most {capacity}; lower workers or enlarge the pool",
            )
        limit_idle_transactions(engine, config.idle_transaction_seconds)
        self.engine = engine
        self.config = config
        self.metrics = metrics
        self._tick = ticker
        self._scheduler = BackgroundScheduler(timezone=UTC)
        self._workers = ThreadPoolExecutor(config.workers, thread_name_prefix="repart-tick")
        self._held: set[str] = set()
        self._in_flight: set[str] = set()
        self._overrunning: set[str] = set()  # skipped since their running tick began (logged once)
        self._measured: set[str] = set()  # regions whose decided b the metrics have read
        self._last_sweep: float | None = None  # time.monotonic() when a sweep last read the regions
        self._lock = threading.Lock()
        # stop() takes this lock to set _stopping, so no sweep hands a tick to the stopped pool.
        self._dispatch = threading.Lock()
        self._stopping = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="repart-sweep", daemon=True)
        self.overruns = 0
        """Regions a sweep skipped because their previous tick was still queued or running."""
        self.missed_sweeps = 0
        """Sweeps that fell due while the previous one still ran (skipped: the next one covers them)."""

    def tick_region(self, region: str, token: int | None = None) -> TickResult | None:
        """Tick ``region`` under its lease: under ``token`` when the caller just claimed it, else after
        taking or renewing the lease; None when another holder has the lease. Conflict when the tick's
        write is refused (see the module doc)."""
        moment = datetime.now(UTC)
        if token is None:
            token = run_in_transaction(
                self.engine,
                lambda session: acquire_lease(
                    session, region, self.config.holder, self.config.lease_ttl_seconds, moment
                ),
            )
        if token is None:
            self._skipped(region, "lease held by another daemon")
            return None
        with self._lock:
            self._held.add(region)
        result = self._tick(self.engine, region, now=moment, fence=Fence(self.config.holder, token))
        log_event("tick", holder=self.config.holder, token=token, **asdict(result))
        return result

    def ingest_spool(self) -> list[SpoolOutcome]:
        """One pass over the spool directory, each file logged; nothing without a spool directory."""
        if self.config.spool is None:
            return []
        outcomes = ingest_spool(self.engine, self.config.spool, max_bytes=self.config.max_snapshot_bytes)
        for outcome in outcomes:
            log_event("snapshot", holder=self.config.holder, **outcome.to_json())
        return outcomes

    def run_once(self) -> list[TickResult | None]:
        """Ingest the spool, then one tick of every region, in name order, each followed by its plan
        retention (``repart run --once``). A region backing off is skipped until its retry time (None
        in the results, logged as ``skipped``), as a sweep skips it; a failed tick is recorded as a
        sweep records it (``_back_off``) and then raised."""
        self.ingest_spool()
        regions = read_transaction(
            self.engine, lambda session: [(row.name, row.retry_at) for row in list_regions(session)]
        )
        results: list[TickResult | None] = []
        for region, retry_at in regions:
            started = datetime.now(UTC)
            if retry_at is not None and retry_at > started:
                self._skipped(region, f"backing off after failed ticks until {retry_at.isoformat()}")
                results.append(None)
                continue
            try:
                result = self.tick_region(region)
            except Conflict:
                raise
            except Exception as error:
                self._back_off(region, error, started)
                raise
            if result is not None:
                self._prune(region)
            results.append(result)
        return results

    def sweep(self, due: float | None = None) -> int:
        """Claim this daemon's leases and the free ones, read every region's lease, and hand every region
        this daemon holds or may take to the tick threads (see the module docstring); returns how many
        it handed.

        With ``due`` (the ``time.monotonic()`` the sweep was due), each region is handed at ``due`` plus
        its ``phase``, so that the interval's ticks are spread over it instead of queueing at its start;
        without, all at once."""
        now, started = datetime.now(UTC), time.monotonic()
        holder, ttl = self.config.holder, self.config.lease_ttl_seconds
        claimed = run_in_transaction(self.engine, lambda session: claim_leases(session, holder, ttl, now))
        leases: list[RegionLease] = read_transaction(self.engine, region_leases)
        self._last_sweep = time.monotonic()
        self._read_regions()
        with self._lock:
            # A region deleted since the last sweep has no lease left to hold or release.
            self._held.intersection_update(lease.region for lease in leases)
            self._held.update(claimed)
        if due is not None:
            leases.sort(key=lambda lease: self.phase(lease.region))
        handed = 0
        for lease in leases:
            token = claimed.get(lease.region)
            if token is None and lease.held_by_another(holder, now):
                self._skipped(lease.region, "lease held by another daemon")
                continue
            if lease.backing_off(self._due_time(now, started, due, lease.region)):
                continue  # logged with its retry time when its tick failed
            if due is not None:
                self._stopping.wait(due + self.phase(lease.region) - time.monotonic())
            with self._dispatch:
                if self._stopping.is_set():
                    return handed
                if self._overran(lease.region):
                    continue
                due_at = time.monotonic() if due is None else due + self.phase(lease.region)
                self._workers.submit(self._guarded_tick, lease.region, token, due_at, lease.tick_failures)
                handed += 1
        return handed

    def _due_time(self, now: datetime, started: float, due: float | None, region: str) -> datetime:
        """When ``region`` is due in the sweep that started at ``now`` (``started`` on
        ``time.monotonic()``) and was due at ``due`` (None: an unpaced sweep, due at ``now``), on the
        wall clock, which a backoff's retry time is compared with. A hundredth of the interval is added:
        a retry time is counted from a due time (``_back_off``), and the two clocks' readings differ by
        microseconds."""
        if due is None:
            return now
        ahead = due + self.phase(region) - started
        return now + timedelta(seconds=ahead + self.config.interval_seconds / 100)

    @property
    def in_flight(self) -> int:
        """Regions whose tick is queued or running."""
        with self._lock:
            return len(self._in_flight)

    def health(self) -> Health:
        """Healthy while the sweep thread runs and a sweep read the regions within the last two
        intervals (what ``/healthz`` answers)."""
        interval = self.config.interval_seconds
        sweeping = self._sweeper.is_alive() and not self._stopping.is_set()
        last = self._last_sweep
        age = None if last is None else time.monotonic() - last
        recent = age is not None and age <= 2 * interval
        return Health(
            sweeping and recent,
            {
                "sweeping": sweeping,
                "last_sweep_seconds_ago": None if age is None else round(age, 3),
                "interval_seconds": interval,
                "ticks_in_flight": self.in_flight,
                "holder": self.config.holder,
            },
        )

    def phase(self, region: str) -> float:
        """A fixed offset within the interval at which a paced sweep hands ``region`` to the tick
        threads, so that regions do not all fall due at the same instant (and queue behind each other)."""
        return zlib.crc32(region.encode("utf-8")) / 2**32 * self.config.interval_seconds

    def start(self) -> None:
        """Start the sweep thread and schedule the spool job, both due at once and then every interval;
        returns at once."""
        if self.config.spool is not None:
            self._scheduler.add_job(
                self._guarded_spool,
                "interval",
                seconds=self.config.interval_seconds,
                id="spool",
                coalesce=True,
                max_instances=1,
                next_run_time=datetime.now(UTC),
            )
            self._scheduler.start()
        self._sweeper.start()
        log_event(
            "started",
            holder=self.config.holder,
            interval=self.config.interval_seconds,
            workers=self.config.workers,
        )

    def stop(self) -> None:
        """Stop sweeping, drop the queued ticks, wait for the running ones, and release the leases this
        daemon holds."""
        with self._dispatch:
            self._stopping.set()
        if self._sweeper.is_alive():
            self._sweeper.join()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self._workers.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            held = sorted(self._held)
        if held:
            run_in_transaction(self.engine, self._release_all(held))
        log_event("stopped", holder=self.config.holder, released=held)

    def _sweep_loop(self) -> None:
        """Paced sweeps every interval until stop(); a sweep that ends after the next one was due makes
        the next start at once, and the sweeps due meanwhile are counted in ``missed_sweeps`` (coalesced)."""
        interval = self.config.interval_seconds
        due = time.monotonic()
        while not self._stopping.is_set():
            try:
                self.sweep(due)
            except Exception as error:  # the daemon outlives a failed sweep (say, the database is down)
                log_event("error", sweep=True, holder=self.config.holder, error=repr(error))
                self._failed("sweep", error)
            due += interval
            late = time.monotonic() - due
            if late > 0:
                missed = math.floor(late / interval)
                self.missed_sweeps += missed
                if self.metrics is not None:
                    self.metrics.coalesced.inc(missed)
                due += missed * interval
            self._stopping.wait(due - time.monotonic())

    def _release_all(self, regions: list[str]) -> Callable[[Session], None]:
        def release(session: Session) -> None:
            for region in regions:
                try:
                    release_lease(session, region, self.config.holder)
                except NotFound:  # deleted since the last sweep: its lease went with it
                    continue

        return release

    def _skipped(self, region: str, reason: str) -> None:
        log_event("skipped", region=region, holder=self.config.holder, reason=reason)

    def _overran(self, region: str) -> bool:
        """True (counted, and logged the first time in a row) when ``region``'s previous tick is still
        queued or running; else marks it in flight and returns False."""
        with self._lock:
            running = region in self._in_flight
            first = running and region not in self._overrunning
            if running:
                self.overruns += 1
                self._overrunning.add(region)
            else:
                self._in_flight.add(region)
        if running and self.metrics is not None:
            self.metrics.overran(region)
        if first:
            self._skipped(region, "its previous tick is still running (counted, logged once until it ends)")
        return running

    def _read_regions(self) -> None:
        """Feed the metrics every region's database values (see the module docstring); a failed read is
        logged and counted, and the sweep goes on with the values of the previous one."""
        if self.metrics is None:
            return
        try:
            readings = read_transaction(self.engine, region_readings)
        except Exception as error:  # the metrics must not stop the ticks
            log_event("error", sweep=True, holder=self.config.holder, metrics=True, error=repr(error))
            self._failed("metrics", error)
            return
        self.metrics.read_regions(readings)

    def _failed(self, stage: str, error: Exception) -> None:
        if self.metrics is not None:
            self.metrics.failed(stage, "conflict" if isinstance(error, Conflict) else type(error).__name__)

    def _guarded_spool(self) -> None:
        """A scheduled spool pass: an error is logged and the next interval tries again."""
        try:
            self.ingest_spool()
        except Exception as error:  # the daemon outlives a failed pass (say, the database is down)
            log_event("error", spool=str(self.config.spool), holder=self.config.holder, error=repr(error))
            self._failed("spool", error)

    def _guarded_tick(self, region: str, token: int | None, due_at: float, failures: int = 0) -> None:
        """A tick on a worker thread, due at ``due_at`` (``time.monotonic()``), of a region with
        ``failures`` failed ticks in a row: a refused write is logged and the next sweep tries again; an
        error is logged and the region backs off (``_back_off``); a success ends a backoff and prunes
        the region's old plans when its settings ask for it (``_prune``). The region is free for the
        next sweep afterwards."""
        started = time.monotonic()
        due_time = datetime.now(UTC) - timedelta(seconds=started - due_at)
        try:
            result = self.tick_region(region, token)
            if result is not None:
                self._measure(result, time.monotonic() - started, started - due_at)
                if failures:  # the tick's own write ended the backoff (``repart.controller.tick``)
                    log_event("recovered", region=region, holder=self.config.holder, failures=failures)
                self._prune(region)
        except Conflict as error:  # a lost lease or a status changed since the read: nothing was written
            log_event("conflict", region=region, holder=self.config.holder, reason=str(error))
            self._failed("tick", error)
        except Exception as error:  # the daemon outlives one region's failure
            log_event("error", region=region, holder=self.config.holder, error=repr(error))
            self._failed("tick", error)
            self._back_off(region, error, due_time)
        finally:
            with self._lock:
                self._in_flight.discard(region)
                self._overrunning.discard(region)

    def _back_off(self, region: str, error: Exception, due_time: datetime) -> None:
        """Count a failed tick of ``region`` on its row and set when it is ticked again: after the k-th
        failure in a row, ``min(max_backoff, interval · 2^(k-1))`` after ``due_time``, when the failed
        tick was due (``repart.controller.backoff``), so that a wait of k intervals is the sweep k
        intervals later, however long the tick took. The record is not fenced: it is a retry time,
        never a decision, and the next success clears it."""

        def record(session: Session) -> tuple[int, datetime]:
            row = region_by_name(session, region)
            failures = row.tick_failures + 1
            wait = backoff_seconds(failures, self.config.interval_seconds, self.config.max_backoff_seconds)
            retry_at = due_time + timedelta(seconds=wait)
            record_failure(session, row.id, f"{type(error).__name__}: {error}", retry_at)
            return failures, retry_at

        try:
            failures, retry_at = run_in_transaction(self.engine, record)
        except Exception as failure:  # say, the database is down: the next sweep tries the region again
            log_event("error", region=region, holder=self.config.holder, backoff=True, error=repr(failure))
            self._failed("backoff", failure)
            return
        log_event(
            "backoff",
            region=region,
            holder=self.config.holder,
            failures=failures,
            retry_at=retry_at.isoformat(),
        )

    def _prune(self, region: str) -> None:
        """Prune the moves of ``region``'s old plans by its retention settings (``plan_keep_versions``,
        ``plan_keep_days``; ``repart.storage.retention``), keeping the applied version's plan. A read
        finds them first, so a region with nothing to prune costs no write transaction. A failure is
        logged and counted, never the tick's."""
        now = datetime.now(UTC)

        def find(session: Session) -> list[int]:
            retention = plan_retention(region_settings(session, region))
            if retention is None:
                return []
            return prunable_plans(session, region, retention, now)

        def prune(session: Session) -> list[int]:
            retention = plan_retention(region_settings(session, region))
            if retention is None:
                return []
            pruned = prune_plans(session, region, retention, now, strict=False, rule=SETTINGS_RULE)
            return [plan.summary["id"] for plan in pruned]

        try:
            if not read_transaction(self.engine, find):
                return
            pruned = run_in_transaction(self.engine, prune)
        except Exception as error:  # the plans stay as they were; the next tick tries again
            log_event("error", region=region, holder=self.config.holder, retention=True, error=repr(error))
            self._failed("retention", error)
            return
        log_event("pruned", region=region, holder=self.config.holder, plans=pruned)

    def _measure(self, result: TickResult, seconds: float, lag: float) -> None:
        """Feed a tick to the metrics, with the b its decision measured when it decided (see the module
        docstring); a failed read of b is logged and counted, never the tick's failure."""
        if self.metrics is None:
            return
        self.metrics.ticked(result, seconds, lag)
        region = result.region
        with self._lock:
            known = region in self._measured
        if result.action == "idle" and known:
            return
        try:
            if result.action in DECISION_ACTIONS:  # its event is the newest decision: its b is the tick's
                imbalance = result.b_before
            else:
                imbalance = read_transaction(self.engine, lambda session: decided_imbalance(session, region))
        except Exception as error:  # the metrics stay as they were; the next decision reads again
            log_event("error", region=region, holder=self.config.holder, metrics=True, error=repr(error))
            self._failed("metrics", error)
            return
        self.metrics.decided(region, imbalance)
        with self._lock:
            self._measured.add(region)


def run(engine: Engine, config: DaemonConfig, stop: threading.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set), then stop cleanly after the current ticks; with
    ``config.metrics_port``, serve metrics meanwhile. InvalidInput naming ``metrics_port`` when the port
    cannot be bound, before anything starts."""
    stop = stop or threading.Event()
    metrics: DaemonMetrics | None = None
    server: MetricsServer | None = None
    if config.metrics_port is not None:
        metrics = DaemonMetrics()
        server = MetricsServer(config.metrics_port, metrics, host=config.metrics_host)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log_event("stopping", holder=config.holder, signal=signal.Signals(signum).name)
        stop.set()

    try:
        daemon = Daemon(engine, config, metrics=metrics)
        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if server is not None:
                server.serve(daemon.health)
                log_event(
                    "metrics",
                    holder=config.holder,
                    host=config.metrics_host,
                    port=server.port,
                    paths=["/metrics", "/healthz"],
                )
            daemon.start()
            stop.wait()
        finally:
            daemon.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        if server is not None:
            server.close()
