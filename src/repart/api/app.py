"""The HTTP API: the ``ControllerClient`` port for jobs, read-only views for people and tools, and the
operator's scale, rollback and resume.

``create_app(engine)`` returns an ASGI application (Starlette) that ``repart.api.server.ApiServer``
serves. Every endpoint is listed once in ``ENDPOINTS``, with what it needs (``job``: a ``job:REGION``
token of the region it names; ``read``: a ``read`` or ``operator`` token; ``operator``: an
``operator`` token) and the JSON it takes and answers; the OpenAPI document (``repart.api.openapi``)
is made from the same list. The operator's calls are the service layer's operations
(``repart.controller.service``), with its checks, as the CLI runs them.

A call goes through three steps:

1. **Admission**: the bearer token is checked (``repart.storage.tokens``); a call without a valid
   token gets 401 (one message whatever the reason), one whose token's scope does not cover it 403 (a
   job token of another region, a plan that is not of the token's region, whether or not it exists, a
   read token on a job call). The scope is checked before anything the path names is looked up. A
   refused call writes one ``access-refused`` event (no region: the controller's own audit log) naming
   why, and nothing else. A token the database granted is kept for a few seconds
   (``repart.api.grants``: a revocation takes effect within ``token_cache_seconds``; an expiry at
   once); every refusal is decided by the database.
   A granted call writes its token's last use once it succeeded, at most once a minute.
2. **The body**, read within its limit (``MAX_SNAPSHOT_BYTES`` for a snapshot, ``SMALL_BODY_BYTES``
   for the others) and checked field by field: malformed JSON, unknown or missing fields and ids of
   another region are refused before anything is written.
3. **The work**, parsing the body included, on a worker thread (at most ``workers`` calls use the
   database at once), in one transaction: the functions ``SqlControllerClient`` runs (the job calls,
   each idempotent under its ids, so a client may retry any of them; a job call first checks that its
   token's region is still the region of that name) or the storage layer's read functions (the views).

Errors answer ``{"error": kind, "field": name or null, "message": text}``: ``invalid-input`` (422; 400
for a body that is not a JSON object, 413 for one over its limit), ``unauthorized`` (401),
``forbidden`` (403), ``not-found`` (404), ``conflict`` (409: retry later), ``corrupt`` (500: stored
state damaged), ``unavailable`` (503).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import anyio
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from repart.api.bodies import (
    SMALL_BODY_BYTES,
    TooLarge,
    fields,
    json_body,
    json_object,
    optional_text,
    read_body,
)
from repart.api.grants import DEFAULT_SECONDS, GrantCache
from repart.controller import service
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError, Unavailable
from repart.protocol.limits import MAX_SNAPSHOT_BYTES
from repart.protocol.snapshot import Snapshot
from repart.storage import models
from repart.storage.client import applied_function, claim_next_plan, region_merge
from repart.storage.engine import read_connection, read_transaction, run_in_transaction
from repart.storage.event_kinds import EVENT_KINDS
from repart.storage.events import NewEvent, record_batch_report, record_event, region_events
from repart.storage.overview import region_overviews
from repart.storage.plan_reports import report_plan
from repart.storage.plans import list_plans
from repart.storage.region_names import REGION_ID
from repart.storage.schema import check_revision
from repart.storage.snapshots import ingest_snapshot
from repart.storage.tables import utc_now
from repart.storage.tokens import JOB_SCOPE, Grant, Refused, authenticate, record_use
from repart.storage.versions import list_versions, stored_function
from repart.storage.views import event_dict, mode_dict, plan_summary, region_status, version_dict
from repart.validation import STORED_INT, Options, check

T = TypeVar("T")
Access = Literal["job", "read", "operator"]
SCOPES_OF = {"read": ("read", "operator"), "operator": ("operator",)}
"""The token scopes that may make the calls of each access but ``job`` (a job token of the region)."""
API_SOURCE = "repart api"
"""The ``source`` recorded with every snapshot the API ingests."""
DEFAULT_WORKERS = 12
"""Calls that may use the database at once (the default PostgreSQL pool holds 15 connections)."""


class Denied(Exception):
    """A refused call: its status (401 or 403) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StaleGrant(Exception):
    """A kept grant of a job token whose region is gone (deleted, perhaps made again under its name):
    the database decides the call again."""


