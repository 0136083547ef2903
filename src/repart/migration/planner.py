"""Construction of the migration plan from one partition function to another.

``plan_migration(a, b, estimate)`` compares the explicit maps and the routing tables ``T'`` of ``a``
and ``b`` and, given a frequency estimate, predicts the state that moves. The same call serves any
pair of versions: the next build, a rollback, or two versions far apart.

Either function may be a ``SplitFunction``: its ``home`` routes its unsplit keys, and the rule for its
split keys is that after the plan every key's state is on channels in ``b.candidates(key)`` (for a
``PartitionFunction``, ``(b.lookup(key),)``). So for every key of ``a``'s or ``b``'s split table a
partial on a channel ``c`` stays if ``c`` is among those candidates, else it is merged into the key's
home in ``b`` (a *consolidation*); a key that becomes split moves nothing when its old channel is among
its new candidates. Such a key is named in the plan (``SplitKey``), never left to the slot moves.
Every other key is planned as between two key-preserving functions: explicit moves for the keys of
``E_a ∪ E_b`` (the homes' explicit maps), slot moves for the rest, pinned keys.

Predicted state is in frequency space: a key of frequency f = count/n holds β_s(f) = f**e (Gedik
Eq. 1; e the state exponent of the resource code). The state of the untracked keys of a slot comes
from ``repart.partitioning.tail`` (the slot's tuple count minus the counts of the explicit keys of
both functions, spread over the slot's share of the distinct keys), converted from count space by
dividing by n**e. Then

    M(a, b) = Σ_{explicit moves} β_s(f(key)) + Σ_{moved slots} tail state of the slot
              + Σ_{consolidations} β_s(f(key)) · w_a(key, source)                          (Eq. 9)
    m = M(a, b) / L̄_s,  L̄_s = (Σ_{d named} β_s(f(d)) + Σ_s tail state of s) / N_b         (Eq. 10, 12)

with w_a(key, c) the key's routing weight on c in ``a`` (1 when ``a`` does not split it) and the named
keys those of E_a ∪ E_b and of both split tables (their counts leave the slots' tail). A named key that
the estimate does not hold is predicted to hold no state.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.migration.consolidation import SplitKey, consolidations_of, predicted_cost
from repart.migration.plan import ExplicitMove, MigrationPlan
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.resources import Resources
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.function import SplitEntry
from repart.partitioning.tail import untracked_slot_loads

FloatArray = npt.NDArray[np.float64]
#: A version's function: key-preserving, or split.

DEFAULT_RESOURCES = Resources.parse("LCL")


def plan_migration(
    a: RoutingFunction,
    b: RoutingFunction,
    estimate: FrequencyEstimate | None = None,
    resources: Resources = DEFAULT_RESOURCES,
) -> MigrationPlan:
    """The plan that takes the state of a region from function ``a`` to function ``b``.

    ``a`` and ``b`` (each a ``PartitionFunction`` or a ``SplitFunction``) must share their key type (or
    have no explicit or split keys) and their slot bits; their channel counts may differ. ``estimate``
    (the frequencies of the current window) gives each explicit move and split key its weight and the
    plan its predicted ``cost`` and ``m``; without it the weights are 0.0 and the prediction is None.
    Only the state shape of ``resources`` matters. ``InvalidInput`` names the argument when the key
    types, the slot bits or the estimate's key type do not match.
    """
    key_type = _common_key_type(a, b)
    if a.slot_bits != b.slot_bits:
        raise InvalidInput(
            "b", f"must have a's slot_bits {a.slot_bits} (a plan maps slot to slot), got {b.slot_bits}"
        )
    if estimate is not None and None not in (estimate.key_type, key_type) and estimate.key_type != key_type:
        raise InvalidInput(
            "estimate", f"must hold the functions' {key_type!r} keys, got {estimate.key_type!r} keys"
        )
    home_a, home_b = a.home, b.home
    split_a, split_b = a.split, b.split
    keys = sorted(home_a.explicit.keys() | home_b.explicit.keys() | split_a.keys() | split_b.keys())
    sources, targets = home_a.lookup_many(keys), home_b.lookup_many(keys)
    is_split = np.array([key in split_a or key in split_b for key in keys], dtype=np.bool_)
    moved = (sources != targets) & ~is_split
    changed = home_a.table != home_b.table
    if estimate is None:
        weights, move_cost, total_state = np.zeros(len(keys)), None, None
    else:
        weights, tail = _predicted_state(estimate, keys, a.slot_bits, resources.load_exponents[0])
        move_cost = float(weights[moved].sum() + tail[changed].sum())
        total_state = float(weights.sum() + tail.sum())
    rows = zip(
        keys,
        sources.tolist(),
        targets.tolist(),
        weights.tolist(),
        moved.tolist(),
        is_split.tolist(),
        strict=True,
    )
    explicit_moves, pinned_keys, split_keys = [], [], []
    for key, source, target, weight, is_moved, split in rows:
        if split:
            split_keys.append(
                SplitKey(key, *_side(split_a.get(key), source), *_side(split_b.get(key), target), weight)
            )
        elif is_moved:
            explicit_moves.append(ExplicitMove(key, source, target, weight))
        else:
            pinned_keys.append(key)
    cost = None if move_cost is None else predicted_cost(move_cost, consolidations_of(split_keys))
    return MigrationPlan(
        key_type=key_type,
        slot_bits=a.slot_bits,
        source_n_channels=a.n_channels,
        target_n_channels=b.n_channels,
        source_digest=a.digest,
        target_digest=b.digest,
        explicit_moves=tuple(explicit_moves),
        pinned_keys=tuple(pinned_keys),
        slot_moves=_slot_runs(home_a.table, home_b.table, changed),
        cost=cost,
        total_state=total_state,
        split_keys=tuple(split_keys),
        move_cost=move_cost,
    )


def _side(entry: SplitEntry | None, home: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A split key's channels and shares in one function: its split entry, or its home alone."""
    return (entry.candidates, entry.weights) if entry is not None else ((home,), (1.0,))


