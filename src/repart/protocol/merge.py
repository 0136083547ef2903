"""The merge of a split key's partial state rows: what a split-mode region declares.

A region in split mode keeps a hot key's state as one partial row per channel the key was routed to;
reading the state, or consolidating a key's partials into one channel, merges those rows. The region
declares how, column by column, as text such as ``"pv=sum,volume=sum,low=min,high=max"``: every state
column named once with one of ``MERGE_OPERATIONS``, which are the decomposable aggregations whose
merge of partials equals the aggregation over all input (a ``count``'s partial counts merge by their
sum; in a batch it counts the key's rows).
The controller stores the canonical text with the region; a job builds its merge from it or passes a
function of its own.

A mergeable job (``repart.spark.StatefulJob``) also reads from the spec where each state column comes
from in a batch: ``volume=sum(qty)`` sums the batch's ``qty`` into the state's ``volume``, ``volume=sum``
sums the batch's ``volume``, and ``trades=count`` counts the key's rows (it has no source column).
Nulls are skipped, as in SQL: a sum, min or max over nulls only is null.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, cast, get_args

from repart.errors import InvalidInput
from repart.validation import shown

MergeOperation = Literal["sum", "count", "min", "max"]
MERGE_OPERATIONS: tuple[MergeOperation, ...] = get_args(MergeOperation)
_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_COLUMN = re.compile(_NAME)
_OPERATION = re.compile(rf"(sum|count|min|max)(?:\(\s*({_NAME})\s*\))?")
_FORMAT = (
    "comma-separated column=operation pairs (operation one of sum, count, min, max; sum, min and max "
    "may name the batch column they read, as in sum(qty)), e.g. 'pv=sum,low=min(price),trades=count'"
)


@dataclass(frozen=True)
class MergeSpec:
    """Each state column with the operation that merges its partial values, and the batch column a
    job aggregates into it (``sources``: the column itself unless the text names another; a ``count``
    has none)."""

    columns: MappingProxyType[str, MergeOperation]
    sources: MappingProxyType[str, str | None]

    @classmethod
    def parse(cls, text: object, field: str = "merge") -> MergeSpec:
        """The spec written as ``text``; ``InvalidInput(field)`` naming the part that is wrong."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(field, f"must be {_FORMAT}, got {shown(text)}")
        columns: dict[str, MergeOperation] = {}
        sources: dict[str, str | None] = {}
        for part in text.split(","):
            column, _, operation = part.strip().partition("=")
            column, operation = column.strip(), operation.strip()
            found = _OPERATION.fullmatch(operation)
            if not _COLUMN.fullmatch(column) or found is None:
                raise InvalidInput(field, f"must be {_FORMAT}, got {shown(part.strip())} in {shown(text)}")
            name, source = found.group(1), found.group(2)
            if name == "count" and source is not None:
                raise InvalidInput(
                    field, f"must give count no column (it counts a key's rows), got {shown(part.strip())}"
                )
            if column in columns:
                raise InvalidInput(
                    field, f"must name each column once, got {column!r} twice in {shown(text)}"
                )
            columns[column] = cast(MergeOperation, name)  # one of MERGE_OPERATIONS by _OPERATION
            sources[column] = None if name == "count" else source or column
        ordered = sorted(columns)
        return cls(
            MappingProxyType({column: columns[column] for column in ordered}),
            MappingProxyType({column: sources[column] for column in ordered}),
        )

    @classmethod
    def of(cls, value: object, field: str = "merge") -> MergeSpec:
        """A spec given as a ``MergeSpec``, its text, or a mapping of each state column to its operation
        (``{"volume": "sum(qty)", "trades": "count"}``); ``InvalidInput(field)`` otherwise."""
        if isinstance(value, MergeSpec):
            return value
        if isinstance(value, Mapping):
            parts = [f"{column}={operation}" for column, operation in value.items()]
            well_formed = all(
                isinstance(column, str)
                and _COLUMN.fullmatch(column.strip()) is not None
                and isinstance(operation, str)
                and _OPERATION.fullmatch(operation.strip()) is not None
                for column, operation in value.items()
            )
            if not parts or not well_formed:
                raise InvalidInput(field, f"must be {_FORMAT}, or a mapping of the same, got {shown(value)}")
            return cls.parse(",".join(parts), field)
        return cls.parse(value, field)

    def to_text(self) -> str:
        """The canonical text: pairs sorted by column, a source named only where it is another column."""
        return ",".join(
            f"{column}={operation}"
            + ("" if self.sources[column] in (None, column) else f"({self.sources[column]})")
            for column, operation in self.columns.items()
        )
