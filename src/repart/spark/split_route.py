"""The rows of split keys pick their candidate in the JVM (DESIGN §11.3).

``repart.spark.route`` looks a key up in its split function's home function, in which every split key
is a routing exception whose code is ``-(i + 1)``, i its index in the split table (``split_codes``).
A row with a negative code reads, with Spark SQL expressions only (no Python UDF):

    r = shiftrightunsigned(xxhash64(row columns), 32)        in [0, 2^32), computed for split rows only
    channel = candidates[i][#{j : thresholds[i][j] <= r}]

(the row columns: ``row_cols``, by default every column but the key, ``row_columns``), which is
``SplitFunction.lookup(key, row_hash)``: the count of thresholds at or below r is the index of the
first threshold above it (``bisect_right``). Only the first d - 1 thresholds of a key with d
candidates are kept (the last, 2^32, is above every r). Thresholds and candidates are two constants,
``array<array<bigint>>`` and ``array<array<int>>`` (``repart.spark.constants``).

The count is a branchless binary search of ceil(log2(L + 1)) steps, L the longest threshold list:
``pos += step if thresholds[i][pos + step - 1] <= r``, steps halving from the largest power of two
not above L; an index past a key's list reads null, which counts as above r. Each step is its own
projection over the previous step's ``pos`` column: an expression naming ``pos`` twice is not inlined
by Spark's CollapseProject, so the plan grows with log L instead of doubling at every step, and
whole-stage codegen still runs the steps as one loop over the rows. The row hash (the costly part:
every hashed column) is a column of its own for the same reason. Every step, and the row hash, sits
under ``code < 0``, so the row of an unsplit key pays one integer comparison per step and nothing
else. Integer steps use bitwise operations (``~code`` is ``-code - 1``; ``pos`` has no bits below
2·step, so ``|`` adds), which Spark's ANSI mode does not wrap in overflow checks. The helper columns
are dropped at the end.

Not chosen: a ``CASE`` with one branch per candidate, or a balanced tree of them (the generated code
grows with d, up to N for W-Choices, where the steps grow with log d), higher-order functions
(``filter``, ``aggregate``: a lambda interpreted per element), and Spark's ``ArrayBinarySearch``
expression (not a SQL function).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from repart.errors import InvalidInput
from repart.partitioning.domain import Key
from repart.partitioning.split.function import SplitFunction
from repart.spark.constants import constant
from repart.spark.keys import quoted

#: Prefix of the helper columns (code, row hash, search position), made unique against the frame's.
HELPER_PREFIX = "_repart_split"


def split_codes(version: SplitFunction) -> dict[Key, int]:
    """Each split key's code ``-(i + 1)``, i its index in the split table (which is in key order)."""
    return {key: -(index + 1) for index, key in enumerate(version.split)}


def row_columns(df: DataFrame, row_cols: Sequence[str] | None, key_col: str) -> list[str]:
    """The columns whose ``xxhash64`` is a row's hash: ``row_cols``, or by default every column of
    ``df`` but the key column ``key_col`` (the key column alone when it is the only one).

    The key is the same in every row of a split key, so hashing it spreads nothing: the default
    leaves it out, which saves hashing a string per split row (measured in docs/DECISIONS.md, "The
    candidate is a binary search in one projection per step"). InvalidInput ``row_cols`` unless it is
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
    df: DataFrame, code: Column, version: SplitFunction, *, channel_col: str, row_cols: Sequence[str]
) -> DataFrame:
    """``df`` with ``channel_col``: ``code`` where it is a channel (≥ 0), else the candidate of split key
    ``-code - 1`` that the row's hash of ``row_cols`` picks (module docstring)."""
    code_col, top_col, pos_col = _helper_names(df, 3)
    keys = list(version.split)
    bounds = constant([list(version.thresholds(key)[:-1]) for key in keys], "array<array<bigint>>")
    candidates = constant([list(version.split[key].candidates) for key in keys], "array<array<int>>")
    longest = max(len(entry.candidates) for entry in version.split.values()) - 1

    code_value = F.col(code_col)
    index = F.bitwise_not(code_value)  # -code - 1, without the overflow checks of ANSI arithmetic
    row_hash = F.xxhash64(*(F.col(quoted(name)) for name in row_cols))
    staged = df.withColumn(code_col, code).withColumn(
        top_col, F.when(code_value < 0, F.shiftrightunsigned(row_hash, 32))
    )
    top, pos = F.col(top_col), F.col(pos_col)
    key_bounds = F.get(bounds, index)
    step = 1 << (longest.bit_length() - 1)
    first = F.when(F.get(key_bounds, F.lit(step - 1)) <= top, step).otherwise(0)
    staged = staged.withColumn(pos_col, F.when(code_value < 0, first))
    step >>= 1
    while step:  # pos is a sum of larger steps: its bits below 2·step are 0, so | is +
        above = F.get(key_bounds, pos.bitwiseOR(step - 1)) <= top  # null past the list: not counted
        level = F.when(above, pos.bitwiseOR(step)).otherwise(pos)
        staged = staged.withColumn(pos_col, F.when(code_value < 0, level))
        step >>= 1
    channel = F.when(code_value >= 0, code_value).otherwise(F.get(F.get(candidates, index), pos))
    return staged.select(*(F.col(quoted(name)) for name in df.columns), channel.alias(channel_col))


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
