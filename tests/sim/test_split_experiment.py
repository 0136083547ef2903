"""Split variants of the adaptation experiment: records, scores on merged keys against oracles, and m
from the migration plan."""

from __future__ import annotations

import numpy as np
import pytest

from repart.partitioning import initial_function
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.partitioning.metrics import relative_migration
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.sim.experiment import RECORD_FIELDS, ExperimentConfig, Record, run_experiment, select
from repart.sim.split import SPLIT_FIELDS, SplitScorer
from repart.sim.workload import ZipfWorkload

BITS = 10


@pytest.fixture(scope="module")
def records() -> list[Record]:
    # z = 1.5: the hottest key carries 38.5 % of the tuples, so b_lb ≥ 1.5 from N = 4 on
    config = ExperimentConfig(
        channels=6, domain=20_000, zipf=1.5, algorithms=("redist",), split=("dchoices", "pkg"), seed=2
    )
    return run_experiment(config)


def test_split_records_add_memory_and_split_keys(records: list[Record]) -> None:
    assert {(r["algorithm"], r["tail_aware"]) for r in records} == {
        ("redist", False),
        ("split-dchoices", False),
        ("split-pkg", False),
    }
    for record in records:
        split = str(record["algorithm"]).startswith("split-")
        assert tuple(record) == (RECORD_FIELDS + SPLIT_FIELDS if split else RECORD_FIELDS)
    for record in select(records, algorithm="split-dchoices"):
        assert float(record["memory"]) >= 1.0
        assert (float(record["split_keys"]) == 0) == (record["N"] == 1)
        assert (record["m"] == 0.0) == (record["N"] == 1)


def test_splitting_beats_the_key_preserving_bound_where_it_binds(records: list[Record]) -> None:
    dchoices = select(records, algorithm="split-dchoices")
    redist = select(records, algorithm="redist")
    for split, preserving in zip(dchoices[3:], redist[3:], strict=True):
        assert split["b_lb"] == preserving["b_lb"] and float(split["b_lb"]) > 1.5
        assert float(preserving["b"]) >= float(preserving["b_lb"]) * (1 - 1e-9)
        assert float(split["b"]) < 0.95


def scorer_for(domain: int = 2000) -> SplitScorer:
    workload = ZipfWorkload(1.0, domain, key_seed=7)
    slots = slots_of_hashes(hash_int64_array(workload.keys), BITS)
    return SplitScorer(workload.keys, workload.frequencies, slots, BITS, BuildParams())


def test_loads_spread_each_split_key_by_its_weights() -> None:
    scorer = scorer_for()
    hot, warm = int(scorer.keys[0]), int(scorer.keys[1])
    home = PartitionFunction(n_channels=4, key_type="int", slot_bits=BITS, explicit={hot: 0, warm: 0})
    function = SplitFunction(
        home, {hot: SplitEntry((0, 1, 2), (0.5, 0.25, 0.25)), warm: SplitEntry((0, 3), (0.0, 1.0))}
    )
    expected = np.zeros(4)
    for key, f in zip(scorer.keys.tolist(), scorer.frequencies.tolist(), strict=True):
        if key in function.split:
            entry = function.split[key]
            for channel, weight in zip(entry.candidates, entry.weights, strict=True):
                expected[channel] += weight * f
        else:
            expected[home.lookup(key)] += f
    loads = scorer.loads(function)
    assert loads[0] == pytest.approx(expected) and loads[2] == pytest.approx(expected)


def test_m_of_two_key_preserving_functions_is_the_relative_migration_on_true_frequencies() -> None:
    scorer = scorer_for()
    before = initial_function(3, "int", BITS)
    top = scorer.keys[:20].tolist()
    after = PartitionFunction(
        n_channels=5, key_type="int", slot_bits=BITS, explicit={k: i % 5 for i, k in enumerate(top)}
    )
    expected = relative_migration(
        BuildParams().resources,
        scorer.frequencies,
        before.lookup_many(scorer.keys),
        after.lookup_many(scorer.keys),
        5,
    )
    assert scorer.migration(before, after) == pytest.approx(expected, rel=1e-9)


def test_m_counts_the_consolidated_partials() -> None:
    scorer = scorer_for()
    hot = int(scorer.keys[0])
    home = PartitionFunction(n_channels=4, key_type="int", slot_bits=BITS, explicit={hot: 0})
    split = SplitFunction(home, {hot: SplitEntry((0, 1, 2), (0.5, 0.25, 0.25))})
    narrowed = SplitFunction(home, {hot: SplitEntry((0, 1), (0.5, 0.5))})
    # the partial on channel 2 (a quarter of the hot key's state) is merged into channel 0
    assert scorer.migration(split, narrowed) == pytest.approx(0.25 * scorer.frequencies[0] * 4)
    assert scorer.migration(split, split) == 0.0
    assert scorer.migration(home, split) == 0.0  # becoming split moves nothing
