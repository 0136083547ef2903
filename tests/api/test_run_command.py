"""``repart run --api-port`` serves the API beside the daemon, binds before anything starts, and
``HttpControllerClient`` retries a call until the API answers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from repart.api.server import ApiServer
from repart.errors import Unavailable
from repart.protocol.http_client import HttpControllerClient
from tests.api.conftest import new_token
from tests.cli.helpers import repart
from tests.factories import add_region, row_counts


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket listens on (on loopback, as the API would)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_repart_run_serves_the_api_until_sigterm(engine: Engine, db_url: str) -> None:
    add_region(engine, "trades")
    token = new_token(engine, "job:trades")
    command = [str(Path(sys.executable).with_name("repart")), "run", "--db", db_url, "--interval", "0.5"]
    process = subprocess.Popen(
        [*command, "--lease-ttl", "3", "--api-port", "0"], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    url = None
    deadline = time.monotonic() + 30
    while url is None and time.monotonic() < deadline:
        line = process.stderr.readline()
        if '"event": "api"' in line:
            url = json.loads(line)["url"]
    assert url is not None and url.startswith("http://127.0.0.1:")
    client = HttpControllerClient(url, token)
    deadline = time.monotonic() + 30
    while True:  # the daemon's first tick makes version 1
        try:
            assert client.applied_function("trades").version == 1
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=30)
    assert process.returncode == 0, rest


def test_an_api_port_that_cannot_be_bound_starts_nothing(engine: Engine, db_url: str, busy_port: int) -> None:
    add_region(engine, "trades")
    before = row_counts(engine)
    in_use = repart(db_url, "run", "--api-port", str(busy_port))
    assert in_use.exit_code == 2
    assert in_use.stderr.startswith(f"error: --api-port must be a free port on this host; {busy_port}")
    assert repart(db_url, "run", "--once", "--api-port", "0").exit_code == 2
    assert repart(db_url, "run", "--api-port", "0", "--api-host", "no.such.host.invalid").exit_code == 2
    assert row_counts(engine) == before


def test_the_client_retries_until_the_api_answers(engine: Engine) -> None:
    add_region(engine, "trades")
    token = new_token(engine, "job:trades")
    port = free_port()
    client = HttpControllerClient(f"http://127.0.0.1:{port}", token, attempts=6, backoff=0.2)
    with pytest.raises(Unavailable):
        HttpControllerClient(f"http://127.0.0.1:{port}", token, attempts=2, backoff=0.01).region_merge(
            "trades"
        )
    servers: list[ApiServer] = []

    def start_later() -> None:
        time.sleep(0.5)
        server = ApiServer(engine, port)
        server.serve()
        servers.append(server)

    starter = threading.Thread(target=start_later)
    starter.start()
    try:
        assert client.region_merge("trades") is None
    finally:
        starter.join()
        for server in servers:
            server.close()


def test_repart_serve_serves_the_api_until_sigterm(engine: Engine, db_url: str) -> None:
    add_region(engine, "trades")
    token = new_token(engine, "read")
    command = [str(Path(sys.executable).with_name("repart")), "serve", "--db", db_url, "--api-port", "0"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        url = next(json.loads(line)["url"] for line in process.stderr if '"event": "api"' in line)
        request = urllib.request.Request(f"{url}/v1/regions", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert [row["region"] for row in json.loads(answer.read())] == ["trades"]
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=30)
        assert process.returncode == 0, rest
    finally:
        if process.poll() is None:
            process.kill()


def test_repart_serve_json_prints_the_url_on_stdout(engine: Engine, db_url: str) -> None:
    command = [
        str(Path(sys.executable).with_name("repart")),
        "serve",
        "--db",
        db_url,
        "--api-port",
        "0",
        "--json",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        url = next(json.loads(line)["url"] for line in process.stderr if '"event": "api"' in line)
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            raise AssertionError(f"repart serve did not stop on SIGTERM: stderr {err[-4000:]!r}") from None
        assert process.returncode == 0
        assert json.loads(out) == {"url": url}
    finally:
        if process.poll() is None:
            process.kill()
