"""Tail-aware builds: slot overrides (repart's extension) and loads of the untracked keys."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.algorithms.builder import build, initial_function
from repart.partitioning.algorithms.overrides import SlotRebalance, rebalance_slots
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.partitioning.tail import loads_by_channel, untracked_slot_mass
from repart.partitioning.utility import balance_penalty, utility_function
from tests.factories import zipf_estimate_with_slots

SLOTS = 1 << 10


def utility_of(problem: SlotRebalance, table: np.ndarray, migration: float) -> float:
    loads = problem.explicit_loads + loads_by_channel(
        problem.slot_loads, table, problem.explicit_loads.shape[1]
    )
    n = loads.shape[1]
    rho = balance_penalty(loads.max(axis=1), loads.min(axis=1), loads.sum(axis=1), problem.thetas, n)
    return float(problem.utility(rho, np.array(migration / problem.ideal_migration)))


def make_problem(
    mass: np.ndarray, table: np.ndarray, explicit: np.ndarray, previous: np.ndarray
) -> SlotRebalance:
    n = explicit.size
    return SlotRebalance(
        slot_loads=mass[None, :].astype(float),
        slot_state=mass.astype(float),
        previous_table=previous.astype(np.int32),
        explicit_loads=explicit[None, :].astype(float),
        thetas=np.array([0.2]),
        utility=utility_function("APM"),
        ideal_migration=float(mass.sum() + explicit.sum()) / n,
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    utility=st.sampled_from(["A", "APM", "APLM", "ATM", "ATLM"]),
)
def test_overrides_never_worsen_the_utility(n: int, seed: int, utility: str) -> None:
    rng = np.random.default_rng(seed)
    mass = rng.integers(0, 50, SLOTS).astype(float)
    table = rng.integers(0, n, SLOTS).astype(np.int32)
    explicit = rng.integers(0, 3000, n).astype(float)
    problem = dataclasses.replace(
        make_problem(mass, table, explicit, table), utility=utility_function(utility)
    )
    before = utility_of(problem, table, 0.0)
    result, migration, _ = rebalance_slots(problem, table, 0.0)
    assert utility_of(problem, result, migration) <= before
    moved = result != table
    owner_moves = mass[moved].sum()  # every moved slot left its previous owner (table == previous here)
    assert migration == pytest.approx(owner_moves)


def test_overrides_walk_through_a_plateau_of_tied_maxima() -> None:
    mass = np.zeros(SLOTS)
    table = np.zeros(SLOTS, dtype=np.int32)
    table[SLOTS // 3 :] = 1
    table[2 * SLOTS // 3 :] = 2
    mass[table == 0] = 3.0
    mass[table == 1] = 3.0
    explicit = np.array([0.0, 3.0 * (table == 0).sum() - 3.0 * (table == 1).sum(), 0.0])
    problem = make_problem(mass, table, explicit, table)
    loads = explicit + np.bincount(table, weights=mass, minlength=3)
    assert loads[0] == loads[1] > loads[2]  # channels 0 and 1 tie at the maximum
    result, migration, _ = rebalance_slots(problem, table, 0.0)
    after = explicit + np.bincount(result, weights=mass, minlength=3)
    assert after.max() - after.min() < (loads.max() - loads.min()) / 10
    assert utility_of(problem, result, migration) < utility_of(problem, table, 0.0)


def test_overrides_prefer_returning_a_slot_to_its_previous_owner() -> None:
    mass = np.zeros(SLOTS)
    table = np.zeros(SLOTS, dtype=np.int32)
    table[SLOTS // 2 :] = 1
    mass[[0, 1]] = 10.0  # two equal slots on channel 0
    previous = table.copy()
    previous[1] = 1  # slot 1's state still lives on channel 1
    problem = make_problem(mass, table, np.array([0.0, 0.0]), previous)
    result, migration, _ = rebalance_slots(problem, table, 10.0)
    assert result[1] == 1 and result[0] == 0
    assert migration == 0.0  # the refund of returning home


def test_untracked_mass_subtracts_tracked_keys_from_their_slots() -> None:
    keys = np.array([5, 6, 7], dtype=np.int64)
    slots = slots_of_hashes(hash_int64_array(keys), 10)
    slot_counts = np.zeros(SLOTS)
    np.add.at(slot_counts, slots, [100.0, 50.0, 20.0])
    slot_counts[0] += 7.0
    estimate = FrequencyEstimate(
        keys=(5, 6, 7), counts=np.array([100.0, 50.0, 20.0]), total=177, slot_counts=slot_counts, slot_bits=10
    )
    mass = untracked_slot_mass(estimate, (5, 6), np.array([100.0, 50.0]), 10)
    assert mass.sum() == pytest.approx(27.0)  # key 7 (untracked) and the 7 extra tuples remain
    assert mass[slots[2]] >= 20.0


def test_tail_aware_build_predicts_better_balance_than_the_faithful_one() -> None:
    estimate = zipf_estimate_with_slots(20_000, 400_000)
    previous = initial_function(5, "int")
    for algorithm in ("scan", "redist", "readj"):
        faithful = build(previous, estimate, 6, BuildParams(), algorithm)
        tail = build(previous, estimate, 6, BuildParams(tail_aware=True), algorithm)
        assert tail.report.slot_overrides == len(tail.function.slot_overrides) > 0
        assert tail.report.predicted_b < faithful.report.predicted_b
        assert tail.report.predicted_b < 1.05 / 1.2  # within 5% of perfect balance on the estimate
        base = tail.function.base_table
        assert all(base[s] != c for s, c in tail.function.slot_overrides.items())
