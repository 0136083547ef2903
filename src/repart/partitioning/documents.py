"""Checks for parsed JSON documents, and the canonical JSON they are written as.

Partition functions (``repart.partitioning.function``), migration plans (``repart.migration.plan``) and
the documents of the storage layer (snapshots, settings, reports) are read from JSON and checked field
by field with these helpers, written over the parameter-check vocabulary of ``repart.validation``.
Each returns the checked value or raises ``InvalidInput`` whose ``field`` is the name
the caller gives (``window.seq``, ``explicit_moves[3]``). A document read back from storage that fails
a check is ``InvalidInput`` here too; the storage layer decides whether that makes it ``Corrupt``.

Stored documents are written as canonical JSON (sorted keys, no whitespace, UTF-8 text, no NaN or
infinity) and identified by the SHA-256 of its bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any, SupportsFloat, cast, get_args

from repart.errors import InvalidInput
from repart.partitioning.domain import INT64_MAX, Key, KeyType, common_key_type, key_type_of
from repart.validation import NONE, Interval, Kind, Options, check, shown

KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)


def parse_json(text: str, name: str = "document") -> Any:
    """``json.loads`` that refuses an object with a repeated field name instead of keeping the last;
    ``InvalidInput(name)`` for text that is not JSON or repeats a field."""
    try:
        return json.loads(text, object_pairs_hook=reject_duplicate_fields)
    except _DuplicateField as duplicate:
        raise InvalidInput(name, f"must not repeat field {duplicate.args[0]!r} in a JSON object") from None
    except (ValueError, TypeError) as problem:  # not JSON, an integer of over 4,300 digits, not a str
        raise InvalidInput(name, f"must be JSON text: {problem}") from None
    except RecursionError:
        raise InvalidInput(name, "must be JSON text nested less deeply (arrays or objects)") from None


class _DuplicateField(ValueError):
    """A JSON object repeats a field name (raised by ``reject_duplicate_fields``)."""


def reject_duplicate_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook: a repeated field name is an error, not a silent overwrite."""
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise _DuplicateField(name)
        document[name] = value
    return document


def canonical_json(document: Mapping[str, Any]) -> str:
    """``document`` as canonical JSON text: sorted keys, no whitespace, UTF-8 text, no NaN or infinity."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def json_number(value: SupportsFloat) -> float | None:
    """``value`` as a JSON number, or None (null) when it is infinite or NaN: canonical JSON has neither."""
    number = float(value)
    return number if math.isfinite(number) else None


def json_values(value: Any) -> Any:
    """``value`` as plain JSON values, however nested: numpy numbers as Python ones (numpy registers
    them as ``numbers.Integral`` and ``Real``; this module imports no numpy), tuples as lists, every
    infinite or NaN float as None."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return json_number(value)
    if isinstance(value, Mapping):
        return {name: json_values(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_values(item) for item in value]
    return value


def sha256_hex(text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: the digest of a stored document."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


JSON_OBJECT = Kind(Mapping, "a JSON object")
JSON_LIST = Kind(list, "a list (a JSON array)")


def require_object(
    value: object, name: str, required: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, Any]:
    """``value`` (a copy) if it is a mapping with every ``required`` field and no field outside
    ``required`` and ``optional``."""
    check(name, value, JSON_OBJECT)
    mapping = cast(Mapping[Any, Any], value)
    required, optional = tuple(required), tuple(optional)
    unknown = sorted(str(field) for field in mapping if field not in required and field not in optional)
    if unknown:
        accepted = sorted(required + optional)
        raise InvalidInput(name, f"has unknown field(s) {unknown}; accepted fields: {accepted}")
    missing = sorted(field for field in required if field not in mapping)
    if missing:
        raise InvalidInput(name, f"is missing field(s) {missing}")
    return dict(mapping)


def require_format(value: object, version: int) -> None:
    """Raise unless the ``format`` field of a document is the integer ``version`` itself (not 1.0 or
    True for 1)."""
    check("format", value, Options((version,)))


def require_list(value: object, name: str) -> list[Any]:
    """``value`` if it is a list (a JSON array)."""
    return cast(list[Any], check(name, value, JSON_LIST))


def require_row(value: object, name: str, columns: Sequence[str]) -> Sequence[Any]:
    """``value`` if it is a list or tuple with one element per column."""
    if not isinstance(value, list | tuple) or len(value) != len(columns):
        shape = "pair" if len(columns) == 2 else "row"
        raise InvalidInput(
            name,
            f"must be a [{', '.join(columns)}] {shape} (a JSON array of {len(columns)} elements), "
            f"got {shown(value)}",
        )
    return value


def require_int(value: object, name: str, low: int = 0, high: int = INT64_MAX) -> int:
    """``value`` as an int if it is an integer (not a bool; numpy integers too) in [low, high]."""
    return cast(int, check(name, value, Interval(int, low, high)))


def require_number(
    value: object, name: str, low: float = 0.0, high: float = math.inf, *, high_open: bool = False
) -> float:
    """``value`` as a float if it is a finite number (not a bool; numpy numbers too) in [low, high], or
    in [low, high) with ``high_open``."""
    bound = None if high == math.inf else high
    return cast(float, check(name, value, Interval(float, low, bound, "left" if high_open else "both")))


def require_key(value: object, name: str, key_type: KeyType | None = None) -> Key:
    """``value`` as a plain str or int if it is a key, of ``key_type`` when one is given.

    A key is a str with a UTF-8 encoding (no lone surrogates) or an int in the signed 64-bit range.
    """
    kind = key_type_of(value, name)
    if key_type is not None and kind != key_type:
        raise InvalidInput(
            name, f"must be a {key_type!r} key (the key_type), got {kind!r} key {shown(value)}"
        )
    if kind == "int":
        return int(cast(int, value))
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            name, f"must be a key with a UTF-8 encoding, got {shown(text)} (a lone surrogate)"
        ) from None
    return text


def require_one_key_type(keys: Iterable[object], name: str) -> KeyType | None:
    """The one key type of ``keys`` (None when there are none); an error when they mix str and int."""
    return common_key_type(keys, name)


def require_key_type(
    value: object, *, found: KeyType | None = None, found_in: str = "the keys", allow_none: bool = False
) -> KeyType | None:
    """The ``key_type`` field: 'str' or 'int' (or None with ``allow_none``), agreeing with ``found``,
    the type of the keys the document holds (``found_in`` names them). None becomes ``found``."""
    if allow_none:
        check("key_type", value, Options(KEY_TYPES), NONE)
    else:
        check("key_type", value, Options(KEY_TYPES))
    if value is None:
        return found
    if found is not None and value != found:
        raise InvalidInput("key_type", f"must be {found!r}, the type of {found_in}, got {value!r}")
    return cast(KeyType, value)
