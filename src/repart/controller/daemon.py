"""The long-running controller: one scheduled tick per region, guarded by a lease (DESIGN §8).

``Daemon`` runs an APScheduler job per region on a fixed interval (coalescing missed runs, never
dropping a late one, never two runs of one region at once, each region at its own phase within the
interval) and a discovery job that adds jobs for regions created later. With a
spool directory configured, a spool job ingests the snapshot files waiting there on the same interval
(``repart.controller.spool``), and ``run_once`` ingests them before ticking. Before each
tick it takes or renews the region's lease in the database (``repart.storage.acquire_lease``), so two
daemons on one database do not act on the same region at the same time: the other daemon skips the
region until the lease expires (its holder stopped renewing it), then takes it over with a new
fencing token. The tick presents the lease's token with its write (DESIGN §12.2), so a daemon that was
paused past its lease (SIGSTOP, swap) cannot write when it resumes: its tick ends in a ``Conflict``,
logged as ``conflict``, and the next interval starts from the database's state again. ``run`` stops on
SIGTERM or SIGINT after the ticks in progress finish, and releases its leases.

Every tick, skip and lifecycle step is logged as one JSON object per line (structured logs).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.controller.spool import SpoolOutcome, ingest_spool
from repart.controller.tick import TickResult, tick
from repart.errors import Conflict
from repart.partitioning.documents import require_number
from repart.storage import (
    Fence,
    acquire_lease,
    list_regions,
    read_transaction,
    release_lease,
    run_in_transaction,
)

LOG = logging.getLogger("repart.daemon")


def default_holder() -> str:
    """A lease holder name unique to this process: host, process id and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DaemonConfig:
    """How often to tick, how long a lease lasts, who holds it, how often to look for new regions,
    and the spool directory whose snapshot files are ingested every interval (None: no spool)."""

    interval_seconds: float = 10.0
    lease_ttl_seconds: float = 30.0
    discover_seconds: float = 30.0
    holder: str = field(default_factory=default_holder)
    spool: Path | None = None

    def __post_init__(self) -> None:
        require_number(self.interval_seconds, "interval", 0.01)
        require_number(self.discover_seconds, "discover", 0.01)
        require_number(self.lease_ttl_seconds, "lease_ttl", 0.01)
        if self.lease_ttl_seconds <= self.interval_seconds:
            raise ValueError(
                f"lease_ttl must exceed the interval ({self.interval_seconds:g} s) so that a live daemon "
                f"renews its leases in time, got {self.lease_ttl_seconds:g}"
            )
        if not 1 <= len(self.holder) <= 200:
            raise ValueError(f"holder must be 1-200 characters, got {self.holder!r}")
        if self.spool is not None and not self.spool.is_dir():
            raise ValueError(f"spool: {str(self.spool)!r} is not a directory")


def log_event(kind: str, **fields: Any) -> None:
    """One structured log line: ``{"event": kind, "at": ISO-8601 UTC, …fields}``."""
    LOG.info(json.dumps({"event": kind, "at": datetime.now(UTC).isoformat(), **fields}, default=str))


