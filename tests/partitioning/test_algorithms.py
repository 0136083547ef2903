"""scan, redist and readj: production against the line-by-line reference, and the NOTES.md decisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.algorithms.builder import ALGORITHMS, build, initial_function
from repart.partitioning.algorithms.problem import BuildParams, prepare
from repart.partitioning.algorithms.readj import readj
from repart.partitioning.consistent import slot_table
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_key
from repart.sim.experiment import ExperimentConfig, window_estimate
from repart.sim.workload import ZipfWorkload
from tests.partitioning.reference import REFERENCE

RESOURCE_CODES = ["CCL", "LCL", "LLL", "LQL", "QLL"]


@st.composite
def instances(draw: st.DrawFn) -> tuple[PartitionFunction, FrequencyEstimate, int, BuildParams]:
    size = draw(st.integers(min_value=1, max_value=9))
    use_str = draw(st.booleans())
    keys: list[str | int] = [f"k{i}" for i in range(size)] if use_str else list(range(100, 100 + size))
    resources = draw(st.sampled_from(RESOURCE_CODES))
    # Loads stay exact integers below 2**53 (DECISIONS.md): large counts except for c**3 loads (LQL).
    scale = draw(st.sampled_from([1, 1000, 20_000])) if resources != "LQL" else 1
    counts = [c * scale for c in draw(st.lists(st.integers(1, 60), min_size=size, max_size=size))]
    tail = draw(st.integers(min_value=0, max_value=40)) * scale
    n_before = draw(st.integers(min_value=1, max_value=5))
    n_after = draw(st.integers(min_value=1, max_value=5))
    explicit_keys = draw(st.lists(st.sampled_from(keys), unique=True, max_size=size))
    gone: list[str | int] = ["gone1", "gone2"] if use_str else [1, 2]
    explicit_keys += draw(st.lists(st.sampled_from(gone), unique=True, max_size=2))
    explicit = {k: draw(st.integers(0, n_before - 1)) for k in explicit_keys}
    previous = PartitionFunction(n_channels=n_before, key_type="str" if use_str else "int", explicit=explicit)
    estimate = FrequencyEstimate(
        keys=tuple(keys),
        counts=np.array(counts, dtype=float),
        total=sum(counts) + tail,
        epsilon=draw(st.sampled_from([0.0, 0.01])),
        distinct_estimate=size + tail,
    )
    params = BuildParams(
        resources=resources,
        alpha=draw(st.sampled_from([1.05, 1.2, 2.0])),
        sigma=draw(st.sampled_from([0.3, 1.0])),
        utility=draw(st.sampled_from(["A", "APM", "APLM", "ATM", "ATLM"])),
        move_limit=draw(st.sampled_from([1, 2, 5])),
    )
    return previous, estimate, n_after, params


@pytest.mark.parametrize("algorithm", ["scan", "redist", "readj"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_production_equals_reference(algorithm: str, instance) -> None:
    previous, estimate, n_after, params = instance
    produced = build(previous, estimate, n_after, params, algorithm).function.explicit
    expected = REFERENCE[algorithm](previous, estimate, n_after, params)
    assert dict(produced) == expected


def zipf_estimate(size: int, total: int, seed: int = 0) -> FrequencyEstimate:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, size + 1)
    counts = np.floor(weights / weights.sum() * total * rng.uniform(0.9, 1.0, size))
    return FrequencyEstimate(
        keys=tuple(range(size)), counts=counts, total=int(total), distinct_estimate=size * 10
    )


@pytest.mark.parametrize("algorithm", ["scan", "redist", "readj"])
def test_reference_agrees_on_a_zipf_adaptation_sequence(algorithm: str) -> None:
    estimate = zipf_estimate(300, 100_000)
    params = BuildParams(sigma=0.5)
    function = initial_function(1, "int")
    for n in range(2, 7):
        result = build(function, estimate, n, params, algorithm)
        assert dict(result.function.explicit) == REFERENCE[algorithm](function, estimate, n, params)
        function = result.function


def test_initial_migration_counts_only_items_no_longer_tracked() -> None:
    """NOTES: m starts from D_o^(t+1) (Eq. 18), not D_p^(t+1) as Algorithms 2 and 3 print."""
    estimate = FrequencyEstimate.from_counts({10: 500.0, 11: 300.0}, total=1000, distinct_estimate=50)
    table = slot_table(3, PartitionFunction(3, "int").consistent, 16)
    hashed = {k: int(table[hash_key(k) >> 48]) for k in (10, 11, 99)}
    elsewhere = (hashed[99] + 1) % 3
    previous = PartitionFunction(3, "int", explicit={10: (hashed[10] + 1) % 3, 99: elsewhere})
    problem = prepare(previous, estimate, 3, BuildParams(sigma=1.0))
    assert set(problem.keys) == {10, 11}
    # 99 (D_o, count 0 in this window, β_s = 0) is the only candidate; tracked 10 does not count.
    assert problem.initial_migration == 0.0
    estimate = FrequencyEstimate.from_counts(
        {10: 500.0, 11: 300.0, 99: 2.0}, total=1000, distinct_estimate=50
    )
    problem = prepare(previous, estimate, 3, BuildParams(sigma=1.0))
    assert 99 not in problem.keys and problem.initial_migration == 2.0
    # m̄ sums over D_a = D_p^(t) ∪ D_p^(t+1): 10, 11 and 99
    assert problem.ideal_migration == pytest.approx((500 + 300 + 2) / 3)


def test_readj_replaces_items_of_removed_channels_with_the_new_hash() -> None:
    estimate = FrequencyEstimate.from_counts(
        {"a": 400.0, "b": 300.0, "c": 200.0}, total=1000, distinct_estimate=9
    )
    previous = PartitionFunction(4, "str", explicit={"a": 3, "b": 0, "c": 1})
    params = BuildParams(sigma=1.0, utility="APM")
    problem = prepare(previous, estimate, 2, params)
    channels, _ = readj(problem)
    assert set(channels.tolist()) <= {0, 1}
    assert dict(build(previous, estimate, 2, params, "readj").function.explicit) == REFERENCE["readj"](
        previous, estimate, 2, params
    )


def test_readj_skips_worse_candidates_instead_of_stopping() -> None:
    """NOTES: 'break' means skip. The first candidates (from the light channel 0) worsen the balance."""
    counts = {"a": 100.0, "b": 90.0, "c": 80.0, "d": 70.0, "e": 60.0}
    estimate = FrequencyEstimate.from_counts(counts, total=400, distinct_estimate=5)
    previous = PartitionFunction(2, "str", explicit={"a": 0, "b": 1, "c": 1, "d": 1, "e": 1})
    result = build(previous, estimate, 2, BuildParams(sigma=1.0, utility="A"), "readj")
    assert dict(result.function.explicit) != dict(previous.explicit)
    assert result.report.rho < 2.0  # from 100 vs 300 (ρ = 11) to 190 vs 210 (ρ = 1.1)


@pytest.mark.parametrize("algorithm", ["scan", "redist", "readj"])
def test_no_channel_is_left_empty_when_n_grows_by_several(algorithm: str) -> None:
    """readj's plateau rule: without it readj stopped at loads [3979, 3979, 174, 0, 0, 0] here."""
    workload = ZipfWorkload(1.0, 20_000, key_seed=0)
    estimate, _ = window_estimate(workload, ExperimentConfig(domain=20_000), 6, np.random.default_rng(0))
    previous = initial_function(2, "int")  # every tracked item starts on channel 0 or 1
    result = build(previous, estimate, 6, BuildParams(), algorithm)
    assert set(result.function.explicit.values()) == set(range(6))
    assert dict(result.function.explicit) == REFERENCE[algorithm](previous, estimate, 6, BuildParams())