@dataclass(frozen=True)
class Call:
    """A granted call: the region its path names (None for a call about no one region) and its grant."""

    region: str | None
    grant: Grant

    @property
    def named(self) -> str:
        """The region a region's endpoint names (its path always has one)."""
        assert self.region is not None
        return self.region


@dataclass
class Api:
    """What the endpoints share: the database, the limits, the kept grants."""

    engine: Engine
    max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES
    workers: int = DEFAULT_WORKERS
    token_cache_seconds: float = DEFAULT_SECONDS
    grants: GrantCache = field(init=False)
    limiter: anyio.CapacityLimiter = field(init=False)

    def __post_init__(self) -> None:
        check_revision(self.engine)
        self.grants = GrantCache(self.token_cache_seconds)
        self.limiter = anyio.CapacityLimiter(self.workers)

    async def run(self, work: Callable[[], T]) -> T:
        """``work`` on a worker thread (at most ``workers`` at once)."""
        return await anyio.to_thread.run_sync(work, limiter=self.limiter)

    def write(self, call: Call, work: Callable[[Session], T]) -> T:
        """``work`` in one write transaction, after checking that a job token's region is still the
        region of its name, with the token's last use when it is stale (on the calling thread)."""
        stale = call.grant.use_is_stale()

        def unit(session: Session) -> tuple[T, datetime | None]:
            _check_grant_region(session, call)
            result = work(session)
            return result, record_use(session, call.grant) if stale else None

        result, used = run_in_transaction(self.engine, unit)
        if used is not None:
            self.grants.used(call.grant, used)
        return result

    def read(self, call: Call, work: Callable[[Session], T]) -> T:
        """``work`` in one read-only transaction, after checking a job token's region as ``write``
        does; the token's last use, when stale, in a write transaction of its own (on the calling
        thread)."""

        def unit(session: Session) -> T:
            _check_grant_region(session, call)
            return work(session)

        result = read_transaction(self.engine, unit)
        self.note_use(call)
        return result

    def note_use(self, call: Call) -> None:
        """Write the call's token's last use, if the stored one is stale (on the calling thread)."""
        if call.grant.use_is_stale():
            used = run_in_transaction(self.engine, lambda session: record_use(session, call.grant))
            self.grants.used(call.grant, used)


def _check_grant_region(session: Session, call: Call) -> None:
    """StaleGrant unless a job token's region is still the region the call names (the token is deleted
    with its region; a kept grant may outlive it by ``token_cache_seconds``)."""
    grant = call.grant
    if grant.region_id is None or call.region is None:
        return
    if session.scalar(REGION_ID, {"name": call.region}) != grant.region_id:
        raise StaleGrant


Handler = Callable[[Api, Request, Call], Awaitable[Any]]


@dataclass(frozen=True)
class Endpoint:
    """One call of the API: its method and path, who may make it, its OpenAPI description (``body``
    and ``answer``: JSON Schemas) and its handler, which gets the region the call is about."""

    method: str
    path: str
    name: str
    access: Access
    summary: str
    answer: dict[str, Any]
    handler: Handler
    body: dict[str, Any] | None = None
    query: tuple[tuple[str, str], ...] = ()


# -- job calls (the ControllerClient port) --------------------------------------------------------------


async def _applied_function(api: Api, request: Request, call: Call) -> dict[str, Any]:
    applied = await api.run(lambda: api.read(call, lambda s: applied_function(s, call.named)))
    return {"version": applied.version, "function_json": applied.function.to_json()}


async def _region_merge(api: Api, request: Request, call: Call) -> dict[str, Any]:
    merge = await api.run(lambda: api.read(call, lambda s: region_merge(s, call.named)))
    return {"merge": None if merge is None else merge.to_text()}


async def _claim_next_plan(api: Api, request: Request, call: Call) -> dict[str, Any]:
    plan = await api.run(lambda: api.write(call, lambda s: claim_next_plan(s, call.named)))
    if plan is None:
        return {"plan": None}
    return {
        "plan": {
            "plan_id": plan.plan_id,
            "region": plan.region,
            "from_version": plan.from_version,
            "to_version": plan.to_version,
            "plan_json": plan.plan_json,
        }
    }


