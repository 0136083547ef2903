"""The placement problem shared by scan, redist and readj (Gedik §4.2, Algorithms 2–4).

``prepare`` turns (previous function p^(t), frequency estimate, N^(t+1), parameters) into arrays:
the tracked items D_p^(t+1) in the canonical order, their per-resource weights, their old channel
p^(t)(d) and their channel under the new consistent hash H_c^(t+1), the migration cost already caused
by items no longer tracked and the ideal migration cost.

Decisions on the places where the paper disagrees with itself (papers/NOTES.md), common to all three
algorithms:

* The initial migration cost m is the cost of the items *no longer tracked*, D_o^(t+1) (Eq. 18 and the
  text; Algorithms 2 and 3 write D_p^(t+1)), and ``1(p^(t) ≠ H_c^(t+1)(d))`` reads ``p^(t)(d)``.
* The ideal migration cost m̄ sums over D_a^(t+1) = D_p^(t) ∪ D_p^(t+1), as Eq. 18 and the text of
  §4.2.2 say (Algorithms 2/3 write D_p^(t+1), Algorithm 4 D_n^(t+1), which may be empty).
* Canonical item order: decreasing estimated count, then increasing key. Scan visits items in this
  order (Algorithm 2's SORT), redist enumerates its candidates in it and readj enumerates the items of a
  channel in it. Ties go to the first candidate in enumeration order: for scan the lowest channel, for
  redist the earliest item and then the lowest channel, for readj see readj.py.
* Weights live in *count space*: an item of count c has load c**e_k for resource k (e_k from
  Eq. 1, 3, 5) instead of f**e_k. ρ (Eq. 19) and γ (Eq. 18) are ratios, so they are unchanged, and
  integer counts make every load sum exact (below 2**53), which is what lets the reference and the
  production implementations agree to the last bit.
* The balance penalty only counts the resources whose β is not constant (§4.4).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.consistent import slot_table
from repart.partitioning.domain import Key, UtilityName, check_sigma, check_utility
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.resources import Resources, check_channels, frequency_threshold, theta
from repart.partitioning.tail import loads_by_channel
from repart.partitioning.utility import Utility, utility_function
from repart.validation import POSITIVE_INT, Interval, check

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_MOVE_LIMIT = 5
# A build needs α > 1: α = 1 gives θ = 0 (Eq. 15), so no imbalance is tolerated and ρ is undefined.
BUILD_ALPHA = Interval(float, 1, None, closed="neither")


@dataclass(frozen=True)
class BuildParams:
    """Construction parameters (Gedik Table 1): resource code, α, σ, utility, readj's move limit c."""

    resources: Resources = field(default_factory=lambda: Resources.parse("LCL"))
    alpha: float = 1.2
    sigma: float = 0.1
    utility: UtilityName = "APM"
    move_limit: int = DEFAULT_MOVE_LIMIT
    tail_aware: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.resources, str):
            object.__setattr__(self, "resources", Resources.parse(self.resources))
        check("alpha", self.alpha, BUILD_ALPHA)
        check_sigma(self.sigma)
        object.__setattr__(self, "utility", check_utility(self.utility))
        check("move_limit", self.move_limit, POSITIVE_INT)

    @property
    def utility_function(self) -> Utility:
        return utility_function(self.utility)


@dataclass(frozen=True)
class Problem:
    """Arrays describing one construction step; item arrays are in the canonical order."""

    delta: float  # the frequency threshold δ of N^(t+1) (Eq. 16–17)
    keys: tuple[Key, ...]
    counts: FloatArray
    frequencies: FloatArray
    weights: FloatArray  # (K, R): load of each item for each active resource, in count space
    state_weights: FloatArray  # (R,): β_s in count space, the migration weight (Eq. 9)
    old_channels: IntArray  # p^(t)(d)
    hashed_channels: IntArray  # H_c^(t+1)(d): the new slot table's channel for the item's slot
    base_loads: FloatArray  # (K, N): load of the untracked items per channel (zero unless tail-aware)
    thetas: FloatArray  # (K,)
    n_channels: int
    initial_migration: float  # m before any placement: items of D_o^(t+1) that move
    dropped_keys: tuple[Key, ...]  # D_o^(t+1): explicit in p^(t), no longer tracked
    dropped_counts: FloatArray
    dropped_state: FloatArray  # their β_s in count space
    dropped_channels: IntArray  # their channel under p^(t)
    dropped_slots: IntArray
    ideal_migration: float  # m̄
    utility: Utility
    move_limit: int

    @property
    def size(self) -> int:
        return len(self.keys)

    def dropped_migration(self, table: npt.NDArray[np.int32]) -> float:
        """Σ_{d ∈ D_o} β_s(f(d))·1(p^(t)(d) ≠ T(slot(d))): the first sum of Eq. 18 under slot table T."""
        moved = self.dropped_channels != table[self.dropped_slots]
        return float(self.dropped_state[moved].sum())

    def placed_loads(self, channels: IntArray) -> FloatArray:
        """(K, N): the summed weights of the items on each channel, without the base loads."""
        return loads_by_channel(self.weights, channels, self.n_channels)


