"""Key → canonical bytes → 64-bit hash → slot.

A key is a ``str`` (hashed as its UTF-8 bytes) or an ``int`` in the signed 64-bit range (hashed as
8 bytes, little-endian, two's complement). The key hash is ``XXH64(bytes, seed=42)`` as an unsigned
64-bit integer, which equals Spark SQL's ``xxhash64`` for ``string`` and ``bigint`` columns. The slot
of a key is the top ``slot_bits`` bits of its hash.

Integer keys are hashed by a numpy transcription of XXH64 for an 8-byte input, so whole arrays hash
without a Python loop. An Arrow string or binary array hashes the same way, one transcription per
value length (``hash_bytes_array``): values of one length are gathered into a matrix and hashed
together. A list of ``str`` keys goes through ``xxhash`` one at a time (``hash_str_keys``). The
``xxhash`` package is the oracle every transcription is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
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
# The four accumulators of XXH64's 32-byte stripes start from these (seed 42).
_STRIPE_STARTS = tuple(
    np.uint64(value % 2**64)
    for value in (
        HASH_SEED + 0x9E3779B185EBCA87 + 0xC2B2AE3D27D4EB4F,
        HASH_SEED + 0xC2B2AE3D27D4EB4F,
        HASH_SEED,
        HASH_SEED - 0x9E3779B185EBCA87,
    )
)
_SHORT_START = np.uint64((HASH_SEED + 0x27D4EB2F165667C5) % 2**64)
#: Values longer than this are hashed by ``xxhash`` one at a time (a matrix of them would be large).
MAX_GATHERED_LENGTH = 256


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


def _avalanche(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """XXH64's final mix of the accumulated hash."""
    h = h ^ (h >> np.uint64(33))
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def hash_int64_array(values: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Vectorized XXH64 (seed 42) of int64 values taken as 8 little-endian bytes.

    A transcription of XXH64 for inputs shorter than 32 bytes: one 8-byte lane, then the avalanche.
    uint64 arithmetic in numpy wraps modulo 2^64, exactly as the C code does.
    """
    lane = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    k1 = _rotl(lane * _P2, 31) * _P1
    h = _INT_START ^ k1
    h = _rotl(h, 27) * _P1 + _P4
    return _avalanche(h)


def hash_bytes_array(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint64]:
    """XXH64 (seed 42) of every value of an Arrow string or binary array (UTF-8 bytes for a string;
    a null hashes as the empty value), as a uint64 array: ``hash_key`` of each value, without a
    Python call per value.

    The values are grouped by length; each group of ``m`` values of length ``L`` is gathered into an
    ``m × L`` byte matrix whose rows XXH64 hashes together, stripe by stripe and lane by lane. Values
    longer than ``MAX_GATHERED_LENGTH``, and arrays with many distinct lengths per value, go through
    ``xxhash`` one at a time.
    """
    if isinstance(values, pa.ChunkedArray):
        parts = [hash_bytes_array(chunk) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    if len(values) == 0:
        return np.empty(0, dtype=np.uint64)
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1].astype(np.int64)
    if values.null_count:  # a null's slot may span bytes; it hashes as the empty value
        offsets = offsets.copy()
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        lengths = np.diff(offsets)
        lengths[nulls] = 0
    else:
        lengths = np.diff(offsets)
    starts = offsets[:-1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    hashes = np.empty(len(values), dtype=np.uint64)
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    group_lengths, group_starts = np.unique(sorted_lengths, return_index=True)
    group_ends = np.append(group_starts[1:], len(order))
    many_lengths = len(group_lengths) * 64 > len(values)
    groups = zip(group_lengths.tolist(), group_starts.tolist(), group_ends.tolist(), strict=True)
    for length, first, last in groups:
        rows = order[first:last]
        if length > MAX_GATHERED_LENGTH or (many_lengths and last - first < 64):
            hashes[rows] = [
                xxhash.xxh64_intdigest(data[start : start + length].tobytes(), HASH_SEED)
                for start in starts[rows].tolist()
            ]
        else:
            block = data[starts[rows][:, None] + np.arange(length)]
            hashes[rows] = _hash_equal_length(block)
    return hashes


def _round(accumulator: npt.NDArray[np.uint64], lane: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """XXH64's round: ``rotl(acc + lane · P2, 31) · P1``."""
    return _rotl(accumulator + lane * _P2, 31) * _P1


def _hash_equal_length(block: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """XXH64 (seed 42) of each row of an ``m × L`` byte matrix (a transcription of the reference
    algorithm: 32-byte stripes into four accumulators, then 8-byte lanes, a 4-byte word and single
    bytes, then the avalanche)."""
    count, length = block.shape
    lanes = np.ascontiguousarray(block[:, : length // 8 * 8]).view("<u8").astype(np.uint64, copy=False)
    position = 0
    if length >= 32:
        v1, v2, v3, v4 = (np.full(count, start, dtype=np.uint64) for start in _STRIPE_STARTS)
        for stripe in range(length // 32):
            v1 = _round(v1, lanes[:, 4 * stripe])
            v2 = _round(v2, lanes[:, 4 * stripe + 1])
            v3 = _round(v3, lanes[:, 4 * stripe + 2])
            v4 = _round(v4, lanes[:, 4 * stripe + 3])
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        zero = np.zeros(count, dtype=np.uint64)
        for accumulator in (v1, v2, v3, v4):
            h = (h ^ _round(zero, accumulator)) * _P1 + _P4
        position = length // 32 * 32
    else:
        h = np.full(count, _SHORT_START, dtype=np.uint64)
    h = h + np.uint64(length)
    while position + 8 <= length:
        h ^= _rotl(lanes[:, position // 8] * _P2, 31) * _P1
        h = _rotl(h, 27) * _P1 + _P4
        position += 8
    if position + 4 <= length:
        word = np.ascontiguousarray(block[:, position : position + 4]).view("<u4")[:, 0].astype(np.uint64)
        h ^= word * _P1
        h = _rotl(h, 23) * _P2 + _P3
        position += 4
    while position < length:
        h ^= block[:, position].astype(np.uint64) * _P5
        h = _rotl(h, 11) * _P1
        position += 1
    return _avalanche(h)


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
