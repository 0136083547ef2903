"""Order-independent checksums of keyed state ("verifies row counts and a checksum").

Every row gets a 64-bit hash of its key and of every state column; a table's checksum is the sum of
its row hashes modulo 2^64. A sum does not depend on the order of the rows, so the checksum of a
channel is the sum of the checksums of its files, and a migration that moves rows from one channel to
another moves exactly their row hashes: ``after = before − out + in`` per channel, the total
unchanged.

- The key hash is the routing hash (``repart.partitioning.hashing``), so the same pass
  also yields each row's slot.
- A fixed-width column (integers, floats, booleans, dates, timestamps) is hashed by its bit pattern
  through the 64-bit finalizer of MurmurHash3, fully vectorized; a string or binary column by the
  ``XXH64`` of each value (``repart.partitioning.hashing.hash_bytes_array``, vectorized too). A null
  hashes to a constant of its own.
- A row's hash folds the column hashes in schema order, each through the finalizer, so swapping two
  values between columns or between rows changes the checksum.
- A null in a column the store's schema gained after its creation (``Layout.added``) folds nothing:
  a row read from a file written before the column existed, where it reads as null, keeps the hash
  it was written with, and so does the same row written again with the column.

Pure pyarrow + numpy: the functions run on Spark executors too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.partitioning.domain import KeyType
from repart.partitioning.hashing import hash_bytes_array, hash_int64_array

U64 = npt.NDArray[np.uint64]

_NULL = np.uint64(0x9E3779B97F4A7C15)
_FOLD = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def is_hashable_type(data_type: pa.DataType) -> bool:
    """True for the Arrow types a state column may have (``column_hashes`` hashes them)."""
    return bool(
        pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_boolean(data_type)
        or _is_fixed_temporal(data_type)
        or is_bytes_like(data_type)
    )


def mix64(values: U64) -> U64:
    """The 64-bit finalizer of MurmurHash3 (fmix64), elementwise; uint64 arithmetic wraps."""
    h = values ^ (values >> _S33)
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


def key_hashes(keys: pa.ChunkedArray | pa.Array, key_type: KeyType) -> U64:
    """The routing hashes of a key column without nulls, vectorized for either key type."""
    if key_type == "int":
        return hash_int64_array(keys.to_numpy().astype(np.int64, copy=False))
    return hash_bytes_array(keys)


def column_hashes(column: pa.ChunkedArray | pa.Array) -> U64:
    """A 64-bit hash per value of a state column (bit pattern through ``mix64``, strings by XXH64)."""
    data_type = column.type
    if pa.types.is_boolean(data_type):
        bits = pc.fill_null(column, False).to_numpy(zero_copy_only=False).astype(np.uint64)
    elif is_bytes_like(data_type):
        bits = hash_bytes_array(column)
    else:
        width = data_type.bit_width
        if _is_fixed_temporal(data_type):
            column = column.cast(pa.int32() if width == 32 else pa.int64())
        raw = pc.fill_null(column, pa.scalar(0).cast(column.type)).to_numpy(zero_copy_only=False)
        bits = raw.view(f"u{width // 8}").astype(np.uint64)
    hashes = mix64(bits + np.uint64(1))
    if column.null_count:
        hashes[column.is_null().to_numpy(zero_copy_only=False)] = _NULL
    return hashes


def row_hashes(table: pa.Table, key_hash: U64, state_cols: Sequence[str], added: Collection[str] = ()) -> U64:
    """Per-row hashes of ``table``: the key hash (computed once by the caller, with the slots) folded
    with the hashes of each state column, in order; a null of a column in ``added`` (the columns the
    schema gained after the store's creation) is not folded."""
    row = mix64(key_hash)
    for name in state_cols:
        column = table.column(name)
        folded = mix64(row * _FOLD + column_hashes(column))
        if name in added and column.null_count:
            folded = np.where(column.is_valid().to_numpy(zero_copy_only=False), folded, row)
        row = folded
    return row


def checksum(hashes: U64) -> int:
    """The order-independent checksum of rows with the given row hashes: their sum modulo 2^64."""
    return int(hashes.sum(dtype=np.uint64)) if hashes.size else 0


def add_checksums(a: int, b: int) -> int:
    """``a + b`` modulo 2^64 (checksums of disjoint row sets add)."""
    return (a + b) % 2**64


def is_bytes_like(data_type: pa.DataType) -> bool:
    """True for string and binary types (hashed per value)."""
    return bool(
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
    )


def _is_fixed_temporal(data_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_timestamp(data_type)
        or pa.types.is_date(data_type)
        or pa.types.is_time(data_type)
        or pa.types.is_duration(data_type)
    )
