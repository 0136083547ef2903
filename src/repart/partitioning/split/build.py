"""Build a split function from a window's frequencies.

``build_split(previous, estimate, N, split=SplitParams(...))`` decides, in this order:

1. **The head**: the keys whose estimated frequency count/n is ≥ θ (``SplitParams.head_threshold``),
   hottest first. With N = 1 nothing is split.
2. **Homes**: a split key's home is its channel under the previous home function, where its state
   is, so that a key that becomes split moves nothing; only when that channel is gone (N shrank) its
   first hash choice.
3. **Candidates**: the home first, then the scheme's choices (``candidates``), plus the previous
   candidates that still hold a partial. The head ends where its keys' alias tables would pass
   ``MAX_ALIAS_BUCKETS`` buckets in all (2^⌈log₂ d⌉ per key, ``alias_fitting``): the job routes all
   of them from one constant, and the colder keys past that stay on their homes unsplit.
4. **The home function**: Gedik's ``build`` from the previous version's home, as for a preserving
   region, on the window without the head (their counts leave the keys, the total and their slots'
   tuple counts) and with the head's load as *fixed loads*: the split keys spread over their
   candidates by the scheme's weights (step 5, ``scheme_weights``) on top of the load of every key
   the build does not place (the untracked mass and the window's keys below δ, by the new consistent
   table). Gedik so places the unsplit keys around the split keys' partial loads; the split keys are
   then pinned to their homes in its explicit map.
   With ``tail_aware`` the placement is the same, and the slot overrides act only on what the split
   keys cannot absorb: from the previous overrides, the split keys are spread by the scheme's weights
   (step 5) over the per-slot loads, and the override pass balances the channels around them
   (``builder.rebalance_tail``). The weights already absorb the tail's unevenness on every channel a
   split key covers; slot moves made against loads that ignore this fit the per-slot sampling noise
   (the pass picks slots by their counts, and picked counts are biased) and pay migration for it.
5. **Weights**: RR's are uniform (load-oblivious, as in its paper); every other scheme's balance the
   predicted channel loads by water-filling (``weights.water_fill``) over the loads of every unsplit
   key under the home function, tracked keys at their home and the untracked mass by slot as the
   builder predicts it (``repart.partitioning.tail``). The scalar load filled is the sum over the
   resource code's active resources of each resource's load divided by its total, so that every
   active resource weighs alike.

Loads live in count space with the resource code's exponents, as the builder's. A split key's load on
a candidate is its weight times its load on every resource: exact for linear resources (the default
LCL, and communication in every code); for a quadratic computation cost it is the load the key would
put on one channel, shared, so it never under-predicts.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.algorithms.builder import (
    BuildResult,
    build,
    keep_previous_overrides,
    predict,
    rebalance_tail,
    require_slot_counts,
)
from repart.partitioning.algorithms.problem import BuildParams, count_weights, select_tracked
from repart.partitioning.consistent import slot_table
from repart.partitioning.domain import Key, key_type_of
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.metrics import Imbalance, imbalance, lower_bound
from repart.partitioning.resources import Resources, check_channels
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.alias import MAX_ALIAS_BUCKETS, alias_buckets
from repart.partitioning.split.candidates import candidate_lists, choice_counts, rendezvous_order
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.partitioning.split.params import SplitParams
from repart.partitioning.split.report import SplitBuildResult, SplitReport
from repart.partitioning.split.weights import water_fill
from repart.partitioning.tail import loads_by_channel, untracked_slot_loads
from repart.validation import Kind, check

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]


def build_split(
    previous: RoutingFunction,
    estimate: FrequencyEstimate,
    n_channels: int,
    *,
    split: SplitParams,
    params: BuildParams | None = None,
    algorithm: str = "redist",
) -> SplitBuildResult:
    """The next split function from ``previous`` (its home, for a split function) and the window's
    ``estimate`` (see the module docstring); ``InvalidInput`` naming the argument otherwise."""
    started = time.perf_counter()
    params = params or BuildParams()
    check("split", split, Kind(SplitParams, "SplitParams"))
    home_before = _home_of(previous)
    n = check_channels(n_channels)
    kinds = (home_before.key_type, estimate.key_type)
    if None not in kinds and kinds[0] != kinds[1]:
        raise InvalidInput(
            "estimate", f"must hold {kinds[0]!r} keys as the previous function does, got {kinds[1]!r}"
        )
    theta = split.head_threshold(n)
    head = head_indices(estimate, theta) if n > 1 else np.empty(0, dtype=np.int64)
    counts, d = choice_counts(split, estimate.frequencies[head], n) if head.size else (head, None)
    keys = tuple(estimate.keys[i] for i in head.tolist())
    hashes = hash_keys(keys) if keys else np.empty(0, dtype=np.uint64)
    homes = sticky_homes(home_before, keys, hashes, n, split.seed)
    before = [previous.split.get(key) for key in keys]
    lists = candidate_lists(split, homes, hashes, counts, n, before)
    fitting = alias_fitting(lists)
    head, keys, homes, lists = head[:fitting], keys[:fitting], homes[:fitting], lists[:fitting]
    exponents = params.resources.load_exponents
    key_loads = np.stack([count_weights(estimate.counts[head], e) for e in exponents])
    require_slot_counts(estimate, params)
    # With split keys, a tail-aware home is placed as a plain one and its slot overrides come after
    # (tail_aware_home); without any, it is the tail-aware build of a preserve region.
    tail_after = params.tail_aware and head.size > 0
    window = home_estimate(estimate, head)
    placed = SplitPlacement(head, key_loads, lists, dict(zip(keys, homes.tolist(), strict=True)))
    built = build(
        home_before,
        window,
        n,
        dataclasses.replace(params, tail_aware=False) if tail_after else params,
        algorithm,
        fixed_loads=home_fixed_loads(home_before, estimate, head, n, placed, split.scheme, params),
    )
    if tail_after:
        built = tail_aware_home(home_before, built, estimate, window, placed, split.scheme, params)
    home = _pinned(built.function, placed.pins)
    base = unsplit_loads(home, estimate, head, exponents)
    weights = scheme_weights(split.scheme, base, key_loads, lists, params)
    function = SplitFunction(
        home,
        {key: SplitEntry(c, w) for key, c, w in zip(keys, lists, weights, strict=True)},
    )
    loads = base + _spread(key_loads, lists, weights, n)
    predicted = imbalance(params.resources, loads, params.alpha)
    distinct = estimate.distinct_estimate if estimate.distinct_estimate is not None else len(estimate.keys)
    extra = sum(sum(1 for w in shares if w > 0) - 1 for shares in weights)
    report = SplitReport(
        home=dataclasses.replace(built.report, explicit_size=len(home.explicit)),
        scheme=split.scheme,
        theta=theta,
        predicted_b=predicted.b,
        predicted_load=predicted.max_mean_load,
        b_lb=estimated_lower_bound(estimate, params.resources, n, params.alpha),
        memory=(distinct + extra) / distinct,
        split_keys=len(keys),
        head=function.split,
        d=d,
        seconds=time.perf_counter() - started,
    )
    return SplitBuildResult(function, report)


def alias_fitting(lists: list[tuple[int, ...]]) -> int:
    """How many of the head's keys, hottest first, have alias tables of at most ``MAX_ALIAS_BUCKETS``
    buckets in all (``SplitFunction`` refuses more: see ``repart.partitioning.split.alias``)."""
    sizes = np.cumsum([alias_buckets(len(candidates)) for candidates in lists], dtype=np.int64)
    return int(np.searchsorted(sizes, MAX_ALIAS_BUCKETS, side="right"))


def split_imbalance(function: RoutingFunction, estimate: FrequencyEstimate, params: BuildParams) -> Imbalance:
    """The imbalance (b, max/mean load) of ``function`` on ``estimate``, as ``build_split`` predicts it
    for the function it builds: the estimate's keys that ``function`` splits spread over their
    candidates by their weights, every other key (and the untracked mass by slot) on its home channel.
    This is the controller's b of an applied version on a new window and the demo's b of a batch; a
    key-preserving function splits no key, and for it the imbalance equals ``builder.predict``'s."""
    exponents = params.resources.load_exponents
    head = np.asarray([i for i, key in enumerate(estimate.keys) if key in function.split], dtype=np.int64)
    keys = [estimate.keys[i] for i in head.tolist()]
    key_loads = np.stack([count_weights(estimate.counts[head], e) for e in exponents])
    lists = [function.split[key].candidates for key in keys]
    weights = [function.split[key].weights for key in keys]
    loads = unsplit_loads(function.home, estimate, head, exponents) + _spread(
        key_loads, lists, weights, function.n_channels
    )
    return imbalance(params.resources, loads, params.alpha)


