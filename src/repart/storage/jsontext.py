"""Canonical JSON text for the JSON columns (reports, settings, event data, batch payloads)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from repart.errors import Corrupt, InvalidInput
from repart.partitioning.documents import canonical_json
from repart.validation import shown


def dump_object(value: Mapping[str, Any], name: str) -> str:
    """``value`` as compact JSON with sorted keys; ``InvalidInput(name)`` if it is not a JSON object of
    finite numbers, strings, booleans, nulls, lists and objects."""
    if not isinstance(value, Mapping):
        raise InvalidInput(name, f"must be a JSON object (a mapping), got {shown(value)}")
    try:
        text = canonical_json(dict(value))
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            name,
            "must be a JSON object of finite numbers, strings, booleans, nulls, lists and objects, "
            f"got {shown(value)} ({error})",
        ) from None
    return text


def load_object(text: str) -> dict[str, Any]:
    """The JSON object stored by ``dump_object``; ``Corrupt`` if the stored text is not one."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as error:
        raise Corrupt(f"stored JSON cannot be read ({error}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise Corrupt(f"stored JSON is not an object: {text[:80]!r}")
    return value