class Daemon:
    """Ticks every region on an interval under a lease; see the module docstring."""

    def __init__(self, engine: Engine, config: DaemonConfig, ticker: Callable[..., TickResult] = tick):
        self.engine = engine
        self.config = config
        self._tick = ticker
        self._scheduler = BackgroundScheduler(timezone=UTC)
        self._held: set[str] = set()
        self._lock = threading.Lock()
        # The discovery job is the only job that calls the scheduler. APScheduler's shutdown holds the
        # job-store lock while it waits for running jobs, so a discovery calling get_job then would
        # deadlock it: stop() first waits for a discovery in progress and makes later ones return.
        self._discovery = threading.Lock()
        self._stopping = threading.Event()

    def tick_region(self, region: str) -> TickResult | None:
        """Take or renew ``region``'s lease and tick it under the lease's fencing token; None when
        another holder has the lease. Conflict when the tick's write is refused (see the module doc)."""
        now = datetime.now(UTC)
        token = run_in_transaction(
            self.engine,
            lambda session: acquire_lease(
                session, region, self.config.holder, self.config.lease_ttl_seconds, now
            ),
        )
        if token is None:
            log_event(
                "skipped", region=region, holder=self.config.holder, reason="lease held by another daemon"
            )
            return None
        with self._lock:
            self._held.add(region)
        result = self._tick(self.engine, region, now=now, fence=Fence(self.config.holder, token))
        log_event("tick", holder=self.config.holder, token=token, **asdict(result))
        return result

    def ingest_spool(self) -> list[SpoolOutcome]:
        """One pass over the spool directory, each file logged; nothing without a spool directory."""
        if self.config.spool is None:
            return []
        outcomes = ingest_spool(self.engine, self.config.spool)
        for outcome in outcomes:
            log_event("snapshot", holder=self.config.holder, **outcome.to_json())
        return outcomes

    def run_once(self) -> list[TickResult | None]:
        """Ingest the spool, then one tick of every region, in name order (``repart run --once``)."""
        self.ingest_spool()
        return [self.tick_region(region) for region in self._regions()]

    def start(self) -> None:
        """Schedule the spool, every known region and the discovery of new ones; returns at once."""
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
        self._discover()
        self._scheduler.add_job(
            self._discover,
            "interval",
            seconds=self.config.discover_seconds,
            id="discover",
            coalesce=True,
            max_instances=1,
        )
        self._scheduler.start()
        log_event("started", holder=self.config.holder, interval=self.config.interval_seconds)

    def stop(self) -> None:
        """Stop scheduling, wait for the ticks in progress, and release the leases this daemon holds."""
        with self._discovery:
            self._stopping.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        with self._lock:
            held = sorted(self._held)
        if held:
            run_in_transaction(self.engine, self._release_all(held))
        log_event("stopped", holder=self.config.holder, released=held)

    def _release_all(self, regions: list[str]) -> Callable[[Session], None]:
        def release(session: Session) -> None:
            for region in regions:
                release_lease(session, region, self.config.holder)

        return release

    def _regions(self) -> list[str]:
        return read_transaction(self.engine, lambda session: [r.name for r in list_regions(session)])

    def _discover(self) -> None:
        with self._discovery:
            if not self._stopping.is_set():
                self._add_jobs()

    def _add_jobs(self) -> None:
        for region in self._regions():
            job_id = f"tick:{region}"
            if self._scheduler.get_job(job_id) is None:
                self._scheduler.add_job(
                    self._guarded_tick,
                    "interval",
                    args=[region],
                    seconds=self.config.interval_seconds,
                    id=job_id,
                    coalesce=True,
                    max_instances=1,
                    misfire_grace_time=None,
                    next_run_time=datetime.now(UTC) + timedelta(seconds=self.phase(region)),
                )

    def phase(self, region: str) -> float:
        """A fixed offset within the interval for the region's ticks, so that regions do not all fall due
        at the same instant (and queue behind each other) every interval."""
        return zlib.crc32(region.encode("utf-8")) / 2**32 * self.config.interval_seconds

    def _guarded_spool(self) -> None:
        """A scheduled spool pass: an error is logged and the next interval tries again."""
        try:
            self.ingest_spool()
        except Exception as error:  # the daemon outlives a failed pass (say, the database is down)
            log_event("error", spool=str(self.config.spool), holder=self.config.holder, error=repr(error))

    def _guarded_tick(self, region: str) -> None:
        """A scheduled tick: a refused write or an error is logged and the next interval tries again."""
        try:
            self.tick_region(region)
        except Conflict as error:  # a lost lease or a status changed since the read: nothing was written
            log_event("conflict", region=region, holder=self.config.holder, reason=str(error))
        except Exception as error:  # the daemon outlives one region's failure
            log_event("error", region=region, holder=self.config.holder, error=repr(error))


def run(engine: Engine, config: DaemonConfig, stop: threading.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set), then stop cleanly after the current ticks."""
    stop = stop or threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log_event("stopping", holder=config.holder, signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    daemon = Daemon(engine, config)
    try:
        daemon.start()
        stop.wait()
    finally:
        daemon.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
