"""``repart run``: the controller daemon."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from repart.cli.database import DbOption, JsonOption, open_database, print_json
from repart.cli.errors import reports_bad_input
from repart.cli.serve import TokenCacheOption, kept_seconds
from repart.controller.defaults import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_MAX_BACKOFF_SECONDS,
    DEFAULT_WORKERS,
)
from repart.controller.listen import LOOPBACK
from repart.errors import InvalidInput
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

if TYPE_CHECKING:
    from repart.api.server import ApiServer


@reports_bad_input
def run(
    interval: Annotated[
        float, typer.Option(help="Seconds between two ticks of a region.")
    ] = DEFAULT_INTERVAL_SECONDS,
    lease_ttl: Annotated[
        float, typer.Option(help="Seconds a region's lease lasts without renewal (must exceed --interval).")
    ] = DEFAULT_LEASE_TTL_SECONDS,
    holder: Annotated[
        str | None, typer.Option(help="Lease holder name (default: host:pid:random).", show_default=False)
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            help="Threads that tick regions; the database pool must hold workers + 2 connections "
            "(the default pool holds 15)."
        ),
    ] = DEFAULT_WORKERS,
    once: Annotated[bool, typer.Option("--once", help="Tick every region once and exit.")] = False,
    spool: Annotated[
        Path | None,
        typer.Option(
            help="Ingest the snapshot files waiting in this directory every interval, before ticking "
            "(they move to done/ or rejected/).",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve Prometheus metrics on http://HOST:PORT/metrics and a health check on /healthz "
            "(0: any free port, logged at start).",
            show_default=False,
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            help="Address the metrics server listens on (default: loopback only; 0.0.0.0: every interface)."
        ),
    ] = LOOPBACK,
    api_port: Annotated[
        int | None,
        typer.Option(
            help="Serve the HTTP API for jobs and tools on http://HOST:PORT/v1/... with bearer tokens "
            "(repart token create; 0: any free port, logged at start). Put TLS in a reverse proxy.",
            show_default=False,
        ),
    ] = None,
    api_host: Annotated[
        str, typer.Option(help="Address the HTTP API listens on (default: loopback only).")
    ] = LOOPBACK,
    max_snapshot_bytes: Annotated[
        int,
        typer.Option(
            help="Reject a spool file larger than this many bytes without reading it "
            f"(default: {MAX_SNAPSHOT_BYTES // 2**20} MiB).",
            show_default=False,
        ),
    ] = MAX_SNAPSHOT_BYTES,
    max_backoff: Annotated[
        float,
        typer.Option(
            help="The longest wait, in seconds, before a region whose ticks fail is ticked again (the wait "
            "doubles from --interval per failure up to this; `repart resume REGION` ends it)."
        ),
    ] = DEFAULT_MAX_BACKOFF_SECONDS,
    token_cache_seconds: TokenCacheOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tick every region on an interval, one daemon per region at a time (leases in the database).

    Logs one JSON object per line on stderr (also the libraries' warnings). SIGTERM or SIGINT stops it
    after the current ticks.
    """
    from repart.controller.daemon import Daemon, DaemonConfig, default_holder
    from repart.controller.daemon import run as run_daemon
    from repart.controller.logs import json_logging

    config = DaemonConfig(
        interval_seconds=interval,
        lease_ttl_seconds=lease_ttl,
        holder=holder or default_holder(),
        spool=spool,
        workers=workers,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        max_snapshot_bytes=max_snapshot_bytes,
        max_backoff_seconds=max_backoff,
    )
    for name, value in (("metrics_port", metrics_port), ("api_port", api_port)):
        if once and value is not None:
            raise InvalidInput(name, "cannot be combined with --once: servers run while the daemon runs")
    with json_logging(sys.stderr), open_database(db) as engine:
        if once:
            results = Daemon(engine, config).run_once()
            if as_json:
                print_json([None if r is None else {"region": r.region, "action": r.action} for r in results])
            return
        if api_port is None:
            run_daemon(engine, config)
            return
        from repart.api.server import ApiServer

        with open_database(db) as api_engine:
            server = ApiServer(
                api_engine,
                api_port,
                host=api_host,
                max_snapshot_bytes=max_snapshot_bytes,
                token_cache_seconds=kept_seconds(token_cache_seconds),
            )
            serve_api(server, lambda: run_daemon(engine, config))


def serve_api(server: ApiServer, run: Callable[[], None]) -> None:
    """Serve the HTTP API (``server``, on an engine of its own, so its calls never wait for the tick
    threads' connections) while ``run`` runs; the port is bound before ``run`` starts."""
    from repart.controller.logs import log_event

    try:
        server.serve()
        log_event("api", url=server.url, paths=["/v1/..."])
        run()
    finally:
        server.close()
