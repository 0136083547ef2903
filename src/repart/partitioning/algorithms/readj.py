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
* Plateaus: ρ only sees the extreme loads, so when two channels tie at the maximum (or minimum) no
  single readjustment lowers it and the listing would stop, possibly with empty channels (N grown by
  more than one, or equal integer loads). Only then, readj also accepts readjustments from a channel
  at the maximum to a channel at the minimum of the same resource that keep ρ and narrow the gap
  (Σ_k Σ_i L_k(i)² falls), chosen by the same gain. (ρ, Σ L²) falls lexicographically at every step,
  so readj still terminates; when the listing would not stop, nothing changes.

Only channels that hold the maximum or the minimum load of some resource can lower ρ: a readjustment
between channels i and j lowers the spread of resource k only if every channel at the maximum, or
every channel at the minimum, is i or j. The production code evaluates just those pairs, all their
moves and swaps at once as numpy arrays; the reference evaluates everything, and both pick the same.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def pairs_across_tied_extremes(loads: FloatArray) -> BoolArray:
    """(N, N) mask of pairs (i, j): i holds the maximum and j the minimum of the same resource."""
    n = loads.shape[1]
    mask = np.zeros((n, n), dtype=bool)
    for row in loads:
        mask |= np.outer(row == row.max(), row == row.min())
    np.fill_diagonal(mask, False)
    return mask


@dataclass(frozen=True)
class Candidates:
    """Readjustments ⟨i, d1, j, d2⟩ (d2 = −1 for a move) and what applying each would give."""

    d1: IntArray
    d2: IntArray
    i: IntArray
    j: IntArray
    shift: FloatArray  # (K, c): load leaving i for j
    rho: FloatArray
    cost: FloatArray  # M(p^(t), w) of Eq. 22
    utility: FloatArray
    denominator: FloatArray  # |f(d1) − f(d2)|, f(∅) = 0


def candidates(
    problem: Problem,
    channels: IntArray,
    loads: FloatArray,
    migration: float,
    eligible: IntArray,
    pairs: BoolArray,
) -> Candidates:
    """Every move and swap of eligible items between channel pairs allowed by ``pairs``."""
    home = channels[eligible]
    move_item, move_to = np.nonzero(pairs[home])
    swap_first, swap_second = np.nonzero(pairs[home[:, None], home[None, :]])
    d1 = eligible[np.concatenate([move_item, swap_first])]
    d2 = np.concatenate([np.full(move_item.size, -1), eligible[swap_second]])
    is_swap = d2 >= 0
    partner = np.where(is_swap, d2, 0)
    i = channels[d1]
    j = np.where(is_swap, channels[partner], np.concatenate([move_to, np.zeros(swap_first.size, np.int64)]))
    shift = problem.weights[:, d1] - np.where(is_swap, problem.weights[:, partner], 0.0)
    rho = transfer_penalties(loads, problem.thetas, i, j, shift)
    old, weight = problem.old_channels, problem.state_weights
    cost = move_cost(weight[d1], old[d1], i, j) + np.where(
        is_swap, move_cost(weight[partner], old[partner], j, i), 0.0
    )
    utility = problem.utility(rho, (migration + cost) / problem.ideal_migration)
    denominator = np.abs(problem.frequencies[d1] - np.where(is_swap, problem.frequencies[partner], 0.0))
    return Candidates(d1, d2, i, j, shift, rho, cost, utility, denominator)


def best_gain(found: Candidates, valid: BoolArray, u_now: float, n: int, size: int) -> int | None:
    """The valid candidate with the best gain (u − u')/|f(d1) − f(d2)|; ties go in enumeration order."""
    valid = valid & (found.denominator > 0)
    if not valid.any():
        return None
    gain = np.where(valid, (u_now - found.utility) / np.where(valid, found.denominator, 1.0), -np.inf)
    ties = np.flatnonzero(valid & (gain == gain[valid].max()))
    order = ((found.i[ties] * n + found.j[ties]) * (size + 1) + found.d1[ties]) * (size + 1) + (
        found.d2[ties] + 1
    )
    return int(ties[np.argmin(order)])


def narrows_gap(found: Candidates, loads: FloatArray) -> BoolArray:
    """Σ_k Σ_i L_k(i)² falls: Σ_k x_k·(x_k + L_k(j) − L_k(i)) < 0 for the load x_k moved from i to j."""
    change = found.shift * (found.shift + loads[:, found.j] - loads[:, found.i])
    return np.asarray(change.sum(axis=0) < 0)


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
        found = candidates(problem, channels, loads, migration, eligible, pairs_that_can_lower_spread(loads))
        evaluations += found.d1.size
        chosen = best_gain(found, found.rho < rho_now, u_now, n, size)
        if chosen is None:  # plateau: ties at the extremes block every single readjustment
            found = candidates(
                problem, channels, loads, migration, eligible, pairs_across_tied_extremes(loads)
            )
            evaluations += found.d1.size
            chosen = best_gain(found, (found.rho == rho_now) & narrows_gap(found, loads), u_now, n, size)
        if chosen is None:
            break
        a, b = int(found.d1[chosen]), int(found.d2[chosen])
        source, target = int(found.i[chosen]), int(found.j[chosen])
        channels[a] = target
        moves[a] += 1
        if b >= 0:
            channels[b] = source
            moves[b] += 1
        loads[:, source] -= found.shift[:, chosen]
        loads[:, target] += found.shift[:, chosen]
        migration += float(found.cost[chosen])
        rho_now, u_now = float(found.rho[chosen]), float(found.utility[chosen])
    return channels, evaluations