def _common_key_type(a: RoutingFunction, b: RoutingFunction) -> KeyType | None:
    if None not in (a.key_type, b.key_type) and a.key_type != b.key_type:
        raise InvalidInput(
            "b", f"must have a's key_type {a.key_type!r} (a region uses one key type), got {b.key_type!r}"
        )
    return a.key_type or b.key_type


def _slot_runs(
    before: npt.NDArray[np.int32], after: npt.NDArray[np.int32], changed: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """Maximal runs of consecutive changed slots with one (source, target) pair: rows of
    ``(first_slot, last_slot, source, target)`` by first slot."""
    slots = np.flatnonzero(changed)
    if slots.size == 0:
        return np.empty((0, 4), dtype=np.int64)
    sources, targets = before[slots], after[slots]
    starts_run = np.ones(slots.size, dtype=np.bool_)
    starts_run[1:] = (np.diff(slots) != 1) | (sources[1:] != sources[:-1]) | (targets[1:] != targets[:-1])
    first = np.flatnonzero(starts_run)
    last = np.append(first[1:], slots.size) - 1
    return np.stack([slots[first], slots[last], sources[first], targets[first]], axis=1).astype(np.int64)


def _predicted_state(
    estimate: FrequencyEstimate, keys: list[Key], slot_bits: int, exponent: int
) -> tuple[FloatArray, FloatArray]:
    """β_s(f) of every explicit key (0 when not estimated) and the untracked state of every slot.

    Both in frequency space: count-space loads c**e (``repart.partitioning.tail``) divided by n**e.
    """
    count_of = estimate.count_of()
    known = [index for index, key in enumerate(keys) if key in count_of]
    known_keys = tuple(keys[index] for index in known)
    known_counts = np.array([count_of[key] for key in known_keys], dtype=np.float64)
    scale = _frequency_scale(estimate.total, exponent)
    weights = np.zeros(len(keys))
    weights[known] = np.power(known_counts, exponent) * scale
    tail = untracked_slot_loads(estimate, known_keys, known_counts, slot_bits, (exponent,))[0] * scale
    return weights, tail


def _frequency_scale(total: int, exponent: int) -> float:
    """1 / n**e, which turns a count-space load c**e into β_s(c/n); 0 for e > 0 in an empty window."""
    if exponent == 0:
        return 1.0
    return float(total) ** -exponent if total > 0 else 0.0
