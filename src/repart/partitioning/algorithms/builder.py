"""One interface for every construction algorithm.

``build(previous, estimate, n_channels, params, algorithm)`` returns the next partition function and a
``BuildReport``: δ, the explicit-map size, the number of slot overrides, ρ and γ of the final mapping
(Eq. 18–20), b, max/mean load and m *predicted* from the estimate (explicit keys plus the untracked
per-slot mass, Eq. 11–12), the objective b·(1 + m) (Eq. 13), the number of candidate evaluations
and the seconds taken.

Algorithms: ``scan``, ``redist`` and ``readj`` (Algorithms 2–4), the baselines ``uniform`` (slot
s → s mod N: hashing without consistency, no explicit map) and ``consistent`` (the slot table alone),
and ``auto``, which runs scan, redist and readj and keeps the lowest objective, recording all three.

``fixed_loads`` (optional, count space, rows s, c, n by channel) is load that sits on the channels
whatever the function does: split mode's partial loads of its split keys (``partitioning.split``).
The placement and the slot-override pass balance around it, and the predicted b includes it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.algorithms.overrides import SlotRebalance, rebalance_slots
from repart.partitioning.algorithms.problem import (
    BuildParams,
    Problem,
    count_weights,
    prepare,
)
from repart.partitioning.algorithms.readj import readj
from repart.partitioning.algorithms.redist import redist
from repart.partitioning.algorithms.scan import scan
from repart.partitioning.consistent import ConsistentSpec, slot_table
from repart.partitioning.documents import json_values
from repart.partitioning.domain import DEFAULT_SLOT_BITS, KeyType
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.metrics import Imbalance, imbalance
from repart.partitioning.resources import check_channels, frequency_threshold
from repart.partitioning.tail import loads_by_channel, untracked_slot_loads
from repart.partitioning.utility import balance_penalty
from repart.validation import Options, check

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Placement = Callable[[Problem], tuple[IntArray, int]]

PLACEMENTS: dict[str, Placement] = {"scan": scan, "redist": redist, "readj": readj}
BASELINES = ("uniform", "consistent")
ALGORITHMS = ("scan", "redist", "readj", "uniform", "consistent", "auto")


@dataclass(frozen=True)
class BuildReport:
    """What a build did and what it predicts (see the module docstring)."""

    algorithm: str
    n_channels: int
    delta: float
    explicit_size: int
    slot_overrides: int
    rho: float
    gamma: float
    predicted_b: float
    predicted_load: float
    predicted_m: float
    objective: float
    evaluations: int
    seconds: float
    candidates: tuple[BuildReport, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON values (the version's stored report): the candidates as nested reports, an
        infinite or NaN figure as None."""
        return dict(json_values(dataclasses.asdict(self)))


@dataclass(frozen=True)
class BuildResult:
    function: PartitionFunction
    report: BuildReport


def check_algorithm(name: str) -> str:
    """``name`` if it is one of ``ALGORITHMS``; ``InvalidInput("algorithm")`` otherwise."""
    return str(check("algorithm", name, Options(ALGORITHMS)))


def initial_function(
    n_channels: int = 1,
    key_type: KeyType | None = None,
    slot_bits: int = DEFAULT_SLOT_BITS,
    consistent: ConsistentSpec | None = None,
) -> PartitionFunction:
    """p^(0): the consistent hash alone, with no explicit map."""
    return PartitionFunction(
        n_channels=n_channels,
        key_type=key_type,
        slot_bits=slot_bits,
        consistent=consistent or ConsistentSpec(),
    )


