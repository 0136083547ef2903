"""The redist algorithm (Gedik §4.2.3, Algorithm 3), production implementation.

At every step all unplaced items and all placements are candidates, and the one with the lowest
U(ρ, γ)/f(d) is placed. The listing leaves two things implicit, read here as the text describes them:
the candidate set D_c starts as D_p^(t+1) in the canonical order and loses each item once it is
placed. A step evaluates every (item, channel) pair as one (K, r, N) numpy array; ties go to the
earliest item in the canonical order, then the lowest channel (numpy's argmin over the row-major
array picks exactly that).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.problem import Problem
from repart.partitioning.algorithms.scan import placement_penalties

IntArray = npt.NDArray[np.int64]


def redist(problem: Problem) -> tuple[IntArray, int]:
    """Run Algorithm 3; returns the channel of every tracked item and the number of evaluations."""
    n = problem.n_channels
    loads = problem.base_loads.copy()
    channels = np.empty(problem.size, dtype=np.int64)
    unplaced = np.arange(problem.size)
    migration = problem.initial_migration
    placements = np.arange(n)[None, :]
    evaluations = 0
    while unplaced.size:
        rho = placement_penalties(loads, problem.weights[:, unplaced], problem)
        moved = problem.state_weights[unplaced, None] * (placements != problem.old_channels[unplaced, None])
        gamma = (migration + moved) / problem.ideal_migration
        scores = problem.utility(rho, gamma) / problem.frequencies[unplaced, None]
        flat = int(np.argmin(scores))
        position, best = divmod(flat, n)
        item = int(unplaced[position])
        channels[item] = best
        migration += float(moved[position, best])
        loads[:, best] += problem.weights[:, item]
        unplaced = np.delete(unplaced, position)
        evaluations += scores.size
    return channels, evaluations
