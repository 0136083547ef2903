"""Prometheus metrics and a health check for ``repart run --metrics-port``.

``DaemonMetrics`` holds the daemon's metrics — its own ``CollectorRegistry`` (never prometheus_client's
global one, so that several daemons can run in one process, as the tests do) and a cache of per-region
values — and renders them; ``MetricsServer`` serves them over HTTP. The ``Daemon`` feeds them as it
works, and a scrape reads only what is cached in memory — never the database — so that it answers in
milliseconds however many regions there are (0.3 ms of CPU with 200 regions):

- after each sweep's region read, per region (``repart.controller.readings``, one query a sweep):
  ``repart_region_channels`` and ``repart_region_applied_version`` (N and number of the applied
  version) and ``repart_region_pending_plan_age_seconds`` (since the oldest plan not yet applied was
  created, computed at the scrape; 0 without one). They describe the database, so every daemon on it
  exports them for every region, whoever holds its lease. With them, ``repart_region_tick_failures``
  (failed ticks in a row) and ``repart_region_backoff_seconds`` (until the next tick of a region
  backing off, ``repart.controller.backoff``; 0 otherwise).
- after each tick of this daemon: ``repart_ticks_total{action}``, ``repart_activations_total{region}``
  (ticks that activated a new version and its plan; p^(0) counts as an ``initialized`` tick), and per
  region ``repart_region_tick_duration_seconds`` and ``repart_region_schedule_lag_seconds`` of its last
  tick (the tick's start minus the moment it was due: its sweep's due time plus the region's phase),
  and ``repart_region_imbalance`` (b of the applied function on the window its newest decision
  measured; absent before the region's first decision, or when that b was infinite).
- ``repart_overruns_total{region}``: sweeps that skipped the region because its previous tick still
  ran; ``repart_failures_total{stage, kind}``: a tick, sweep, spool pass or metrics read that failed,
  by the error's class (``conflict`` for a refused write); ``repart_sweeps_total`` and
  ``repart_sweeps_coalesced_total`` (sweeps that fell due while the previous one still ran).
  prometheus_client's ``process_*`` metrics are left out: reading them takes a dozen reads of
  ``/proc``, each giving up the GIL to the tick threads, and that doubled the time a scrape takes under
  load; a node or container exporter reports the process's CPU and memory.

The server (``http.server.ThreadingHTTPServer``: a thread per connection, one request per connection)
answers ``GET /metrics`` with the text exposition format and ``GET /healthz`` with 200 and a small JSON
object while the daemon's ``Health`` says it is healthy, 503 otherwise. A connection has
``REQUEST_DEADLINE`` seconds in all to send its request and read the answer, however slowly it
trickles bytes, and is then cut off; slow clients each hold only their own thread, so a liveness probe
is answered while they wait. At most ``MAX_CONNECTIONS`` connections are served at once (each takes
two threads); one beyond is closed unanswered. It listens on loopback unless ``host`` says otherwise
(``repart run --metrics-host``): a Prometheus server on another machine needs the host's address, or
a proxy. The port is bound when the server is made, before the daemon starts, so a port that cannot be
bound starts nothing: ``InvalidInput`` naming ``metrics_port``, as for a port outside [0, 65535] (0:
any free port, the one bound is ``MetricsServer.port``). Requests are not logged: the daemon's log is
JSON only, and a scrape every few seconds is not an event.

A scrape competes with the tick threads for the GIL: it needs it at each of its I/O steps (accept,
read, write), and tick threads that build functions hold it in turns of the interpreter's switch
interval. While it serves, the server lowers that interval (``sys.setswitchinterval``) from Python's
5 ms to ``SWITCH_INTERVAL``, and ``close`` restores it: with 5 ms, scrapes under
``benchmarks/daemon.py``'s load took up to 143 ms, with 1 ms up to 33 ms
(``benchmarks/metrics_endpoint.py``). The cost is more frequent switches between the tick threads,
microseconds each.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, get_args
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter
from prometheus_client.exposition import generate_latest

from repart.controller.listen import LOOPBACK, bound_socket, check_port
from repart.controller.logs import log_event
from repart.controller.readings import RegionReading
from repart.controller.tick import TickAction, TickResult
from repart.storage.tables import REGION_MODES

REQUEST_DEADLINE = 5.0
MAX_CONNECTIONS = 64
"""Connections served at once; one more is closed unanswered until a slot frees (at most
``REQUEST_DEADLINE`` seconds)."""
"""Seconds a connection has in all to send its request and read the answer."""
SWITCH_INTERVAL = 0.001
"""The interpreter's thread switch interval while the server serves (Python's default: 0.005 s)."""


def check_metrics_port(port: object) -> int:
    """``port`` if it is an integer in [0, 65535] (0: any free port); InvalidInput naming
    ``metrics_port`` otherwise."""
    return check_port("metrics_port", port)


@dataclass(frozen=True)
class Health:
    """Whether the daemon is healthy, and what ``/healthz`` shows about it (JSON values)."""

    healthy: bool
    detail: dict[str, Any]


@dataclass(frozen=True)
class _RegionValues:
    """What is cached of one region between scrapes (see the module docstring)."""

    reading: RegionReading | None = None
    imbalance: float | None = None
    tick_seconds: float | None = None
    lag_seconds: float | None = None
    activations: int = 0
    overruns: int = 0


_REGION_SERIES = (
    (
        "mode",
        "repart_region_mode",
        "gauge",
        "1 for the region's mode (auto, recommend or hold), 0 for the other two.",
    ),
    ("channels", "repart_region_channels", "gauge", "Channels of the region's applied version."),
    ("applied_version", "repart_region_applied_version", "gauge", "Number of the region's applied version."),
    (
        "pending_age",
        "repart_region_pending_plan_age_seconds",
        "gauge",
        "Seconds since the region's oldest plan not yet applied (pending or applying) was created; "
        "0 without one.",
    ),
    (
        "imbalance",
        "repart_region_imbalance",
        "gauge",
        "b of the applied function on the window the region's newest decision measured (1: even).",
    ),
    ("tick_seconds", "repart_region_tick_duration_seconds", "gauge", "Seconds the region's last tick took."),
    (
        "lag_seconds",
        "repart_region_schedule_lag_seconds",
        "gauge",
        "Seconds the region's last tick started after it was due.",
    ),
    (
        "activations",
        "repart_activations_total",
        "counter",
        "Ticks of this daemon that activated a new version of the region with its plan.",
    ),
    (
        "overruns",
        "repart_overruns_total",
        "counter",
        "Sweeps that skipped the region because its previous tick still ran.",
    ),
    (
        "tick_failures",
        "repart_region_tick_failures",
        "gauge",
        "The region's failed ticks in a row (0: its last tick succeeded or it was resumed).",
    ),
    (
        "backoff",
        "repart_region_backoff_seconds",
        "gauge",
        "Seconds until the daemon ticks the region again after failed ticks; 0 when not backing off.",
    ),
)
"""The per-region series: (key, name, type, help)."""


class DaemonMetrics:
    """The daemon's registry, the per-region values, and their text exposition (see the module
    docstring); thread-safe.

    The per-region series (10 per region: 2,000 lines with 200 regions) are not rendered by
    prometheus_client's ``generate_latest``, which validates and escapes each sample at every scrape
    (8 ms of CPU for them, up to 90 ms a scrape when the tick threads compete for the GIL): each
    region's lines are formatted when its values change, and a scrape joins them, formatting only the
    pending plans' ages (0.3 ms with 200 regions). The registry holds the few other series."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._regions: dict[str, _RegionValues] = {}
        self._lines: dict[str, dict[str, str]] = {}  # region -> series key -> its formatted line
        self.ticks = Counter(
            "repart_ticks", "Ticks of this daemon, by action.", ["action"], registry=self.registry
        )
        for action in get_args(TickAction):
            self.ticks.labels(action)
        self.failures = Counter(
            "repart_failures",
            "Failed ticks, sweeps, spool passes and metrics reads by error class (conflict: refused write).",
            ["stage", "kind"],
            registry=self.registry,
        )
        self.sweeps = Counter("repart_sweeps", "Sweeps that read the regions.", registry=self.registry)
        self.coalesced = Counter(
            "repart_sweeps_coalesced",
            "Sweeps that fell due while the previous one still ran (covered by the next one).",
            registry=self.registry,
        )

    def read_regions(self, readings: Iterable[RegionReading]) -> None:
        """A sweep's region read: the regions exported from now on, with their database values; a
        region no longer read (deleted) is no longer exported."""
        self.sweeps.inc()
        with self._lock:
            regions, lines = {}, {}
            for reading in readings:
                region = reading.region
                values = self._regions.get(region, _RegionValues())
                if values.reading == reading and region in self._lines:
                    regions[region], lines[region] = values, self._lines[region]
                else:
                    regions[region] = replace(values, reading=reading)
                    lines[region] = _lines(region, regions[region])
            self._regions, self._lines = regions, lines

    def ticked(self, result: TickResult, seconds: float, lag: float) -> None:
        """A tick of ``result.region`` that took ``seconds`` and started ``lag`` seconds after it was due."""
        self.ticks.labels(result.action).inc()
        with self._lock:
            values = self._regions.get(result.region, _RegionValues())
            activations = values.activations + (result.action == "activated")
            self._store(result.region, tick_seconds=seconds, lag_seconds=lag, activations=activations)

    def decided(self, region: str, imbalance: float | None) -> None:
        """The b that ``region``'s newest decision measured (None: none, or infinite)."""
        with self._lock:
            self._store(region, imbalance=imbalance)

    def failed(self, stage: str, kind: str) -> None:
        """One failure of ``stage`` (tick, sweep, spool, metrics) with error class ``kind``."""
        self.failures.labels(stage, kind).inc()

    def overran(self, region: str) -> None:
        """A sweep skipped ``region``: its previous tick still ran."""
        with self._lock:
            self._store(region, overruns=self._regions.get(region, _RegionValues()).overruns + 1)

    def _store(self, region: str, **changes: Any) -> None:
        """Change ``region``'s values and lines; the caller holds the lock."""
        values = replace(self._regions.get(region, _RegionValues()), **changes)
        self._regions[region] = values
        self._lines[region] = _lines(region, values)

    def render(self) -> bytes:
        """Every series in the text exposition format (what ``/metrics`` answers)."""
        return generate_latest(self.registry) + self._render_regions().encode()

    def _render_regions(self) -> str:
        now = datetime.now(UTC)
        with self._lock:
            rows = sorted(
                (region, self._lines[region], values.reading.pending_since, values.reading.retry_at)
                for region, values in self._regions.items()
                if values.reading is not None  # else ticked, then deleted before the next sweep read it
            )
        out = []
        for key, name, kind, documentation in _REGION_SERIES:
            out += [f"# HELP {name} {documentation}", f"# TYPE {name} {kind}"]
            if key == "pending_age":
                out += [
                    f"{name}{_label(region)}{0.0 if since is None else (now - since).total_seconds()!r}"
                    for region, _, since, _ in rows
                ]
            elif key == "backoff":
                out += [
                    f"{name}{_label(region)}{_seconds_until(retry, now)!r}" for region, _, _, retry in rows
                ]
            else:
                out += [lines[key] for _, lines, _, _ in rows if key in lines]
        return "\n".join(out) + "\n"