def test_every_algorithm_builds_and_reports() -> None:
    estimate = zipf_estimate(2000, 1_000_000)
    previous = initial_function(4, "int")
    for algorithm in ALGORITHMS:
        result = build(previous, estimate, 5, BuildParams(), algorithm)
        report = result.report
        assert result.function.n_channels == 5
        assert report.objective == pytest.approx(report.predicted_b * (1 + report.predicted_m))
        if algorithm in ("uniform", "consistent"):
            assert report.explicit_size == 0
        else:
            assert report.explicit_size > 0
    auto = build(previous, estimate, 5, BuildParams(), "auto").report
    assert len(auto.candidates) == 3
    assert auto.objective == min(c.objective for c in auto.candidates)


def test_tail_aware_needs_slot_counts() -> None:
    with pytest.raises(InvalidInput, match="slot_counts") as excinfo:
        build(initial_function(2, "int"), zipf_estimate(50, 1000), 3, BuildParams(tail_aware=True), "scan")
    assert excinfo.value.field == "estimate"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"alpha": 0.5}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": 2.0}, "sigma"),
        ({"utility": "XYZ"}, "utility"),
        ({"resources": "LLQ"}, "resources"),
        ({"move_limit": 0}, "move_limit"),
    ],
)
def test_bad_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        BuildParams(**kwargs)
    assert excinfo.value.field == field


def test_an_empty_estimate_is_refused() -> None:
    empty = FrequencyEstimate(keys=(), counts=np.array([]), total=0)
    with pytest.raises(InvalidInput, match="estimate") as excinfo:
        build(initial_function(2, "int"), empty, 3, BuildParams(), "redist")
    assert excinfo.value.field == "estimate"


def test_bad_algorithm_and_channels() -> None:
    with pytest.raises(InvalidInput, match="algorithm") as excinfo:
        build(initial_function(1, "int"), zipf_estimate(5, 100), 2, BuildParams(), "magic")
    assert excinfo.value.field == "algorithm"
    with pytest.raises(InvalidInput, match="n_channels") as excinfo:
        build(initial_function(1, "int"), zipf_estimate(5, 100), 0, BuildParams(), "scan")
    assert excinfo.value.field == "n_channels"