def build(
    previous: PartitionFunction,
    estimate: FrequencyEstimate,
    n_channels: int,
    params: BuildParams | None = None,
    algorithm: str = "redist",
    *,
    fixed_loads: FloatArray | None = None,
) -> BuildResult:
    """Construct p^(t+1) from p^(t) = ``previous`` and the estimated frequencies (Gedik §4.2)."""
    params = params or BuildParams()
    check_algorithm(algorithm)
    n = check_channels(n_channels)
    fixed = _checked_fixed_loads(fixed_loads, n)
    if estimate.total == 0 or not estimate.keys:
        raise InvalidInput("estimate", "must hold at least one key and one tuple, got an empty estimate")
    require_slot_counts(estimate, params)
    if algorithm == "auto":
        runs = [build(previous, estimate, n, params, name, fixed_loads=fixed) for name in PLACEMENTS]
        best = min(runs, key=lambda run: run.report.objective)
        seconds = sum(run.report.seconds for run in runs)
        report = dataclasses.replace(
            best.report,
            algorithm=f"auto:{best.report.algorithm}",
            seconds=seconds,
            candidates=tuple(run.report for run in runs),
        )
        return BuildResult(best.function, report)
    started = time.perf_counter()
    if algorithm in BASELINES:
        function = _baseline(previous, n, algorithm)
        return BuildResult(
            function,
            _report(
                algorithm,
                previous,
                function,
                estimate,
                params,
                _threshold(estimate, params, n),
                0.0,
                0.0,
                0,
                started,
                fixed,
            ),
        )
    return _build_placement(previous, estimate, n, params, algorithm, started, fixed)


def _checked_fixed_loads(fixed_loads: FloatArray | None, n: int) -> FloatArray | None:
    """``fixed_loads`` as a (3, N) float array of finite loads ≥ 0, or None."""
    if fixed_loads is None:
        return None
    loads = np.asarray(fixed_loads, dtype=np.float64)
    if loads.shape != (3, n) or not np.all(np.isfinite(loads)) or np.any(loads < 0):
        raise InvalidInput(
            "fixed_loads",
            f"must be a (3, {n}) array of finite loads >= 0 (rows s, c, n), got shape {loads.shape}",
        )
    return loads


def _threshold(estimate: FrequencyEstimate, params: BuildParams, n: int) -> float:
    """δ for N channels (Eq. 16–17), reported by the baselines too although they track nothing."""
    return frequency_threshold(
        params.resources, params.alpha, params.sigma, n, estimate.distinct_estimate, estimate.frequencies
    )


def _baseline(previous: PartitionFunction, n: int, algorithm: str) -> PartitionFunction:
    spec = previous.consistent
    if algorithm == "uniform":
        spec = dataclasses.replace(spec, method="mod")
    return PartitionFunction(
        n_channels=n, key_type=previous.key_type, slot_bits=previous.slot_bits, consistent=spec
    )


def _build_placement(
    previous: PartitionFunction,
    estimate: FrequencyEstimate,
    n: int,
    params: BuildParams,
    algorithm: str,
    started: float,
    fixed: FloatArray | None,
) -> BuildResult:
    base = slot_table(n, previous.consistent, previous.slot_bits)
    table = _keep_previous_overrides(previous, base, n) if params.tail_aware else base
    problem = prepare(previous, estimate, n, params, table=table)
    rebalance = _tail_aware(problem, previous, estimate, params, table) if params.tail_aware else None
    if rebalance is not None:
        problem = rebalance.problem
    fixed_active = (
        np.zeros_like(problem.base_loads) if fixed is None else fixed[list(params.resources.active)]
    )
    problem = dataclasses.replace(problem, base_loads=problem.base_loads + fixed_active)
    channels, evaluations = PLACEMENTS[algorithm](problem)
    migration = problem.initial_migration + _explicit_migration(problem, channels)
    loads = problem.base_loads + problem.placed_loads(channels)
    if rebalance is not None:
        slots = dataclasses.replace(
            rebalance.slots, explicit_loads=problem.placed_loads(channels) + fixed_active
        )
        start = table
        table, migration, extra = rebalance_slots(slots, table, migration)
        migration += problem.dropped_migration(table) - problem.dropped_migration(start)
        evaluations += extra
        loads = slots.explicit_loads + loads_by_channel(slots.slot_loads, table, n)
    function = PartitionFunction(
        n_channels=n,
        key_type=previous.key_type or estimate.key_type,
        slot_bits=previous.slot_bits,
        consistent=previous.consistent,
        explicit=dict(zip(problem.keys, channels.tolist(), strict=True)),
        slot_overrides=_overrides(table, base),
    )
    rho = float(balance_penalty(loads.max(axis=1), loads.min(axis=1), loads.sum(axis=1), problem.thetas, n))
    gamma = migration / problem.ideal_migration if problem.ideal_migration > 0 else 0.0
    report = _report(
        algorithm,
        previous,
        function,
        estimate,
        params,
        problem.delta,
        rho,
        gamma,
        evaluations,
        started,
        fixed,
    )
    return BuildResult(function, report)


