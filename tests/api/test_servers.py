"""Slow clients hold neither the health check nor the API back, and both listen on loopback by
default."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.controller.metrics import REQUEST_DEADLINE, DaemonMetrics, Health, MetricsServer
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
