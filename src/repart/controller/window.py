"""The sliding frequency estimate: the merge of the last ``x - 1`` tumbling snapshots (DESIGN §3).

Gedik §4.1.2 ("Handling changes", Fig. 2) emulates a sliding window of ``W`` tuples with ``x`` lossy
counters over tumbling windows; the controller's *measure* step (DESIGN §8, Gedik §4.5) realizes it
by merging the snapshots of the last ``x - 1`` closed tumbling windows that the Spark job emitted.

The merge is the rule of ``LossyCounter.merge``, applied as a left fold in ``seq`` order, so merging
snapshots gives exactly the table that ``functools.reduce(LossyCounter.merge, counters)`` gives for
the counters the snapshots were taken from (which is what ``SlidingWindow`` does in process).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import Key
from repart.storage.snapshots import Snapshot


def window_size(x: int) -> int:
    """Snapshots merged for a sliding estimate with ``x`` counters: ``x - 1`` (Gedik Fig. 2, x >= 2)."""
    if isinstance(x, bool) or not isinstance(x, int) or x < 2:
        raise ValueError(f"x (the number of counters) must be an integer >= 2, got {x!r}")
    return x - 1


def merge_snapshots(snapshots: Sequence[Snapshot]) -> FrequencyEstimate:
    """The merged estimate of ``snapshots`` (DESIGN §3: the sliding estimate), in any order.

    Requirements (ValueError naming the field otherwise): at least one snapshot; the same
    ``region``, ``key_type``, ``slot_bits`` and ``epsilon``; distinct ``seq``; and, sorted by
    ``seq``, windows that do not overlap (each starts at or after the previous one's end). Gaps
    between windows are allowed: the estimate then counts exactly the tuples of the windows given.

    Merge rule (``LossyCounter.merge``, folded over the snapshots in ``seq`` order): counts add and
    deltas add; a side with no entry for a key contributes count 0 and delta ``floor(n / w)``, with
    ``n`` its tuple count and ``w = ceil(1/epsilon)`` the bucket width (the most an absent key can have
    occurred there; ``<= epsilon * n``). After each step, entries with ``count + delta <= floor(n /
    w)`` for the merged ``n`` are dropped, as at a bucket close. For ``epsilon = 0`` (exact counts)
    an absent key contributes 0 and nothing is dropped.

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
    width = math.ceil(1.0 / first.epsilon) if first.epsilon > 0 else None
    counts: dict[Key, int] = {}
    deltas: dict[Key, int] = {}
    n = 0
    for snapshot in ordered:
        mine = {item.key: item for item in snapshot.items}
        absent_before = n // width if width else 0
        absent_here = snapshot.tuples // width if width else 0
        for key in counts.keys() - mine.keys():
            deltas[key] += absent_here
        for key, item in mine.items():
            counts[key] = counts.get(key, 0) + item.count
            deltas[key] = deltas.get(key, absent_before) + item.delta
        n += snapshot.tuples
        if width:
            closed = n // width
            for key in [key for key in counts if counts[key] + deltas[key] <= closed]:
                del counts[key], deltas[key]
    keys = sorted(counts)
    return FrequencyEstimate(
        keys=tuple(keys),
        counts=np.array([counts[key] for key in keys], dtype=np.float64),
        total=n,
        epsilon=first.epsilon,
        distinct_estimate=max(len(keys), *(s.distinct_estimate for s in ordered)),
        slot_counts=_slot_counts(ordered),
        slot_bits=first.slot_bits,
        key_type=first.key_type,
    )


def _check_window(snapshots: Sequence[Snapshot]) -> list[Snapshot]:
    """The snapshots sorted by ``seq`` after checking they form one window (see ``merge_snapshots``)."""
    if not snapshots:
        raise ValueError("snapshots must hold at least one snapshot")
    ordered = sorted(snapshots, key=lambda snapshot: snapshot.seq)
    first = ordered[0]
    for snapshot in ordered[1:]:
        for name in ("region", "key_type", "slot_bits", "epsilon"):
            if getattr(snapshot, name) != getattr(first, name):
                raise ValueError(
                    f"{name} must be equal in all merged snapshots, got {getattr(first, name)!r} "
                    f"(seq {first.seq}) and {getattr(snapshot, name)!r} (seq {snapshot.seq})"
                )
    for before, after in itertools.pairwise(ordered):
        if after.seq == before.seq:
            raise ValueError(f"seq must be distinct in merged snapshots, got {after.seq} twice")
        if after.window_start < before.window_end:
            raise ValueError(
                f"window of seq {after.seq} (start {after.window_start.isoformat()}) overlaps the window "
                f"of seq {before.seq} (end {before.window_end.isoformat()}); windows must not overlap"
            )
    return ordered


def _slot_counts(snapshots: Sequence[Snapshot]) -> npt.NDArray[np.float64] | None:
    # A window without tuples has no slot counts to store (sparse and empty reads back as None).
    if any(snapshot.slots is None and snapshot.tuples > 0 for snapshot in snapshots):
        return None
    dense = np.zeros(1 << snapshots[0].slot_bits, dtype=np.float64)
    for snapshot in snapshots:
        for slot, count in snapshot.slots or ():
            dense[slot] += count
    return dense
