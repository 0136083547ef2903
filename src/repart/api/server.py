"""``ApiServer``: the HTTP API (``repart.api.app``) served by uvicorn on a thread of its own.

The socket is bound when the server is made (``repart.controller.listen``: InvalidInput naming
``api_port`` or ``api_host``), on loopback unless another host is given: the API speaks plain HTTP,
and TLS belongs to a reverse proxy in front of it (docs/how-to/api.md). uvicorn's event loop (uvloop)
handles every connection, its requests parsed by httptools, so a client that sends slowly holds none of
the others back; a connection idle between requests is closed after ``KEEP_ALIVE_SECONDS``, one that
has not sent a whole request within ``REQUEST_DEADLINE`` seconds is closed too, and at most
``MAX_CONNECTIONS`` are served at once.
Requests are not logged; uvicorn's errors are, as JSON lines (``UVICORN_LOGGING``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any

import uvicorn
from sqlalchemy import Engine
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from repart.api.app import DEFAULT_WORKERS, create_app
from repart.api.grants import DEFAULT_SECONDS
from repart.controller.listen import LOOPBACK, bound_socket
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

KEEP_ALIVE_SECONDS = 5
REQUEST_DEADLINE = 60.0
"""Seconds a connection has to send a whole request (headers and body) from its start or from the end
of its previous answer: a 128 MiB snapshot needs about 2.2 MB/s."""
MAX_CONNECTIONS = 1000
"""Connections served at once; a request on one more is answered 503 (which clients retry)."""
UVICORN_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "repart.controller.logs.JsonFormatter"}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    },
    "loggers": {"uvicorn.error": {"handlers": ["stderr"], "level": "WARNING", "propagate": False}},
}
"""uvicorn's own log (its errors, with an unexpected error's traceback) as JSON lines on stderr, as the
daemon logs (``repart.controller.logs``)."""
START_TIMEOUT = 10.0


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 connection (parsed by httptools), closed when a request has not arrived whole
    within ``deadline`` seconds: a client that trickles its headers or its body holds a connection that
    long at most. The deadline runs from the connection's start and from the end of each answer; it
    spares a connection while a request that arrived whole is still unanswered."""

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._start_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def _start_deadline(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(self._deadline, self._deadline_passed)

    def _deadline_passed(self) -> None:
        """Close the connection unless a request arrived whole and is still being answered (the newest
        one, or one queued behind it: a pipelined request is queued once its headers are in, and only
        after the request before it arrived whole)."""
        cycle = self.cycle
        answering = cycle is not None and not cycle.more_body and not cycle.response_complete
        if not answering and not self.pipeline and not self.transport.is_closing():
            self.transport.close()


class ApiServer:
    """The API on ``host``:``port`` (0: any free port; the one bound is ``port``), serving from
    ``serve`` until ``close``: at most ``max_connections`` connections at once, each closed when a
    request has not arrived whole within ``request_deadline`` seconds (``DeadlineProtocol``); a token
    the database granted is kept ``token_cache_seconds`` (``repart.api.grants``)."""

    def __init__(
        self,
        engine: Engine,
        port: int,
        *,
        host: str = LOOPBACK,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
        workers: int = DEFAULT_WORKERS,
        token_cache_seconds: float = DEFAULT_SECONDS,
        request_deadline: float = REQUEST_DEADLINE,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        app = create_app(
            engine,
            max_snapshot_bytes=max_snapshot_bytes,
            workers=workers,
            token_cache_seconds=token_cache_seconds,
        )
        self._socket = bound_socket(host, port, field="api_port")
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            log_config=UVICORN_LOGGING,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            limit_concurrency=max_connections,
            http=functools.partial(DeadlineProtocol, deadline=request_deadline),  # type: ignore[arg-type]
            loop="uvloop",
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port bound."""
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        """The API's base URL (``http://host:port``)."""
        host = self._socket.getsockname()[0]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def serve(self) -> None:
        """Start answering on a daemon thread; returns once the server accepts connections."""
        self._socket.listen(2048)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="repart-api", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop answering (requests under way finish) and release the port."""
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join()
        self._socket.close()
