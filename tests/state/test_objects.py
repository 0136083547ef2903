"""Bad store locations (``repart.state.objects``): each is refused in one line that names the URL, the
option or the object at fault, with the documented error class (and, on the command line, exit code),
and nothing is written anywhere. Secrets given as store options never show."""

from __future__ import annotations

import os
import pickle
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.errors import InvalidInput, NotFound, RepartError, Unavailable
from repart.state.objects import objects_at
from repart.state.store import StateStore
from tests.factories import s3_bucket
from tests.state.state_child import batch_rows, commit_batch, create, function, write_rows

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
ATTEMPTS: dict[str, Callable[[str, dict[str, str] | None], object]] = {
    "open": StateStore.open,
    "create": lambda url, options: create(url, options),
}


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def buckets(endpoint: str) -> bytes:
    """The endpoint's bucket listing (to show that nothing was created)."""
    with urllib.request.urlopen(endpoint, timeout=10) as response:
        listing: bytes = response.read()
    return listing


def clear_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_an_unknown_scheme_is_invalid_state_listing_the_accepted_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attempt: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput) as raised:
        ATTEMPTS[attempt]("ftp://x/y", None)
    assert raised.value.field == "state"
    message = one_line(raised.value)
    assert "'ftp://x/y'" in message and "'ftp'" in message
    assert all(scheme in message for scheme in ("file://", "s3://", "gs://", "az://"))
    assert not list(tmp_path.iterdir())  # nothing written, not even a directory named ftp:


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_a_missing_bucket_is_not_found_naming_the_url(
    s3_endpoint: str, s3_options: dict[str, str], attempt: str
) -> None:
    before = buckets(s3_endpoint)
    url = "s3://no-such-bucket-here/state"
    with pytest.raises(NotFound) as raised:
        ATTEMPTS[attempt](url, s3_options)
    assert url in one_line(raised.value) and "does not exist" in str(raised.value)
    assert buckets(s3_endpoint) == before  # no bucket was created


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_an_endpoint_that_does_not_answer_is_unavailable_quickly(
    s3_options: dict[str, str], attempt: str
) -> None:
    options = {**s3_options, "endpoint": f"http://127.0.0.1:{closed_port()}", "aws_secret_access_key": SECRET}
    started = time.monotonic()
    with pytest.raises(Unavailable) as raised:
        ATTEMPTS[attempt]("s3://some-bucket/state", options)
    assert time.monotonic() - started < 10
    message = one_line(raised.value)
    assert "s3://some-bucket/state did not answer" in message and SECRET not in message


@pytest.mark.parametrize("endpoint", ["not a url", "127.0.0.1:9000", "ftp://127.0.0.1:9000"])
def test_an_endpoint_that_is_not_an_http_url_is_invalid_options(
    s3_options: dict[str, str], endpoint: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        StateStore.open("s3://some-bucket/state", {**s3_options, "endpoint": endpoint})
    assert raised.value.field == "options" and repr(endpoint) in one_line(raised.value)


def test_an_unknown_option_is_invalid_options_naming_it(s3_options: dict[str, str]) -> None:
    options = {**s3_options, "aws_secret_access_key": SECRET, "no_such_option": "1"}
    with pytest.raises(InvalidInput) as raised:
        StateStore.open("s3://some-bucket/state", options)
    message = one_line(raised.value)
    assert raised.value.field == "options" and "no_such_option" in message and SECRET not in message


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_missing_credentials_are_invalid_credentials_before_any_request(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """No credential in the options or the environment: refused at once (no request is sent: the
    endpoint does not exist), even with a secret given without its key id, which never shows."""
    clear_aws_environment(monkeypatch)
    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "AZURE_")):
            monkeypatch.delenv(name)
    url = f"{scheme}://bucket/state"
    for options in (None, {"endpoint": f"http://127.0.0.1:{closed_port()}", "aws_secret_access_key": SECRET}):
        with pytest.raises(InvalidInput) as raised:
            StateStore.open(url, options)
        message = one_line(raised.value)
        assert raised.value.field == "credentials" and url in message and SECRET not in message


