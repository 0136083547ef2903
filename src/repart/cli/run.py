"""``repart run``: the controller daemon."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from repart.cli.database import DbOption, JsonOption, open_database, print_json
from repart.cli.errors import reports_bad_input
from repart.controller.defaults import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_MAX_BACKOFF_SECONDS,
    DEFAULT_WORKERS,
)
from repart.errors import InvalidInput
from repart.protocol.limits import MAX_SNAPSHOT_BYTES


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
        max_snapshot_bytes=max_snapshot_bytes,
        max_backoff_seconds=max_backoff,
    )
    if once and metrics_port is not None:
        raise InvalidInput(
            "metrics_port", "cannot be combined with --once: metrics are served while the daemon runs"
        )
    with json_logging(sys.stderr), open_database(db) as engine:
        if once:
            results = Daemon(engine, config).run_once()
            if as_json:
                print_json([None if r is None else {"region": r.region, "action": r.action} for r in results])
            return
        run_daemon(engine, config)