async def _report_plan(api: Api, request: Request, call: Call) -> dict[str, Any]:
    raw = await read_body(request, SMALL_BODY_BYTES)
    plan_id = int(request.path_params["plan_id"])

    def work() -> str:
        given = fields(json_body(raw), ("outcome",), ("moved_rows", "moved_bytes", "reason"))
        outcome: str = check("outcome", given["outcome"], Options(("applied", "failed")))
        reason = optional_text("reason", given["reason"])
        api.write(
            call,
            lambda s: report_plan(
                s,
                plan_id,
                outcome,
                moved_rows=given["moved_rows"],
                moved_bytes=given["moved_bytes"],
                reason=reason,
            ),
        )
        return outcome

    return {"plan_id": plan_id, "outcome": await api.run(work)}


async def _submit_snapshot(api: Api, request: Request, call: Call) -> dict[str, Any]:
    raw = await read_body(request, api.max_snapshot_bytes)

    def work() -> int:
        snapshot = Snapshot.from_document(json_body(raw))
        if snapshot.region != call.region:
            raise InvalidInput(
                "region", f"must be the region the call names, {call.region!r}, got {snapshot.region!r}"
            )
        if snapshot.batch is None:
            raise InvalidInput(
                "batch", "is required over HTTP (the job's batch id, which makes a retried snapshot a no-op)"
            )
        return api.write(call, lambda s: ingest_snapshot(s, snapshot, source=API_SOURCE))

    return {"snapshot_id": await api.run(work)}


async def _report_batch(api: Api, request: Request, call: Call) -> dict[str, Any]:
    raw = await read_body(request, SMALL_BODY_BYTES)

    def work() -> int:
        given = fields(json_body(raw), ("batch_id", "payload"), ("plan_id",))
        batch_id = check("batch_id", given["batch_id"], STORED_INT)
        payload = json_object("payload", given["payload"])
        plan_id = None if given["plan_id"] is None else check("plan_id", given["plan_id"], STORED_INT)

        return api.write(
            call, lambda s: record_batch_report(s, call.named, batch_id, payload, plan_id=plan_id)
        )

    return {"report_id": await api.run(work)}


# -- read-only views ------------------------------------------------------------------------------------


async def _all_status(api: Api, request: Request, call: Call) -> list[dict[str, Any]]:
    return await api.run(lambda: _status_rows(api, call, None))


async def _status(api: Api, request: Request, call: Call) -> dict[str, Any]:
    return (await api.run(lambda: _status_rows(api, call, call.named)))[0]


def _status_rows(api: Api, call: Call, region: str | None) -> list[dict[str, Any]]:
    rows = read_connection(
        api.engine, lambda c: [region_status(overview) for overview in region_overviews(c, region)]
    )
    api.note_use(call)
    return rows


async def _versions(api: Api, request: Request, call: Call) -> list[dict[str, Any]]:
    def work(session: Session) -> list[dict[str, Any]]:
        return [version_dict(row, stored_function(row)) for row in list_versions(session, call.named)]

    return await api.run(lambda: api.read(call, work))


async def _plans(api: Api, request: Request, call: Call) -> list[dict[str, Any]]:
    return await api.run(
        lambda: api.read(call, lambda s: [plan_summary(p) for p in list_plans(s, call.named)])
    )


async def _events(api: Api, request: Request, call: Call) -> list[dict[str, Any]]:
    kind = request.query_params.get("kind")

    def work(session: Session) -> list[dict[str, Any]]:
        return [event_dict(row) for row in region_events(session, call.named, kind=kind)]

    return await api.run(lambda: api.read(call, work))


# -- operator calls (the service layer's operations, as the CLI runs them) -----------------------------


async def _operator_action(
    api: Api, request: Request, call: Call, field: str, act: Callable[[Any, str | None], Any]
) -> dict[str, Any]:
    """An operator's scale or rollback: the body's required ``field`` and optional ``reason``, the
    service's ``act(value, reason)``, and its result as JSON."""
    raw = await read_body(request, SMALL_BODY_BYTES)

    def work() -> dict[str, Any]:
        given = fields(json_body(raw), (field,), ("reason",))
        result = act(given[field], optional_text("reason", given["reason"]))
        api.note_use(call)
        return asdict(result)

    return await api.run(work)


async def _scale(api: Api, request: Request, call: Call) -> dict[str, Any]:
    def act(n_channels: Any, reason: str | None) -> Any:
        return service.scale(api.engine, call.named, n_channels, reason=reason)

    return await _operator_action(api, request, call, "n_channels", act)


async def _rollback(api: Api, request: Request, call: Call) -> dict[str, Any]:
    def act(to_version: Any, reason: str | None) -> Any:
        checked = check("to_version", to_version, STORED_INT)
        return service.rollback(api.engine, call.named, checked, reason=reason)

    return await _operator_action(api, request, call, "to_version", act)


