"""Weights that balance the predicted channel loads: water-filling over each split key's candidates.

The papers choose a split key's worker tuple by tuple (the least loaded candidate); a controller that
knows the window's frequencies chooses the shares once per version, the batch analogue (as
Off-Greedy is PKG's offline baseline). Channel c starts with ``base[c]``, the load of every unsplit
key; each split key then pours its load x into its candidates so that the lowest of them rise to a
common level ℓ (Σ_c max(0, ℓ − L_c) = x), the hottest key first. Pouring one key so minimises
Σ_c L_c² over its candidates given the others; repeating the pass (each key taken out and poured
again) is block coordinate descent on that convex sum, which converges to its minimum: the most
even loads the candidate structure allows (the largest load as small as it can be, then the next).
Passes stop when no channel's load changes by more than ``TOLERANCE`` of the total, or after
``MAX_SWEEPS``.

Shares below ``TOLERANCE`` of a key's load are set to 0 (rounding residue of the level), and each
key's weights are its shares divided by its load, so they sum to 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MAX_SWEEPS = 200
TOLERANCE = 1e-12


def pour(levels: FloatArray, mass: float) -> FloatArray:
    """The shares of ``mass`` that lift the lowest of ``levels`` to one common level."""
    order = np.argsort(levels, kind="stable")
    ranked = levels[order]
    filled = np.arange(1, ranked.size + 1) * ranked - np.cumsum(ranked)  # mass to lift the first j to l_j
    j = int(np.searchsorted(filled, mass, side="right"))  # the first j channels take part
    level = (mass + float(ranked[:j].sum())) / j
    shares = np.zeros_like(levels)
    shares[order[:j]] = np.maximum(level - ranked[:j], 0.0)
    return shares


def water_fill(
    base: FloatArray, loads: FloatArray, candidates: Sequence[Sequence[int]]
) -> list[tuple[float, ...]]:
    """Each key's weights over its candidates (see the module docstring).

    ``base`` holds the channels' loads without the split keys, ``loads[i]`` key i's load (> 0), keys
    hottest first; ``candidates[i]`` key i's distinct channels.
    """
    channel_loads = np.asarray(base, dtype=np.float64).copy()
    masses = np.asarray(loads, dtype=np.float64)
    lists = [np.asarray(c, dtype=np.int64) for c in candidates]
    shares = [np.zeros(c.size) for c in lists]
    scale = float(channel_loads.sum() + masses.sum())
    for sweep in range(MAX_SWEEPS):
        before = channel_loads.copy()
        for i, channels in enumerate(lists):
            channel_loads[channels] -= shares[i]
            shares[i] = pour(channel_loads[channels], float(masses[i]))
            channel_loads[channels] += shares[i]
        if sweep > 0 and float(np.abs(channel_loads - before).max()) <= TOLERANCE * scale:
            break
    weights = []
    for share, mass in zip(shares, masses.tolist(), strict=True):
        kept = np.where(share > TOLERANCE * mass, share, 0.0)
        weights.append(tuple((kept / kept.sum()).tolist()))
    return weights
