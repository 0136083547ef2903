"""Merging partial state rows into one row per key.

In split mode a hot key's state is one *partial* row on each channel its rows were routed to.
Reading the state (``StateStore.read_merged``), and later consolidating a key's partials into its
home channel, merges those rows with the region's merge: either the ``MergeSpec`` it declares
(``repart.protocol.merge``: each state column with ``sum``, ``count``, ``min`` or ``max``; the
partials of a count merge by their sum), which
``merge_function`` turns into a pyarrow ``group_by``, or a function of the user's
(``pa.Table -> pa.Table``) for state that is not column-wise, such as sketches.

This module takes the spec by its shape (an object with a ``columns`` mapping, ``MergeColumns``)
rather than importing ``repart.protocol``: the state store depends on ``partitioning`` and
``migration`` only. ``merged`` checks what a user's function returns: the input's schema,
and exactly one row for every key of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from repart.errors import InvalidInput
from repart.validation import shown

__all__ = ["Merge", "MergeColumns", "merge_function", "merged"]

#: A merge: the partial rows of any number of keys in, one row per key out, with the same schema.
Merge = Callable[[pa.Table], pa.Table]
OPERATIONS = ("sum", "count", "min", "max")
#: How partial values merge: a count's partials are summed.
_PARTIAL_AGGREGATE = {"sum": "sum", "count": "sum", "min": "min", "max": "max"}


class MergeColumns(Protocol):
    """What ``merge_function`` reads of a ``repart.protocol.merge.MergeSpec``: each state column (all
    but the key) with the operation, one of ``OPERATIONS``, that merges its partial values."""

    @property
    def columns(self) -> Mapping[str, str]: ...


def merge_function(spec: MergeColumns, *, key_col: str | None = None) -> Merge:
    """The merge that ``spec`` declares: partial rows grouped by key, each column merged by its
    operation, the result cast back to the column's type (one row per key, the input's schema).

    The key column is ``key_col``, or else the one column of the table that ``spec`` does not name.
    The returned function raises InvalidInput ``merge`` when the table's columns are not the spec's
    and one key column, when an operation does not apply to its column's type (``sum`` of strings),
    or when a sum overflows its column's type.
    """
    columns = _checked_columns(spec)

    def merge(table: pa.Table) -> pa.Table:
        key = _key_of(table.schema, columns, key_col)
        try:
            grouped = table.group_by(key, use_threads=False).aggregate(
                [(name, _PARTIAL_AGGREGATE[operation]) for name, operation in columns.items()]
            )
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise InvalidInput(
                "merge", f"must apply to the state's column types {table.schema.types}: {error}"
            ) from None
        arrays = []
        for field in table.schema:
            if field.name == key:
                arrays.append(grouped.column(key))
                continue
            operation = columns[field.name]
            try:
                arrays.append(
                    grouped.column(f"{field.name}_{_PARTIAL_AGGREGATE[operation]}").cast(field.type)
                )
            except pa.ArrowInvalid as error:
                raise InvalidInput(
                    "merge",
                    f"must fit the column's type: the {operation} of column {field.name!r} does not fit "
                    f"{field.type}: {error}",
                ) from None
        return pa.Table.from_arrays(arrays, schema=table.schema)

    return merge


def merged(table: pa.Table, merge: MergeColumns | Merge, key_col: str) -> pa.Table:
    """``table``'s partial rows merged by ``merge`` (a spec, or a function of the user's) into one row
    per key of ``key_col``. A function's result is checked: InvalidInput ``merge`` unless it is a
    table with ``table``'s schema holding exactly one row for each key of ``table``."""
    if not callable(merge):
        return merge_function(merge, key_col=key_col)(table)
    result = merge(table)
    if not isinstance(result, pa.Table):
        raise InvalidInput("merge", f"must return a pyarrow Table, got {type(result).__name__}")
    if not result.schema.equals(table.schema):
        raise InvalidInput(
            "merge",
            f"must return the state's schema ({_shown_schema(table.schema)}), "
            f"got ({_shown_schema(result.schema)})",
        )
    keys = result.column(key_col)
    counts = keys.value_counts()
    repeated = pc.filter(counts, pc.greater(counts.field("counts"), 1))
    if len(repeated):
        first = repeated[0].as_py()
        raise InvalidInput(
            "merge",
            f"must return one row per key: it returned {first['counts']} rows for key {first['values']!r}",
        )
    given = pc.unique(table.column(key_col))
    unknown = pc.invert(pc.is_in(keys, value_set=given))
    if pc.any(unknown).as_py():
        stray = pc.filter(keys, unknown)[0].as_py()
        raise InvalidInput(
            "merge", f"must return the keys it was given: it returned key {stray!r}, not in its input"
        )
    if len(keys) != len(given):
        missing = pc.filter(given, pc.invert(pc.is_in(given, value_set=keys)))[0].as_py()
        raise InvalidInput(
            "merge", f"must return a row for every key it was given: key {missing!r} is missing"
        )
    return result


def _checked_columns(spec: object) -> dict[str, str]:
    """The spec's columns, checked: InvalidInput ``merge`` unless it maps column names to operations."""
    columns = getattr(spec, "columns", None)
    if not isinstance(columns, Mapping) or not columns:
        raise InvalidInput(
            "merge",
            "must be a MergeSpec (each state column with sum, count, min or max) or a function, "
            f"got {shown(spec)}",
        )
    bad = {
        name: operation
        for name, operation in columns.items()
        if operation not in OPERATIONS or not isinstance(name, str)
    }
    if bad:
        raise InvalidInput("merge", f"must merge each column by one of {list(OPERATIONS)}, got {bad}")
    return dict(columns)


def _key_of(schema: pa.Schema, columns: Mapping[str, str], key_col: str | None) -> str:
    """The key column: ``key_col``, or the one column the spec does not name; InvalidInput ``merge``
    unless the spec names every other column of ``schema`` and no column it lacks."""
    missing = sorted(set(columns) - set(schema.names))
    if missing:
        raise InvalidInput(
            "merge", f"must name state columns {schema.names}: it names {missing}, which the state lacks"
        )
    if key_col is not None and key_col in columns:
        raise InvalidInput("merge", f"must not merge the key column {key_col!r}: the merge groups by it")
    unnamed: list[str] = [name for name in schema.names if name not in columns]
    if key_col is None and len(unnamed) == 1:
        return unnamed[0]
    if key_col is not None and unnamed == [key_col]:
        return key_col
    if not unnamed:
        raise InvalidInput(
            "merge", f"must leave the key column unnamed: it names every column {schema.names}"
        )
    others = [name for name in unnamed if name != key_col]
    raise InvalidInput(
        "merge",
        f"must name every state column but the key with sum, count, min or max: {others} are not named",
    )


def _shown_schema(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)
