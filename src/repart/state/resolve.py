"""A channel's state from its files' rows: one row per key (base plus deltas).

A channel's files hold, per key, the rows successive batches wrote (``repart.state.files``). In a
mergeable store they are partials: the key's state is their merge by the store's merge (sum, count,
min, max; ``repart.state.merge``), in any order. In a general store the row of the highest ``seq`` (the
newest generation) is the key's state, and when that row is a tombstone (``_deleted``) the key has
none. Base files alone already hold one row per key, so a channel without deltas needs no resolving.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.state.files import DELETED_COLUMN, Layout
from repart.state.merge import merge_function

SEQ_COLUMN = "_seq"


@dataclass(frozen=True)
class StoreMerge:
    """A mergeable store's merge in the shape ``merge_function`` and ``merged`` read (``MergeColumns``)."""

    columns: Mapping[str, str]

    @classmethod
    def of(cls, layout: Layout) -> StoreMerge | None:
        """The merge of a mergeable store's ``layout``; None for a general store."""
        return None if layout.merge is None else cls(dict(layout.merge))


def resolved(rows: pa.Table, seqs: npt.NDArray[np.int64], layout: Layout) -> pa.Table:
    """One row per key (the user's columns) of ``rows``, a channel's file rows (the file columns, with
    ``_deleted`` in a general store), whose row ``i`` was written by generation ``seqs[i]``."""
    user = layout.schema.names
    merge = StoreMerge.of(layout)
    if merge is not None:
        return merge_function(merge, key_col=layout.key_col)(rows.select(user))
    if rows.num_rows == 0:
        return rows.select(user)
    table = rows.select([layout.key_col]).append_column(SEQ_COLUMN, pa.array(seqs, pa.int64()))
    order = pc.sort_indices(table, sort_keys=[(layout.key_col, "ascending"), (SEQ_COLUMN, "ascending")])
    keys = pc.take(rows.column(layout.key_col), order)
    last = np.ones(len(keys), dtype=np.bool_)
    if len(keys) > 1:
        changes = pc.not_equal(keys.slice(0, len(keys) - 1), keys.slice(1))
        last[:-1] = changes.to_numpy(zero_copy_only=False)
    newest = order.to_numpy()[last]
    deleted = rows.column(DELETED_COLUMN).to_numpy(zero_copy_only=False).astype(np.bool_)[newest]
    return rows.take(pa.array(np.sort(newest[~deleted]))).select(user)