def select_tracked(
    estimate: FrequencyEstimate, params: BuildParams, n_channels: int
) -> tuple[float, IntArray]:
    """δ for N^(t+1) and the indices of D_p^(t+1) in ``estimate`` (count ≥ (δ − ε)·n, Manku–Motwani).

    Returns them in the canonical order (decreasing count, then increasing key).
    """
    n = estimate.total
    delta = frequency_threshold(
        params.resources,
        params.alpha,
        params.sigma,
        n_channels,
        estimate.distinct_estimate,
        tracked_frequencies=estimate.frequencies,
    )
    if delta >= 1.0 or n == 0:
        return delta, np.empty(0, dtype=np.int64)
    chosen = np.flatnonzero((estimate.counts >= (delta - estimate.epsilon) * n) & (estimate.counts > 0))
    order = sorted(chosen.tolist(), key=lambda i: (-estimate.counts[i], estimate.keys[i]))
    return delta, np.asarray(order, dtype=np.int64)


def count_weights(counts: FloatArray, exponent: int) -> FloatArray:
    """Per-item load in count space: c**e (e = 0 gives 1 per item)."""
    return np.power(np.asarray(counts, dtype=np.float64), exponent)


def prepare(
    previous: PartitionFunction,
    estimate: FrequencyEstimate,
    n_channels: int,
    params: BuildParams,
    table: npt.NDArray[np.int32] | None = None,
) -> Problem:
    """Build the ``Problem`` of one step from p^(t) to p^(t+1) with N^(t+1) = ``n_channels``.

    ``table`` is the new slot table (default: the consistent base for N^(t+1) with the previous
    function's consistent parameters). The base loads (untracked load per channel) start at zero, as in
    the paper; tail-aware builds replace them.
    """
    n = check_channels(n_channels)
    if (
        estimate.key_type is not None
        and previous.key_type is not None
        and estimate.key_type != previous.key_type
    ):
        raise InvalidInput(
            "estimate",
            f"must hold {previous.key_type!r} keys as the previous function does, got {estimate.key_type!r}",
        )
    if table is None:
        table = slot_table(n, previous.consistent, previous.slot_bits)
    delta, order = select_tracked(estimate, params, n)
    keys = tuple(estimate.keys[i] for i in order.tolist())
    counts = estimate.counts[order]
    resources = params.resources
    exponents = resources.load_exponents
    active = resources.active
    weights = np.stack([count_weights(counts, exponents[k]) for k in active])
    state_weights = count_weights(counts, exponents[0])
    old = previous.lookup_many(keys) if keys else np.empty(0, dtype=np.int64)
    hashed = np.asarray(table[_slots_of(keys, previous.slot_bits)], dtype=np.int64)

    count_of = estimate.count_of()
    tracked = set(keys)
    dropped = tuple(key for key in previous.explicit if key not in tracked)
    dropped_counts = np.array([count_of.get(k, 0.0) for k in dropped], dtype=np.float64)
    dropped_state = count_weights(dropped_counts, exponents[0])
    ideal = float(dropped_state.sum() + state_weights.sum()) / n

    problem = Problem(
        delta=delta,
        keys=keys,
        counts=counts,
        frequencies=estimate.frequencies[order],
        weights=weights,
        state_weights=state_weights,
        old_channels=old,
        hashed_channels=hashed,
        base_loads=np.zeros((len(active), n), dtype=np.float64),
        thetas=np.full(len(active), theta(params.alpha, n)),
        n_channels=n,
        initial_migration=0.0,
        dropped_keys=dropped,
        dropped_counts=dropped_counts,
        dropped_state=dropped_state,
        dropped_channels=np.array([previous.explicit[k] for k in dropped], dtype=np.int64),
        dropped_slots=_slots_of(dropped, previous.slot_bits),
        ideal_migration=ideal,
        utility=params.utility_function,
        move_limit=params.move_limit,
    )
    return dataclasses.replace(problem, initial_migration=problem.dropped_migration(table))


def _slots_of(keys: tuple[Key, ...], slot_bits: int) -> IntArray:
    if not keys:
        return np.empty(0, dtype=np.int64)
    return slots_of_hashes(hash_keys(keys), slot_bits)
