"""Tail-aware split builds: the slot overrides act only on the imbalance the split keys' weights leave
(``split.build.tail_aware_home``, ``builder.rebalance_tail``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import pytest

from repart.errors import InvalidInput
from repart.partitioning.algorithms.builder import build, initial_function, predict, rebalance_tail
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split.build import (
    SplitPlacement,
    build_split,
    head_indices,
    home_estimate,
    home_fixed_loads,
    split_imbalance,
)
from repart.partitioning.split.function import SplitFunction
from repart.partitioning.split.params import SplitParams
from repart.partitioning.tail import loads_by_channel, untracked_slot_mass
from tests.factories import zipf_estimate_with_slots

SLOT_BITS = 10
FloatArray = npt.NDArray[np.float64]


def _tail_estimate(slot_counts: FloatArray) -> FrequencyEstimate:
    """A window of untracked keys only: one tracked key with count 0 and the given slot counts."""
    return FrequencyEstimate(
        keys=(10**9,),
        counts=np.array([0.0]),
        total=int(slot_counts.sum()),
        distinct_estimate=10 * slot_counts.size,
        slot_counts=slot_counts,
        slot_bits=SLOT_BITS,
        key_type="int",
    )


def _tail_loads(estimate: FrequencyEstimate, table: npt.NDArray[np.int32], n: int) -> FloatArray:
    mass = untracked_slot_mass(estimate, (), np.empty(0), SLOT_BITS)
    return loads_by_channel(mass[None, :], table, n)[0]


def _evened_tail() -> tuple[PartitionFunction, PartitionFunction, FrequencyEstimate, FloatArray]:
    """A 4-channel home over a tail of slot masses 0..39, and the fixed loads of split keys whose
    weights fill every channel up to the fullest one (rows s, c, n alike): previous, home, estimate,
    fixed loads."""
    home = PartitionFunction(n_channels=4, key_type="int", slot_bits=SLOT_BITS)
    estimate = _tail_estimate(np.arange(1 << SLOT_BITS, dtype=np.float64) % 40)
    tail = _tail_loads(estimate, home.table, 4)
    return initial_function(1, "int", SLOT_BITS), home, estimate, np.tile(tail.max() - tail, (3, 1))


def test_rebalance_tail_moves_nothing_when_the_fixed_loads_even_out_the_tail() -> None:
    previous, home, estimate, fixed = _evened_tail()  # nothing left to balance
    result = rebalance_tail(previous, home, estimate, BuildParams(tail_aware=True), fixed)
    assert dict(result.slot_overrides) == {}
    assert result == home


def test_rebalance_tail_moves_slots_off_the_channel_the_weights_leave_heavy() -> None:
    previous, home, estimate, fixed = _evened_tail()
    fixed[:, 0] += 2_000.0  # 2,000 tuples more on channel 0 than the weights could spread
    result = rebalance_tail(previous, home, estimate, BuildParams(tail_aware=True), fixed)
    after = _tail_loads(estimate, result.table, 4) + fixed[0]
    # Slot masses are at most 39: the pass ends within about one slot of even, mostly moving off 0.
    assert float(after.max() - after.min()) < 40.0
    left = [int(home.table[slot]) for slot in result.slot_overrides]
    assert left.count(0) > len(left) / 2
    assert dict(result.explicit) == dict(home.explicit)


def test_a_tail_aware_split_build_equals_the_plain_one_when_the_weights_absorb_the_tail() -> None:
    # W-Choices' candidates cover every channel, so the weights balance the predicted loads exactly
    # and the override pass has nothing to do: the plain build is the oracle.
    estimate = zipf_estimate_with_slots(20_000, 400_000)
    previous = initial_function(1, "int")
    for n in (2, 4, 6):
        split = SplitParams("wchoices")
        plain = build_split(previous, estimate, n, split=split, params=BuildParams())
        tail = build_split(previous, estimate, n, split=split, params=BuildParams(tail_aware=True))
        assert isinstance(tail.function, SplitFunction)
        assert tail.report.home.slot_overrides == len(tail.function.home.slot_overrides) == 0
        assert tail.function.digest == plain.function.digest
        # The home report's b is recomputed for the final home: the split function's, with its final
        # weights (the plain build's report has the b of the placement's water-filled spread).
        b = split_imbalance(tail.function, estimate, BuildParams(tail_aware=True)).b
        assert tail.report.home.predicted_b == pytest.approx(b, rel=1e-12)
        previous = tail.function.home


def test_a_tail_aware_rr_home_balances_around_rr_s_uniform_weights() -> None:
    # RR's weights are uniform whatever the loads, so they cannot absorb the tail: the override pass
    # must act around them (balancing around water-filled weights RR never uses would do nothing).
    previous = initial_function(1, "int")
    for step, n in enumerate((4, 6, 8)):
        estimate = zipf_estimate_with_slots(20_000, 400_000, seed=10 + step)
        split = SplitParams("rr")
        plain = build_split(previous, estimate, n, split=split, params=BuildParams())
        tail = build_split(previous, estimate, n, split=split, params=BuildParams(tail_aware=True))
        assert isinstance(tail.function, SplitFunction)
        overrides = len(tail.function.home.slot_overrides)
        assert tail.report.home.slot_overrides == overrides > 0
        assert tail.report.predicted_b < plain.report.predicted_b
        # RR's final weights are the uniform ones the home was balanced around: the home report's b
        # is the split function's.
        b = split_imbalance(tail.function, estimate, BuildParams(tail_aware=True)).b
        assert tail.report.home.predicted_b == pytest.approx(b, rel=1e-12)
        # and its m is the final home's (slot overrides included) on the window without the split keys
        window = home_estimate(estimate, head_indices(estimate, split.head_threshold(n)))
        _, m = predict(previous, tail.function.home, window, BuildParams(tail_aware=True))
        assert tail.report.home.predicted_m == pytest.approx(m, rel=1e-12)
        assert m != pytest.approx(plain.report.home.predicted_m, rel=1e-6)
        for key, entry in tail.function.split.items():
            assert entry.weights == (1.0 / len(entry.candidates),) * len(entry.candidates)
            assert tail.function.home.lookup(key) == entry.candidates[0]  # pinned to its home
        previous = tail.function.home


def test_a_tail_aware_split_build_without_split_keys_is_the_tail_aware_build() -> None:
    params = BuildParams(tail_aware=True)
    # θ above every key's frequency: nothing is split, so the home is a preserve region's build.
    split = SplitParams("dchoices", theta=0.9)
    for seed in (3, 7):
        estimate = zipf_estimate_with_slots(20_000, 400_000, seed=seed)
        previous = initial_function(1, "int")
        for n in (2, 4):
            result = build_split(previous, estimate, n, split=split, params=params)
            assert isinstance(result.function, SplitFunction) and not result.function.split
            assert result.function.home == build(previous, estimate, n, params).function
            previous = result.function.home


def test_a_tail_aware_split_build_needs_slot_counts() -> None:
    estimate = dataclasses.replace(zipf_estimate_with_slots(20_000, 400_000), slot_counts=None)
    with pytest.raises(InvalidInput) as raised:
        build_split(
            initial_function(1, "int"),
            estimate,
            4,
            split=SplitParams("dchoices"),
            params=BuildParams(tail_aware=True),
        )
    assert raised.value.field == "estimate" and "slot_counts" in str(raised.value)


def test_an_rr_home_is_placed_around_rr_s_uniform_spread() -> None:
    # The placement's fixed loads spread each split key by the scheme's own weights: for RR each
    # candidate carries 1/d of the key's load whatever the other loads are (hand-computed oracle).
    estimate = zipf_estimate_with_slots(20_000, 400_000)
    previous = initial_function(1, "int")
    head = np.array([0, 1, 2], dtype=np.int64)
    key_loads = np.stack([estimate.counts[head]] * 3)
    lists = [(0, 1), (1, 2, 3), (2, 3, 0, 1)]
    placed = SplitPlacement(head, key_loads, lists, {estimate.keys[i]: lists[i][0] for i in range(3)})
    fixed = home_fixed_loads(previous, estimate, head, 4, placed, "rr", BuildParams())
    expected = np.zeros(4)
    for count, candidates in zip(estimate.counts[head].tolist(), lists, strict=True):
        for channel in candidates:
            expected[channel] += count / len(candidates)
    assert np.allclose(fixed, np.tile(expected, (3, 1)))
    water_filled = home_fixed_loads(previous, estimate, head, 4, placed, "dchoices", BuildParams())
    assert not np.allclose(water_filled, fixed)
