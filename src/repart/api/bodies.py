"""A request's JSON body, read within a size limit and checked field by field.

Every refusal is ``InvalidInput`` naming the field (``body`` for the body as a whole), so that the API
answers it with a 4xx whose JSON names the field; ``TooLarge`` for a body over its limit (413).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from repart.errors import InvalidInput
from repart.validation import shown

SMALL_BODY_BYTES = 2**20
"""The largest body of every call but a snapshot's: 1 MiB (a plan's outcome, a batch's report)."""


class TooLarge(InvalidInput):
    """A body over its route's limit (answered 413)."""


DRAINED_MULTIPLE = 2
"""A body over its limit but within this multiple of it is read to its end and dropped before the 413
is sent: answered while still sending, a client may see its connection reset instead of the answer
(urllib's Broken pipe, in 2 of 300 oversized calls before bodies were drained). One declared larger,
or one without ``Content-Length`` once it passes the multiple, is answered before the rest is read."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, of at most ``limit`` bytes, or ``TooLarge``: one declared (``Content-Length``)
    over ``DRAINED_MULTIPLE`` times the limit before it is read, a smaller one over the limit once it
    has arrived, read to its end and dropped (``DRAINED_MULTIPLE``). ``json_body`` parses it, on a
    worker thread (parsing a large body would hold the event loop, and every call, up)."""
    drained = DRAINED_MULTIPLE * limit
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > drained):
        raise TooLarge("body", f"must be at most {limit} bytes, got Content-Length {declared}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > drained:
            break
        if size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()  # refused already: what arrives is only read to its end
    if size > limit:
        raise TooLarge("body", f"must be at most {limit} bytes, got {size if size <= drained else 'more'}")
    return b"".join(chunks)


def json_body(raw: bytes) -> dict[str, Any]:
    """``raw`` (a body from ``read_body``) as a JSON object; InvalidInput naming ``body`` otherwise."""
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInput("body", f"must be a JSON object, got malformed JSON ({error})") from None
    except RecursionError:
        raise InvalidInput(
            "body", "must be a JSON object nested less deeply, got one nested too deep"
        ) from None
    if not isinstance(value, dict):
        raise InvalidInput("body", f"must be a JSON object, got {type(value).__name__}")
    return value


def fields(
    body: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``body``'s fields, if it has every ``required`` one and no field outside ``required`` and
    ``optional`` (missing optional fields are None); InvalidInput naming the first field that is not."""
    for name in body:
        if name not in required and name not in optional:
            accepted = ", ".join((*required, *optional))
            raise InvalidInput(name, f"is not a field of this call; the fields are {accepted}")
    for name in required:
        if name not in body:
            raise InvalidInput(name, "is required")
    return {name: body.get(name) for name in (*required, *optional)}


def optional_text(name: str, value: object) -> str | None:
    """``value`` if it is None or a string; InvalidInput naming ``name`` otherwise."""
    if value is not None and not isinstance(value, str):
        raise InvalidInput(name, f"must be a string or null, got {shown(value)}")
    return value


def json_object(name: str, value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object; InvalidInput naming ``name`` otherwise."""
    if not isinstance(value, dict):
        raise InvalidInput(name, f"must be a JSON object, got {shown(value)}")
    return value