def _label(region: str) -> str:
    """``{region="…"} `` with the name escaped as the text format wants."""
    escaped = region.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{{region="{escaped}"}} '


def _seconds_until(moment: datetime | None, now: datetime) -> float:
    """Seconds from ``now`` to ``moment``; 0 when it is None or past."""
    return 0.0 if moment is None else max(0.0, (moment - now).total_seconds())


def _lines(region: str, values: _RegionValues) -> dict[str, str]:
    """The region's sample lines of every series but the pending plan's age and the backoff, by series
    key; a value not known yet has no line."""
    reading = values.reading
    numbers = {
        "channels": None if reading is None else reading.n_channels,
        "applied_version": None if reading is None else reading.applied_version,
        "imbalance": values.imbalance,
        "tick_seconds": values.tick_seconds,
        "lag_seconds": values.lag_seconds,
        "activations": values.activations,
        "overruns": values.overruns,
        "tick_failures": None if reading is None else reading.tick_failures,
    }
    label = _label(region)
    lines = {
        key: f"{name}{label}{float(number)!r}"  # finite when set: Go's ParseFloat reads Python's repr
        for key, name, _, _ in _REGION_SERIES
        if (number := numbers.get(key)) is not None
    }
    if reading is not None:
        lines["mode"] = "\n".join(
            f'repart_region_mode{label[:-2]},mode="{mode}"}} {float(mode == reading.mode)!r}'
            for mode in REGION_MODES
        )
    return lines


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops the connects beyond it, which retry after 1 s
    metrics: DaemonMetrics
    health: Callable[[], Health]
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own if fewer than ``MAX_CONNECTIONS`` are served;
        close it at once otherwise (each takes two threads: its handler and its deadline)."""
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that failed (a client gone mid-answer, a bug) is one JSON log line, not
        socketserver's traceback on stderr; the server goes on."""
        log_event("error", metrics=True, client=client_address[0], error=repr(sys.exc_info()[1]))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_DEADLINE

    def setup(self) -> None:
        """Start the connection's deadline: when it passes, the socket is shut down, which ends any
        read or write the handler is blocked in."""
        super().setup()
        self._deadline = threading.Timer(REQUEST_DEADLINE, self._cut_off)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut_off(self) -> None:
        with contextlib.suppress(OSError):  # already closed
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):  # the connection was cut off
            super().finish()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._reply(200, CONTENT_TYPE_LATEST, self.server.metrics.render())
        elif path == "/healthz":
            health = self.server.health()
            body = json.dumps({"healthy": health.healthy, **health.detail}).encode()
            self._reply(200 if health.healthy else 503, "application/json", body)
        else:
            self._reply(404, "text/plain; charset=utf-8", b"not found; the paths are /metrics and /healthz\n")

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (see the module docstring)."""


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``host``:``port`` (see the module docstring): bound when made,
    serving from ``serve`` until ``close``."""

    def __init__(self, port: int, metrics: DaemonMetrics, *, host: str = LOOPBACK) -> None:
        listening = bound_socket(host, port, field="metrics_port")
        self._server = _Server(listening.getsockname()[:2], _Handler, bind_and_activate=False)
        self._server.socket.close()
        self._server.socket = listening
        self._server.address_family = listening.family
        self._server.server_address = listening.getsockname()
        self._server.server_activate()
        self._server.metrics = metrics
        self._server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread: threading.Thread | None = None
        self._switch_interval = sys.getswitchinterval()

    @property
    def port(self) -> int:
        """The port bound (the one chosen when asked for port 0)."""
        return int(self._server.server_address[1])

    def serve(self, health: Callable[[], Health]) -> None:
        """Start answering requests on a daemon thread; ``health`` says what ``/healthz`` answers."""
        self._server.health = health
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL))
        self._thread = threading.Thread(target=self._server.serve_forever, name="repart-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering, release the port and restore the switch interval."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            sys.setswitchinterval(self._switch_interval)
        self._server.server_close()