@dataclass(frozen=True)
class _TailAware:
    problem: Problem
    slots: SlotRebalance


def _tail_aware(
    problem: Problem,
    previous: PartitionFunction,
    estimate: FrequencyEstimate,
    params: BuildParams,
    table: npt.NDArray[np.int32],
) -> _TailAware:
    """The placement problem and the slot-override pass of a tail-aware build.

    The explicit keys are placed against the untracked load spread evenly over the channels (what the
    override pass then aims for), so that noise in the per-slot counts does not reshuffle hot keys.
    Migration counts the untracked state too: the slots whose owner changes with the new base table
    start the migration cost, and the ideal m̄ covers all state. Keys that just left the explicit map
    (D_o) are routed by slot like the rest of the tail, but their state sits on their old explicit
    channel, so their migration is counted per key (``Problem.dropped_migration``), not per slot.
    """
    n, bits = problem.n_channels, previous.slot_bits
    exponents = params.resources.load_exponents
    active = tuple(exponents[k] for k in params.resources.active)
    slot_loads = untracked_slot_loads(estimate, problem.keys, problem.counts, bits, active)
    known = problem.keys + problem.dropped_keys
    known_counts = np.concatenate([problem.counts, problem.dropped_counts])
    slot_state = untracked_slot_loads(estimate, known, known_counts, bits, (exponents[0],))[0]
    even = np.repeat(slot_loads.sum(axis=1, keepdims=True) / n, n, axis=1)
    problem = dataclasses.replace(
        problem,
        base_loads=even,
        initial_migration=problem.initial_migration + float(slot_state[previous.table != table].sum()),
        ideal_migration=problem.ideal_migration + float(slot_state.sum()) / n,
    )
    slots = SlotRebalance(
        slot_loads=slot_loads,
        slot_state=slot_state,
        previous_table=previous.table,
        explicit_loads=np.zeros_like(even),
        thetas=problem.thetas,
        utility=problem.utility,
        ideal_migration=problem.ideal_migration,
    )
    return _TailAware(problem, slots)


def require_slot_counts(estimate: FrequencyEstimate, params: BuildParams) -> None:
    """InvalidInput ``estimate`` when a tail-aware build (``params.tail_aware``) is given an estimate
    without per-slot tuple counts, which its slot overrides need."""
    if params.tail_aware and estimate.slot_counts is None:
        raise InvalidInput(
            "estimate", "must have slot_counts (per-slot tuple counts) for a tail_aware build, got None"
        )


def keep_previous_overrides(previous: PartitionFunction, function: PartitionFunction) -> PartitionFunction:
    """``function`` (on its consistent base) with the previous overrides whose channel still exists:
    the slot table a tail-aware build starts from."""
    base = function.base_table
    table = _keep_previous_overrides(previous, base, function.n_channels)
    return dataclasses.replace(function, slot_overrides=_overrides(table, base))


def rebalance_tail(
    previous: PartitionFunction,
    function: PartitionFunction,
    estimate: FrequencyEstimate,
    params: BuildParams,
    fixed_loads: FloatArray,
) -> PartitionFunction:
    """``function`` with the tail-aware slot-override pass run on its table, its explicit map kept.

    For a home whose explicit keys are already placed (split mode, ``split.build``): ``fixed_loads``
    (count space, rows s, c, n) is the split keys' load as their weights spread it, so the pass moves
    slots only for the imbalance those weights leave. Migration is counted from p^(t) = ``previous``
    as in a tail-aware build.
    """
    n = function.n_channels
    fixed = _checked_fixed_loads(fixed_loads, n)
    if fixed is None:
        raise InvalidInput("fixed_loads", f"must be a (3, {n}) array of finite loads >= 0, got None")
    start = function.table
    problem = prepare(previous, estimate, n, params, table=start)
    rebalance = _tail_aware(problem, previous, estimate, params, start)
    channels = function.lookup_many(problem.keys) if problem.keys else np.empty(0, dtype=np.int64)
    slots = dataclasses.replace(
        rebalance.slots,
        explicit_loads=problem.placed_loads(channels) + fixed[list(params.resources.active)],
    )
    migration = rebalance.problem.initial_migration + _explicit_migration(problem, channels)
    table, _, _ = rebalance_slots(slots, start, migration)
    return dataclasses.replace(function, slot_overrides=_overrides(table, function.base_table))


