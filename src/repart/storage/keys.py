"""Keys in table columns: an int key in ``key_int``, a str key as UTF-8 bytes in ``key_utf8``.

Two columns keep both key types exact: BIGINT holds the whole signed 64-bit range, and bytes hold any
str (PostgreSQL text cannot hold NUL characters, which are valid keys).
"""

from __future__ import annotations

from repart.errors import Corrupt
from repart.partitioning.domain import Key


def key_columns(key: Key) -> dict[str, int | bytes | None]:
    """The ``key_int`` and ``key_utf8`` column values of ``key``."""
    if isinstance(key, str):
        return {"key_int": None, "key_utf8": key.encode("utf-8")}
    return {"key_int": key, "key_utf8": None}


def key_from_columns(key_int: int | None, key_utf8: bytes | None) -> Key:
    """The key stored as ``key_int`` or ``key_utf8``."""
    if key_utf8 is not None:
        return bytes(key_utf8).decode("utf-8")
    if key_int is None:
        raise Corrupt("a stored key has neither key_int nor key_utf8")
    return key_int
