"""The key column of a DataFrame and its hash and slot as JVM expressions.

repart hashes a key as ``XXH64(bytes, seed=42)``: a ``str`` as its UTF-8 bytes, an ``int`` as 8 bytes
little-endian. Spark SQL's ``xxhash64`` computes exactly that for ``string`` and ``bigint`` columns
(returning the hash as a signed long), so smaller integer columns are cast to ``bigint`` first and the
hash and the slot ``h >> (64 - S)`` never leave the JVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from repart.errors import InvalidInput
from repart.partitioning.domain import KeyType, check_slot_bits

_INT_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
ACCEPTED_TYPES = "string, tinyint, smallint, int, bigint"


@dataclass(frozen=True)
class KeyColumn:
    """A DataFrame's key column: its name, the Spark type it has and the repart key type it maps to."""

    name: str
    spark_type: str
    key_type: KeyType

    @property
    def value(self) -> Column:
        """The key as repart hashes it: the string itself, or the integer as a bigint."""
        column = F.col(quoted(self.name))
        return column if self.key_type == "str" else column.cast("bigint")

    @property
    def hash(self) -> Column:
        """``XXH64(key, seed=42)`` as a signed long (the unsigned hash's two's complement)."""
        return F.xxhash64(self.value)

    def slot(self, slot_bits: int) -> Column:
        """``slot = h >> (64 - S)``, an unsigned shift, in ``[0, 2^S)``."""
        return F.shiftrightunsigned(self.hash, 64 - check_slot_bits(slot_bits))

    @property
    def is_null(self) -> Column:
        return F.col(quoted(self.name)).isNull()


def key_column(
    df: DataFrame, name: str, expected: KeyType | None = None, *, field: str = "key_col"
) -> KeyColumn:
    """Resolve ``name`` in ``df`` as a key column; InvalidInput ``field`` (the caller's name for the
    argument) if it is missing, of a type repart does not hash, or not of the ``expected`` key type."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(field, f"must be a column name, got {name!r}")
    fields = {column.name: column for column in df.schema.fields}
    if name not in fields:
        raise InvalidInput(
            field,
            f"must name a column: the DataFrame has no column {name!r}; its columns are "
            f"{', '.join(fields) or '(none)'}",
        )
    data_type = fields[name].dataType
    if isinstance(data_type, T.StringType):
        kind: KeyType = "str"
    elif isinstance(data_type, _INT_TYPES):
        kind = "int"
    else:
        raise InvalidInput(
            field,
            f"must be a key column: column {name!r} has type {data_type.simpleString()}; "
            f"accepted key types: {ACCEPTED_TYPES}",
        )
    if expected is not None and kind != expected:
        raise InvalidInput(
            field,
            f"must hold the version's keys: column {name!r} holds {kind!r} keys "
            f"({data_type.simpleString()}) but the version routes {expected!r} keys",
        )
    return KeyColumn(name=name, spark_type=data_type.simpleString(), key_type=kind)


def quoted(name: str) -> str:
    """``name`` as a column reference that survives dots and backticks in it."""
    return "`" + name.replace("`", "``") + "`"
