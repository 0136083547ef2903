"""``HttpControllerClient`` sends its token only to the URL it was given: a redirect is an error naming
``url``, and plain http:// is accepted only for a loopback host."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from repart.errors import Conflict, InvalidInput
from repart.protocol.http_client import HttpControllerClient


class Recorder(BaseHTTPRequestHandler):
    """Answers every GET with an empty merge, recording the Authorization header it got."""

    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"merge": None}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def elsewhere() -> Iterator[HTTPServer]:
    Recorder.seen = []
    yield from serving(Recorder)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_error_naming_url_and_sends_the_token_nowhere(
    elsewhere: HTTPServer, status: int
) -> None:
    target = f"http://127.0.0.1:{elsewhere.server_port}/x"

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    for server in serving(Redirect):
        client = HttpControllerClient(f"http://127.0.0.1:{server.server_port}", "repart_1_SECRET", attempts=1)
        with pytest.raises(InvalidInput) as raised:
            client.region_merge("trades")
        assert raised.value.field == "url"
        assert str(status) in str(raised.value)
    assert Recorder.seen == []


@pytest.mark.parametrize("url", ["http://controller.example:8000", "http://10.0.0.5:8000", "ftp://localhost"])
def test_plain_http_is_refused_off_loopback(url: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        HttpControllerClient(url, "repart_1_SECRET")
    assert raised.value.field == "url"


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "https://controller.example"],
)
def test_loopback_http_and_any_https_are_accepted(url: str) -> None:
    assert HttpControllerClient(url, "repart_1_SECRET").url == url


def test_a_conflict_is_retried_and_raised_once_attempts_run_out() -> None:
    answers = [409, 409, 200]

    class Busy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = answers.pop(0) if answers else 409
            body = json.dumps(
                {"merge": None} if status == 200 else {"error": "conflict", "field": None, "message": "busy"}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    for server in serving(Busy):
        url = f"http://127.0.0.1:{server.server_port}"
        assert (
            HttpControllerClient(url, "repart_1_SECRET", attempts=3, backoff=0.01).region_merge("r") is None
        )
        with pytest.raises(Conflict):
            HttpControllerClient(url, "repart_1_SECRET", attempts=2, backoff=0.01).region_merge("r")
    assert answers == []
