"""The API's OpenAPI 3.1 document, made from ``repart.api.app.ENDPOINTS`` (the one list of calls), and
published as docs/openapi.json: ``python -m repart.api.openapi > docs/openapi.json`` (a test checks
the published copy is current)."""

from __future__ import annotations

import json
import re
import sys
from importlib.resources import files
from typing import Any

import repart
from repart.api.app import ENDPOINTS, Endpoint
from repart.api.bodies import SMALL_BODY_BYTES
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "enum": [
                "invalid-input",
                "unauthorized",
                "forbidden",
                "not-found",
                "conflict",
                "corrupt",
                "unavailable",
                "internal",
                "method-not-allowed",
            ]
        },
        "field": {"type": ["string", "null"]},
        "message": {"type": "string"},
    },
    "required": ["error", "field", "message"],
}
_ERRORS = {
    "400": "The body is not a JSON object (field: body).",
    "401": "No token, or a token that is malformed, unknown, wrong, expired or revoked (field: token; "
    "one message whatever the reason).",
    "403": "The token's scope does not cover the call, or the plan is not of the token's region "
    "(field: token).",
    "404": "No such region.",
    "409": "The call clashes with the stored state; retry later.",
    "413": f"The body is over its limit: {SMALL_BODY_BYTES} bytes, a snapshot's "
    f"{MAX_SNAPSHOT_BYTES} by default.",
    "422": "A field is missing, unknown or outside what is accepted (field: its name).",
    "500": "corrupt: stored state is damaged (not retried); internal: the API failed (the log has why).",
    "503": "unavailable: the database cannot be reached, or the API serves its most connections "
    "(then a plain-text answer); retry later.",
}


def document() -> dict[str, Any]:
    """The OpenAPI document of every endpoint."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", endpoint.path)
        paths.setdefault(path, {})[endpoint.method.lower()] = _operation(endpoint)
    snapshot_schema = json.loads(files("repart.protocol").joinpath("snapshot.schema.json").read_text())
    snapshot_schema.pop("$schema", None)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "repart controller API",
            "version": repart.__version__,
            "description": "The ControllerClient port for jobs, read-only views of the controller, and "
            "the operator's scale, rollback and resume. Every call takes a bearer token (repart token "
            "create).",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": _ERROR, "Snapshot": snapshot_schema},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    parameters = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "integer" if name == "plan_id" else "string"},
        }
        for name in re.findall(r"\{(\w+)", endpoint.path)
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": text}
        for name, text in endpoint.query
    ]
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    operation: dict[str, Any] = {
        "operationId": endpoint.name,
        "summary": endpoint.summary,
        "description": {
            "job": "Scope: job:REGION of the call's region.",
            "read": "Scope: read or operator.",
            "operator": "Scope: operator.",
        }[endpoint.access],
        "parameters": parameters,
        "responses": {
            "200": {"description": "Done.", "content": {"application/json": {"schema": endpoint.answer}}},
            **{status: {"description": text, **error} for status, text in _ERRORS.items()},
        },
    }
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": endpoint.body}},
        }
    return operation


def main() -> None:
    """Print the document (what docs/openapi.json holds)."""
    sys.stdout.write(json.dumps(document(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
