"""Spark SQL's ``hash`` (Murmur3 x86 32-bit, seed 42), vectorized, and the state partition a stateful
streaming query gives a key: ``pmod(hash(key), n)``.

A Structured Streaming aggregation, deduplication or join places its state by the shuffle before its
operator, ``hashpartitioning(keys, n)``, which is ``pmod(murmur3(keys, 42), n)`` over the key columns.
repart cannot change that function, only n, so choosing n with skew in view needs the hot keys'
hashes exactly as Spark computes them:

- an ``int`` column hashes its 4 bytes in one Murmur3 round, a ``bigint`` its low then its high 4
  bytes (one round each), then the finalizer with the length (4 or 8);
- a ``string`` (its UTF-8 bytes) hashes each whole 4-byte little-endian word in one round, then *each
  remaining byte, sign-extended to an int, in a round of its own* (Spark's historical variant of the
  tail, kept for compatibility of partitioning; standard Murmur3 folds the tail bytes into one word),
  then the finalizer with the byte length.

uint32 arithmetic in numpy wraps modulo 2^32, as Java's int arithmetic does. Spark's own ``F.hash``
is the oracle the tests compare against. Nulls are refused: Spark passes the seed through for a null,
but a state key is never null.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from repart.errors import InvalidInput
from repart.partitioning.domain import Key, KeyType
from repart.validation import POSITIVE_INT, check

SPARK_HASH_SEED = 42

U32 = npt.NDArray[np.uint32]
I32 = npt.NDArray[np.int32]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_N = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)


def _rotl(x: U32, bits: int) -> U32:
    return (x << np.uint32(bits)) | (x >> np.uint32(32 - bits))


def _mix_k1(k1: U32) -> U32:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: U32, k1: U32) -> U32:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + _N


def _finalize(h1: U32, length: int) -> U32:
    h1 = h1 ^ np.uint32(length)
    h1 ^= h1 >> np.uint32(16)
    h1 *= _F1
    h1 ^= h1 >> np.uint32(13)
    h1 *= _F2
    h1 ^= h1 >> np.uint32(16)
    return h1


def _seeds(count: int) -> U32:
    return np.full(count, SPARK_HASH_SEED, dtype=np.uint32)


def _refuse_nulls(values: pa.Array | pa.ChunkedArray) -> None:
    if values.null_count:
        raise InvalidInput(
            "values", f"must hold no nulls (a state key is never null), got {values.null_count}"
        )


def _integers(values: npt.ArrayLike | pa.Array | pa.ChunkedArray, bits: int) -> npt.NDArray[np.int64]:
    """``values`` as a 1-d int64 array if every value is an integer that fits a signed ``bits``-bit
    int; ``InvalidInput("values")`` otherwise (floats, which would be truncated, included)."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        _refuse_nulls(values)
        values = values.to_numpy()
    array = np.asarray(values)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    requirement = f"must be a 1-d array of integers in [{low}, {high}]"
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InvalidInput("values", f"{requirement}, got dtype {array.dtype} and shape {array.shape}")
    if array.size and (int(array.min()) < low or int(array.max()) > high):
        raise InvalidInput("values", f"{requirement}, got values in [{array.min()}, {array.max()}]")
    return array.astype(np.int64)


def spark_hash_ints(values: npt.ArrayLike | pa.Array | pa.ChunkedArray) -> I32:
    """Spark's ``hash`` of ``int`` (32-bit) values, as signed 32-bit ints: one Murmur3 round of the
    value, then the finalizer with length 4."""
    ints = _integers(values, 32).astype(np.int32).view(np.uint32)
    return _finalize(_mix_h1(_seeds(len(ints)), _mix_k1(ints)), 4).view(np.int32)


def spark_hash_longs(values: npt.ArrayLike | pa.Array | pa.ChunkedArray) -> I32:
    """Spark's ``hash`` of ``bigint`` (64-bit) values, as signed 32-bit ints: a round of the low 4
    bytes, a round of the high 4 bytes, then the finalizer with length 8."""
    longs = _integers(values, 64).view(np.uint64)
    low = (longs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (longs >> np.uint64(32)).astype(np.uint32)
    h1 = _mix_h1(_mix_h1(_seeds(len(longs)), _mix_k1(low)), _mix_k1(high))
    return _finalize(h1, 8).view(np.int32)


def spark_hash(keys: Sequence[Key], key_type: KeyType) -> I32:
    """Spark's ``hash`` of repart keys of ``key_type``: a ``str`` key as a ``string`` column, an
    ``int`` key as a ``bigint`` column (repart's int keys are 64-bit)."""
    if key_type == "str":
        return spark_hash_strings(pa.array(keys, type=pa.string()))
    return spark_hash_longs(np.asarray(keys, dtype=np.int64))


def spark_hash_strings(values: pa.Array | pa.ChunkedArray) -> I32:
    """Spark's ``hash`` of ``string`` values (a pyarrow ``string`` or ``large_string`` array, sliced or
    chunked alike), as signed 32-bit ints: the UTF-8 bytes' whole words, then each tail byte in a round
    of its own, then the finalizer with the byte length.

    The strings are hashed in groups of equal byte length, each group's bytes gathered into one matrix,
    so the cost is one pass over the data per distinct length."""
    if not isinstance(values, pa.Array | pa.ChunkedArray) or not (
        pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    ):
        raise InvalidInput(
            "values", f"must be a pyarrow string or large_string array, got {type(values).__name__}"
        )
    _refuse_nulls(values)
    if isinstance(values, pa.ChunkedArray):
        parts = [_hash_string_array(chunk) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
    return _hash_string_array(values)


def _hash_string_array(values: pa.Array) -> I32:
    if len(values) == 0:
        return np.empty(0, dtype=np.int32)
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(
        offsets_buffer, dtype=np.int64 if pa.types.is_large_string(values.type) else np.int32
    )
    offsets = offsets[values.offset : values.offset + len(values) + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    lengths, starts = np.diff(offsets), offsets[:-1]
    hashes = np.empty(len(values), dtype=np.uint32)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        block = data[starts[rows][:, None] + np.arange(length)]
        h1 = _seeds(len(rows))
        aligned = length - length % 4
        words = np.ascontiguousarray(block[:, :aligned]).view("<u4").astype(np.uint32)
        for word in range(aligned // 4):
            h1 = _mix_h1(h1, _mix_k1(words[:, word]))
        for position in range(aligned, length):
            signed = block[:, position].view(np.int8).astype(np.int32).view(np.uint32)
            h1 = _mix_h1(h1, _mix_k1(signed))
        hashes[rows] = _finalize(h1, length)
    return hashes.view(np.int32)


def spark_partitions(hashes: npt.ArrayLike, n_partitions: int) -> npt.NDArray[np.int64]:
    """``pmod(hash, n)``: the state partition of each key (by its Spark hash) among ``n_partitions``
    (an integer >= 1), in [0, n_partitions)."""
    n = check("n_partitions", n_partitions, POSITIVE_INT)
    partitions: npt.NDArray[np.int64] = np.mod(np.asarray(hashes, dtype=np.int64), n)
    return partitions
