"""The HTTP API: the ``ControllerClient`` port for jobs and read-only views for people and tools.

``create_app(engine)`` returns an ASGI application (Starlette) that ``repart.api.server.ApiServer``
serves. Every endpoint is listed once in ``ENDPOINTS``, with what it needs (``job``: a ``job:REGION``
token of the region it names; ``read``: a ``read`` or ``operator`` token) and the JSON it takes and
answers; the OpenAPI document (``repart.api.openapi``) is made from the same list.

A call goes through three steps:

1. **Admission**, in one transaction: the bearer token is checked (``repart.storage.tokens``); a call
   without a valid token gets 401 (one message whatever the reason), one whose token's scope does not
   cover it 403 (a job token of another region, a plan that is not of the token's region, whether or
   not it exists, a read token on a job call). The scope is checked before anything the path names is
   looked up. A refused call writes one ``access-refused`` event (no region: the controller's own audit
   log) naming why, and nothing else.
   A granted call writes its token's last use once it succeeded, at most once a minute.
2. **The body**, read within its limit (``MAX_SNAPSHOT_BYTES`` for a snapshot, ``SMALL_BODY_BYTES``
   for the others) and checked field by field: malformed JSON, unknown or missing fields and ids of
   another region are refused before anything is written.
3. **The work**, parsing the body included, through ``SqlControllerClient`` (the job calls, each
   idempotent under its ids, so a client may retry any of them) or the storage layer's read functions
   (the views), on a worker thread; at most ``workers`` calls use the database at once.

Errors answer ``{"error": kind, "field": name or null, "message": text}``: ``invalid-input`` (422; 400
for a body that is not a JSON object, 413 for one over its limit), ``unauthorized`` (401),
``forbidden`` (403), ``not-found`` (404), ``conflict`` (409: retry later), ``corrupt`` (500: stored
state damaged), ``unavailable`` (503).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio
from sqlalchemy import Connection, Engine, select
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
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError, Unavailable
from repart.protocol.limits import MAX_SNAPSHOT_BYTES
from repart.protocol.snapshot import Snapshot
from repart.storage import models
from repart.storage.client import SqlControllerClient
from repart.storage.engine import read_connection, read_transaction, run_in_transaction
from repart.storage.event_kinds import EVENT_KINDS
from repart.storage.events import NewEvent, record_event, region_events
from repart.storage.overview import region_overviews
from repart.storage.plans import list_plans
from repart.storage.tokens import Grant, Refused, authenticate, record_use
from repart.storage.versions import list_versions, version_function
from repart.storage.views import event_dict, plan_summary, region_status, version_dict
from repart.validation import STORED_INT, Options, check

T = TypeVar("T")
Access = Literal["job", "read"]
API_SOURCE = "repart api"
"""The ``source`` recorded with every snapshot the API ingests."""
DEFAULT_WORKERS = 12
"""Calls that may use the database at once (the default PostgreSQL pool holds 15 connections)."""


class Denied(Exception):
    """A refused call: its status (401 or 403) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Api:
    """What the endpoints share: the database, the port's SQL implementation, the limits."""

    engine: Engine
    max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES
    workers: int = DEFAULT_WORKERS
    client: SqlControllerClient = field(init=False)
    limiter: anyio.CapacityLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.client = SqlControllerClient(self.engine, source=API_SOURCE)
        self.limiter = anyio.CapacityLimiter(self.workers)

    async def run(self, work: Callable[[], T]) -> T:
        """``work`` on a worker thread (at most ``workers`` at once)."""
        return await anyio.to_thread.run_sync(work, limiter=self.limiter)


Handler = Callable[[Api, Request, str | None], Awaitable[Any]]


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


