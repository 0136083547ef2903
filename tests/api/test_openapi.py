"""docs/openapi.json is the document the code makes, and it describes every route the app serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlalchemy import Engine
from starlette.routing import Route

from repart.api.app import create_app
from repart.api.openapi import document

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_published_document_is_current() -> None:
    assert json.loads(PUBLISHED.read_text()) == document(), (
        "docs/openapi.json is stale: run `python -m repart.api.openapi > docs/openapi.json`"
    )


def test_the_document_lists_every_route_of_the_app(engine: Engine) -> None:
    served = {
        (method.lower(), re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path))
        for route in create_app(engine).routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    described = {(method, path) for path, item in document()["paths"].items() for method in item}
    assert served == described
    assert len(described) == 14


def test_every_operation_lists_every_error_status_the_api_answers() -> None:
    statuses = {"400", "401", "403", "404", "409", "413", "422", "500", "503"}
    for methods in document()["paths"].values():
        for operation in methods.values():
            assert statuses <= set(operation["responses"]), operation["operationId"]
