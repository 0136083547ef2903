"""The merge of a split key's partial state rows (DESIGN §11.3): what a split-mode region declares.

A region in split mode keeps a hot key's state as one partial row per channel the key was routed to;
reading the state, or consolidating a key's partials into one channel, merges those rows. The region
declares how, column by column, as text such as ``"pv=sum,volume=sum,low=min,high=max"``: every state
column named once with one of ``MERGE_OPERATIONS``, which are the decomposable aggregations whose
merge of partials equals the aggregation over all input (a ``count``'s partial counts merge by their
sum; in a batch it counts the key's rows).
The controller stores the canonical text with the region; a job builds its merge from it or passes a
function of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from repart.errors import InvalidInput
from repart.validation import shown

MergeOperation = Literal["sum", "count", "min", "max"]
MERGE_OPERATIONS: tuple[MergeOperation, ...] = get_args(MergeOperation)
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_FORMAT = (
    "comma-separated column=operation pairs (operation one of sum, count, min, max), e.g. 'pv=sum,low=min'"
)


@dataclass(frozen=True)
class MergeSpec:
    """Each state column with the operation that merges its partial values."""

    columns: MappingProxyType[str, MergeOperation]

    @classmethod
    def parse(cls, text: object, field: str = "merge") -> MergeSpec:
        """The spec written as ``text``; ``InvalidInput(field)`` naming the part that is wrong."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(field, f"must be {_FORMAT}, got {shown(text)}")
        columns: dict[str, MergeOperation] = {}
        for part in text.split(","):
            column, _, operation = part.strip().partition("=")
            column, operation = column.strip(), operation.strip()
            if not _COLUMN.fullmatch(column) or operation not in MERGE_OPERATIONS:
                raise InvalidInput(field, f"must be {_FORMAT}, got {shown(part.strip())} in {shown(text)}")
            if column in columns:
                raise InvalidInput(
                    field, f"must name each column once, got {column!r} twice in {shown(text)}"
                )
            columns[column] = operation  # checked against MERGE_OPERATIONS above
        return cls(MappingProxyType(dict(sorted(columns.items()))))

    def to_text(self) -> str:
        """The canonical text: pairs sorted by column."""
        return ",".join(f"{column}={operation}" for column, operation in self.columns.items())
