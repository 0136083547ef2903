"""``ApiServer``: the HTTP API (``repart.api.app``) served by uvicorn on a thread of its own.

The socket is bound when the server is made (``repart.controller.listen``: InvalidInput naming
``api_port`` or ``api_host``), on loopback unless another host is given: the API speaks plain HTTP,
and TLS belongs to a reverse proxy in front of it (docs/api.md). uvicorn's event loop handles every
connection, so a client that sends slowly holds none of the others back; a connection idle between
requests is closed after ``KEEP_ALIVE_SECONDS``. Requests are not logged; uvicorn's errors are, as JSON
lines (``UVICORN_LOGGING``).
"""

from __future__ import annotations

import threading
import time

import uvicorn
from sqlalchemy import Engine

from repart.api.app import DEFAULT_WORKERS, create_app
from repart.controller.listen import LOOPBACK, bound_socket
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

KEEP_ALIVE_SECONDS = 5
UVICORN_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "repart.controller.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn.error": {"handlers": ["stderr"], "level": "WARNING", "propagate": False}},
}
"""uvicorn's own log (its errors, with an unexpected error's traceback) as JSON lines on stderr, as the
daemon logs (``repart.controller.logs``)."""
START_TIMEOUT = 10.0


class ApiServer:
    """The API on ``host``:``port`` (0: any free port; the one bound is ``port``), serving from
    ``serve`` until ``close``."""

    def __init__(
        self,
        engine: Engine,
        port: int,
        *,
        host: str = LOOPBACK,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self._socket = bound_socket(host, port, field="api_port")
        app = create_app(engine, max_snapshot_bytes=max_snapshot_bytes, workers=workers)
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            log_config=UVICORN_LOGGING,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
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
