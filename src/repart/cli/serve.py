"""``repart serve``: the HTTP API in a process of its own, beside a daemon (``repart run``) that ticks.

The API and the daemon share nothing but the database, so the API may run on its own (one or several
processes behind a proxy), where ``repart run --api-port`` would share one interpreter, and its GIL,
with the ticks.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Annotated

import typer

from repart.cli.database import DbOption, JsonOption, open_database, print_json
from repart.cli.errors import reports_bad_input
from repart.controller.listen import LOOPBACK
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

TokenCacheOption = Annotated[
    float | None,
    typer.Option(
        help="Seconds a server keeps a token the database granted before reading it again: a revoked "
        "token is refused at most this long after its revocation (default: 10; 0: read it at every call; "
        "at most 3600).",
        show_default=False,
    ),
]


def kept_seconds(seconds: float | None) -> float:
    """``--token-cache-seconds``, or the server's default (``repart.api.grants``) when not given."""
    from repart.api.grants import DEFAULT_SECONDS

    return DEFAULT_SECONDS if seconds is None else seconds


@reports_bad_input
def serve(
    api_port: Annotated[
        int,
        typer.Option(
            help="Port of the HTTP API (0: any free port, logged at start). Put TLS in a reverse proxy."
        ),
    ],
    api_host: Annotated[
        str, typer.Option(help="Address the HTTP API listens on (default: loopback only).")
    ] = LOOPBACK,
    max_snapshot_bytes: Annotated[
        int,
        typer.Option(
            help="Refuse a snapshot body larger than this many bytes "
            f"(default: {MAX_SNAPSHOT_BYTES // 2**20} MiB).",
            show_default=False,
        ),
    ] = MAX_SNAPSHOT_BYTES,
    token_cache_seconds: TokenCacheOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Serve the HTTP API for jobs and tools until SIGTERM or SIGINT (logs JSON lines on stderr). Once
    it answers, prints its URL on stdout (``{"url": ...}`` with ``--json``)."""
    from repart.api.server import ApiServer
    from repart.controller.logs import json_logging, log_event

    stop = threading.Event()
    with json_logging(sys.stderr), open_database(db) as engine:
        server = ApiServer(
            engine,
            api_port,
            host=api_host,
            max_snapshot_bytes=max_snapshot_bytes,
            token_cache_seconds=kept_seconds(token_cache_seconds),
        )
        previous = {
            sig: signal.signal(sig, lambda signum, frame: stop.set())
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            server.serve()
            log_event("api", url=server.url, paths=["/v1/..."])
            if as_json:
                print_json({"url": server.url})
            else:
                typer.echo(f"serving the API at {server.url} (SIGTERM or Ctrl-C stops it)")
            sys.stdout.flush()
            stop.wait()
            log_event("stopped", api=True)
        finally:
            server.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
