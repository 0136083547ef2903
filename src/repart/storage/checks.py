"""Field checks shared by the storage layer's parsers: each failure names the field (DESIGN §10)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from repart.partitioning.hashing import INT64_MAX, INT64_MIN, Key, KeyType
from repart.storage.errors import StorageError


def require_object(
    value: object,
    name: str,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
    error: type[StorageError] = StorageError,
) -> Mapping[str, Any]:
    """``value`` as a mapping with all ``required`` fields and no field outside ``required + optional``."""
    if not isinstance(value, Mapping):
        raise error(f"{name} must be a JSON object, got {type(value).__name__}")
    missing = [field for field in required if field not in value]
    if missing:
        raise error(f"{name} is missing the field(s) {', '.join(missing)}")
    unknown = sorted(str(field) for field in value if field not in required and field not in optional)
    if unknown:
        accepted = ", ".join(sorted(required + optional))
        raise error(f"{name} has unknown field(s) {', '.join(unknown)}; accepted fields: {accepted}")
    return value


def require_list(value: object, name: str, error: type[StorageError] = StorageError) -> list[Any]:
    """``value`` if it is a list (a JSON array)."""
    if not isinstance(value, list):
        raise error(f"{name} must be a JSON array, got {type(value).__name__}")
    return value


def require_tuple(value: object, name: str, size: int, error: type[StorageError] = StorageError) -> list[Any]:
    """``value`` if it is a list of exactly ``size`` elements."""
    if not isinstance(value, list) or len(value) != size:
        raise error(f"{name} must be a JSON array of {size} elements, got {value!r}")
    return value


def require_int(
    value: object, name: str, low: int = 0, high: int = INT64_MAX, error: type[StorageError] = StorageError
) -> int:
    """``value`` if it is an integer (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise error(f"{name} must be in [{low}, {high}], got {value}")
    return value


def require_number(
    value: object,
    name: str,
    low: float,
    high: float = math.inf,
    high_open: bool = False,
    error: type[StorageError] = StorageError,
) -> float:
    """``value`` as a float if it is a finite number (not a bool) in [low, high] (or [low, high))."""
    interval = f"[{low}, {high})" if high_open else f"[{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise error(f"{name} must be a finite number in {interval}, got {value!r}")
    if not low <= value <= high or (high_open and value == high):
        raise error(f"{name} must be in {interval}, got {value}")
    return float(value)


def require_key(value: object, name: str, key_type: KeyType, error: type[StorageError] = StorageError) -> Key:
    """``value`` if it is a key of ``key_type``: a signed 64-bit int, or a str that encodes as UTF-8."""
    if isinstance(value, str):
        if key_type != "str":
            raise error(f"{name} is the str key {value!r}, but key_type is 'int'")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{name} must be valid Unicode text (no lone surrogates), got {value!r}") from None
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if key_type != "int":
            raise error(f"{name} is the int key {value}, but key_type is 'str'")
        return require_int(value, name, INT64_MIN, INT64_MAX, error)
    raise error(f"{name} must be a key of type {key_type!r} (accepted key types: str, int), got {value!r}")


def require_one_key_type(keys: list[object], name: str, error: type[StorageError] = StorageError) -> None:
    """Raise when ``keys`` hold both str and int keys (one region uses one key type, DESIGN §2)."""
    kinds = {"str" if isinstance(key, str) else "int" for key in keys if isinstance(key, str | int)}
    if len(kinds) > 1:
        raise error(f"{name} mix key types 'int' and 'str'; one region uses one key type")
