"""The rows of split keys pick their candidate in the JVM.

``repart.spark.route`` looks a key up in its split function's home function, in which every split key
is a routing exception whose "channel" is a negative *code* (``AliasLayout``). A row with a negative
code reads, with Spark SQL expressions only (no Python UDF), its key's Walker alias table
(``repart.partitioning.split.alias``):

    h = xxhash64(row columns)                              computed for split rows only
    m = ~code = offset << 6 | (64 − b)                     the key's table and its bucket bits b
    entry = entries[(m >> 6) | (h >>> (m & 63))]           one array read
    channel = own(entry) if (h & (2^32 − 1)) < cut(entry) else alias(entry)

(the row columns: ``row_cols``, by default every column but the key, ``row_columns``), which is
``SplitFunction.lookup(key, h)``. The entries are one flat ``array<bigint>`` constant
(``repart.spark.constants``): each split key's 2^b buckets at its offset, the widest tables first, so
that every offset is a multiple of its table's size and ``|`` adds the bucket. An entry packs a bucket
as ``cut << 32 | own channel << 16 | alias channel`` (channels are below 2^16; a cut of 2^32, "always
its own", is written as cut 0: such a bucket is its own alias). The integer operations are bitwise
ones, which Spark's ANSI mode does not wrap in overflow checks, and the constant holds Σ 2^b < 2 Σ d
entries.

The row hash and the entry are projections of their own: each is referenced twice, so Spark's
CollapseProject keeps them apart instead of computing them twice, and whole-stage codegen still runs
the projections as one loop over the rows. Both sit under ``code < 0``, so the row of an unsplit key
pays three integer comparisons and nothing else. The helper columns are dropped at the end.

Measured against the search it replaced (a branchless binary search over the key's cumulative
thresholds, one projection per step, ⌈log₂ d⌉ steps), side by side on the 10M-row benchmark with 6M
split rows and d = 8 (docs/results/spark-split.txt, exploratory run (h)): ``route()`` alone 0.76 s
against 0.87 s (home function 0.63 s), ``partition()`` 1.28× Spark's ``repartition(32, key)`` against
1.34× (the preserving function 1.22×). Not chosen: a ``CASE`` per candidate (the generated code grows
with d, up to N for W-Choices), higher-order functions (``filter``, ``aggregate``: a lambda
interpreted per element), a guide table over the cumulative thresholds (D-Choices gives weights of a
few 2^−32, so thresholds lie a few units apart and no table under 2^17 entries per key leaves one
threshold per entry), and hashing every row to spare the branch (slower: 0.88 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from repart.errors import InvalidInput
from repart.partitioning.domain import Key
from repart.partitioning.split.alias import BUCKET_SPAN
from repart.partitioning.split.function import SplitFunction
from repart.spark.constants import constant
from repart.spark.keys import quoted

#: Prefix of the helper columns (code, row hash, alias entry), made unique against the frame's.
HELPER_PREFIX = "_repart_split"
_LOW_32 = 2**32 - 1
_CHANNEL_MASK = 2**16 - 1


class AliasLayout(NamedTuple):
    """A split function's split keys as ``route_split`` reads them: each key's code (negative, marking
    it in the home function's exception groups) and the packed alias entries (module docstring)."""

    codes: dict[Key, int]
    entries: list[int]


def alias_layout(version: SplitFunction) -> AliasLayout:
    """Each split key's table at an offset (widest first, then in key order) and its code
    ``~(offset << 6 | (64 − b))``; the entries ``cut << 32 | own << 16 | alias`` as signed 64-bit
    integers. ``SplitFunction`` keeps the buckets within ``MAX_ALIAS_BUCKETS`` = 2^25, so every offset
    fits the code's 25 bits and the code is an int below every channel."""
    codes: dict[Key, int] = {}
    entries: list[int] = []
    for key in sorted(version.split, key=lambda key: -version.alias_table(key).bucket_bits):  # stable
        table, candidates = version.alias_table(key), version.split[key].candidates
        codes[key] = ~(len(entries) << 6 | (64 - table.bucket_bits))
        for bucket, (cut, alias) in enumerate(zip(table.cuts, table.aliases, strict=True)):
            own = candidates[bucket] if bucket < len(candidates) else 0  # padding: its cut is 0
            packed = (0 if cut == BUCKET_SPAN else cut) << 32 | own << 16 | candidates[alias]
            entries.append(packed - 2**64 if packed >= 2**63 else packed)
    return AliasLayout(codes, entries)


def row_columns(df: DataFrame, row_cols: Sequence[str] | None, key_col: str) -> list[str]:
    """The columns whose ``xxhash64`` is a row's hash: ``row_cols``, or by default every column of
    ``df`` but the key column ``key_col`` (the key column alone when it is the only one).

    The key is the same in every row of a split key, so hashing it spreads nothing: the default
    leaves it out, which saves hashing a string per split row (measured in docs/DECISIONS.md, "The
    default row hash leaves the key out"). InvalidInput ``row_cols`` unless it is
    a non-empty list of distinct column names of ``df`` whose types Spark can hash (a map or a variant,
    or a struct or array holding one, cannot be: pass ``row_cols`` without it).
    """
    types = {field.name: field.dataType for field in df.schema.fields}
    if row_cols is None:
        names = [name for name in df.columns if name != key_col] or [key_col]
    elif isinstance(row_cols, str) or not isinstance(row_cols, Sequence) or not row_cols:
        raise InvalidInput("row_cols", f"must be a non-empty list of column names, got {row_cols!r}")
    else:
        names = list(row_cols)
        unknown = [name for name in names if name not in types]
        if unknown:
            raise InvalidInput(
                "row_cols", f"must name columns of the DataFrame {list(types)}: got unknown {unknown}"
            )
        if len(set(names)) != len(names):
            raise InvalidInput("row_cols", f"must name each column once, got {names}")
    unhashable = [name for name in names if _unhashable(types[name])]
    if unhashable:
        raise InvalidInput(
            "row_cols",
            f"must be columns Spark can hash: {unhashable} hold maps or variants; pass row_cols without them",
        )
    return names


def route_split(
    df: DataFrame, code: Column, hashed: Column, layout: AliasLayout, *, channel_col: str
) -> DataFrame:
    """``df`` with ``channel_col``: ``code`` where it is a channel (≥ 0), else the candidate that the
    bigint ``hashed`` picks in the alias table ``code`` names in ``layout`` (module docstring);
    ``hashed`` is evaluated only for rows with a negative code."""
    code_col, hash_col, entry_col = _helper_names(df, 3)
    code_value, hash_value, entry = F.col(code_col), F.col(hash_col), F.col(entry_col)
    table = F.bitwise_not(code_value)  # offset << 6 | (64 - bucket bits)
    bucket = F.call_function("shiftrightunsigned", hash_value, table.bitwiseAND(63)).cast("int")
    index = F.shiftright(table, 6).bitwiseOR(bucket)
    staged = (
        df.withColumn(code_col, code)
        .withColumn(hash_col, F.when(code_value < 0, hashed))
        .withColumn(
            entry_col, F.when(code_value < 0, F.get(constant(layout.entries, "array<bigint>"), index))
        )
    )
    below_cut = hash_value.bitwiseAND(_LOW_32) < F.shiftrightunsigned(entry, 32)
    pick = F.when(below_cut, F.shiftright(entry, 16).bitwiseAND(_CHANNEL_MASK)).otherwise(
        entry.bitwiseAND(_CHANNEL_MASK)
    )
    channel = F.when(code_value >= 0, code_value).otherwise(pick.cast("int"))
    return staged.select(*(F.col(quoted(name)) for name in df.columns), channel.alias(channel_col))


def row_hash(row_cols: Sequence[str]) -> Column:
    """A row's hash: Spark's ``xxhash64`` of ``row_cols`` (checked by ``row_columns``)."""
    return F.xxhash64(*(F.col(quoted(name)) for name in row_cols))


def _helper_names(df: DataFrame, count: int) -> list[str]:
    """``count`` column names that ``df`` does not have, whatever its case sensitivity."""
    taken = {name.lower() for name in df.columns}
    names: list[str] = []
    serial = 0
    while len(names) < count:
        name = f"{HELPER_PREFIX}_{serial}"
        if name.lower() not in taken:
            names.append(name)
        serial += 1
    return names


def _unhashable(data_type: T.DataType) -> bool:
    """Whether Spark cannot hash ``data_type``: a map or a variant, or a struct or array holding one."""
    if isinstance(data_type, T.MapType | T.VariantType):
        return True
    if isinstance(data_type, T.ArrayType):
        return _unhashable(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_unhashable(field.dataType) for field in data_type.fields)
    return False