async def _resume(api: Api, request: Request, call: Call) -> dict[str, Any]:
    raw = await read_body(request, SMALL_BODY_BYTES)

    def work() -> dict[str, Any]:
        if raw.strip():  # no body, or an empty object
            fields(json_body(raw), ())
        return api.write(call, lambda s: mode_dict(service.resume(s, call.named)))

    return await api.run(work)


# -- schemas (for the OpenAPI document) -----------------------------------------------------------------

_INT = {"type": "integer"}
_STR = {"type": "string"}
_NULLABLE_INT = {"type": ["integer", "null"]}
_OBJECT = {"type": "object"}


def _obj(properties: dict[str, Any], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
        "additionalProperties": False,
    }


_NULLABLE_STR = {"type": ["string", "null"]}
_ACTION = _obj(
    {
        "region": _STR,
        "action": {"enum": ["scaled", "rollback"]},
        "reason": _STR,
        "version": _INT,
        "plan_id": _INT,
        "from_version": _INT,
        "n_channels": _INT,
        "digest": _STR,
        "plan_m": {"type": ["number", "null"]},
        "mode": _STR,
        "mode_reason": _STR,
    }
)
_PLAN = _obj({"plan_id": _INT, "region": _STR, "from_version": _INT, "to_version": _INT, "plan_json": _STR})
_REGION = "/v1/regions/{region}"

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "GET",
        f"{_REGION}/applied-function",
        "applied_function",
        "job",
        "The region's applied version: its number and its function's canonical JSON (404 before the "
        "controller's first tick).",
        _obj({"version": _INT, "function_json": _STR}),
        _applied_function,
    ),
    Endpoint(
        "GET",
        f"{_REGION}/merge",
        "region_merge",
        "job",
        "How the region's partial state rows merge (column=sum|min|max,...), null when it declares none.",
        _obj({"merge": {"type": ["string", "null"]}}),
        _region_merge,
    ),
    Endpoint(
        "POST",
        f"{_REGION}/plans/claim",
        "claim_next_plan",
        "job",
        "The plan to apply before writing state, now applying (one a job died applying, else the pending "
        "one), or null. Idempotent: a retry gets the same plan.",
        _obj({"plan": {"oneOf": [_PLAN, {"type": "null"}]}}),
        _claim_next_plan,
    ),
    Endpoint(
        "POST",
        "/v1/plans/{plan_id:int}/outcome",
        "report_plan",
        "job",
        "Record a claimed plan's outcome; a plan already in that outcome is left as it is. Only a job "
        "token of the plan's region may report it.",
        _obj({"plan_id": _INT, "outcome": _STR}),
        _report_plan,
        body=_obj(
            {
                "outcome": {"enum": ["applied", "failed"]},
                "moved_rows": _NULLABLE_INT,
                "moved_bytes": _NULLABLE_INT,
                "reason": {"type": ["string", "null"]},
            },
            ("outcome",),
        ),
    ),
    Endpoint(
        "POST",
        f"{_REGION}/snapshots",
        "submit_snapshot",
        "job",
        "Ingest a batch's snapshot document (its region must be the path's, its batch is required); a "
        "batch already ingested is "
        f"a no-op answering the stored snapshot's id. At most {MAX_SNAPSHOT_BYTES} bytes by default.",
        _obj({"snapshot_id": _INT}),
        _submit_snapshot,
        body={"$ref": "#/components/schemas/Snapshot"},
    ),
    Endpoint(
        "POST",
        f"{_REGION}/batches",
        "report_batch",
        "job",
        "Record what a batch did (payload: a JSON object; plan_id: a plan of the region it applied); a "
        "batch already reported keeps its first report, whose id is returned.",
        _obj({"report_id": _INT}),
        _report_batch,
        body=_obj(
            {"batch_id": {"type": "integer", "minimum": 0}, "payload": _OBJECT, "plan_id": _NULLABLE_INT},
            ("batch_id", "payload"),
        ),
    ),
    Endpoint(
        "GET",
        "/v1/regions",
        "status_all",
        "read",
        "Every region's status, by name (as `repart status --json`).",
        {"type": "array", "items": _OBJECT},
        _all_status,
    ),
    Endpoint(
        "GET",
        f"{_REGION}/status",
        "status",
        "read",
        "The region's mode, applied version, N, open plan and last event.",
        _OBJECT,
        _status,
    ),
    Endpoint(
        "GET",
        f"{_REGION}/versions",
        "versions",
        "read",
        "The region's versions, oldest first.",
        {"type": "array", "items": _OBJECT},
        _versions,
    ),
    Endpoint(
        "GET",
        f"{_REGION}/plans",
        "plans",
        "read",
        "The region's plans, oldest first.",
        {"type": "array", "items": _OBJECT},
        _plans,
    ),
    Endpoint(
        "GET",
        f"{_REGION}/events",
        "events",
        "read",
        "The region's audit log, oldest first (kind: only events of that kind).",
        {"type": "array", "items": _OBJECT},
        _events,
        query=(("kind", "One of " + ", ".join(EVENT_KINDS) + "."),),
    ),
    Endpoint(
        "POST",
        f"{_REGION}/scale",
        "scale",
        "operator",
        "Activate the next function on n_channels channels, built from the applied version, with a "
        "pending plan to it, and hold the region (as `repart scale REGION --channels 8` does for "
        "n_channels 8). A retry is not a no-op: while the plan is pending it activates another "
        "version on the same N, superseding the first plan.",
        _ACTION,
        _scale,
        body=_obj({"n_channels": {"type": "integer"}, "reason": _NULLABLE_STR}, ("n_channels",)),
    ),
    Endpoint(
        "POST",
        f"{_REGION}/rollback",
        "rollback",
        "operator",
        "Activate a new version with version to_version's function, with a pending plan to it from the "
        "applied version, and hold the region (as `repart rollback REGION --to 2` does for to_version "
        "2). A retry is not a no-op: while the plan is pending it activates another such version, "
        "superseding the first plan.",
        _ACTION,
        _rollback,
        body=_obj({"to_version": {"type": "integer"}, "reason": _NULLABLE_STR}, ("to_version",)),
    ),
    Endpoint(
        "POST",
        f"{_REGION}/resume",
        "resume",
        "operator",
        "Return a held region to its previous mode and end its backoff (as `repart resume REGION`); "
        "the body is empty or {}. A retry once it is resumed is refused (422 naming mode) and writes "
        "nothing.",
        _obj({"region": _STR, "mode": _STR, "mode_reason": {"type": ["string", "null"]}}),
        _resume,
    ),
)


