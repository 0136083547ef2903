"""Checks for parsed JSON documents, and the canonical JSON they are written as (DESIGN §2, §10).

Partition functions (``repart.partitioning.function``), migration plans (``repart.migration.plan``) and
the documents of the storage layer (snapshots, settings, reports) are read from JSON and checked field
by field with these helpers. Each returns the checked value or raises ``error`` (ValueError unless the
caller passes a subclass, as storage does with its StorageError classes) with a message that names the
field and the accepted values.

Stored documents are written as canonical JSON (sorted keys, no whitespace, UTF-8 text, no NaN or
infinity) and identified by the SHA-256 of its bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast, get_args

import numpy as np

from repart.partitioning.hashing import INT64_MAX, Key, KeyType, common_key_type, key_type_of

KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)


def parse_json(text: str) -> Any:
    """``json.loads`` that refuses an object with a repeated field name instead of keeping the last."""
    return json.loads(text, object_pairs_hook=reject_duplicate_fields)


def reject_duplicate_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook: a repeated field name is an error, not a silent overwrite."""
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise ValueError(f"duplicate field {name!r} in a JSON object")
        document[name] = value
    return document


def canonical_json(document: Mapping[str, Any]) -> str:
    """``document`` as canonical JSON text: sorted keys, no whitespace, UTF-8 text, no NaN or infinity."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: the digest of a stored document."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def require_object(
    value: object,
    name: str,
    required: Iterable[str],
    optional: Iterable[str] = (),
    *,
    error: type[ValueError] = ValueError,
) -> dict[str, Any]:
    """``value`` (a copy) if it is a mapping with every ``required`` field and no field outside
    ``required`` and ``optional``."""
    if not isinstance(value, Mapping):
        raise error(f"{name} must be a JSON object, got {_shown(value)}")
    required, optional = tuple(required), tuple(optional)
    unknown = sorted(str(field) for field in value if field not in required and field not in optional)
    if unknown:
        accepted = sorted(required + optional)
        raise error(f"unknown field(s) {unknown} in {name}; accepted fields: {accepted}")
    missing = sorted(field for field in required if field not in value)
    if missing:
        raise error(f"missing field(s) {missing} in {name}")
    return dict(value)


def require_equal(
    value: object, expected: str | int, name: str, note: str = "", *, error: type[ValueError] = ValueError
) -> None:
    """Raise unless ``value`` is ``expected`` itself: equal and of the same type (no float 1.0 or bool
    True for 1). ``note`` is added to the message in parentheses."""
    if type(value) is not type(expected) or value != expected:
        detail = f" ({note})" if note else ""
        raise error(f"{name} must be {expected!r}{detail}, got {_shown(value)}")


def require_format(value: object, version: int, *, error: type[ValueError] = ValueError) -> None:
    """Raise unless the ``format`` field of a document is the integer ``version``."""
    require_equal(value, version, "format", f"accepted format versions: {version}", error=error)


def require_list(value: object, name: str, *, error: type[ValueError] = ValueError) -> list[Any]:
    """``value`` if it is a list (a JSON array)."""
    if not isinstance(value, list):
        raise error(f"{name} must be a list (a JSON array), got {_shown(value)}")
    return value


def require_row(
    value: object, name: str, columns: Sequence[str], *, error: type[ValueError] = ValueError
) -> Sequence[Any]:
    """``value`` if it is a list or tuple with one element per column."""
    if not isinstance(value, list | tuple) or len(value) != len(columns):
        shape = "pair" if len(columns) == 2 else "row"
        raise error(
            f"{name} must be a [{', '.join(columns)}] {shape} (a JSON array of {len(columns)} elements), "
            f"got {_shown(value)}"
        )
    return value


def require_int(
    value: object,
    name: str,
    low: int = 0,
    high: int = INT64_MAX,
    *,
    error: type[ValueError] = ValueError,
) -> int:
    """``value`` as an int if it is an integer (not a bool; numpy integers too) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise error(f"{name} must be an integer in [{low}, {high}], got {_shown(value)}")
    if not low <= value <= high:
        raise error(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def require_number(
    value: object,
    name: str,
    low: float = 0.0,
    high: float = math.inf,
    *,
    high_open: bool = False,
    error: type[ValueError] = ValueError,
) -> float:
    """``value`` as a float if it is a finite number (not a bool; numpy numbers too) in [low, high], or
    in [low, high) with ``high_open``."""
    closing = ")" if high_open or high == math.inf else "]"
    interval = f"[{low}, {high}{closing}"
    if (
        isinstance(value, bool | np.bool_)
        or not isinstance(value, int | float | np.integer | np.floating)
        or not math.isfinite(value)
    ):
        raise error(f"{name} must be a finite number in {interval}, got {_shown(value)}")
    if not low <= value <= high or (high_open and value == high):
        raise error(f"{name} must be in {interval}, got {value!r}")
    return float(value)


def require_key(
    value: object, name: str, key_type: KeyType | None = None, *, error: type[ValueError] = ValueError
) -> Key:
    """``value`` as a plain str or int if it is a key (DESIGN §2), of ``key_type`` when one is given.

    A key is a str with a UTF-8 encoding (no lone surrogates) or an int in the signed 64-bit range.
    """
    try:
        kind = key_type_of(value)
    except ValueError as problem:
        raise error(f"{name}: {problem}") from None
    if key_type is not None and kind != key_type:
        raise error(f"{name}: key {_shown(value)} has type {kind!r}, but key_type is {key_type!r}")
    if kind == "int":
        return int(cast(int, value))
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{name}: key {_shown(text)} has a lone surrogate and no UTF-8 encoding") from None
    return text


def require_one_key_type(
    keys: Iterable[object], name: str, *, error: type[ValueError] = ValueError
) -> KeyType | None:
    """The one key type of ``keys`` (None when there are none); an error when they mix str and int."""
    try:
        return common_key_type(keys)
    except ValueError as problem:
        raise error(f"{name}: {problem}") from None


def require_key_type(
    value: object,
    *,
    found: KeyType | None = None,
    found_in: str = "the keys",
    allow_none: bool = False,
    error: type[ValueError] = ValueError,
) -> KeyType | None:
    """The ``key_type`` field: 'str' or 'int' (or None with ``allow_none``), agreeing with ``found``,
    the type of the keys the document holds (``found_in`` names them). None becomes ``found``."""
    if value is None and allow_none:
        return found
    if value not in KEY_TYPES:
        accepted = "one of 'str', 'int' or None" if allow_none else "'str' or 'int'"
        raise error(f"key_type must be {accepted}, got {_shown(value)}")
    if found is not None and value != found:
        raise error(f"key_type is {value!r} but {found_in} are {found!r}")
    return value


def _shown(value: object) -> str:
    """``repr(value)``, cut short so that a huge value cannot flood an error message."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}…"
