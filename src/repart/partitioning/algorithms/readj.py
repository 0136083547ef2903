"""The readj algorithm (Gedik §4.2.4, Algorithm 4), production implementation.

Tracked items start where p^(t) put them (an item new to tracking sits where the old consistent hash
put it), and moves ⟨i, d1, j, ∅⟩ and swaps ⟨i, d1, j, d2⟩ (Eq. 21) are applied one at a time, always
the one with the best gain (u − u')/|f(d1) − f(d2)|, until no readjustment lowers the balance
penalty ρ. Decisions on the listing (papers/NOTES.md), each tested:

* When N shrank, items whose channel no longer exists are first re-placed with H_c^(t+1) (§4.2.4),
  and that move counts in the migration cost m.
* ``break`` on a candidate with worse balance (a ≥ ρ(H_p)) means "skip this candidate".
* u is the utility of the current mapping, U(ρ(H_p), m/m̄), fixed while one step's candidates are
  compared, and set to the chosen candidate's u' once it is applied. (The listing starts u at 0 and
  overwrites it inside the candidate loop, which makes the gain depend on enumeration order; the text
  says the gain is the utility reduction between steps.) A candidate with negative gain may still be
  chosen, as in the listing (g starts at −∞): readj only stops when no candidate improves ρ.
* For a move f(∅) = 0; a swap of two items of equal frequency changes no load and is never a
  candidate (its denominator would be 0).
* Each item may move at most ``move_limit`` times (c = 5 in the paper; a swap counts for both items).
* Candidate order for ties: i, then j, then d1 in the canonical order, then d2 (∅ first).

Only channels that hold the maximum or the minimum load of some resource can lower ρ: a readjustment
between channels i and j lowers the spread of resource k only if every channel at the maximum, or
every channel at the minimum, is i or j. The production code evaluates just those pairs, all their
moves and swaps at once as numpy arrays; the reference evaluates everything, and both pick the same.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.moves import move_cost, transfer_penalties
from repart.partitioning.algorithms.problem import Problem
from repart.partitioning.utility import balance_penalty

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def initial_placement(problem: Problem) -> tuple[IntArray, float]:
    """H_p^(t+1) = {d ⇒ p^(t)(d)}, re-placing items of removed channels with H_c^(t+1); returns m too."""
    channels = problem.old_channels.copy()
    gone = channels >= problem.n_channels
    channels[gone] = problem.hashed_channels[gone]
    return channels, problem.initial_migration + float(problem.state_weights[gone].sum())


def pairs_that_can_lower_spread(loads: FloatArray) -> BoolArray:
    """(N, N) mask of channel pairs (i, j), i ≠ j, whose readjustments can lower some resource's spread."""
    n = loads.shape[1]
    mask = np.zeros((n, n), dtype=bool)
    for row in loads:
        for extreme in (row == row.max(), row == row.min()):
            members = np.flatnonzero(extreme)
            if members.size == 1:
                mask[members[0], :] = True
                mask[:, members[0]] = True
            elif members.size == 2:
                a, b = members
                mask[a, b] = mask[b, a] = True
    np.fill_diagonal(mask, False)
    return mask


def readj(problem: Problem) -> tuple[IntArray, int]:
    """Run Algorithm 4; returns the channel of every tracked item and the number of evaluations."""
    n, size = problem.n_channels, problem.size
    if size == 0:
        return np.empty(0, dtype=np.int64), 0
    channels, migration = initial_placement(problem)
    loads = problem.base_loads + problem.placed_loads(channels)
    moves = np.zeros(size, dtype=np.int64)
    rho_now = float(
        balance_penalty(loads.max(axis=1), loads.min(axis=1), loads.sum(axis=1), problem.thetas, n)
    )
    u_now = float(problem.utility(np.array(rho_now), np.array(migration / problem.ideal_migration)))
    evaluations = 0
    while True:
        eligible = np.flatnonzero(moves < problem.move_limit)
        pairs = pairs_that_can_lower_spread(loads)
        home = channels[eligible]
        move_item, move_to = np.nonzero(pairs[home])
        swap_first, swap_second = np.nonzero(pairs[home[:, None], home[None, :]])
        d1 = eligible[np.concatenate([move_item, swap_first])]
        d2 = np.concatenate([np.full(move_item.size, -1), eligible[swap_second]])
        if d1.size == 0:
            break
        is_swap = d2 >= 0
        partner = np.where(is_swap, d2, 0)
        i = channels[d1]
        j = np.where(
            is_swap, channels[partner], np.concatenate([move_to, np.zeros(swap_first.size, np.int64)])
        )
        evaluations += d1.size

        shift = problem.weights[:, d1] - np.where(is_swap, problem.weights[:, partner], 0.0)  # (K, c)
        rho = transfer_penalties(loads, problem.thetas, i, j, shift)
        old, weight = problem.old_channels, problem.state_weights
        cost = move_cost(weight[d1], old[d1], i, j) + np.where(
            is_swap, move_cost(weight[partner], old[partner], j, i), 0.0
        )
        utility = problem.utility(rho, (migration + cost) / problem.ideal_migration)
        denominator = np.abs(problem.frequencies[d1] - np.where(is_swap, problem.frequencies[partner], 0.0))
        valid = (rho < rho_now) & (denominator > 0)
        if not valid.any():
            break
        gain = np.where(valid, (u_now - utility) / np.where(valid, denominator, 1.0), -np.inf)
        best_gain = gain[valid].max()
        ties = np.flatnonzero(valid & (gain == best_gain))
        order_key = ((i[ties] * n + j[ties]) * (size + 1) + d1[ties]) * (size + 1) + (d2[ties] + 1)
        chosen = int(ties[np.argmin(order_key)])

        a, b = int(d1[chosen]), int(d2[chosen])
        source_channel, target_channel = int(i[chosen]), int(j[chosen])
        channels[a] = target_channel
        moves[a] += 1
        if b >= 0:
            channels[b] = source_channel
            moves[b] += 1
        loads[:, source_channel] -= shift[:, chosen]
        loads[:, target_channel] += shift[:, chosen]
        migration += float(cost[chosen])
        rho_now, u_now = float(rho[chosen]), float(utility[chosen])
    return channels, evaluations
