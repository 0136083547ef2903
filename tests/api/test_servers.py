"""Slow clients hold neither the health check nor the API back, and both listen on loopback by
default."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.controller.metrics import MAX_CONNECTIONS, REQUEST_DEADLINE, DaemonMetrics, Health, MetricsServer
from tests.api.conftest import call, new_token
from tests.factories import add_region

SLOW_CLIENTS = 50


@pytest.fixture
def metrics_server() -> Iterator[MetricsServer]:
    server = MetricsServer(0, DaemonMetrics())
    server.serve(lambda: Health(True, {}))
    yield server
    server.close()


def slow_clients(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each sent the start of a request and then nothing more."""
    held = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", port))
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        held.append(connection)
    return held


def test_health_and_an_api_call_answer_within_a_second_beside_50_slow_clients(
    engine: Engine, api: ApiServer, metrics_server: MetricsServer
) -> None:
    add_region(engine, "trades")
    token = new_token(engine, "read")
    held = slow_clients(metrics_server.port, SLOW_CLIENTS) + slow_clients(api.port, SLOW_CLIENTS)
    try:
        start = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_server.port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        health_seconds = time.monotonic() - start
        start = time.monotonic()
        status, body = call(api, "GET", "/v1/regions/trades/status", token)
        api_seconds = time.monotonic() - start
        assert (status, body["region"]) == (200, "trades")
        assert health_seconds < 1.0 and api_seconds < 1.0, (health_seconds, api_seconds)
    finally:
        for connection in held:
            connection.close()


def test_a_trickling_client_is_cut_off_at_the_deadline(metrics_server: MetricsServer) -> None:
    connection = socket.create_connection(("127.0.0.1", metrics_server.port))
    start = time.monotonic()
    try:
        connection.settimeout(REQUEST_DEADLINE + 5)
        while True:  # one byte a second: each read is quick, the whole request never ends
            try:
                connection.sendall(b"X")
            except OSError:
                break
            connection.settimeout(1.0)
            try:
                if connection.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        elapsed = time.monotonic() - start
    finally:
        connection.close()
    assert REQUEST_DEADLINE - 0.5 <= elapsed <= REQUEST_DEADLINE + 1.5


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_servers_listen_on_loopback_by_default(
    engine: Engine, api: ApiServer, metrics_server: MetricsServer
) -> None:
    assert api.url.startswith("http://127.0.0.1:")
    assert metrics_server._server.server_address[0] == "127.0.0.1"


def closed_within(connection: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``connection`` (None if it did not within ``seconds``)."""
    start = time.monotonic()
    connection.settimeout(seconds)
    try:
        while connection.recv(1024):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - start


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_api_closes_a_connection_whose_request_does_not_arrive_in_time(engine: Engine) -> None:
    server = ApiServer(engine, 0, request_deadline=1.0)
    server.serve()
    try:
        silent = socket.create_connection(("127.0.0.1", server.port))
        half = socket.create_connection(("127.0.0.1", server.port))
        half.sendall(b"GET /v1/regions HTTP/1.1\r\nHost: x\r\n")
        trickling = socket.create_connection(("127.0.0.1", server.port))
        start = time.monotonic()
        cut = None
        for byte in b"GET /v1/regions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 30:
            try:
                trickling.sendall(bytes([byte]))
            except OSError:
                cut = time.monotonic() - start
                break
            trickling.settimeout(0.2)
            try:
                if trickling.recv(1) == b"":
                    cut = time.monotonic() - start
                    break
            except TimeoutError:
                continue
        assert cut is not None and 0.8 <= cut <= 2.5, cut
        for connection in (silent, half):
            assert closed_within(connection, 2.0) is not None
            connection.close()
        trickling.close()
    finally:
        server.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_api_answers_503_beyond_its_connections(engine: Engine) -> None:
    add_region(engine, "trades")
    token = new_token(engine, "read")
    server = ApiServer(engine, 0, max_connections=3)
    server.serve()
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    try:
        time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.url}/v1/regions/trades/status", timeout=5)
        assert refused.value.code == 503  # uvicorn's own answer, before the app
    finally:
        for connection in held:
            connection.close()
    time.sleep(0.2)
    assert call(server, "GET", "/v1/regions/trades/status", token)[0] == 200
    server.close()


def test_the_health_server_serves_a_bounded_number_of_connections(metrics_server: MetricsServer) -> None:
    threads = threading.active_count()
    held = slow_clients(metrics_server.port, 3 * MAX_CONNECTIONS)
    try:
        time.sleep(0.5)
        assert threading.active_count() - threads <= 2 * MAX_CONNECTIONS
        refused = [connection for connection in held if closed_within(connection, 0.05) is not None]
        assert len(refused) >= 2 * MAX_CONNECTIONS - 5  # the ones beyond the cap, closed unanswered
    finally:
        for connection in held:
            connection.close()


def raw_answers(connection: socket.socket, count: int, seconds: float) -> list[bytes]:
    """The status lines of the first ``count`` answers on ``connection`` (fewer if the server closed
    it or ``seconds`` passed first)."""
    connection.settimeout(seconds)
    received = b""
    try:
        while received.count(b"HTTP/1.1 ") < count or not received.endswith(b"}"):
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    except TimeoutError:
        pass
    return re.findall(rb"HTTP/1\.1 \d{3} [A-Za-z ]*", received)


@pytest.fixture
def slow_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """The status call's work takes 0.4 s longer (on the server's worker thread)."""
    import repart.api.app

    original = repart.api.app.region_status

    def slowly(*args: object, **kwargs: object) -> object:
        time.sleep(0.4)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(repart.api.app, "region_status", slowly)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_deadline_spares_requests_that_arrived_whole_and_cuts_a_trickled_body(
    engine: Engine, slow_status: None
) -> None:
    """A request whose answer takes longer than the deadline is answered, and so are two pipelined
    requests that take longer together; a request whose body trickles is cut off at the deadline."""
    add_region(engine, "trades")
    token = new_token(engine, "read")
    request = f"GET /v1/regions/trades/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    server = ApiServer(engine, 0, request_deadline=0.3)
    server.serve()
    try:
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(request.encode())
        assert raw_answers(slow, 1, 5.0) == [b"HTTP/1.1 200 OK"]
        slow.close()
        pipelined = socket.create_connection(("127.0.0.1", server.port))
        pipelined.sendall(request.encode() * 2)
        assert raw_answers(pipelined, 2, 5.0) == [b"HTTP/1.1 200 OK"] * 2
        pipelined.close()
        trickling = socket.create_connection(("127.0.0.1", server.port))
        trickling.sendall(
            f"POST /v1/regions/trades/batches/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
        )
        assert closed_within(trickling, 3.0) is not None
        trickling.close()
    finally:
        server.close()
