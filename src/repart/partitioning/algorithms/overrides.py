"""Slot overrides for tail-aware builds (repart's extension beyond Gedik).

After the explicit map is built (against the untracked load spread evenly over the channels, see
``builder``), the hashed tail itself is rebalanced by moving slots, on the full predicted loads:
explicit keys plus the untracked keys' per-slot mass. Each step looks at the
resource with the largest ρ_k and its least loaded channel lo, takes the most loaded channel hi that
has a slot lighter than L(hi) − L(lo) (so moving it narrows that pair's gap; the most loaded channel
may hold only explicit keys), and applies the move of a slot from hi to lo with the lowest utility
U(ρ, γ). Moving slot s costs its untracked state mass when s leaves the channel
that holds its state now (its owner under p^(t)) and refunds it when s returns there (Eq. 22 applied
to slots), so overrides that give slots back to their previous owner are preferred.

ρ depends only on the extreme loads, so it has plateaus: with two channels tied at the maximum no
single move lowers it. The pass therefore walks on through such plateaus and remembers the mapping
with the lowest U seen; it stops when no slot fits a gap, after ``patience`` moves without a new best,
or after ``max_moves`` moves, and returns the best mapping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.moves import move_cost, transfer_penalties
from repart.partitioning.tail import loads_by_channel
from repart.partitioning.utility import Utility, balance_penalty, balance_penalty_k

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_MAX_OVERRIDE_MOVES = 20_000
DEFAULT_PATIENCE = 64


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


def _utility(problem: SlotRebalance, loads: FloatArray, migration: FloatArray) -> FloatArray:
    n = loads.shape[1]
    rho = balance_penalty(loads.max(axis=1), loads.min(axis=1), loads.sum(axis=1), problem.thetas, n)
    return problem.utility(rho, migration / problem.ideal_migration)


class _LoadedSlots:
    """The slots that carry untracked load, per channel of the current table, in increasing order."""

    def __init__(self, table: npt.NDArray[np.int32], slot_loads: FloatArray, n: int):
        loaded = slot_loads.sum(axis=0) > 0
        self.members = [np.flatnonzero(loaded & (table == channel)) for channel in range(n)]

    def move(self, slot: int, source: int, target: int) -> None:
        members = self.members[source]
        self.members[source] = members[members != slot]
        members = self.members[target]
        self.members[target] = np.insert(members, np.searchsorted(members, slot), slot)


def _best_move(
    problem: SlotRebalance,
    slots_of: _LoadedSlots,
    loads: FloatArray,
    migration: float,
) -> tuple[int, int, int, FloatArray, float, float, int] | None:
    """The lowest-U move of one slot into the least loaded channel lo of the most imbalanced resource.

    The source is the most loaded channel that has a slot lighter than its gap to lo (the most loaded
    channel may hold only explicit keys). Returns (slot, source, lo, load shift, cost, U', candidates).
    """
    n = loads.shape[1]
    k = int(
        np.argmax(
            balance_penalty_k(loads.max(axis=1), loads.min(axis=1), loads.sum(axis=1), 1.0, n)
            / problem.thetas
        )
    )
    row, mass = loads[k], problem.slot_loads[k]
    lo = int(row.argmin())
    for hi in np.argsort(-row, kind="stable")[:-1].tolist():
        slots = slots_of.members[hi]
        slots = slots[(mass[slots] > 0) & (mass[slots] < row[hi] - row[lo])]
        if slots.size:
            break
    else:
        return None
    shift = problem.slot_loads[:, slots]  # (K, c)
    rho = transfer_penalties(loads, problem.thetas, hi, lo, shift)
    cost = move_cost(problem.slot_state[slots], problem.previous_table[slots], hi, lo)
    utility = problem.utility(rho, (migration + cost) / problem.ideal_migration)
    chosen = int(np.argmin(utility))
    return (
        int(slots[chosen]),
        hi,
        lo,
        shift[:, chosen],
        float(cost[chosen]),
        float(utility[chosen]),
        slots.size,
    )


def rebalance_slots(
    problem: SlotRebalance,
    table: npt.NDArray[np.int32],
    migration: float,
    max_moves: int = DEFAULT_MAX_OVERRIDE_MOVES,
    patience: int = DEFAULT_PATIENCE,
) -> tuple[npt.NDArray[np.int32], float, int]:
    """Plateau-walking slot moves; returns the best slot table, its migration cost and the evaluations."""
    table = np.array(table, dtype=np.int32)
    n = problem.explicit_loads.shape[1]
    loads = problem.explicit_loads + loads_by_channel(problem.slot_loads, table, n)
    best_u = float(_utility(problem, loads, np.array(migration)))
    best_migration, best_moves = migration, 0
    history: list[tuple[int, int]] = []  # (slot, channel it left)
    evaluations = 0
    slots_of = _LoadedSlots(table, problem.slot_loads, n)
    while len(history) < max_moves and len(history) - best_moves < patience and n > 1:
        step = _best_move(problem, slots_of, loads, migration)
        if step is None:
            break
        slot, hi, lo, shift, cost, utility, considered = step
        evaluations += considered
        table[slot] = lo
        slots_of.move(slot, hi, lo)
        loads[:, hi] -= shift
        loads[:, lo] += shift
        migration += cost
        history.append((slot, hi))
        if utility < best_u:
            best_u, best_migration, best_moves = utility, migration, len(history)
    for slot, channel in reversed(history[best_moves:]):
        table[slot] = channel
    return table, best_migration, evaluations
