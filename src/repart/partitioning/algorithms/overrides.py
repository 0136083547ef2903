"""Slot overrides for tail-aware builds (repart's extension beyond Gedik, DESIGN §2 and §5).

After the explicit map is built against the full predicted loads (explicit keys plus the untracked
keys' per-slot mass), the hashed tail itself is rebalanced: slots move from a channel holding the
maximum load of some resource to a channel holding the minimum, one at a time, each time the slot
whose move lowers the utility U(ρ, γ) the most. Moving slot s from channel i to channel j costs its
untracked state mass when s leaves its previous owner and refunds it when s returns to it (Eq. 22
applied to slots), so overrides that give slots back to their previous owner are preferred. The pass
stops when no such move lowers both ρ and U, or after ``max_moves`` moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.readj import extremes_without_pair
from repart.partitioning.tail import loads_by_channel
from repart.partitioning.utility import Utility, balance_penalty

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_MAX_OVERRIDE_MOVES = 4096


@dataclass(frozen=True)
class SlotRebalance:
    """Inputs of the override pass; loads and masses in count space, K active resources."""

    slot_loads: FloatArray  # (K, 2^S) untracked load per slot
    slot_state: FloatArray  # (2^S,) untracked state per slot (the migration weight)
    previous_table: npt.NDArray[np.int32]  # T'^(t): where each slot's state lives now
    explicit_loads: FloatArray  # (K, N) load of the explicit keys per channel
    thetas: FloatArray
    utility: Utility
    ideal_migration: float


def rebalance_slots(
    problem: SlotRebalance,
    table: npt.NDArray[np.int32],
    migration: float,
    max_moves: int = DEFAULT_MAX_OVERRIDE_MOVES,
) -> tuple[npt.NDArray[np.int32], float, int]:
    """Greedy slot moves; returns the new slot table, the migration cost after them and the evaluations."""
    table = np.array(table, dtype=np.int32)
    n = problem.explicit_loads.shape[1]
    k_range = np.arange(problem.explicit_loads.shape[0])[:, None]
    loads = problem.explicit_loads + loads_by_channel(problem.slot_loads, table, n)
    totals = loads.sum(axis=1)
    rho_now = float(balance_penalty(loads.max(axis=1), loads.min(axis=1), totals, problem.thetas, n))
    u_now = float(problem.utility(np.array(rho_now), np.array(migration / problem.ideal_migration)))
    evaluations = 0
    for _ in range(max_moves):
        sources = np.unique(loads.argmax(axis=1))
        targets = np.unique(loads.argmin(axis=1))
        slots = np.flatnonzero(np.isin(table, sources) & (problem.slot_loads.sum(axis=0) > 0))
        if slots.size == 0 or n == 1:
            break
        slot = np.repeat(slots, targets.size)
        j = np.tile(targets, slots.size).astype(np.int64)
        i = table[slot].astype(np.int64)
        keep = i != j
        slot, i, j = slot[keep], i[keep], j[keep]
        if slot.size == 0:
            break
        evaluations += slot.size
        shift = problem.slot_loads[:, slot]
        source = loads[k_range, i[None, :]] - shift
        target = loads[k_range, j[None, :]] + shift
        highest, lowest = extremes_without_pair(loads)
        new_max = np.maximum(np.maximum(highest[:, i, j], source), target)
        new_min = np.minimum(np.minimum(lowest[:, i, j], source), target)
        rho = balance_penalty(new_max, new_min, totals[:, None], problem.thetas, n)
        state = problem.slot_state[slot]
        owner = problem.previous_table[slot]
        cost = state * (owner == i) - state * (owner == j)
        utility = problem.utility(rho, (migration + cost) / problem.ideal_migration)
        valid = (rho < rho_now) & (utility < u_now)
        if not valid.any():
            break
        chosen = int(np.flatnonzero(valid)[np.argmin(utility[valid])])
        s, a, b = int(slot[chosen]), int(i[chosen]), int(j[chosen])
        table[s] = b
        loads[:, a] -= shift[:, chosen]
        loads[:, b] += shift[:, chosen]
        migration += float(cost[chosen])
        rho_now, u_now = float(rho[chosen]), float(utility[chosen])
    return table, migration, evaluations