@dataclass(frozen=True)
class SplitPlacement:
    """The split keys of a build: their indices in the estimate (``head``), their loads in count space
    (``key_loads``, rows s, c, n), their candidate lists and their homes (``pins``)."""

    head: IntArray
    key_loads: FloatArray
    lists: list[tuple[int, ...]]
    pins: dict[Key, int]


def scheme_weights(
    scheme: str, base: FloatArray, key_loads: FloatArray, lists: list[tuple[int, ...]], params: BuildParams
) -> list[tuple[float, ...]]:
    """The split keys' weights under ``scheme`` over the channel loads ``base`` of every other key: RR's
    are uniform (load-oblivious, as in its paper), every other scheme's balance them
    (``balancing_weights``)."""
    if scheme == "rr":
        return [(1.0 / len(candidates),) * len(candidates) for candidates in lists]
    return balancing_weights(base, key_loads, lists, params)


def tail_aware_home(
    previous: PartitionFunction,
    built: BuildResult,
    estimate: FrequencyEstimate,
    window: FrequencyEstimate,
    placed: SplitPlacement,
    scheme: str,
    params: BuildParams,
) -> BuildResult:
    """The home ``built`` (placed as without ``tail_aware`` on ``window``, the estimate without the
    split keys) with the tail-aware slot overrides of the imbalance the split keys' weights leave (see
    the module docstring): starting from the previous overrides, the split keys are spread over the
    per-slot loads by the scheme's weights (``scheme_weights``: RR's uniform ones included), and the
    override pass (``builder.rebalance_tail``) balances around them. The report's predicted b,
    max/mean load and m are those of the final home with the split keys so spread
    (``builder.predict``); its rho, gamma and evaluations describe the placement search."""
    n = built.function.n_channels
    start = keep_previous_overrides(previous, built.function)
    loads = unsplit_loads(_pinned(start, placed.pins), estimate, placed.head, params.resources.load_exponents)
    weights = scheme_weights(scheme, loads, placed.key_loads, placed.lists, params)
    spread = _spread(placed.key_loads, placed.lists, weights, n)
    function = rebalance_tail(previous, start, window, params, spread)
    predicted, m = predict(previous, function, window, params, spread)
    report = dataclasses.replace(
        built.report,
        slot_overrides=len(function.slot_overrides),
        predicted_b=predicted.b,
        predicted_load=predicted.max_mean_load,
        predicted_m=m,
        objective=predicted.b * (1.0 + m),
    )
    return BuildResult(function, report)


