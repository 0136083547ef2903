"""The sliding frequency estimate: the merge of the last ``x - 1`` tumbling snapshots.

Gedik §4.1.2 ("Handling changes", Fig. 2) emulates a sliding window of ``W`` tuples with ``x`` lossy
counters over tumbling windows; the controller's *measure* step (Gedik §4.5) realizes it
by merging the snapshots of the last ``x - 1`` closed tumbling windows that the Spark job emitted.

The merge is the rule of ``LossyCounter.merge``, applied as a left fold in ``seq`` order, so merging
snapshots gives exactly the table that ``functools.reduce(LossyCounter.merge, counters)`` gives for
the counters the snapshots were taken from (which is what ``SlidingWindow`` does in process).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.frequency import FrequencyEstimate, LossyCounter
from repart.protocol.snapshot import Snapshot
from repart.validation import Interval, check


def window_size(x: int) -> int:
    """Snapshots merged for a sliding estimate with ``x`` counters: ``x - 1`` (Gedik Fig. 2, x >= 2)."""
    return int(check("x", x, Interval(int, 2, None))) - 1


def merge_snapshots(snapshots: Sequence[Snapshot]) -> FrequencyEstimate:
    """The merged estimate of ``snapshots`` (the sliding estimate), in any order.

    Requirements (``InvalidInput("snapshots")`` otherwise): at least one snapshot; the same
    ``region``, ``key_type`` and ``slot_bits``; distinct ``seq``; and, sorted by
    ``seq``, windows that do not overlap (each starts at or after the previous one's end). Gaps
    between windows are allowed: the estimate then counts exactly the tuples of the windows given.

    The merge is ``LossyCounter.merge`` folded over the snapshots' counters in ``seq`` order (each
    rebuilt with ``LossyCounter.from_entries``; ``epsilon = 0`` is an exact counter): counts add and
    deltas add, a side without the key contributes ``floor(n / w)`` to its delta, and entries that
    carry no more than the merged bound are dropped.

    The result: ``keys`` in sorted order with the merged ``counts`` (each within ``epsilon * total``
    below the key's true count over the windows, and every key with a true count above that bound
    present); ``total = Σ tuples``; ``epsilon`` unchanged (the bound on the sum is
    ``epsilon * Σ tuples``); ``slot_counts`` the sum of the snapshots' slot counts, or None when a
    snapshot with tuples has none (an empty window's are all zero); ``distinct_estimate`` the
    largest of the snapshots' estimates, raised to the number of merged keys when that is larger.
    That is a lower bound of the union's distinct count only: the snapshots carry HyperLogLog
    estimates, not the sketches, so the union cannot be estimated.
    """
    ordered = _check_window(snapshots)
    first = ordered[0]
    counters = [
        LossyCounter.from_entries(
            snapshot.epsilon,
            snapshot.tuples,
            [item.key for item in snapshot.items],
            [item.count for item in snapshot.items],
            [item.delta for item in snapshot.items],
            snapshot.key_type,
        )
        for snapshot in ordered
    ]
    merged = functools.reduce(LossyCounter.merge, counters)
    keys, counts, _ = merged.entries()
    return FrequencyEstimate(
        keys=tuple(keys.tolist()),
        counts=counts.astype(np.float64),
        total=merged.n,
        epsilon=first.epsilon,
        distinct_estimate=max(len(keys), *(s.distinct_estimate for s in ordered)),
        slot_counts=_slot_counts(ordered),
        slot_bits=first.slot_bits,
        key_type=first.key_type,
    )


def _check_window(snapshots: Sequence[Snapshot]) -> list[Snapshot]:
    """The snapshots sorted by ``seq`` after checking they form one window (see ``merge_snapshots``)."""
    if not snapshots:
        raise InvalidInput("snapshots", "must hold at least one snapshot, got none")
    ordered = sorted(snapshots, key=lambda snapshot: snapshot.seq)
    # A job that changed its epsilon: the windows before the change leave the estimate (one merged
    # bound needs one epsilon), instead of every tick failing until they age out.
    newest = ordered[-1].epsilon
    while ordered[0].epsilon != newest:
        ordered.pop(0)
    first = ordered[0]
    for snapshot in ordered[1:]:
        for name in ("region", "key_type", "slot_bits"):
            if getattr(snapshot, name) != getattr(first, name):
                raise InvalidInput(
                    "snapshots",
                    f"must have one {name}, got {getattr(first, name)!r} (seq {first.seq}) and "
                    f"{getattr(snapshot, name)!r} (seq {snapshot.seq})",
                )
    for before, after in itertools.pairwise(ordered):
        if after.seq == before.seq:
            raise InvalidInput("snapshots", f"must have distinct seq, got {after.seq} twice")
        if after.window_start < before.window_end:
            raise InvalidInput(
                "snapshots",
                f"must have windows that do not overlap, got seq {after.seq} starting at "
                f"{after.window_start.isoformat()} before seq {before.seq} ends at "
                f"{before.window_end.isoformat()}",
            )
    return ordered


def _slot_counts(snapshots: Sequence[Snapshot]) -> npt.NDArray[np.float64] | None:
    # A window without tuples has no slot counts to store (sparse and empty reads back as None).
    if any(snapshot.slots is None and snapshot.tuples > 0 for snapshot in snapshots):
        return None
    dense = np.zeros(1 << snapshots[0].slot_bits, dtype=np.float64)
    for snapshot in snapshots:
        columns = snapshot.slot_columns
        if columns is not None:
            np.add.at(dense, columns.slots, columns.counts)
    return dense
