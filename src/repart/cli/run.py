"""``repart run``: the controller daemon (DESIGN §8)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from repart.cli.database import DbOption, JsonOption, open_database, print_json
from repart.cli.errors import reports_bad_input
from repart.controller.daemon import DEFAULT_WORKERS, LOG, Daemon, DaemonConfig, default_holder
from repart.controller.daemon import run as run_daemon


@reports_bad_input
def run(
    interval: Annotated[float, typer.Option(help="Seconds between two ticks of a region.")] = 10.0,
    lease_ttl: Annotated[
        float, typer.Option(help="Seconds a region's lease lasts without renewal (must exceed --interval).")
    ] = 30.0,
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
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tick every region on an interval, one daemon per region at a time (leases in the database).

    Logs one JSON object per line on stderr. SIGTERM or SIGINT stops it after the current ticks.
    """
    config = DaemonConfig(
        interval_seconds=interval,
        lease_ttl_seconds=lease_ttl,
        holder=holder or default_holder(),
        spool=spool,
        workers=workers,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    try:
        with open_database(db) as engine:
            if once:
                results = Daemon(engine, config).run_once()
                if as_json:
                    print_json(
                        [None if r is None else {"region": r.region, "action": r.action} for r in results]
                    )
                return
            run_daemon(engine, config)
    finally:
        LOG.removeHandler(handler)