async def _applied_function(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    applied = await api.run(lambda: api.client.applied_function(_named(region)))
    return {"version": applied.version, "function_json": applied.function.to_json()}


async def _region_merge(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    merge = await api.run(lambda: api.client.region_merge(_named(region)))
    return {"merge": None if merge is None else merge.to_text()}


async def _claim_next_plan(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    plan = await api.run(lambda: api.client.claim_next_plan(_named(region)))
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


async def _report_plan(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    raw = await read_body(request, SMALL_BODY_BYTES)
    given = fields(
        await api.run(lambda: json_body(raw)), ("outcome",), ("moved_rows", "moved_bytes", "reason")
    )
    outcome = check("outcome", given["outcome"], Options(("applied", "failed")))
    reason = optional_text("reason", given["reason"])
    plan_id = int(request.path_params["plan_id"])
    await api.run(
        lambda: api.client.report_plan(
            plan_id, outcome, moved_rows=given["moved_rows"], moved_bytes=given["moved_bytes"], reason=reason
        )
    )
    return {"plan_id": plan_id, "outcome": outcome}


async def _submit_snapshot(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    raw = await read_body(request, api.max_snapshot_bytes)
    snapshot = await api.run(lambda: Snapshot.from_document(json_body(raw)))
    if snapshot.region != region:
        raise InvalidInput(
            "region", f"must be the region the call names, {region!r}, got {snapshot.region!r}"
        )
    if snapshot.batch is None:
        raise InvalidInput(
            "batch", "is required over HTTP (the job's batch id, which makes a retried snapshot a no-op)"
        )
    return {"snapshot_id": await api.run(lambda: api.client.submit_snapshot(snapshot))}


async def _report_batch(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    raw = await read_body(request, SMALL_BODY_BYTES)
    given = fields(await api.run(lambda: json_body(raw)), ("batch_id", "payload"), ("plan_id",))
    batch_id = check("batch_id", given["batch_id"], STORED_INT)
    payload = json_object("payload", given["payload"])
    plan_id = None if given["plan_id"] is None else check("plan_id", given["plan_id"], STORED_INT)
    named = _named(region)

    def work() -> int:
        if plan_id is not None:
            read_transaction(api.engine, lambda session: _check_plan_of(session, named, plan_id))
        return api.client.report_batch(named, batch_id, payload, plan_id)

    return {"report_id": await api.run(work)}


def _check_plan_of(session: Session, region: str, plan_id: int) -> None:
    """InvalidInput naming ``plan_id`` unless it is the id of a plan of ``region``."""
    owner = session.scalar(
        select(models.Region.name)
        .join(models.Plan, models.Plan.region_id == models.Region.id)
        .where(models.Plan.id == plan_id)
    )
    if owner != region:
        raise InvalidInput("plan_id", f"must be the id of a plan of region {region!r}, got {plan_id}")


# -- read-only views ------------------------------------------------------------------------------------


async def _all_status(api: Api, request: Request, region: str | None) -> list[dict[str, Any]]:
    return await api.run(lambda: read_connection(api.engine, lambda c: _status_rows(c, None)))


async def _status(api: Api, request: Request, region: str | None) -> dict[str, Any]:
    rows = await api.run(lambda: read_connection(api.engine, lambda c: _status_rows(c, _named(region))))
    return rows[0]


def _status_rows(connection: Connection, region: str | None) -> list[dict[str, Any]]:
    return [region_status(overview) for overview in region_overviews(connection, region)]


async def _versions(api: Api, request: Request, region: str | None) -> list[dict[str, Any]]:
    def work(session: Session) -> list[dict[str, Any]]:
        return [version_dict(row, version_function(row)) for row in list_versions(session, _named(region))]

    return await api.run(lambda: read_transaction(api.engine, work))


async def _plans(api: Api, request: Request, region: str | None) -> list[dict[str, Any]]:
    return await api.run(
        lambda: read_transaction(
            api.engine, lambda s: [plan_summary(p) for p in list_plans(s, _named(region))]
        )
    )


async def _events(api: Api, request: Request, region: str | None) -> list[dict[str, Any]]:
    kind = request.query_params.get("kind")

    def work(session: Session) -> list[dict[str, Any]]:
        return [event_dict(row) for row in region_events(session, _named(region), kind=kind)]

    return await api.run(lambda: read_transaction(api.engine, work))


def _named(region: str | None) -> str:
    """The region a region's endpoint names (its path always has one)."""
    assert region is not None
    return region


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
)


# -- admission and errors --------------------------------------------------------------------------------


def _admit(session: Session, endpoint: Endpoint, request: Request) -> Grant | Denied:
    """The grant of the call's bearer token, or why the call is refused (with its audit event written)."""
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    try:
        grant = authenticate(session, presented.strip() if scheme.lower() == "bearer" else None)
    except Refused as refused:
        return _refuse(session, endpoint, request, 401, refused.reason, refused.token_id, None)
    if endpoint.access == "job":  # a job token only: other scopes learn nothing of the path's ids
        allowed = grant.region_id is not None and grant.region_id == _region_of(session, request)
    else:
        allowed = grant.scope in ("read", "operator")
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
        wanted = "job:<the region of the call>" if endpoint.access == "job" else "read or operator"
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
        return session.scalar(
            select(models.Region.id).where(models.Region.name == request.path_params["region"])
        )
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


def _route(api: Api, endpoint: Endpoint) -> Route:
    async def respond(request: Request) -> Response:
        try:

            def admit(session: Session) -> Grant | Denied:
                return _admit(session, endpoint, request)

            admitted = await api.run(functools.partial(run_in_transaction, api.engine, admit))
            if isinstance(admitted, Denied):
                kind = "unauthorized" if admitted.status == 401 else "forbidden"
                return _error(admitted.status, kind, str(admitted), "token")
            answer = await endpoint.handler(api, request, request.path_params.get("region"))
            if admitted.use_is_stale():
                await api.run(lambda: run_in_transaction(api.engine, lambda s: record_use(s, admitted)))
            return JSONResponse(answer)
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
    engine: Engine, *, max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES, workers: int = DEFAULT_WORKERS
) -> Starlette:
    """The API on ``engine`` (module docstring): snapshots of at most ``max_snapshot_bytes``, at most
    ``workers`` calls on the database at once. A database at another schema revision is refused
    (InvalidInput naming ``db``)."""
    api = Api(engine, max_snapshot_bytes=max_snapshot_bytes, workers=workers)
    return Starlette(
        routes=[_route(api, endpoint) for endpoint in ENDPOINTS],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