def _home_of(previous: RoutingFunction) -> PartitionFunction:
    if isinstance(previous, PartitionFunction | SplitFunction):  # an argument check, not dispatch
        return previous.home
    raise InvalidInput(
        "previous", f"must be a PartitionFunction or a SplitFunction, got a {type(previous).__name__}"
    )


def head_indices(estimate: FrequencyEstimate, theta: float) -> IntArray:
    """Indices of the keys with estimated frequency ≥ θ, by decreasing count, then increasing key."""
    chosen = np.flatnonzero((estimate.frequencies >= theta) & (estimate.counts > 0)).tolist()
    chosen.sort(key=lambda i: (-estimate.counts[i], estimate.keys[i]))
    return np.asarray(chosen, dtype=np.int64)


def sticky_homes(
    previous: PartitionFunction, keys: tuple[Key, ...], hashes: UIntArray, n: int, seed: int
) -> IntArray:
    """Each split key's home: its channel under the previous home function, where its state is, or
    its first hash choice (rendezvous order) when that channel is gone (N shrank)."""
    if not keys:
        return np.empty(0, dtype=np.int64)
    homes = previous.lookup_many(keys)
    gone = homes >= n
    if gone.any():
        homes[gone] = rendezvous_order(hashes[gone], n, seed)[:, 0]
    return homes


def home_estimate(estimate: FrequencyEstimate, head: IntArray) -> FrequencyEstimate:
    """The window as the home build sees it: the head keys count 0 (so that Gedik neither tracks nor
    places them: their load reaches the build as fixed loads) and their tuples leave the total and
    their slots' tuple counts. The total stays ≥ 1, for a window whose every tuple is split."""
    if head.size == 0:
        return estimate
    counts = estimate.counts.copy()
    removed = counts[head]
    counts[head] = 0.0
    slot_counts = estimate.slot_counts
    if slot_counts is not None and estimate.slot_bits is not None:
        keys = tuple(estimate.keys[i] for i in head.tolist())
        slots = slots_of_hashes(hash_keys(keys), estimate.slot_bits)
        slot_counts = np.maximum(slot_counts - np.bincount(slots, removed, minlength=slot_counts.size), 0.0)
    total = max(1, estimate.total - math.floor(float(removed.sum())))
    return dataclasses.replace(estimate, counts=counts, total=total, slot_counts=slot_counts)


