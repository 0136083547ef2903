"""The scan algorithm (Gedik §4.2.2, Algorithm 2), production implementation.

Items are placed one at a time in the canonical order (decreasing frequency); each goes to the channel
whose placement minimises U(ρ, γ). Per-channel loads are kept incrementally and the N placements of
one item are evaluated as numpy arrays: adding weight w to channel l changes only that channel, so the
new maximum is max(max_i L(i), L(l) + w) and the new minimum is min(min_{i≠l} L(i), L(l) + w).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.problem import Problem
from repart.partitioning.utility import balance_penalty

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def min_excluding_each(loads: FloatArray) -> FloatArray:
    """For loads of shape (K, N): entry [k, l] is min over channels i ≠ l of loads[k, i] (+inf if N = 1)."""
    n = loads.shape[1]
    if n == 1:
        return np.full_like(loads, np.inf)
    smallest = np.partition(loads, 1, axis=1)
    first, second = smallest[:, :1], smallest[:, 1:2]
    argmin = loads.argmin(axis=1)[:, None]
    return np.where(np.arange(n)[None, :] == argmin, second, first)


def placement_penalties(loads: FloatArray, weights: FloatArray, problem: Problem) -> FloatArray:
    """ρ of adding items to each channel: weights (K, r) → ρ of shape (r, N) (Eq. 19–20)."""
    candidate = loads[:, None, :] + weights[:, :, None]  # (K, r, N)
    new_max = np.maximum(loads.max(axis=1)[:, None, None], candidate)
    new_min = np.minimum(min_excluding_each(loads)[:, None, :], candidate)
    totals = (loads.sum(axis=1)[:, None] + weights)[:, :, None]
    return balance_penalty(new_max, new_min, totals, problem.thetas, problem.n_channels)


def scan(problem: Problem) -> tuple[IntArray, int]:
    """Run Algorithm 2; returns the channel of every tracked item and the number of evaluations."""
    n = problem.n_channels
    loads = problem.base_loads.copy()
    channels = np.empty(problem.size, dtype=np.int64)
    migration = problem.initial_migration
    placements = np.arange(n)
    for item in range(problem.size):
        rho = placement_penalties(loads, problem.weights[:, item : item + 1], problem)[0]
        moved = problem.state_weights[item] * (placements != problem.old_channels[item])
        gamma = (migration + moved) / problem.ideal_migration
        best = int(np.argmin(problem.utility(rho, gamma)))
        channels[item] = best
        migration += float(moved[best])
        loads[:, best] += problem.weights[:, item]
    return channels, problem.size * n