# -- admission and errors --------------------------------------------------------------------------------


def _presented(request: Request) -> str | None:
    """The bearer token the call presents (None without one)."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    return presented.strip() if scheme.lower() == "bearer" else None


def _kept_grant(api: Api, endpoint: Endpoint, request: Request) -> Grant | None:
    """The kept grant of the call's token (``GrantCache``) if its scope covers the call by the path's
    names alone; None when the database must decide (a plan's region is looked up there)."""
    grant = api.grants.get(_presented(request), utc_now())
    if grant is None:
        return None
    if endpoint.access == "job":
        region = request.path_params.get("region")
        allowed = region is not None and grant.scope == JOB_SCOPE + region
    else:
        allowed = grant.scope in SCOPES_OF[endpoint.access]
    return grant if allowed else None


def _admit(session: Session, endpoint: Endpoint, request: Request) -> Grant | Denied:
    """The grant of the call's bearer token, or why the call is refused (with its audit event written)."""
    try:
        grant = authenticate(session, _presented(request))
    except Refused as refused:
        return _refuse(session, endpoint, request, 401, refused.reason, refused.token_id, None)
    if endpoint.access == "job":  # a job token only: other scopes learn nothing of the path's ids
        allowed = grant.region_id is not None and grant.region_id == _region_of(session, request)
    else:
        allowed = grant.scope in SCOPES_OF[endpoint.access]
    if not allowed:
        return _refuse(session, endpoint, request, 403, "scope", grant.token_id, grant.scope)
    return grant


def _refuse(
    session: Session,
    endpoint: Endpoint,
    request: Request,
    status: int,
    reason: str,
    token_id: int | None,
    scope: str | None,
) -> Denied:
    """Write the refusal's audit event and return it."""
    if status == 401:  # one message whatever the reason, which only the audit row keeps
        message = "token must be a valid bearer token (Authorization: Bearer repart_...)"
    else:
        wanted = {"job": "job:<the region of the call>", "read": "read or operator", "operator": "operator"}[
            endpoint.access
        ]
        message = f"token must have scope {wanted}; token {token_id} has scope {scope}"
    data = {"method": request.method, "path": request.url.path, "call": endpoint.name, "token_id": token_id}
    client = request.client
    event = NewEvent(
        kind="access-refused",
        rule=reason,
        message=message,
        data={**data, "scope": scope, "client": None if client is None else client.host},
    )
    record_event(session, None, event)
    return Denied(status, message)


def _region_of(session: Session, request: Request) -> int | None:
    """The id of the region a call is about: the path's, or the region of the path's plan (None for a
    region or a plan that does not exist, which is no token's: a job token cannot tell a plan of
    another region from a missing one)."""
    if "region" in request.path_params:
        return session.scalar(REGION_ID, {"name": request.path_params["region"]})
    plan_id = request.path_params.get("plan_id")
    if plan_id is None:
        return None
    check("plan_id", plan_id, STORED_INT)
    return session.scalar(select(models.Plan.region_id).where(models.Plan.id == plan_id))


def _error(status: int, kind: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": kind, "field": field, "message": message}, status_code=status)


def _answer_error(error: RepartError) -> JSONResponse:
    if isinstance(error, TooLarge):
        return _error(413, "invalid-input", str(error), error.field)
    if isinstance(error, InvalidInput):
        status = 400 if error.field == "body" else 422
        return _error(status, "invalid-input", str(error), error.field)
    if isinstance(error, NotFound):
        return _error(404, "not-found", str(error))
    if isinstance(error, Conflict):
        return _error(409, "conflict", str(error))
    if isinstance(error, Corrupt):
        return _error(500, "corrupt", str(error))
    if isinstance(error, Unavailable):
        return _error(503, "unavailable", str(error))
    return _error(500, "internal", str(error))


async def _admitted(api: Api, endpoint: Endpoint, request: Request) -> Grant | Denied:
    """The call's grant: kept (no database), or decided by the database (``_admit``) and then kept."""
    kept = _kept_grant(api, endpoint, request)
    if kept is not None:
        return kept

    def admit(session: Session) -> Grant | Denied:
        return _admit(session, endpoint, request)

    read_at = time.monotonic()  # before the transaction reads the token: the cache's bound counts from here
    admitted = await api.run(functools.partial(run_in_transaction, api.engine, admit))
    presented = _presented(request)
    if isinstance(admitted, Grant) and presented is not None:
        api.grants.keep(presented, admitted, read_at)
    return admitted


def _denied(denied: Denied) -> JSONResponse:
    return _error(
        denied.status, "unauthorized" if denied.status == 401 else "forbidden", str(denied), "token"
    )


def _route(api: Api, endpoint: Endpoint) -> Route:
    async def respond(request: Request) -> Response:
        try:
            admitted = await _admitted(api, endpoint, request)
            if isinstance(admitted, Denied):
                return _denied(admitted)
            call = Call(request.path_params.get("region"), admitted)
            try:
                return JSONResponse(await endpoint.handler(api, request, call))
            except StaleGrant:  # the kept grant's region is gone: the database decides again
                api.grants.forget(admitted.token_id)
                again = await _admitted(api, endpoint, request)
                if isinstance(again, Denied):
                    return _denied(again)
                raise Conflict("the token's grant changed during the call; retry it") from None
        except RepartError as error:
            return _answer_error(error)

    return Route(endpoint.path, respond, methods=[endpoint.method], name=endpoint.name)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    kinds = {404: "not-found", 405: "method-not-allowed"}
    return _error(error.status_code, kinds.get(error.status_code, "invalid-input"), str(error.detail))


async def _internal_error(request: Request, error: Exception) -> Response:
    """A 500 for an unexpected error; uvicorn logs it with its traceback as a JSON line
    (``repart.api.server``)."""
    return _error(500, "internal", "the API failed on this call; the controller's log has the error")


def create_app(
    engine: Engine,
    *,
    max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
    workers: int = DEFAULT_WORKERS,
    token_cache_seconds: float = DEFAULT_SECONDS,
) -> Starlette:
    """The API on ``engine`` (module docstring): snapshots of at most ``max_snapshot_bytes``, at most
    ``workers`` calls on the database at once, a granted token kept ``token_cache_seconds``
    (``repart.api.grants``). A database at another schema revision is refused (InvalidInput naming
    ``db``)."""
    api = Api(
        engine,
        max_snapshot_bytes=max_snapshot_bytes,
        workers=workers,
        token_cache_seconds=token_cache_seconds,
    )
    return Starlette(
        routes=[_route(api, endpoint) for endpoint in ENDPOINTS],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