def _pinned(function: PartitionFunction, homes: dict[Key, int]) -> PartitionFunction:
    """``function`` with every split key mapped explicitly to its home."""
    if not homes:
        return function
    return PartitionFunction(
        n_channels=function.n_channels,
        key_type=function.key_type or key_type_of(next(iter(homes))),
        slot_bits=function.slot_bits,
        consistent=function.consistent,
        explicit={**function.explicit, **homes},
        slot_overrides=function.slot_overrides,
    )


def home_fixed_loads(
    previous: PartitionFunction,
    estimate: FrequencyEstimate,
    head: IntArray,
    n: int,
    placed: SplitPlacement,
    scheme: str,
    params: BuildParams,
) -> FloatArray:
    """(3, N): the split keys' loads as the home build sees them, spread over their candidates by the
    scheme's weights (``scheme_weights``: water-filled, or RR's uniform ones) on top of the load of
    every key the build does not place: the untracked mass and the window's keys below δ, routed by
    the new consistent table (see the module docstring)."""
    exponents = params.resources.load_exponents
    table = slot_table(n, previous.consistent, previous.slot_bits)
    untracked = untracked_slot_loads(estimate, estimate.keys, estimate.counts, previous.slot_bits, exponents)
    hashed = loads_by_channel(untracked, table, n)
    below = np.ones(len(estimate.keys), dtype=bool)
    below[head] = False
    below[select_tracked(home_estimate(estimate, head), params, n)[1]] = False
    if below.any():
        keys = [key for key, kept in zip(estimate.keys, below.tolist(), strict=True) if kept]
        channels = table[slots_of_hashes(hash_keys(keys), previous.slot_bits)]
        loads = np.stack([count_weights(estimate.counts[below], e) for e in exponents])
        hashed += loads_by_channel(loads, channels, n)
    weights = scheme_weights(scheme, hashed, placed.key_loads, placed.lists, params)
    return _spread(placed.key_loads, placed.lists, weights, n)


def balancing_weights(
    base: FloatArray, key_loads: FloatArray, lists: list[tuple[int, ...]], params: BuildParams
) -> list[tuple[float, ...]]:
    """Water-filling on the active resources' loads, each divided by its total, summed."""
    if not lists:
        return []
    active = list(params.resources.active)
    scale = (base[active].sum(axis=1) + key_loads[active].sum(axis=1))[:, None]
    return water_fill((base[active] / scale).sum(axis=0), (key_loads[active] / scale).sum(axis=0), lists)


def unsplit_loads(
    home: PartitionFunction, estimate: FrequencyEstimate, head: IntArray, exponents: tuple[int, ...]
) -> FloatArray:
    """(len(exponents), N): every key's load but the head's, tracked keys at their home and the
    untracked mass by slot (count space, as ``builder.predict``)."""
    n = home.n_channels
    slot_loads = untracked_slot_loads(estimate, estimate.keys, estimate.counts, home.slot_bits, exponents)
    loads = loads_by_channel(slot_loads, home.table, n)
    rest = np.ones(len(estimate.keys), dtype=bool)
    rest[head] = False
    keys: list[Key] = [key for key, kept in zip(estimate.keys, rest.tolist(), strict=True) if kept]
    if keys:
        channels = home.lookup_many(keys)
        for k, e in enumerate(exponents):
            loads[k] += np.bincount(channels, weights=count_weights(estimate.counts[rest], e), minlength=n)
    return loads


def _spread(
    key_loads: FloatArray, lists: list[tuple[int, ...]], weights: list[tuple[float, ...]], n: int
) -> FloatArray:
    """(K, N): the split keys' loads on their candidates, by weight."""
    loads = np.zeros((key_loads.shape[0], n))
    for i, (candidates, shares) in enumerate(zip(lists, weights, strict=True)):
        loads[:, list(candidates)] += key_loads[:, i : i + 1] * np.asarray(shares)[None, :]
    return loads


def estimated_lower_bound(estimate: FrequencyEstimate, resources: Resources, n: int, alpha: float) -> float:
    """b_lb (``metrics.lower_bound``) on the estimate: the tracked keys' frequencies and the untracked
    mass shared evenly by the keys the estimate does not hold (its distinct estimate minus the tracked
    keys, at least one)."""
    tracked = estimate.frequencies
    rest = max(0.0, 1.0 - float(tracked.sum()))
    if rest <= 0:
        return lower_bound(resources, tracked, n, alpha)
    distinct = estimate.distinct_estimate if estimate.distinct_estimate is not None else len(tracked)
    untracked = max(distinct - len(tracked), 1)
    return lower_bound(resources, np.concatenate([tracked, np.full(untracked, rest / untracked)]), n, alpha)
