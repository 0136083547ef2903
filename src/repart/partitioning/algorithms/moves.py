"""Moving load between two channels: the balance penalty afterwards and the migration cost (Eq. 22).

Shared by readj (moves and swaps of tracked items) and the slot-override pass (moves of slots).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from repart.partitioning.utility import balance_penalty

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def extremes_without_pair(loads: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(K, N, N) arrays: max and min of each resource's loads over channels other than i and j."""
    k_count, n = loads.shape
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    highest = np.empty((k_count, n, n))
    lowest = np.empty((k_count, n, n))
    for k in range(k_count):
        for result, ranked, fill in (
            (highest, np.argsort(-loads[k], kind="stable"), -np.inf),
            (lowest, np.argsort(loads[k], kind="stable"), np.inf),
        ):
            value = np.full((n, n), fill)
            for channel in ranked[:3][::-1]:
                value = np.where((channel != i) & (channel != j), loads[k, channel], value)
            result[k] = value
    return highest, lowest


def transfer_penalties(
    loads: FloatArray, thetas: FloatArray, source: IntArray | int, target: IntArray | int, shift: FloatArray
) -> FloatArray:
    """ρ (Eq. 19–20) after moving ``shift[:, c]`` from channel ``source[c]`` to ``target[c]``.

    ``source`` and ``target`` are arrays with one channel per candidate, or one channel for all.
    Only the two channels change, so the new extremes are those of the other channels (top three of
    each resource) and of the two changed loads; the totals do not change.
    """
    k = loads.shape[0]
    highest, lowest = extremes_without_pair(loads)
    from_load = loads[:, source].reshape(k, -1) - shift
    to_load = loads[:, target].reshape(k, -1) + shift
    new_max = np.maximum(np.maximum(highest[:, source, target].reshape(k, -1), from_load), to_load)
    new_min = np.minimum(np.minimum(lowest[:, source, target].reshape(k, -1), from_load), to_load)
    return balance_penalty(new_max, new_min, loads.sum(axis=1)[:, None], thetas, loads.shape[1])


def move_cost(
    state: FloatArray, owner: npt.NDArray[np.integer[Any]], source: IntArray | int, target: IntArray | int
) -> FloatArray:
    """β_s·1(p^(t) = source) − β_s·1(p^(t) = target): one term pair of Eq. 22.

    Moving state away from the channel that holds it costs it; moving it back home refunds it.
    """
    return np.asarray(state * (owner == source) - state * (owner == target), dtype=np.float64)
