"""Canonical JSON text for the JSON columns (reports, settings, event data, batch payloads)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from repart.partitioning.documents import canonical_json
from repart.storage.errors import StorageError


def dump_object(value: Mapping[str, Any], name: str) -> str:
    """``value`` as compact JSON with sorted keys; StorageError naming ``name`` if it is not a JSON
    object of finite numbers, strings, booleans, nulls, lists and objects."""
    if not isinstance(value, Mapping):
        raise StorageError(f"{name} must be a JSON object (a mapping), got {type(value).__name__}")
    try:
        text = canonical_json(dict(value))
    except (TypeError, ValueError) as error:
        raise StorageError(f"{name} must be JSON-serializable without NaN or infinity: {error}") from None
    return text


def load_object(text: str) -> dict[str, Any]:
    """The JSON object stored by ``dump_object``."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise StorageError(f"stored JSON is not an object: {text[:80]!r}")
    return value
