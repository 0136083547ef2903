"""``HttpControllerClient``: the ``ControllerClient`` port over the controller's HTTP API.

A job that may not reach the controller's database (a Spark driver on a cluster) talks to the API the
controller serves (``repart run --api-port``) instead, with a ``job:REGION`` token
(``repart token create --scope job:REGION``)::

    client = HttpControllerClient("https://controller.example:8443", token)

The token goes only to the URL given: plain ``http://`` is accepted only for a loopback host (the API
itself on this machine; a remote API is reached through a TLS reverse proxy, ``https://``), and a
redirect is not followed (an answer 3xx is InvalidInput naming ``url``: give the URL it points to).

It uses only the standard library, so a job needs no web framework. Every call of the port is
idempotent under its ids (``repart.protocol.client``), so a call that fails on the way (the connection
refused or reset, a timeout, a 502, 503 or 504 from a proxy) or meets a conflict with a concurrent call
(409) is sent again, up to ``attempts`` times with an exponential backoff (``backoff`` seconds doubling
up to ``max_backoff``); what still fails raises ``Unavailable`` (``Conflict`` for a conflict). The API's
other refusals become the errors the SQL client raises: ``InvalidInput`` naming the field (a refused
token names ``token``), ``NotFound`` and ``Corrupt``; none is retried.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from http.client import HTTPException
from typing import Any

from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError, Unavailable
from repart.partitioning.split.function import load_function
from repart.protocol.client import AppliedFunction, PlanOutcome, PlanToApply
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import Snapshot

RETRIED_STATUSES = frozenset({409, 502, 503, 504})
"""Answers that may change on a retry: a conflict with a concurrent call (409: the API's "retry later"),
or a proxy or a server that is not ready."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Hand a redirect back as an error instead of following it with the token."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class HttpControllerClient:
    """The port over the API at ``url`` (``http://`` on loopback, else a reverse proxy's ``https://`` URL)
    with bearer ``token`` (module docstring); ``timeout``: seconds one attempt may take."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        attempts: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                "url", f"must be an http:// or https:// URL of the controller's API, got {url!r}"
            )
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            raise InvalidInput(
                "url",
                f"must be https:// for a host other than loopback (the token would travel in clear), "
                f"got {url!r}",
            )
        if not token:
            raise InvalidInput(
                "token", "must be a token of scope job:REGION (`repart token create --scope job:REGION`)"
            )
        if attempts < 1:
            raise InvalidInput("attempts", f"must be at least 1, got {attempts}")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff

    def applied_function(self, region: str) -> AppliedFunction:
        answer = self._call("GET", f"{_region_path(region)}/applied-function")
        return AppliedFunction(answer["version"], load_function(answer["function_json"]))

    def region_merge(self, region: str) -> MergeSpec | None:
        text = self._call("GET", f"{_region_path(region)}/merge")["merge"]
        return None if text is None else MergeSpec.parse(text)

    def claim_next_plan(self, region: str) -> PlanToApply | None:
        plan = self._call("POST", f"{_region_path(region)}/plans/claim")["plan"]
        if plan is None:
            return None
        return PlanToApply(
            plan["plan_id"], plan["region"], plan["from_version"], plan["to_version"], plan["plan_json"]
        )

    def report_plan(
        self,
        plan_id: int,
        outcome: PlanOutcome,
        *,
        moved_rows: int | None = None,
        moved_bytes: int | None = None,
        reason: str | None = None,
    ) -> None:
        body = {"outcome": outcome, "moved_rows": moved_rows, "moved_bytes": moved_bytes, "reason": reason}
        self._call("POST", f"/v1/plans/{int(plan_id)}/outcome", body)

    def submit_snapshot(self, snapshot: Snapshot) -> int:
        document = snapshot.checked().to_document()
        return int(self._call("POST", f"{_region_path(snapshot.region)}/snapshots", document)["snapshot_id"])

    def report_batch(
        self, region: str, batch_id: int, payload: Mapping[str, Any], plan_id: int | None
    ) -> int:
        body = {"batch_id": batch_id, "payload": dict(payload), "plan_id": plan_id}
        return int(self._call("POST", f"{_region_path(region)}/batches", body)["report_id"])

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Send the call, retrying what may be retried (module docstring); its JSON answer."""
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        delay = self.backoff
        problem = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
            request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
            try:
                with _OPENER.open(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                answer = error.read()
                if 300 <= error.code < 400:
                    raise InvalidInput(
                        "url",
                        f"must be the API's own URL; {method} {path} answered {error.code}, redirecting to "
                        f"{error.headers.get('Location')!r}, which is not followed",
                    ) from None
                if error.code not in RETRIED_STATUSES:
                    raise _refusal(error.code, answer) from None
                if error.code == 409 and attempt == self.attempts - 1:
                    raise _refusal(error.code, answer) from None
                problem = f"HTTP {error.code}"
            except (TimeoutError, urllib.error.URLError, HTTPException, OSError) as error:
                problem = str(getattr(error, "reason", error))
        raise Unavailable(
            f"the controller's API at {self.url} did not answer {method} {path} "
            f"({problem}) after {self.attempts} attempts"
        )


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a URL's host name) is this machine: ``localhost`` or a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _region_path(region: str) -> str:
    return "/v1/regions/" + urllib.parse.quote(region, safe="")


def _refusal(status: int, body: bytes) -> RepartError:
    """The error an API refusal stands for (the API's error document: kind, field, message)."""
    try:
        document = json.loads(body)
        kind, field, message = document["error"], document.get("field"), str(document["message"])
    except (ValueError, KeyError, TypeError):
        return Unavailable(f"the controller's API answered {status} without its error document")
    if kind in ("invalid-input", "unauthorized", "forbidden") and field:
        requirement = message[len(field) + 1 :] if message.startswith(f"{field} ") else message
        return InvalidInput(field, requirement)
    if kind == "not-found":
        return NotFound(message)
    if kind == "conflict":
        return Conflict(message)
    if kind == "corrupt":
        return Corrupt(message)
    return Unavailable(f"the controller's API answered {status}: {message}")
