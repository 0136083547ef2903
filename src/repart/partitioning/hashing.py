"""Key → canonical bytes → 64-bit hash → slot.

A key is a ``str`` (hashed as its UTF-8 bytes) or an ``int`` in the signed 64-bit range (hashed as
8 bytes, little-endian, two's complement). The key hash is ``XXH64(bytes, seed=42)`` as an unsigned
64-bit integer, which equals Spark SQL's ``xxhash64`` for ``string`` and ``bigint`` columns. The slot
of a key is the top ``slot_bits`` bits of its hash.

Integer keys are hashed by a numpy transcription of XXH64 for an 8-byte input, so whole arrays hash
without a Python loop; the ``xxhash`` package is the oracle it is tested against. String keys go
through ``xxhash`` one at a time (their lengths vary).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import cast

import numpy as np
import numpy.typing as npt
import xxhash

from repart.errors import InvalidInput
from repart.partitioning.domain import Key, KeyType, common_key_type, key_type_of

HASH_SEED = 42

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
# XXH64 of an 8-byte input starts from seed + PRIME64_5 + length.
_INT_START = np.uint64((HASH_SEED + 0x27D4EB2F165667C5 + 8) % 2**64)


def key_bytes(key: Key) -> bytes:
    """Canonical bytes of a key: UTF-8 for str, 8 bytes little-endian two's complement for int."""
    if key_type_of(key) == "str":
        return str(key).encode("utf-8")
    return int(key).to_bytes(8, "little", signed=True)


def hash_key(key: Key) -> int:
    """``XXH64(key_bytes(key), seed=42)`` as an unsigned 64-bit int."""
    return xxhash.xxh64_intdigest(key_bytes(key), HASH_SEED)


def _rotl(x: npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


def hash_int64_array(values: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Vectorized XXH64 (seed 42) of int64 values taken as 8 little-endian bytes.

    A transcription of XXH64 for inputs shorter than 32 bytes: one 8-byte lane, then the avalanche.
    uint64 arithmetic in numpy wraps modulo 2^64, exactly as the C code does.
    """
    lane = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    k1 = _rotl(lane * _P2, 31) * _P1
    h = _INT_START ^ k1
    h = _rotl(h, 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def hash_keys(
    keys: Sequence[Key] | npt.NDArray[np.generic], key_type: KeyType | None = None
) -> npt.NDArray[np.uint64]:
    """Hashes of many keys of one type as a uint64 array.

    An integer numpy array is hashed fully vectorized. Other sequences are checked for one key type
    (pass ``key_type`` when the caller has already checked).
    """
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        return hash_int64_array(keys.astype(np.int64, copy=False))
    if key_type is None:
        key_type = common_key_type(keys)
    if key_type is None:
        return np.empty(0, dtype=np.uint64)
    if key_type == "int":
        return hash_int64_array(np.asarray(keys, dtype=np.int64))
    return hash_str_keys(cast(Sequence[str], keys))


def hash_str_keys(keys: Sequence[str]) -> npt.NDArray[np.uint64]:
    """Hashes of many str keys as a uint64 array, by the fastest loop of ``xxhash`` calls.

    ``str.encode`` doubles as the type check (it rejects anything but a str), so no separate pass
    over the keys is needed; a non-str key raises ``InvalidInput("keys")``, as ``common_key_type`` does.
    """
    try:
        hashes = map(xxhash.xxh64_intdigest, map(str.encode, keys), repeat(HASH_SEED))
        return np.fromiter(hashes, dtype=np.uint64, count=len(keys))
    except TypeError:
        kind = common_key_type(keys)  # raises for an unsupported key or mixed key types
        raise InvalidInput("keys", f"must be 'str' keys, got {kind!r} keys") from None


def slot_of_hash(key_hash: int, slot_bits: int) -> int:
    """Slot of one hash: its top ``slot_bits`` bits."""
    return key_hash >> (64 - slot_bits)


def slots_of_hashes(hashes: npt.NDArray[np.uint64], slot_bits: int) -> npt.NDArray[np.int64]:
    """Slots of many hashes (top ``slot_bits`` bits) as int64."""
    return (hashes >> np.uint64(64 - slot_bits)).astype(np.int64)