def test_a_given_secret_never_shows_but_travels_with_the_pickled_handle(
    s3_endpoint: str, s3_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_aws_environment(monkeypatch)
    url = f"s3://{s3_bucket(s3_endpoint)}/state"
    options = {**s3_options, "aws_secret_access_key": SECRET, "aws_session_token": SECRET + "-token"}
    store = create(url, options)
    rows = batch_rows(1, rows=50)
    commit_batch(store, function(), write_rows(store, function(), rows, kind="base"), None)
    shipped = pickle.loads(pickle.dumps(store))  # what an executor gets
    shown = [
        repr(store),
        repr(store.objects),
        repr(shipped),
        repr(shipped.objects),
        str(vars(shipped.objects)),
    ]
    shown += [repr(vars(store.objects)[name]) for name in vars(store.objects)]
    assert not [text for text in shown if SECRET in text]
    assert SECRET.encode() in pickle.dumps(store)  # it does travel: executors need no environment
    assert shipped.read().num_rows == len(set(rows.column("key").to_pylist()))  # and it works there
    errors: list[RepartError] = []
    attempts: list[Callable[[], object]] = [
        lambda: StateStore.open(url.replace("s3://", "s3://no-such-bucket-"), options),
        lambda: StateStore.open(url, {**options, "endpoint": f"http://127.0.0.1:{closed_port()}"}),
        lambda: StateStore.open(url, {**options, "endpoint": "nonsense"}),
        lambda: StateStore.open(url, {**options, "bogus": SECRET}),
    ]
    for attempt in attempts:
        with pytest.raises(RepartError) as raised:
            attempt()
        errors.append(raised.value)
    assert not [str(error) for error in errors if SECRET in str(error)]
    for document in (info.path for info in store.objects.listing("_log/")):
        assert SECRET.encode() not in store.objects.read(document)


def state_command(*arguments: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["state", *arguments])
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.mark.parametrize("command", ["verify", "compact", "vacuum", "upgrade"])
def test_the_command_line_prints_a_bad_location_in_one_line_with_its_exit_code(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    clear_aws_environment(monkeypatch)
    cases: list[tuple[str, dict[str, str], int, str]] = [
        ("ftp://x/y", {}, 2, "--state must be a path or a URL with scheme file://, s3://, gs://, az://"),
        ("s3://bucket/state", {}, 2, "credentials are missing for s3://bucket/state"),
        (
            "s3://no-such-bucket-at-all/state",
            {"AWS_ENDPOINT_URL": s3_endpoint},
            2,
            "the bucket of s3://no-such-bucket-at-all/state does not exist",
        ),
        (
            "s3://bucket/state",
            {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"},
            5,
            "the object store at s3://bucket/state did not answer",
        ),
    ]
    for url, environment, code, message in cases:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        if environment:
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "repart-test")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        exit_code, out, err = state_command(command, "--state", url)
        assert (exit_code, out) == (code, ""), (url, err)
        assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
        assert "Traceback" not in err and SECRET not in err
        clear_aws_environment(monkeypatch)


def test_nothing_is_written_for_refused_options(s3_endpoint: str, s3_options: dict[str, str]) -> None:
    """A bucket that exists, with store options that are refused: nothing is put in it."""
    bucket = s3_bucket(s3_endpoint)
    for options, named in (({**s3_options, "bogus": "1"}, "bogus"), ({**s3_options, "endpoint": "x"}, "'x'")):
        with pytest.raises(InvalidInput) as raised:
            create(f"s3://{bucket}/state", options)
        assert raised.value.field == "options" and named in one_line(raised.value)
    assert objects_at(f"s3://{bucket}", s3_options).listing() == []