def _overrides(table: npt.NDArray[np.int32], base: npt.NDArray[np.int32]) -> dict[int, int]:
    """The slot overrides that turn the consistent ``base`` into ``table``."""
    return {int(s): int(table[s]) for s in np.flatnonzero(table != base)}


def _keep_previous_overrides(
    previous: PartitionFunction, table: npt.NDArray[np.int32], n: int
) -> npt.NDArray[np.int32]:
    """Start from the new consistent base, keeping the previous overrides whose channel still exists."""
    kept = np.array(table, dtype=np.int32)
    for slot, channel in previous.slot_overrides.items():
        if channel < n:
            kept[slot] = channel
    return kept


def _explicit_migration(problem: Problem, channels: IntArray) -> float:
    """Σ β_s over placed items whose channel differs from p^(t) (the second sum of Eq. 18)."""
    return float(problem.state_weights[channels != problem.old_channels].sum())


def _report(
    algorithm: str,
    previous: PartitionFunction,
    function: PartitionFunction,
    estimate: FrequencyEstimate,
    params: BuildParams,
    delta: float,
    rho: float,
    gamma: float,
    evaluations: int,
    started: float,
    fixed: FloatArray | None,
) -> BuildReport:
    predicted, m = predict(previous, function, estimate, params, fixed)
    b = predicted.b
    return BuildReport(
        algorithm=algorithm,
        n_channels=function.n_channels,
        delta=delta,
        explicit_size=len(function.explicit),
        slot_overrides=len(function.slot_overrides),
        rho=rho,
        gamma=gamma,
        predicted_b=b,
        predicted_load=predicted.max_mean_load,
        predicted_m=m,
        objective=b * (1.0 + m),
        evaluations=evaluations,
        seconds=time.perf_counter() - started,
    )


def predict(
    previous: PartitionFunction,
    function: PartitionFunction,
    estimate: FrequencyEstimate,
    params: BuildParams,
    fixed_loads: FloatArray | None = None,
) -> tuple[Imbalance, float]:
    """The imbalance (b, max/mean load) and m of ``function`` predicted from the estimate: retained
    keys plus the untracked slot mass.

    Keys the estimate retains are placed by lookup; the untracked mass per slot (tail.py) follows the
    slot tables; ``fixed_loads`` (when given) add to the channels. m compares p^(t) = ``previous``
    with ``function`` on the same loads.
    """
    n = function.n_channels
    exponents = params.resources.load_exponents
    counts = estimate.counts
    slot_loads = untracked_slot_loads(estimate, estimate.keys, estimate.counts, function.slot_bits, exponents)
    if estimate.keys:
        now = function.lookup_many(estimate.keys)
        before = previous.lookup_many(estimate.keys)
    else:
        now = before = np.empty(0, dtype=np.int64)
    loads = loads_by_channel(slot_loads, function.table, n)
    for k, e in enumerate(exponents):
        loads[k] += np.bincount(now, weights=count_weights(counts, e), minlength=n)
    if fixed_loads is not None:
        loads += fixed_loads
    predicted = imbalance(params.resources, loads, params.alpha)
    state = count_weights(counts, exponents[0])
    moved = float(state[now != before].sum()) + float(slot_loads[0][previous.table != function.table].sum())
    ideal = (float(state.sum()) + float(slot_loads[0].sum())) / n
    return predicted, (moved / ideal if ideal > 0 else 0.0)
